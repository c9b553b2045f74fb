package rbloom

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestItemEdgeCases: the empty item and an item of 1 MB are items like any
// other (only their hash reaches Redis), and batches of no items answer at
// once, with no round trip and nothing written.
func TestItemEdgeCases(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "edges", Options{Capacity: 1000}))
	big := strings.Repeat("x", 1<<20)
	sent := serverStat(t, rdb, "stats", "total_net_input_bytes")
	for _, item := range []string{"", big, big[1:] + "y"} {
		if ok := must(c.Test(ctx, item)).on(t); ok {
			t.Fatalf("Test(%.10q...) = true before Add", item)
		}
		must(c.Add(ctx, item)).on(t)
		want := 1 // the empty item too: its slots are apart (TestEmptyItemSlots)
		if ok, n := must(c.Test(ctx, item)).on(t), must(c.Count(ctx, item)).on(t); !ok || n != want {
			t.Errorf("after Add(%.10q...): Test = %v, Count = %d; want true, %d", item, ok, n, want)
		}
		if ok := must(c.Remove(ctx, item)).on(t); !ok {
			t.Errorf("Remove(%.10q...) = false after Add", item)
		}
		if ok := must(c.Test(ctx, item)).on(t); ok {
			t.Errorf("Test(%.10q...) = true after Remove", item)
		}
	}
	// 15 calls, each of a few hundred bytes: 2 MB of items never travel.
	if n := serverStat(t, rdb, "stats", "total_net_input_bytes") - sent; n > 64<<10 {
		t.Errorf("Redis received %d bytes for 15 calls on three items, two of 1 MB: the items were sent", n)
	} else {
		t.Logf("Redis received %d bytes for 15 calls on three items, two of 1 MB", n)
	}

	before := dump(t, rdb)
	commands := serverStat(t, rdb, "stats", "total_commands_processed")
	for _, items := range [][]string{nil, {}} {
		for name, call := range map[string]func() ([]bool, error){
			"AddMany":    func() ([]bool, error) { return c.AddMany(ctx, items) },
			"TestMany":   func() ([]bool, error) { return c.TestMany(ctx, items) },
			"RemoveMany": func() ([]bool, error) { return c.RemoveMany(ctx, items) },
		} {
			if res, err := call(); err != nil || len(res) != 0 {
				t.Errorf("%s(%#v) = %v, %v; want no answers and no error", name, items, res, err)
			}
		}
	}
	// One INFO was processed: the one that read the count.
	if n := serverStat(t, rdb, "stats", "total_commands_processed") - commands; n != 1 {
		t.Errorf("batches of no items sent %d commands, want none", n-1)
	}
	if after := dump(t, rdb); !maps.Equal(before, after) {
		t.Errorf("batches of no items changed Redis")
	}
}

// TestBadNames: names that would break the key's hash tag, or that hold
// control characters, are refused with ErrInvalidOptions by every
// constructor and by Open, before anything reaches Redis.
func TestBadNames(t *testing.T) {
	rdb := realRedis(t)
	for _, name := range []string{
		"", "{", "}", "a{b", "{tag}", "a}", "line\nbreak", "tab\t", "nul\x00", "\x1b[31m", "del\x7f", "\r",
		strings.Repeat("n", 257),
	} {
		_, err1 := NewCounting(rdb, name, Options{Capacity: 10})
		_, err2 := NewClassic(rdb, name, Options{Capacity: 10})
		_, err3 := Open(ctx, rdb, name, Options{})
		for i, err := range []error{err1, err2, err3} {
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "name") {
				t.Errorf("call %d with name %q: %v, want ErrInvalidOptions naming the name", i, name, err)
			}
		}
	}
	if keys := dump(t, rdb); len(keys) != 0 {
		t.Errorf("bad names wrote %q", keys)
	}
	// Names may hold anything else.
	for _, name := range []string{"a", "with space", "ünïcödé", "a:b/c", "rbloom:x", strings.Repeat("n", 256)} {
		c := created(t, newCounting(t, rdb, name, Options{Capacity: 10}))
		must(c.Add(ctx, "a")).on(t)
		if f, err := Open(ctx, rdb, name, Options{}); err != nil || !must(f.Test(ctx, "a")).on(t) {
			t.Errorf("name %q: Open = %v", name, err)
		}
	}
}

// corruption is a way a partition's string can differ from what rbloom
// wrote, and the error every call must then give.
type corruption struct {
	name string
	do   func(v []byte) []byte
	want error
	// openOK: the header itself is sound, so Open succeeds, and the calls
	// of the filter it returns fail like the others.
	openOK bool
}

func setByte(i int, b byte) func(v []byte) []byte {
	return func(v []byte) []byte { v[i] = b; return v }
}

var corruptions = []corruption{
	{"older format version (byte 6 = 0)", setByte(6, 0), ErrNotFilter, false},
	{"newer format version (byte 6 = 2)", setByte(6, 2), ErrNotFilter, false},
	{"bad magic", setByte(0, 'R'), ErrNotFilter, false},
	{"unknown mode", setByte(7, 'x'), ErrNotFilter, false},
	{"k = 0", setByte(8, 0), ErrNotFilter, false},
	{"k = 65", setByte(8, 65), ErrNotFilter, false},
	{"m = 0", func(v []byte) []byte { copy(v[12:16], "\x00\x00\x00\x00"); return v }, ErrNotFilter, false},
	// Non-zero reserved bytes 9-11: TestReservedIdentityBytes.
	{"P = 0", func(v []byte) []byte { copy(v[16:20], "\x00\x00\x00\x00"); return v }, ErrNotFilter, false},
	{"index >= P", setByte(23, 1), ErrNotFilter, false},
	{"truncated to 10 bytes", func(v []byte) []byte { return v[:10] }, ErrNotFilter, false},
	// The identity (bytes 0-23) is intact: the length gives them away.
	{"truncated to 30 bytes", func(v []byte) []byte { return v[:30] }, ErrDamaged, false},
	{"header alone", func(v []byte) []byte { return v[:headerSize] }, ErrDamaged, true},
	{"one byte longer", func(v []byte) []byte { return append(v, 0) }, ErrDamaged, true},
	{"one byte shorter", func(v []byte) []byte { return v[:len(v)-1] }, ErrDamaged, true},
}

