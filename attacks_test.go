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

// Regression tests for what a reviewer who had not written the code found
// by attacking the promise from the outside (each failed before its fix).

// TestRepairKeepsIDs: a partition lost and repaired by Rebuild gets the
// filter's incarnation back, so a RemoveOnce delivered again after the
// repair is still answered from its record (before, the repaired
// partition had a fresh incarnation, the replay removed a second time,
// and an item held once tested absent).
func TestRepairKeepsIDs(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "repair", Options{Capacity: 1000, Partitions: 2}))
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

// TestRemoveOnceBeforeCreate: by default a RemoveOnce on a filter that
// does not exist fails with ErrNotFound and makes nothing, not even its
// record. With CreateOnWrite it records its answer ("absent"), so its
// replay after the item was added removes nothing (before, nothing was
// recorded and the replay removed the item).
func TestRemoveOnceBeforeCreate(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		for _, parts := range []int{1, 3} {
			strict := newCounting(t, rdb, "strict-"+string(rune('0'+parts)), Options{Capacity: 1000, Partitions: parts})
			if _, err := strict.RemoveOnce(ctx, "x", "del-1"); !errors.Is(err, ErrNotFound) {
				t.Errorf("P=%d: RemoveOnce on a filter that does not exist: %v, want ErrNotFound", parts, err)
			}
			if _, err := strict.RemoveManyOnce(ctx, []string{"y"}, "del-2"); !errors.Is(err, ErrNotFound) {
				t.Errorf("P=%d: RemoveManyOnce on a filter that does not exist: %v, want ErrNotFound", parts, err)
			}
			if keys := rdb.Keys(ctx, "*strict-*").Val(); len(keys) != 0 {
				t.Errorf("P=%d: a RemoveOnce refused with ErrNotFound left keys %v", parts, keys)
			}
			c := newCounting(t, rdb, "late-"+string(rune('0'+parts)), Options{Capacity: 1000, Partitions: parts, CreateOnWrite: true})
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
	c := created(t, newCounting(t, rdb, "retry-absent", Options{Capacity: 1000}))
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
	c := created(t, newCounting(t, rdb, "short-ids", o))
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
	c := created(t, newCounting(t, slow, "switch-lost", Options{Capacity: 1000}))
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

// TestReadsSeeOneState: a read checks a partition's header and reads its
// slots in one transaction, so a partition deleted (and restored), or
// replaced by a resize, between the two never reads as zeros. Before, a
// pipelined batch read answered absent for thousands of held items while
// another connection deleted and restored a partition, or resized the
// filter under an old-size handle.
func TestReadsSeeOneState(t *testing.T) {
	rdb := realRedis(t)
	held := make([]string, 9000)
	for i := range held {
		held[i] = fmt.Sprint("held-", i)
	}
	readWhile := func(t *testing.T, name string, o Options, meanwhile func()) {
		t.Helper()
		reader := newCounting(t, redis.NewClient(rdb.Options()), name, o)
		stop, done := make(chan struct{}), make(chan struct{})
		absent, reads := 0, 0
		go func() {
			defer close(done)
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); reads++ {
				got, err := reader.TestMany(ctx, held)
				if err != nil {
					if errors.Is(err, ErrParamsMismatch) {
						return // resized: the old handle is told to reopen
					}
					continue
				}
				for _, ok := range got {
					if !ok {
						absent++
					}
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		meanwhile()
		close(stop)
		<-done
		if absent > 0 {
			t.Errorf("%d held items answered absent in %d reads", absent, reads)
		}
	}
	t.Run("deleted and restored", func(t *testing.T) {
		o := Options{Capacity: 10_000, Partitions: 2}
		c := created(t, newCounting(t, rdb, "restored", o))
		must(c.AddMany(ctx, held)).on(t)
		key := c.f.parts[1].key
		dump := must(rdb.Dump(ctx, key).Result()).on(t)
		readWhile(t, "restored", o, func() {
			for range 100 {
				rdb.Del(ctx, key)
				time.Sleep(2 * time.Millisecond)
				must(rdb.Restore(ctx, key, 0, dump).Result()).on(t)
				time.Sleep(3 * time.Millisecond)
			}
		})
	})
	t.Run("resized", func(t *testing.T) {
		o := Options{Capacity: 10_000, Partitions: 2}
		c := created(t, newCounting(t, rdb, "resized", o))
		must(c.AddMany(ctx, held)).on(t)
		readWhile(t, "resized", o, func() {
			time.Sleep(20 * time.Millisecond)
			if _, err := c.Resize(ctx, Options{Capacity: 20_000, Partitions: 1}, func(add func([]string) error) error { return add(held) }); err != nil {
				t.Error(err)
			}
			time.Sleep(50 * time.Millisecond)
		})
	})
}

// TestSharedRecordHashLives: an operation id's record lives as long as its
// own call needs, even in a hash another process made with a shorter TTL
// (before, the hash kept the first record's TTL, and a go-redis re-send
// arriving after it expired applied the call a second time).
func TestSharedRecordHashLives(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "shared", Options{Capacity: 1000}))
	must(c.AddMany(ctx, []string{"x", "x"})).on(t)
	rec := onceRecord(c.f.parts[0].key, "remove", 0, "del-1", digest([]string{"x"}, c.f.perCall(), len(c.f.parts)), c.f.idLifetime, c.f.retryKeep, c.f.now())
	// Another process's record made the hash first, with a short TTL.
	rdb.HSet(ctx, rec.keys[0], "another-field", "x")
	rdb.PExpire(ctx, rec.keys[0], 300*time.Millisecond)
	must(c.RemoveOnce(ctx, "x", "del-1")).on(t)
	time.Sleep(400 * time.Millisecond)
	if ttl := rdb.PTTL(ctx, rec.keys[0]).Val(); ttl < c.f.idLifetime {
		t.Errorf("the record's hash has TTL %v after its record, want at least IDLifetime %v", ttl, c.f.idLifetime)
	}
	must(c.RemoveOnce(ctx, "x", "del-1")).on(t)
	if n := must(c.Count(ctx, "x")).on(t); n != 1 {
		t.Errorf("Count(x) = %d after one RemoveOnce replayed, want 1", n)
	}
}

// TestOnceClockSkew: a replay within IDLifetime from a process whose clock
// is up to a quarter of IDLifetime ahead finds the record (before, the
// lookups stopped four buckets back, and such a replay was applied again).
func TestOnceClockSkew(t *testing.T) {
	rdb := realRedis(t)
	const keep = time.Minute
	span := keep / recordBucketsPerKeep
	c := created(t, newCounting(t, rdb, "skew", Options{Capacity: 1000, IDLifetime: keep}))
	// The call at the end of its bucket; the replay just under IDLifetime
	// later by a clock just under a bucket ahead: five buckets on.
	clk := newClock(time.UnixMilli(1_700_000_000_000).Truncate(span).Add(span - time.Millisecond))
	c.f.now = clk.now
	must(c.AddMany(ctx, []string{"x", "x"})).on(t)
	must(c.RemoveOnce(ctx, "x", "del-1")).on(t)
	clk.add(keep + span - 2*time.Millisecond)
	must(c.RemoveOnce(ctx, "x", "del-1")).on(t)
	if n := must(c.Count(ctx, "x")).on(t); n != 1 {
		t.Errorf("Count(x) = %d after a replay IDLifetime later by a clock a bucket ahead, want 1", n)
	}
}

// TestRepairKeepsTTL: a lost partition repaired by Rebuild takes the TTL
// left to the filter's other partitions, not the rebuilding handle's.
func TestRepairKeepsTTL(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "repair-ttl", Options{Capacity: 1000, Partitions: 2, TTL: time.Hour}))
	must(c.AddMany(ctx, []string{"a", "b", "c"})).on(t)
	rdb.Del(ctx, c.f.parts[0].key)
	if err := newCounting(t, rdb, "repair-ttl", Options{Capacity: 1000, Partitions: 2}).Rebuild(ctx, func(add func([]string) error) error {
		return add([]string{"a", "b", "c"})
	}); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.f.parts {
		if ttl := rdb.PTTL(ctx, p.key).Val(); ttl < 59*time.Minute {
			t.Errorf("%s has TTL %v after the repair, want the filter's (about 1h)", p.key, ttl)
		}
	}
}

