package rbloom

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestLostFilterDefault: with no option set, a filter Redis lost (a flush,
// the eviction of its keys) fails every call with ErrNotFound, writes
// included, so that the next write does not make it again, empty, and
// pass for the real one; Create made it on purpose, for every mode.
func TestLostFilterDefault(t *testing.T) {
	rdb := realRedis(t)
	for _, mode := range deletableModes {
		for _, parts := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/P=%d", mode.name, parts), func(t *testing.T) {
				name := fmt.Sprintf("lost-%s-%d", mode.name, parts)
				c := must(mode.make(rdb, name, Options{Capacity: 1000, Partitions: parts})).on(t)
				if err := c.Create(ctx); err != nil {
					t.Fatal(err)
				}
				items := []string{"a", "b", "c", "d", "e", "f"}
				must(c.AddMany(ctx, items)).on(t)
				for _, lose := range []struct {
					name string
					do   func()
				}{
					{"FLUSHALL", func() { rdb.FlushAll(ctx) }},
					{"evicted", func() { evictAll(t, rdb, c.core()) }},
				} {
					lose.do()
					checkNotFound(t, lose.name, c, items)
					// Made again on purpose: the next loss is a loss again.
					if err := c.Create(ctx); err != nil {
						t.Fatal(err)
					}
					must(c.AddMany(ctx, items)).on(t)
				}
			})
		}
	}
}

// checkNotFound checks that every method of c fails with ErrNotFound, and
// that after the writes the items are still not answered absent.
func checkNotFound(t *testing.T, when string, c deletable, items []string) {
	t.Helper()
	calls := map[string]func() error{
		"TestMany":      func() error { _, err := c.TestMany(ctx, items); return err },
		"Count":         func() error { _, err := c.Count(ctx, items[0]); return err },
		"AddMany":       func() error { _, err := c.AddMany(ctx, items[:1]); return err },
		"AddManyOnce":   func() error { _, err := c.AddManyOnce(ctx, items[:1], "op-"+when); return err },
		"TestOrAddMany": func() error { _, err := c.TestOrAddMany(ctx, items); return err },
		"RemoveMany":    func() error { _, err := c.RemoveMany(ctx, items[:1]); return err },
	}
	for _, name := range sortedKeys(calls) {
		if err := calls[name](); !errors.Is(err, ErrNotFound) {
			t.Errorf("after %s: %s: %v, want ErrNotFound", when, name, err)
		}
	}
	if got, err := c.TestMany(ctx, items); !errors.Is(err, ErrNotFound) {
		t.Errorf("after %s and writes: TestMany = %v, %v: want ErrNotFound, never absent", when, got, err)
	}
}

// evictAll deletes every key of f, as an eviction of them all would.
func evictAll(t *testing.T, rdb *redis.Client, f *filter) {
	t.Helper()
	for _, p := range f.parts {
		if err := rdb.Del(ctx, p.key).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLostFilterNotReplicated: with WaitReplicas and no replica to wait
// for, a write to a lost filter, which writes nothing, fails with
// ErrNotFound, not ErrNotReplicated (which says the master has the write).
func TestLostFilterNotReplicated(t *testing.T) {
	rdb := realRedis(t)
	c := newCounting(t, rdb, "lost-wait", Options{Capacity: 100, WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	for _, write := range []func() error{
		func() error { _, err := c.Add(ctx, "a"); return err },
		func() error { _, err := c.AddOnce(ctx, "a", "op"); return err },
		func() error { _, err := c.Remove(ctx, "a"); return err },
	} {
		if err := write(); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotReplicated) {
			t.Errorf("a write to a missing filter with no replica: %v, want ErrNotFound alone", err)
		}
	}
}
