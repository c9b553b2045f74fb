package rbloom

import (
	"context"
	"math"
	"unsafe"

	"github.com/spaolacci/murmur3"
)

// Cuckoo is a cuckoo filter in Redis (Fan, Andersen, Kaminsky and
// Mitzenmacher, "Cuckoo Filter: Practically Better Than Bloom", 2014):
// each item leaves a fingerprint of f bits in one of its two buckets of 4
// slots, so it supports Remove in about a third of a counting filter's
// memory, and lookups read two buckets with no script. Its price is a hard
// capacity: an add that cannot place its item fails with ErrFull and
// changes nothing, never dropping another item's fingerprint.
//
// Adding an item already present stores another copy of its fingerprint
// (so that a Remove per Add keeps it as long as it was added more often):
// its two buckets hold at most 8, and an add past that fails with
// ErrFull. TestOrAdd adds an item only when it is absent, and makes no
// copies.
//
// Removing an item that was never added but tests true (a false positive)
// takes out a fingerprint of another item, which can then test false:
// remove only what was added, as with Counting.
//
// It has every method of Filter, and Remove, Count and Resize. It is safe
// for concurrent use by multiple goroutines.
type Cuckoo struct{ base }

var _ Filter = (*Cuckoo)(nil)

const (
	// MinFingerprintBits and MaxFingerprintBits bound a cuckoo filter's
	// fingerprint width f. A bucket of 4 fingerprints is one integer of
	// 4f bits, which Redis's Lua holds exactly up to 52 bits.
	MinFingerprintBits = 4
	MaxFingerprintBits = 13

	// CuckooMaxLoad is the planned load of a cuckoo filter: the share of
	// its slots it fills at most. An add past it fails with ErrFull before
	// any fingerprint moves, where kick chains would grow long and calls
	// slow. Sizing from Capacity plans for Capacity items at this load.
	// Under churn an insert costs more the fuller the filter, its kick
	// chains growing: 0.9 would save 11% of the memory for slower inserts.
	CuckooMaxLoad = 0.8

	cuckooBucketSize = 4
	// cuckooMaxKicks bounds the steps of one insert's walk (each reads
	// up to 4 buckets and may move a fingerprint) before it gives up
	// (ErrFull), so that a call stays within about a millisecond. Below
	// the planned load a walk that long is very rare: in the tests filters
	// without the planned load first refuse an add at load 0.95 or more.
	cuckooMaxKicks = 100
	// cuckooItemsPerCall bounds the items of one script call, so that a
	// call stays under a millisecond of server time at the planned load:
	// a call has work of its own (header, record, arguments), so more
	// items a call are cheaper an item, but a longer call meets more of a
	// busy server's stalls. 48 items keep most calls under the bound for
	// a few percent of speed against 64.
	cuckooItemsPerCall = 48
	// cuckooStride is the numbers a placement keeps per item: the bit
	// offsets of its two buckets, its first bucket and its fingerprint.
	cuckooStride = 4
	// cuckooMix spreads fingerprints over the buckets for the alternate
	// bucket: b2 = (fp*cuckooMix mod m - b1) mod m. Below 2^31, so that
	// the product is exact in a Lua double.
	cuckooMix = 0x5bd1e995
)

// NewCuckoo returns the cuckoo filter called name, sized by o, in the
// Redis that rdb reaches. Like NewCounting, it does not contact Redis.
//
// In a cuckoo filter Options.Slots is the number of buckets (of 4
// fingerprints each) and Options.Hashes the fingerprint width in bits,
// MinFingerprintBits to MaxFingerprintBits; by default both come from
// Capacity and ErrorRate (CuckooParams). ErrorRate can be as low as about
// 0.1%.
func NewCuckoo(rdb Client, name string, o Options) (*Cuckoo, error) {
	f, err := newFilter(rdb, name, ModeCuckoo, o)
	if err != nil {
		return nil, callError("new cuckoo", err)
	}
	return &Cuckoo{base{f}}, nil
}

// OpenCuckoo returns the cuckoo filter called name as stored in Redis, as
// OpenCounting does for a counting one.
func OpenCuckoo(ctx context.Context, rdb Client, name string, o Options) (*Cuckoo, error) {
	f, err := openMode(ctx, rdb, name, o, ModeCuckoo)
	if err != nil {
		return nil, err
	}
	return &Cuckoo{base{f}}, nil
}