// TestDamagedHeaders damages a filter's string in each way of corruptions:
// every read and write fails with the error of that corruption (ErrNotFilter
// for a header rbloom does not read, ErrDamaged for a sound header on a
// string of the wrong length) and leaves Redis byte for byte unchanged.
func TestDamagedHeaders(t *testing.T) {
	rdb := realRedis(t)
	items := []string{"a", "b", "c", "d"}
	for _, cor := range corruptions {
		c := created(t, newCounting(t, rdb, "damaged", Options{Capacity: 1000, Partitions: 1}))
		must(c.AddMany(ctx, items)).on(t)
		good := []byte(rdb.Get(ctx, c.f.parts[0].key).Val())
		rdb.Set(ctx, c.f.parts[0].key, cor.do(good), 0)
		before := dump(t, rdb)

		check := func(c *Counting, via string) {
			calls := allCalls(rdb, c)
			delete(calls, "Open")
			for _, op := range sortedKeys(calls) {
				if err := calls[op](ctx); !errors.Is(err, cor.want) {
					t.Errorf("%s: %s%s = %v, want %v", cor.name, op, via, err, cor.want)
				}
			}
		}
		check(c, "")
		f, err := Open(ctx, rdb, "damaged", Options{})
		switch {
		case cor.openOK && err != nil:
			t.Errorf("%s: Open = %v, want the filter (its header is sound)", cor.name, err)
		case cor.openOK:
			check(f.(*Counting), " (opened)")
		case !errors.Is(err, ErrNotFilter):
			t.Errorf("%s: Open = %v, want ErrNotFilter", cor.name, err)
		}
		if after := dump(t, rdb); !maps.Equal(before, after) {
			t.Errorf("%s: refused calls changed Redis", cor.name)
		}
		rdb.FlushAll(ctx)
	}
}

// TestReservedHeaderBytes: header bytes 57-63 must be zero (byte 48 is
// the rebuild mark, 49-56 the incarnation); a string where they are not is
// no filter of this version, for reads and writes alike.
func TestReservedHeaderBytes(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "reserved", Options{Capacity: 1000}))
	must(c.Add(ctx, "a")).on(t)
	v := []byte(rdb.Get(ctx, c.f.parts[0].key).Val())
	v[reservedByte+1] = 1
	rdb.Set(ctx, c.f.parts[0].key, v, 0)
	calls := allCalls(rdb, c)
	for _, op := range sortedKeys(calls) {
		if err := calls[op](context.Background()); !errors.Is(err, ErrNotFilter) {
			t.Errorf("%s with byte %d = 1: %v, want ErrNotFilter", op, reservedByte+1, err)
		}
	}
}

// TestEmptyItemSlots: MurmurHash3 of the empty string is h1 = h2 = 0.
// With plain double hashing all k slots of the empty item were slot 0, so
// three Adds saturated it for good (found by this test); the cubic term of
// enhanced double hashing keeps them apart, and the item comes and goes.
func TestEmptyItemSlots(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "empty", Options{Capacity: 1000}))
	if slots := globalSlots(c.f, ""); len(slots) > 1 && slices.Min(slots) == slices.Max(slots) {
		t.Errorf("the empty item's slots are %v: all the same", slots)
	}
	for range 3 {
		must(c.Add(ctx, "")).on(t)
	}
	for range 3 {
		must(c.Remove(ctx, "")).on(t)
	}
	if must(c.Test(ctx, "")).on(t) {
		t.Errorf("Test(\"\") = true after 3 Adds and 3 Removes: counter %d saturated", globalSlots(c.f, "")[0])
	}
}

// TestIDLifetimeBytes: header bytes 9-11 hold the id lifetime, part of
// the identity: a handle with another IDLifetime gets ErrParamsMismatch
// from reads and writes alike (parseHeader and lua/filter.lua's parse
// agree), and Open takes the stored one.
func TestIDLifetimeBytes(t *testing.T) {
	rdb := realRedis(t)
	for _, i := range []int{9, 10, 11} {
		c := created(t, newCounting(t, rdb, "once-"+strconv.Itoa(i), Options{Capacity: 1000}))
		must(c.Add(ctx, "a")).on(t)
		v := []byte(rdb.Get(ctx, c.f.parts[0].key).Val())
		v[i] = 1
		rdb.Set(ctx, c.f.parts[0].key, v, 0)
		calls := allCalls(rdb, c)
		for _, op := range sortedKeys(calls) {
			if op == "Open" {
				continue
			}
			if err := calls[op](ctx); !errors.Is(err, ErrParamsMismatch) {
				t.Errorf("%s with byte %d = 1: %v, want ErrParamsMismatch", op, i, err)
			}
		}
		opened := must(OpenCounting(ctx, rdb, "once-"+strconv.Itoa(i), Options{})).on(t)
		if want := time.Duration(1<<(8*(11-i))) * time.Second; opened.f.idLifetime != want {
			t.Errorf("Open with byte %d = 1: id lifetime %v, want %v", i, opened.f.idLifetime, want)
		}
	}
}
