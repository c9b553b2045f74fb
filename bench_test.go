package rbloom

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Client-side costs: hashing an item, and building the arguments of the
// script calls of a batch. go test -run '^$' -bench . -benchmem

func BenchmarkLocate(b *testing.B) {
	buf := make([]uint64, 0, MaxHashes)
	for b.Loop() {
		locate(buf[:0], "user:1234567", 7, 9_585_059, 1)
	}
}

func BenchmarkBatchArgs(b *testing.B) {
	c, err := NewCounting(redis.NewClient(&redis.Options{}), "bench", Options{Capacity: 1_000_000})
	if err != nil {
		b.Fatal(err)
	}
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprint("user:", i)
	}
	perCall := maxCallSlots / c.f.h.k
	ops := map[string]func(p int, pl placement, at []int) []any{
		"add":    func(p int, pl placement, at []int) []any { return c.f.call(c.f.addOp(), p, 0, pl, at).wire().args },
		"remove": func(p int, pl placement, at []int) []any { return c.f.call(c.f.removeOp(), p, 0, pl, at).wire().args },
		"test": func(_ int, pl placement, at []int) []any { // as read.go calls it
			return c.f.getArgs(make([]any, 0, 2+len(at)*c.f.h.k*3), pl, at)
		},
	}
	for _, op := range []string{"add", "remove", "test"} {
		batch := func() {
			pl := c.f.place(items)
			for p, group := range pl.groups {
				for a, b := range spans(len(group), perCall) {
					ops[op](p, pl, group[a:b])
				}
			}
		}
		b.Run(op, func(b *testing.B) {
			for b.Loop() {
				batch()
			}
			b.ReportMetric(testing.AllocsPerRun(10, batch)/float64(len(items)), "allocs/item")
		})
	}
}