// RemoveMany removes one copy of each item's fingerprint, in order, and
// reports for each whether there was one; it changes nothing for an item
// that is definitely absent. Each call of up to 48 items is atomic; on
// error, some items may have been removed. Remove only items that were
// added: see Cuckoo.
func (c *Cuckoo) RemoveMany(ctx context.Context, items []string) ([]bool, error) {
	return observe(ctx, c.f.obs, c.callOf("RemoveMany", len(items)), func(ctx context.Context) ([]bool, error) {
		return followWrite(ctx, &c.base, items, func(f *filter, items []string) ([]bool, error) { return f.remove(ctx, items) })
	})
}

// Remove is RemoveMany of one item.
func (c *Cuckoo) Remove(ctx context.Context, item string) (bool, error) {
	return first(c.RemoveMany(ctx, []string{item}))
}

// RemoveManyOnce is RemoveMany, applied at most once per opID, as
// Counting.RemoveManyOnce is.
func (c *Cuckoo) RemoveManyOnce(ctx context.Context, items []string, opID string) ([]bool, error) {
	return observe(ctx, c.f.obs, c.callOf("RemoveManyOnce", len(items)), func(ctx context.Context) ([]bool, error) {
		return followOnce(ctx, &c.base, func(f *filter) ([]bool, error) { return f.writeOnce(ctx, f.removeOp(), items, opID) })
	})
}

// RemoveOnce is RemoveManyOnce of one item.
func (c *Cuckoo) RemoveOnce(ctx context.Context, item, opID string) (bool, error) {
	return first(c.RemoveManyOnce(ctx, []string{item}, opID))
}

// CountMany returns for each item the number of copies of its
// fingerprint in its two buckets, 0 to 8: an upper bound on how many times
// it was added and not removed (other items may share the fingerprint). An
// item in a partition that vanished reads 15: unknown.
func (c *Cuckoo) CountMany(ctx context.Context, items []string) ([]int, error) {
	return observe(ctx, c.f.obs, c.callOf("CountMany", len(items)), func(ctx context.Context) ([]int, error) {
		return followRead(ctx, &c.base, func(f *filter) ([]int, error) { return f.count(ctx, items) })
	})
}

// Count is CountMany of one item.
func (c *Cuckoo) Count(ctx context.Context, item string) (int, error) {
	return first(c.CountMany(ctx, []string{item}))
}

// Resize rebuilds the filter into one of other parameters, as
// Counting.Resize does, and returns the handle of the new filter.
func (c *Cuckoo) Resize(ctx context.Context, o Options, fill func(add func(items []string) error) error) (*Cuckoo, error) {
	g, err := c.resize(ctx, o, fill)
	if err != nil {
		return nil, err
	}
	return &Cuckoo{base{g}}, nil
}

// CuckooParams returns the fingerprint width f and the number of buckets
// of a cuckoo filter that holds n items with a false-positive rate of at
// most p at the planned load, CuckooMaxLoad: the smallest f with
// CuckooFalsePositiveRate(CuckooMaxLoad, f) <= p, and ceil(n / (4 *
// CuckooMaxLoad)) buckets. f is 0 when p needs more than
// MaxFingerprintBits, or p is not in (0, 1); buckets is 0 when n is 0.
func CuckooParams(n uint64, p float64) (f int, buckets uint64) {
	if n > 0 {
		buckets = uint64(math.Ceil(float64(n) / (cuckooBucketSize * CuckooMaxLoad)))
	}
	if !(p > 0 && p < 1) {
		return 0, buckets
	}
	for f = MinFingerprintBits; f <= MaxFingerprintBits; f++ {
		if CuckooFalsePositiveRate(CuckooMaxLoad, f) <= p {
			return f, buckets
		}
	}
	return 0, buckets
}

// CuckooFalsePositiveRate returns the probability that an item never
// added tests present in a cuckoo filter at load (the share of its slots
// that hold a fingerprint) with f-bit fingerprints: one of the 8 slots of
// its two buckets holding its fingerprint, one of 2^f - 1,
//
//	p = 1 - (1 - 1/(2^f - 1))^(8 load)
func CuckooFalsePositiveRate(load float64, f int) float64 {
	if f <= 0 || load <= 0 {
		return 0
	}
	return -math.Expm1(2 * cuckooBucketSize * load * math.Log1p(-1/(math.Exp2(float64(f))-1)))
}