// TestResizeFullAddsNothing: an add refused with ErrFull during a resize
// does not reach the new filter either.
func TestResizeFullAddsNothing(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "full", Options{Capacity: 100}))
	items := make([]string, 100)
	for i := range items {
		items[i] = fmt.Sprint("i-", i)
	}
	must(c.AddMany(ctx, items)).on(t)
	bounded := newCounting(t, rdb, "full", Options{Capacity: 100, MaxItems: 100})
	var full error
	bigger, err := c.Resize(ctx, Options{Capacity: 100_000}, func(add func([]string) error) error {
		_, full = bounded.Add(ctx, "one too many")
		return add(items)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(full, ErrFull) {
		t.Fatalf("an add past MaxItems during the resize: %v, want ErrFull", full)
	}
	if must(bigger.Test(ctx, "one too many")).on(t) {
		t.Error("an add refused with ErrFull is in the resized filter")
	}
}

// TestResizeOnceForwardedOnce: an AddOnce during a resize whose call to the
// old partition failed after its items were forwarded, sent again with the
// same id, adds them to the new filter once (before, the forward had no
// record, and the retry forwarded again).
func TestResizeOnceForwardedOnce(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "forward-once", Options{Capacity: 100}))
	must(c.Add(ctx, "base")).on(t)
	bigger, err := c.Resize(ctx, Options{Capacity: 10_000}, func(add func([]string) error) error {
		// The forward happens, then the old partition's call is lost:
		// stand in for it with the forward alone, as forward does.
		head := must(rdb.GetRange(ctx, copyKey(c.f.parts[0].key), 0, headerSize-1).Result()).on(t)
		op := c.f.addOp()
		op.opID, op.keep = "ev-1", c.f.idLifetime
		if _, err := c.f.forward(ctx, head, op, []string{"x"}); err != nil {
			return err
		}
		if _, err := c.AddOnce(ctx, "x", "ev-1"); err != nil { // the caller's retry
			return err
		}
		return add([]string{"base"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := must(bigger.Count(ctx, "x")).on(t); n != 1 {
		t.Errorf("Count(x) = %d in the resized filter after one AddOnce id, want 1", n)
	}
}
