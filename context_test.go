package rbloom

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestCancelledContext checks that every call honours a context that is
// already done, and writes nothing.
func TestCancelledContext(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := newCounting(t, rdb, "cancelled", Options{Capacity: 1000, Partitions: 2})
		done, cancel := context.WithCancel(ctx)
		cancel()
		calls := map[string]func() error{
			"Add":        func() error { _, err := c.Add(done, "a"); return err },
			"AddMany":    func() error { _, err := c.AddMany(done, []string{"a", "b"}); return err },
			"AddOnce":    func() error { _, err := c.AddOnce(done, "a", "id"); return err },
			"Remove":     func() error { _, err := c.Remove(done, "a"); return err },
			"RemoveMany": func() error { _, err := c.RemoveMany(done, []string{"a"}); return err },
			"Test":       func() error { _, err := c.Test(done, "a"); return err },
			"TestMany":   func() error { _, err := c.TestMany(done, []string{"a"}); return err },
			"Count":      func() error { _, err := c.Count(done, "a"); return err },
			"Create":     func() error { return c.Create(done) },
			"Info":       func() error { _, err := c.Info(done); return err },
			"Drop":       func() error { return c.Drop(done) },
			"Open":       func() error { _, err := Open(done, rdb, "cancelled", Options{}); return err },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
			}
		}
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
			t.Errorf("keys written with a cancelled context: %v", keys)
		}
	})
}

// TestDeadlineMidBatch stops large batches at a deadline, with a client
// that lets contexts interrupt network I/O (ContextTimeoutEnabled). Some
// script calls ran and some did not, but each is all or nothing: the
// counters add up to exactly k for every item the filter counts.
func TestDeadlineMidBatch(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t), ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := created(t, must(NewCounting(rdb, "deadline", Options{Slots: 4_000_000, Hashes: 3, Partitions: 3})).on(t))
	items := make([]string, 300_000)
	for i := range items {
		items[i] = fmt.Sprint("item-", i)
	}
	stopped := 0
	for _, d := range []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 80 * time.Millisecond} {
		dctx, cancel := context.WithTimeout(ctx, d)
		_, err := c.AddMany(dctx, items)
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) &&
				!errors.Is(err, redis.ErrClosed) && !isTimeout(err) {
				t.Errorf("AddMany past its deadline: %v, want a deadline error", err)
			}
			stopped++
		}
	}
	if stopped == 0 {
		t.Fatal("no batch was stopped by its deadline: the test proved nothing")
	}
	sum := 0
	for _, v := range slotValues(t, rdb, c.f) {
		if v == 15 {
			t.Fatal("a counter saturated: the sum check needs fewer items")
		}
		sum += v
	}
	in := must(c.Info(ctx)).on(t)
	if sum != int(in.Items)*c.f.h.k {
		t.Errorf("counters add up to %d, want k * items = %d * %d: some item was half applied", sum, c.f.h.k, in.Items)
	}
	t.Logf("%d of 3 batches stopped by their deadline; %d items applied, all whole", stopped, in.Items)
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
