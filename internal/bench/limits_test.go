package bench

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

// TestLocateMatchesLibrary checks that the limits touch exactly the slots
// the library does: after adding items through rbloom, the counters in the
// filter's string are those that locate computes, one per slot and item.
func TestLocateMatchesLibrary(t *testing.T) {
	m := rbloomtest.NewMiniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	items := names("item", 0, 50)

	counting, err := rbloom.NewCounting(rdb, "c", rbloom.Options{Capacity: 100})
	if err != nil {
		t.Fatal(err)
	}
	classic, err := rbloom.NewClassic(rdb, "b", rbloom.Options{Capacity: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []rbloom.Filter{counting, classic} {
		if err := f.Create(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := counting.AddMany(ctx, items); err != nil {
		t.Fatal(err)
	}
	if _, err := classic.AddMany(ctx, items); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		key   string
		width uint64
	}{{"rbloom:{c}", 4}, {"rbloom:{b}", 1}} {
		k, slots, err := readHeader(ctx, rdb, tc.key)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := rdb.Get(ctx, tc.key).Result()
		if err != nil {
			t.Fatal(err)
		}
		p := plain{key: tc.key, k: k, m: slots, width: tc.width}
		want := make(map[uint64]int) // bit offset -> counter
		for _, item := range items {
			for _, off := range p.offsets(nil, item) {
				if tc.width == 4 {
					want[off]++
				} else {
					want[off] = 1
				}
			}
		}
		got := make(map[uint64]int)
		for off := uint64(headerBits); off < uint64(len(raw))*8; off += tc.width {
			b := raw[off/8]
			var v int
			if tc.width == 4 {
				v = int(b>>(4-off%8)) & 0xf
			} else {
				v = int(b>>(7-off%8)) & 1
			}
			if v != 0 {
				got[off] = v
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d slots set, locate says %d", tc.key, len(got), len(want))
		}
		for off, v := range want {
			if got[off] != v {
				t.Errorf("%s: counter at bit %d = %d, locate says %d", tc.key, off, got[off], v)
			}
		}
	}
}

// TestLocateGolden pins the hash of README.md's example: "hello" gives h1 =
// cbd8a7b341bd9b02 and h2 = 5b1e906a48ae1d19, so slot i is
// h1 + i*h2 + (i^3-i)/6.
func TestLocateGolden(t *testing.T) {
	const h1, h2 = 0xcbd8a7b341bd9b02, 0x5b1e906a48ae1d19
	got := locate(nil, "hello", 3, 1<<64-1)
	for i, slot := range got {
		u := uint64(i)
		if want := (uint64(h1) + u*h2 + (u*u*u-u)/6) % (1<<64 - 1); slot != want {
			t.Errorf("locate(hello)[%d] = %d, want %d", i, slot, want)
		}
	}
}

func TestPlainArgs(t *testing.T) {
	p := plain{key: "key", k: 2, m: 1000, width: 4}
	slots := locate(nil, "x", 2, 1000)
	off := func(i int) uint64 { return 512 + 4*slots[i] }
	for _, tc := range []struct {
		name string
		got  []any
		want string
	}{
		{"incr", p.incrArgs("x"), fmt.Sprint("[BITFIELD key OVERFLOW SAT INCRBY u4 ", off(0), " 1 INCRBY u4 ", off(1), " 1]")},
		{"get", p.getArgs("x"), fmt.Sprint("[BITFIELD_RO key GET u4 ", off(0), " GET u4 ", off(1), "]")},
		{"set u1", plain{key: "key", k: 2, m: 1000, width: 1}.setArgs("x"),
			fmt.Sprint("[BITFIELD key SET u1 ", 512+slots[0], " 1 SET u1 ", 512+slots[1], " 1]")},
	} {
		if got := fmt.Sprint(tc.got); got != tc.want {
			t.Errorf("%s args = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// The client side of a limit row: hashing an item and building its
// command.
func BenchmarkIncrArgs(b *testing.B) {
	p := plain{key: "key", k: 7, m: 9_585_059, width: 4}
	for b.Loop() {
		p.incrArgs("item:123456")
	}
}

func BenchmarkGetArgs(b *testing.B) {
	p := plain{key: "key", k: 7, m: 9_585_059, width: 4}
	for b.Loop() {
		p.getArgs("item:123456")
	}
}

func BenchmarkLocate(b *testing.B) {
	var buf [7]uint64
	for b.Loop() {
		locate(buf[:0], "item:123456", 7, 9_585_059)
	}
}

// BenchmarkPipelinedIncr is limit row 5 on a real Redis: 1,000 plain
// BITFIELD INCRBY u4 per flush.
func BenchmarkPipelinedIncr(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(b)})
	defer rdb.Close()
	p := plain{key: "key", k: 7, m: 9_585_059, width: 4}
	items := names("item", 0, 1000)
	ctx := context.Background()
	for b.Loop() {
		if err := pipelined(ctx, rdb, items, len(items), p.incrArgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(items))/b.Elapsed().Seconds(), "items/s")
}