// sizeCuckoo sets the fingerprint width (h.k) and buckets (h.m, of the
// whole filter) of a cuckoo filter from its capacity and error rate where
// they are not given, and returns the option they come from.
func (h *header) sizeCuckoo() (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", failf(ErrInvalidOptions, format, args...)
	}
	field := "Slots"
	if h.k != 0 && (h.k < MinFingerprintBits || h.k > MaxFingerprintBits) {
		return bad("Hashes = %d: a cuckoo filter's fingerprint width, want %d to %d bits", h.k, MinFingerprintBits, MaxFingerprintBits)
	}
	if h.errorRate == 0 && h.k == 0 {
		h.errorRate = DefaultErrorRate
	}
	if h.k == 0 {
		f, _ := CuckooParams(1, h.errorRate)
		if f == 0 {
			return bad("ErrorRate = %v needs fingerprints of more than %d bits: a cuckoo filter reaches %.2g%% at most",
				h.errorRate, MaxFingerprintBits, 100*CuckooFalsePositiveRate(CuckooMaxLoad, MaxFingerprintBits))
		}
		h.k = f
	}
	if h.m == 0 {
		_, h.m = CuckooParams(h.capacity, 0)
		field = "Capacity"
	}
	if h.errorRate == 0 {
		h.errorRate = CuckooFalsePositiveRate(CuckooMaxLoad, h.k)
	}
	return field, nil
}

// cuckooPartitionBuckets returns the buckets of each of parts partitions
// of a cuckoo filter for n items: items spread over the partitions
// unevenly, so each gets room for its share and 4 standard deviations more.
func cuckooPartitionBuckets(n, parts uint64) uint64 {
	share := float64(n) / float64(parts)
	return uint64(math.Ceil((share + 4*math.Sqrt(share)) / (cuckooBucketSize * CuckooMaxLoad)))
}

// cuckooLocate returns the partition, first and second bucket, and
// fingerprint of item in a cuckoo filter of P partitions of m buckets and
// f-bit fingerprints. From the same MurmurHash3 as locate:
//
//	h1, h2    = murmur3_x64_128(item)
//	partition = (h2 >> 32) * P >> 32
//	b1        = h1 mod m
//	fp        = (h2 mod 2^32) mod (2^f - 1) + 1
//	b2        = (fp * 0x5bd1e995 mod m - b1) mod m
//
// This is the on-Redis format (see docs/format.md).
func cuckooLocate(item string, f int, m uint64, p int) (part int, b1, b2, fp uint64) {
	h1, h2 := murmur3.Sum128(unsafe.Slice(unsafe.StringData(item), len(item)))
	fp = (h2&0xffffffff)%(1<<f-1) + 1
	b1 = h1 % m
	return partitionOf(h2, p), b1, cuckooAlt(b1, fp, m), fp
}

// cuckooAlt returns the other bucket of fingerprint fp in bucket b.
func cuckooAlt(b, fp, m uint64) uint64 {
	return (fp*cuckooMix%m + m - b) % m
}

// cuckooPlace is place for a cuckoo filter: item i's numbers are
// offsets[i*cuckooStride:], the bit offsets of its two buckets (what a
// read gets), then its first bucket and fingerprint (what cuckoo.lua
// takes).
func (f *filter) cuckooPlace(items []string) placement {
	pl := placement{groups: make([][]int, len(f.parts)), offsets: make([]uint64, 0, len(items)*cuckooStride)}
	w := f.h.width()
	for i, item := range items {
		p, b1, b2, fp := cuckooLocate(item, f.h.k, f.h.m, len(f.parts))
		pl.groups[p] = append(pl.groups[p], i)
		pl.offsets = append(pl.offsets, headerBits+b1*w, headerBits+b2*w, b1, fp)
	}
	return pl
}

// cuckooCopies returns the number of copies of the fingerprint of the
// item at position pos of pl in its two buckets, read as vals.
func (f *filter) cuckooCopies(vals []int64, pl placement, pos int) int64 {
	o := pl.offsets[pos*cuckooStride : (pos+1)*cuckooStride]
	fp, mask := o[3], uint64(1)<<f.h.k-1
	n := int64(0)
	for j, v := range vals {
		if j == 1 && o[1] == o[0] {
			break // one bucket, counted once
		}
		for t := range cuckooBucketSize {
			if uint64(v)>>(t*f.h.k)&mask == fp {
				n++
			}
		}
	}
	return n
}

// cuckooOp is cuckoo.lua's ARGV[9].
func cuckooOp(remove bool) string {
	if remove {
		return "d"
	}
	return "a"
}
