package rbloom

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// FuzzParseHeader feeds parseHeader arbitrary strings. It must never panic,
// and whatever it accepts must be a header encode writes back identically:
// bytes 0-23 (the identity every write script compares) of the re-encoded
// header equal the input's, and every field is within the bounds the
// scripts and the slot arithmetic rely on.
func FuzzParseHeader(f *testing.F) {
	good := header{mode: ModeCounting, k: 7, m: 9586, partitions: 1, capacity: 1000, errorRate: 0.01}.encode()
	f.Add([]byte(good))
	f.Add([]byte(good + "extra slots after the header"))
	f.Add([]byte(header{mode: ModeClassic, k: 64, m: ModeClassic.maxSlots(), partitions: 1024, index: 1023}.encode()))
	f.Add([]byte(header{mode: ModeCuckoo, k: MaxFingerprintBits, m: maxSlotsOf(ModeCuckoo, MaxFingerprintBits), partitions: 1}.encode()))
	f.Add([]byte(good[:63]))
	f.Add([]byte(""))
	f.Add([]byte("rbloom"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := string(data)
		h, err := parseHeader(in)
		if err != nil {
			if !errors.Is(err, ErrNotFilter) {
				t.Fatalf("parseHeader(%q) = %v, want an error wrapping ErrNotFilter", in, err)
			}
			return
		}
		switch {
		case len(in) < headerSize:
			t.Fatalf("parseHeader accepted %d bytes, shorter than a header", len(in))
		case h.mode != ModeCounting && h.mode != ModeClassic && h.mode != ModeCuckoo:
			t.Fatalf("parseHeader accepted mode %q", byte(h.mode))
		case h.k < 1 || h.k > MaxHashes:
			t.Fatalf("parseHeader accepted k = %d", h.k)
		case h.mode == ModeCuckoo && (h.k < MinFingerprintBits || h.k > MaxFingerprintBits):
			t.Fatalf("parseHeader accepted a cuckoo filter of %d-bit fingerprints", h.k)
		case h.m < 1 || h.m > maxSlotsOf(h.mode, h.k):
			t.Fatalf("parseHeader accepted m = %d, outside 1..%d", h.m, maxSlotsOf(h.mode, h.k))
		case h.partitions < 1 || h.partitions > MaxPartitions || h.index >= h.partitions:
			t.Fatalf("parseHeader accepted partition %d of %d", h.index, h.partitions)
		case h.size() > 512<<20:
			t.Fatalf("parseHeader accepted a filter of %d bytes, more than a Redis string holds", h.size())
		}
		enc := h.encode()
		if len(enc) != headerSize {
			t.Fatalf("encode() is %d bytes, want %d", len(enc), headerSize)
		}
		if enc[:identitySize] != in[:identitySize] {
			t.Fatalf("identity of parseHeader(%q).encode() = %q, want the input's %q", in[:headerSize], enc[:identitySize], in[:identitySize])
		}
		if want := int64(binary.BigEndian.Uint64(data[24:32])); h.items != want {
			t.Fatalf("items = %d, want %d", h.items, want)
		}
		if enc[32:40] != in[32:40] {
			t.Fatalf("capacity re-encodes as %x, want %x", enc[32:40], in[32:40])
		}
		// And the re-encoded header parses to the same fields (items aside:
		// encode writes 0 there).
		again, err := parseHeader(enc)
		h.items = 0
		if err != nil || again.mode != h.mode || again.k != h.k || again.m != h.m ||
			again.partitions != h.partitions || again.index != h.index || again.capacity != h.capacity {
			t.Fatalf("parseHeader(encode(%+v)) = %+v, %v", h, again, err)
		}
	})
}

// optionFields are the names an ErrInvalidOptions message may cite.
var optionFields = []string{"Capacity", "ErrorRate", "Slots", "Hashes", "Partitions", "TTL", "IDLifetime"}

