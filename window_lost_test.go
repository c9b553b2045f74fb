package rbloom

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestWindowLostWhole: a window Redis lost whole (a restart without
// persistence, FLUSHALL, the eviction of every key) fails every call
// with ErrNotFound, from its handle and a fresh one, and answers no held
// event new and no replayed batch with other answers; no call makes it
// again. Create does, empty.
func TestWindowLostWhole(t *testing.T) {
	srv := rbloomtest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 3}
	for _, lose := range srv.Losses(rdb) {
		w := created(t, must(NewWindow(rdb, "clicks", o)).on(t))
		held := events("held", 90)
		first := must(w.TestOrAddManyOnce(ctx, held, "batch")).on(t)
		lose.Do()
		for _, h := range []*Window{w, must(NewWindow(rdb, "clicks", o)).on(t)} {
			for name, call := range map[string]func() ([]bool, error){
				"TestMany":          func() ([]bool, error) { return h.TestMany(ctx, held) },
				"TestOrAddMany":     func() ([]bool, error) { return h.TestOrAddMany(ctx, held) },
				"TestOrAddManyOnce": func() ([]bool, error) { return h.TestOrAddManyOnce(ctx, held, "batch") },
				"TestOrAdd":         func() ([]bool, error) { seen, err := h.TestOrAdd(ctx, held[0]); return []bool{seen}, err },
				"Info":              func() ([]bool, error) { _, err := h.Info(ctx); return nil, err },
			} {
				seen, err := call()
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("after %s, %s: %v, %v; want ErrNotFound", lose.What, name, seen, err)
				}
				if err == nil && name == "TestOrAddManyOnce" && !slices.Equal(seen, first) {
					t.Errorf("after %s, the replayed batch answered %v, first %v", lose.What, seen, first)
				}
			}
		}
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) > 0 {
			t.Errorf("after %s, refused calls made %v", lose.What, keys)
		}
		must(0, w.Create(ctx)).on(t)
		if seen := must(w.TestOrAddMany(ctx, held)).on(t); slices.Contains(seen, true) {
			t.Errorf("after %s, Create made a window that holds events", lose.What)
		}
		must(0, w.Drop(ctx)).on(t)
	}
}
