package rbloom

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// failNth fails the n-th pipeline of scripts it sees while armed, as a
// connection lost before the round trip was sent.
type failNth struct {
	armed atomic.Bool
	seen  atomic.Int64
	n     int64
}

func (h *failNth) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *failNth) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *failNth) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && len(cmds) > 0 && cmds[0].Name() == "evalsha" && h.seen.Add(1) == h.n {
			err := errors.New("simulated: connection lost before the round trip was sent")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestOnceReorderedReplay: a batch under an operation id that failed half
// way and is sent again with the same items in another order is refused
// with ErrOpIDReused and applies none of its calls, on the counting and the
// cuckoo filter. Before (found by an outside review), each call checked
// only its own record, tagged with its own items: the calls the first
// attempt never made ran with items it had applied in other calls, and an
// item added twice and removed once tested absent. Sent again in the same
// order, the batch completes.
func TestOnceReorderedReplay(t *testing.T) {
	for _, mode := range []string{"counting", "cuckoo"} {
		for _, reorder := range []bool{true, false} {
			t.Run(fmt.Sprint(mode, "/reorder=", reorder), func(t *testing.T) {
				rdb := realRedis(t)
				var f interface {
					AddMany(context.Context, []string) ([]bool, error)
					TestMany(context.Context, []string) ([]bool, error)
					RemoveManyOnce(context.Context, []string, string) ([]bool, error)
				}
				if mode == "counting" {
					f = created(t, newCounting(t, rdb, "reorder", Options{Capacity: 40_000, Partitions: 2}))
				} else {
					f = created(t, must(NewCuckoo(rdb, "reorder", Options{Capacity: 40_000, Partitions: 2})).on(t))
				}
				items := events("it", 20_000)
				for range 2 {
					must(f.AddMany(ctx, items)).on(t)
				}
				again := failHalfway(t, rdb, items, reorder, func() error { _, err := f.RemoveManyOnce(ctx, items, "R"); return err })
				_, err := f.RemoveManyOnce(ctx, again, "R")
				if reorder != errors.Is(err, ErrOpIDReused) {
					t.Errorf("sent again (reordered: %v): %v", reorder, err)
				}
				lost := 0
				for _, ok := range must(f.TestMany(ctx, items)).on(t) {
					if !ok {
						lost++
					}
				}
				if lost > 0 {
					t.Errorf("%d items added twice and removed once under R test absent", lost)
				}
			})
		}
	}
}

// TestWindowOnceReorderedReplay: the same for a window's
// TestOrAddManyOnce, which shares the records: a batch that failed half
// way and is sent again in another order is refused with ErrOpIDReused;
// in the same order it completes, and then every event is held.
func TestWindowOnceReorderedReplay(t *testing.T) {
	for _, reorder := range []bool{true, false} {
		t.Run(fmt.Sprint("reorder=", reorder), func(t *testing.T) {
			rdb := realRedis(t)
			w := created(t, must(NewWindow(rdb, "reorder", WindowOptions{EventsPerBucket: 40_000, ErrorRate: 0.01,
				Bucket: time.Hour, Span: 2 * time.Hour, Partitions: 2})).on(t))
			evs := events("ev", maxRoundTripSlots/w.f.h.k+5_000)
			must(w.TestOrAdd(ctx, "the window exists")).on(t)
			again := failHalfway(t, rdb, evs, reorder, func() error { _, err := w.TestOrAddManyOnce(ctx, evs, "B"); return err })
			_, err := w.TestOrAddManyOnce(ctx, again, "B")
			if reorder != errors.Is(err, ErrOpIDReused) {
				t.Fatalf("sent again (reordered: %v): %v", reorder, err)
			}
			if !reorder && slices.Contains(must(w.TestMany(ctx, evs)).on(t), false) {
				t.Error("after the batch completed, an event is not held")
			}
		})
	}
}

// failHalfway runs send, a batch of items under an id, with its second
// round trip failing (failNth), and returns the items to send again:
// shuffled when reorder.
func failHalfway(t *testing.T, rdb *redis.Client, items []string, reorder bool, send func() error) []string {
	t.Helper()
	h := &failNth{n: 2}
	rdb.AddHook(h)
	h.armed.Store(true)
	err := send()
	h.armed.Store(false)
	if err == nil {
		t.Fatal("the first attempt did not fail: the batch fits in one round trip")
	}
	again := slices.Clone(items)
	if reorder {
		rand.New(rand.NewPCG(1, 1)).Shuffle(len(again), func(i, j int) { again[i], again[j] = again[j], again[i] })
	}
	return again
}
