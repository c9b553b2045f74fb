package rbloom

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// Regression tests for what a reviewer who had not written the code found
// by attacking the promise from the outside (each failed before its fix).

// TestRepairKeepsIDs: a partition lost and repaired by Rebuild gets the
// filter's incarnation back, so a RemoveOnce delivered again after the
// repair is still answered from its record (before, the repaired
// partition had a fresh incarnation, the replay removed a second time,
// and an item held once tested absent).
func TestRepairKeepsIDs(t *testing.T) {
	rdb := realRedis(t)
	c := newCounting(t, rdb, "repair", Options{Capacity: 1000, Partitions: 2})
	must(c.AddOnce(ctx, "x", "add-1")).on(t)
	must(c.AddOnce(ctx, "x", "add-2")).on(t)
	must(c.RemoveOnce(ctx, "x", "rm-1")).on(t)
	p, _ := c.f.locate(nil, "x")
	rdb.Del(ctx, c.f.parts[p].key)
	if err := c.Rebuild(ctx, func(add func([]string) error) error { return add([]string{"x"}) }); err != nil {
		t.Fatal(err)
	}
	must(c.RemoveOnce(ctx, "x", "rm-1")).on(t)
	if !must(c.Test(ctx, "x")).on(t) {
		t.Error("x, held once, tests absent: the RemoveOnce replayed after the repair was applied again")
	}
}

// TestRemoveOnceBeforeCreate: a RemoveOnce on a filter that does not exist
// yet records its answer ("absent"), so its replay after the item was
// added removes nothing (before, nothing was recorded and the replay
// removed the item).
func TestRemoveOnceBeforeCreate(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		for _, parts := range []int{1, 3} {
			c := newCounting(t, rdb, "late-"+string(rune('0'+parts)), Options{Capacity: 1000, Partitions: parts})
			if removed := must(c.RemoveOnce(ctx, "x", "del-1")).on(t); removed {
				t.Fatal("RemoveOnce on a filter that does not exist removed something")
			}
			must(c.RemoveManyOnce(ctx, []string{"y"}, "del-2")).on(t)
			must(c.AddMany(ctx, []string{"x", "y"})).on(t)
			if removed := must(c.RemoveOnce(ctx, "x", "del-1")).on(t); removed {
				t.Errorf("P=%d: the replayed RemoveOnce answered removed; its first call found x absent", parts)
			}
			if again := must(c.RemoveManyOnce(ctx, []string{"y"}, "del-2")).on(t); again[0] {
				t.Errorf("P=%d: the replayed RemoveManyOnce answered removed", parts)
			}
			if got := must(c.TestMany(ctx, []string{"x", "y"})).on(t); !got[0] || !got[1] {
				t.Errorf("P=%d: Test(x, y) = %v after their Add, want both present", parts, got)
			}
		}
	})
}

// slowRetries is a client through a proxy whose go-redis re-sends a call
// retry after losing its reply.
func slowRetries(t *testing.T, addr string, retry time.Duration) (*redis.Client, *rbloomtest.Proxy) {
	proxy := rbloomtest.NewProxy(t, addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MinRetryBackoff: retry, MaxRetryBackoff: retry})
	t.Cleanup(func() { rdb.Close() })
	return rdb, proxy
}

// TestRemoveRetryAbsent: a Remove that found its item absent, whose reply
// was lost, is re-sent by go-redis after another client added the item:
// the re-sent call answers "absent" again and removes nothing (before, no
// record was kept for a remove that changed nothing, and the re-send
// removed the item).
func TestRemoveRetryAbsent(t *testing.T) {
	rdb := realRedis(t)
	slow, proxy := slowRetries(t, rdb.Options().Addr, 500*time.Millisecond)
	c := newCounting(t, rdb, "retry-absent", Options{Capacity: 1000})
	s := newCounting(t, slow, "retry-absent", Options{Capacity: 1000})
	must(c.Add(ctx, "other")).on(t)
	must(s.Remove(ctx, "warm")).on(t) // remove.lua is in the script cache
	proxy.DropReplies(1)
	done := make(chan bool)
	go func() {
		removed, _ := s.Remove(context.Background(), "x")
		done <- removed
	}()
	time.Sleep(150 * time.Millisecond)
	must(c.Add(ctx, "x")).on(t)
	if removed := <-done; removed || !must(c.Test(ctx, "x")).on(t) {
		t.Errorf("the re-sent Remove answered %v and x, added meanwhile, tests %v", removed, must(c.Test(ctx, "x")).on(t))
	}
}

// TestOnceRetryOutlivesIDLifetime: an operation id's record lasts as long
// as go-redis may re-send the call, even when IDLifetime is shorter (before,
// a RemoveOnce re-sent 2 s after a lost reply, with IDLifetime 1 s, was
// applied twice).
func TestOnceRetryOutlivesIDLifetime(t *testing.T) {
	rdb := realRedis(t)
	slow, proxy := slowRetries(t, rdb.Options().Addr, 2*time.Second)
	o := Options{Capacity: 1000, IDLifetime: time.Second}
	c := newCounting(t, rdb, "short-ids", o)
	s := newCounting(t, slow, "short-ids", o)
	must(c.AddMany(ctx, []string{"x", "x"})).on(t)
	must(s.Remove(ctx, "warm")).on(t) // remove.lua is in the script cache
	proxy.DropReplies(1)
	must(s.RemoveOnce(ctx, "x", "del-1")).on(t)
	if n := must(c.Count(ctx, "x")).on(t); n != 1 {
		t.Errorf("Count(x) = %d after one RemoveOnce re-sent by go-redis, want 1", n)
	}
}

// TestRebuildSwitchReplyLost: a switch whose reply was lost, re-sent by
// go-redis, is answered ok: Rebuild succeeds (before, it reported
// ErrRebuildLost, "not switched", though it had switched).
func TestRebuildSwitchReplyLost(t *testing.T) {
	rdb := realRedis(t)
	slow, proxy := slowRetries(t, rdb.Options().Addr, 100*time.Millisecond)
	c := newCounting(t, slow, "switch-lost", Options{Capacity: 1000})
	must(c.AddMany(ctx, []string{"keep", "ghost"})).on(t)
	err := c.Rebuild(ctx, func(add func([]string) error) error {
		if err := add([]string{"keep"}); err != nil {
			return err
		}
		proxy.DropReplies(1) // the switch's
		return nil
	})
	if err != nil {
		t.Errorf("Rebuild whose switch reply was lost: %v, want nil", err)
	}
	if errors.Is(err, ErrRebuildLost) && !must(c.Test(ctx, "ghost")).on(t) {
		t.Error("Rebuild said it did not switch, but the ghost is gone")
	}
	if n := rdb.Exists(ctx, leaseKey(c.f.parts[0].key)).Val(); n != 0 {
		t.Error("the lease is left after the rebuild")
	}
}