// FuzzOptions feeds Options.resolve arbitrary options. It must never panic,
// and either reject them with ErrInvalidOptions naming a field, or return a
// header that encodes to one parseHeader accepts, with k in 1..MaxHashes,
// P in 1..MaxPartitions, at least the Slots asked for (m*P >= Slots,
// or >= OptimalSlots(Capacity, ErrorRate) when sized by capacity), and
// exactly the Hashes and Partitions asked for when given.
func FuzzOptions(f *testing.F) {
	type seed struct {
		o       Options
		classic bool
	}
	for _, s := range []seed{
		{Options{Capacity: 1000}, false},
		{Options{Capacity: 1_000_000, ErrorRate: 0.001}, true},
		{Options{Slots: 100, Hashes: 2}, false},
		{Options{Slots: 1 << 31, Hashes: 3}, false},
		{Options{Slots: 1 << 33, Hashes: 3}, true},
		{Options{Capacity: 1e9, ErrorRate: 1e-6, Partitions: 300}, false},
		{Options{Capacity: 1, ErrorRate: 1e-300}, false},
		{Options{Capacity: math.MaxUint64, ErrorRate: 0.5}, false},
		{Options{Slots: 1, Hashes: 64, Partitions: 1024}, true},
		{Options{Capacity: 10, ErrorRate: math.NaN()}, false},
		{Options{Capacity: 10, TTL: time.Microsecond}, false},
		{Options{Capacity: 10, IDLifetime: -1}, false},
		{Options{Hashes: 3}, false},
		{Options{Slots: 10}, false},
		{Options{Slots: math.MaxUint64, Hashes: 3, Partitions: 1}, false},
	} {
		o := s.o
		f.Add(o.Capacity, o.ErrorRate, o.Slots, o.Hashes, o.Partitions, int64(o.TTL), int64(o.IDLifetime), s.classic)
	}
	f.Fuzz(func(t *testing.T, capacity uint64, errorRate float64, counters uint64, hashes, partitions int,
		ttl, once int64, classic bool) {
		o := Options{Capacity: capacity, ErrorRate: errorRate, Slots: counters, Hashes: hashes,
			Partitions: partitions, TTL: time.Duration(ttl), IDLifetime: time.Duration(once)}
		mode := ModeCounting
		if classic {
			mode = ModeClassic
		}
		h, err := o.resolve(mode)
		if err != nil {
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("resolve(%+v) = %v, want an error wrapping ErrInvalidOptions", o, err)
			}
			named := false
			for _, field := range optionFields {
				named = named || strings.Contains(err.Error(), field)
			}
			if !named {
				t.Fatalf("resolve(%+v) = %q, which names no field", o, err)
			}
			return
		}
		switch {
		case h.mode != mode:
			t.Fatalf("resolve(%+v): mode %v, want %v", o, h.mode, mode)
		case h.k < 1 || h.k > MaxHashes:
			t.Fatalf("resolve(%+v): k = %d", o, h.k)
		case hashes != 0 && h.k != hashes:
			t.Fatalf("resolve(%+v): k = %d, want Hashes", o, h.k)
		case h.partitions < 1 || h.partitions > MaxPartitions:
			t.Fatalf("resolve(%+v): P = %d", o, h.partitions)
		case partitions != 0 && int(h.partitions) != partitions:
			t.Fatalf("resolve(%+v): P = %d, want Partitions", o, h.partitions)
		case h.index != 0 || h.items != 0:
			t.Fatalf("resolve(%+v): index %d, items %d, want 0", o, h.index, h.items)
		}
		total := h.m * uint64(h.partitions) // at most 2^32 * 2^10: no overflow
		want := counters
		if want == 0 {
			p := errorRate
			if p == 0 {
				p = DefaultErrorRate
			}
			want = OptimalSlots(capacity, p)
		}
		if total < want {
			t.Fatalf("resolve(%+v): m = %d in %d partitions = %d slots, fewer than %d", o, h.m, h.partitions, total, want)
		}
		if h.m > 1 && (h.m-1)*uint64(h.partitions) >= want {
			t.Fatalf("resolve(%+v): m = %d per partition, more than needed for %d slots in %d", o, h.m, want, h.partitions)
		}
		back, err := parseHeader(h.encode())
		if err != nil {
			t.Fatalf("resolve(%+v) = %+v, whose encoding parseHeader refuses: %v", o, h, err)
		}
		if back.mode != h.mode || back.k != h.k || back.m != h.m || back.partitions != h.partitions || back.capacity != h.capacity {
			t.Fatalf("resolve(%+v) = %+v, which encodes as %+v", o, h, back)
		}
		if h.errorRate < 0 || h.errorRate > 1 || math.IsNaN(h.errorRate) {
			t.Fatalf("resolve(%+v): error rate %v outside [0, 1]", o, h.errorRate)
		}
	})
}

// TestCountersOverflowPartitions pins a bug FuzzOptions found: with
// Partitions set, resolve rounded Slots up to a multiple of it with
// (m + P - 1) / P, which wrapped around for Slots within P-1 of 2^64 and
// gave m = 0, and the first Add divided by zero.
func TestCountersOverflowPartitions(t *testing.T) {
	o := Options{Slots: math.MaxUint64, Hashes: 3, Partitions: 2}
	h, err := o.resolve(ModeCounting)
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(fmtErr(err), "Slots") && !strings.Contains(fmtErr(err), "Partitions") {
		t.Errorf("resolve(%+v) = %+v, %v; want ErrInvalidOptions naming Slots or Partitions", o, h, err)
	}
	c, err := NewCounting(miniRedis(t), "overflow", o)
	if err == nil {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("Add on the filter NewCounting(%+v) accepted panics: %v", o, r)
			}
		}()
		_, err = c.Add(ctx, "x")
		t.Errorf("NewCounting(%+v) accepted the options; Add = %v", o, err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
