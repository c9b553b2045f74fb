package rbloom

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// roundTrips counts the commands and pipelines a client sends.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error { h.n.Add(1); return next(ctx, c) }
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, c []redis.Cmder) error { h.n.Add(1); return next(ctx, c) }
}

// TestBatchRoundTrips: the round trips of a counting filter's batches of
// 90,000 items, as README says: a write batch takes one pipeline per
// perRoundTrip items (256 calls of 256 slots), a read batch one
// transaction per maxTxSlots slots (2,048: 292 items at k = 7), eight at
// a time. go test -run TestBatchRoundTrips -v . prints them.
func TestBatchRoundTrips(t *testing.T) {
	rdb := realRedis(t)
	h := &roundTrips{}
	rdb.AddHook(h)
	items := make([]string, 90_000)
	for i := range items {
		items[i] = fmt.Sprint("user:", i)
	}
	for _, rate := range []float64{0.01, 0.001} {
		c := created(t, must(NewCounting(rdb, fmt.Sprint("trips", rate), Options{Capacity: 1_000_000, ErrorRate: rate})).on(t))
		k := c.f.h.k
		must(c.AddMany(ctx, items[:10])).on(t) // the filter made, the scripts loaded
		must(c.TestMany(ctx, items[:10])).on(t)
		writes := (len(items) + c.f.perRoundTrip() - 1) / c.f.perRoundTrip()
		reads := (len(items) + maxTxSlots/k - 1) / (maxTxSlots / k)
		for _, op := range []struct {
			name string
			most int
			call func() error
		}{
			{"AddMany", writes, func() error { _, err := c.AddMany(ctx, items); return err }},
			{"TestMany", reads, func() error { _, err := c.TestMany(ctx, items); return err }},
			{"CountMany", reads, func() error { _, err := c.CountMany(ctx, items); return err }},
			{"RemoveMany", writes, func() error { _, err := c.RemoveMany(ctx, items); return err }},
		} {
			h.n.Store(0)
			if err := op.call(); err != nil {
				t.Fatalf("%s: %v", op.name, err)
			}
			n := int(h.n.Load())
			t.Logf("k = %d: %s of %d items: %d round trips", k, op.name, len(items), n)
			// A few more: a pipeline go-redis sends again after a timeout
			// on a busy machine.
			if most := op.most + op.most/10 + 2; n > most {
				t.Errorf("k = %d: %s of %d items took %d round trips, want at most %d", k, op.name, len(items), n, most)
			}
		}
	}
}
