package rbloomtest_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

// BenchmarkMiniredisDemo runs the workload of "rbloom demo" against
// NewMiniredis: 100,000 items added to a counting and a classic filter,
// half of them removed from the counting one, then the kept, the removed
// and 100,000 other items tested on both. It measures the in-memory server
// that cmd/rbloom and examples/cacheguard use when given no Redis, and says
// nothing of rbloom on a real Redis.
func BenchmarkMiniredisDemo(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	rdb := newClient(b, rbloomtest.NewMiniredis(b).Addr())
	opts := rbloom.Options{Capacity: n, ErrorRate: 0.01}
	counting, err := rbloom.NewCounting(rdb, "counting", opts)
	if err != nil {
		b.Fatal(err)
	}
	classic, err := rbloom.NewClassic(rdb, "classic", opts)
	if err != nil {
		b.Fatal(err)
	}
	rows, strangers := make([]string, n), make([]string, n)
	for i := range n {
		rows[i], strangers[i] = "row:"+strconv.Itoa(i), "stranger:"+strconv.Itoa(i)
	}
	kept, deleted := rows[:n/2], rows[n/2:]
	var done int // items added, removed or tested
	check := func(res []bool, err error) {
		if err != nil {
			b.Fatal(err)
		}
		done += len(res)
	}
	for b.Loop() {
		check(nil, counting.Drop(ctx))
		check(nil, classic.Drop(ctx))
		check(counting.AddMany(ctx, rows))
		check(classic.AddMany(ctx, rows))
		check(counting.RemoveMany(ctx, deleted))
		for _, f := range []rbloom.Filter{counting, classic} {
			for _, items := range [][]string{kept, deleted, strangers} {
				check(f.TestMany(ctx, items))
			}
		}
	}
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "items/s")
}
