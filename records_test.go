package rbloom

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestOnceRecordHorizon: an operation id's record is found for at least
// IDLifetime after its call, by a process whose clock is a bucket ahead or
// behind too, and is forgotten within IDLifetime plus two buckets. Reusing
// the id for another item shows whether the record was found: it is
// ErrOpIDReused when it is.
func TestOnceRecordHorizon(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		const keep = time.Minute
		span := keep / recordBucketsPerKeep
		c := created(t, newCounting(t, rdb, "horizon", Options{Capacity: 1000, IDLifetime: keep}))
		clk := newClock(time.UnixMilli(1_700_000_000_000).Truncate(span).Add(span / 2))
		c.f.now = clk.now
		t0 := clk.now()
		must(c.AddOnce(ctx, "a", "id")).on(t)
		for _, d := range []time.Duration{-3 * span / 4, 0, span / 2, span, 2 * span, keep / 2, keep - time.Millisecond, keep + span/3} {
			clk.t = t0.Add(d)
			if _, err := c.AddOnce(ctx, "b", "id"); !errors.Is(err, ErrOpIDReused) {
				t.Errorf("%v after the call: reusing the id gave %v, want ErrOpIDReused", d, err)
			}
			if maybe := must(c.AddOnce(ctx, "a", "id")).on(t); maybe {
				t.Errorf("%v after the call: the replay answered %v, want the first answer (new)", d, maybe)
			}
		}
		clk.t = t0.Add(keep + 2*span)
		if _, err := c.AddOnce(ctx, "b", "id"); err != nil {
			t.Errorf("IDLifetime plus two buckets after the call, the id is still remembered: %v", err)
		}
		if items := must(c.Info(ctx)).on(t).Items; items != 2 {
			t.Errorf("Items = %d, want 2 (a once, b once)", items)
		}
	})
}

// TestRecordHashes: records are fields of small hashes, a handle's random
// records at most recordChunk to a hash, and every hash has a TTL from its
// first record, so none outlives its bucket.
func TestRecordHashes(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "records", Options{Capacity: 10_000, IDLifetime: time.Hour}))
		const calls = 300
		for i := range calls {
			must(c.Add(ctx, fmt.Sprint("plain-", i))).on(t)
			must(c.AddOnce(ctx, fmt.Sprint("once-", i), fmt.Sprint("id-", i))).on(t)
		}
		keys := rdb.Keys(ctx, "rbloom:{records}:r:*").Val()
		fields := int64(0)
		for _, k := range keys {
			n := rdb.HLen(ctx, k).Val()
			fields += n
			if !strings.Contains(k, ":once:") && n > recordChunk {
				t.Errorf("%s: %d records, want at most %d", k, n, recordChunk)
			}
			ttl := rdb.PTTL(ctx, k).Val()
			if ttl <= 0 || ttl > time.Hour+2*time.Hour/recordBucketsPerKeep {
				t.Errorf("%s: TTL %v", k, ttl)
			}
		}
		if want := int64(2*calls + 1); fields != want { // and Create's call
			t.Errorf("%d records, want one per call (%d)", fields, want)
		}
	})
}

// TestRecordMemory measures the Redis memory a write's record takes, on
// a real server: a record key took 150 bytes (MEMORY USAGE, 195 with its
// expiry); a record must take at most a third of that.
func TestRecordMemory(t *testing.T) {
	rdb := realRedis(t)
	for _, once := range []bool{false, true} {
		name := fmt.Sprint("memory-", once)
		c := created(t, newCounting(t, rdb, name, Options{Capacity: 100_000}))
		const calls = 20_000
		for i := range calls {
			if once {
				must(c.AddOnce(ctx, fmt.Sprint(i), fmt.Sprint("event-", i))).on(t)
			} else {
				must(c.Add(ctx, fmt.Sprint(i))).on(t)
			}
		}
		var bytes int64
		for _, k := range rdb.Keys(ctx, "rbloom:{"+name+"}:r:*").Val() {
			bytes += rdb.MemoryUsage(ctx, k, 0).Val()
		}
		per := float64(bytes) / calls
		t.Logf("once %v: %d calls, %.1f bytes of record hashes per call", once, calls, per)
		if per > 50 {
			t.Errorf("once %v: %.1f bytes per call, want at most 50 (a third of 150)", once, per)
		}
	}
}

// TestRetryKeep: a call's record outlives every re-send go-redis may make,
// as its options bound them, and the record hash gets that lifetime.
func TestRetryKeep(t *testing.T) {
	for _, tt := range []struct {
		name string
		rdb  Client
		want time.Duration
	}{
		{"defaults", redis.NewClient(&redis.Options{}), defaultRetryKeep},
		{"cluster defaults", redis.NewClusterClient(&redis.ClusterOptions{}), defaultRetryKeep},
		{"short timeouts", redis.NewClient(&redis.Options{DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond, MaxRetries: 1}), minRetryKeep},
		{"more retries", redis.NewClient(&redis.Options{MaxRetries: 9}), 10*(6*time.Second+5*5100*time.Millisecond+10*time.Second) + 9*time.Second},
		{"no read timeout", redis.NewClient(&redis.Options{ReadTimeout: -1}), maxRetryKeep},
	} {
		if got := retryKeep(tt.rdb); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if defaultRetryKeep != 169*time.Second {
		t.Errorf("defaultRetryKeep = %v, want 169s", defaultRetryKeep)
	}

	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "retry-keep", Options{Capacity: 100}))
	must(c.Add(ctx, "a")).on(t)
	keys := rdb.Keys(ctx, "rbloom:{retry-keep}:r:*").Val()
	if len(keys) != 1 {
		t.Fatalf("record hashes %v, want one", keys)
	}
	span := defaultRetryKeep / recordBucketsPerKeep
	if ttl := rdb.PTTL(ctx, keys[0]).Val(); ttl <= defaultRetryKeep || ttl > defaultRetryKeep+span {
		t.Errorf("record hash TTL %v, want above %v, at most %v", ttl, defaultRetryKeep, defaultRetryKeep+span)
	}
}

// TestIDLifetimeStored: the id lifetime is stored with the filter, so two
// handles can never disagree on where an id's record is and how long it
// lasts (before, handles with IDLifetime 1h and 2h each missed the other's
// records: AddOnce counted twice, RemoveOnce removed twice, and a window
// answered a replayed batch anew). A handle with another window gets
// ErrParamsMismatch, from every once call, and writes nothing; the default
// and an explicit hour agree; Open takes the stored window.
func TestIDLifetimeStored(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		hour := created(t, newCounting(t, rdb, "stored", Options{Capacity: 1000, IDLifetime: time.Hour}))
		must(hour.AddOnce(ctx, "x", "id-1")).on(t)
		defaulted := newCounting(t, rdb, "stored", Options{Capacity: 1000})
		if maybe := must(defaulted.AddOnce(ctx, "x", "id-1")).on(t); maybe {
			t.Error("the replay through the default window's handle answered present: it was applied again")
		}
		before := dump(t, rdb)
		other := newCounting(t, rdb, "stored", Options{Capacity: 1000, IDLifetime: 2 * time.Hour})
		calls := map[string]func() error{
			"AddOnce":        func() error { _, err := other.AddOnce(ctx, "x", "id-1"); return err },
			"AddManyOnce":    func() error { _, err := other.AddManyOnce(ctx, []string{"x"}, "id-2"); return err },
			"RemoveOnce":     func() error { _, err := other.RemoveOnce(ctx, "x", "id-3"); return err },
			"RemoveManyOnce": func() error { _, err := other.RemoveManyOnce(ctx, []string{"x"}, "id-4"); return err },
			"Add":            func() error { _, err := other.Add(ctx, "y"); return err },
		}
		for _, name := range sortedKeys(calls) {
			if err := calls[name](); !errors.Is(err, ErrParamsMismatch) {
				t.Errorf("%s through a handle with another IDLifetime: %v, want ErrParamsMismatch", name, err)
			}
		}
		if after := dump(t, rdb); !maps.Equal(before, after) {
			t.Error("calls refused for another IDLifetime changed Redis")
		}
		if n := must(hour.Count(ctx, "x")).on(t); n != 1 {
			t.Errorf("Count(x) = %d, want 1 (one AddOnce, replayed)", n)
		}
		opened := must(OpenCounting(ctx, rdb, "stored", Options{})).on(t)
		if opened.f.idLifetime != time.Hour {
			t.Errorf("Open: id lifetime %v, want 1h", opened.f.idLifetime)
		}
		if _, err := OpenCounting(ctx, rdb, "stored", Options{IDLifetime: time.Hour}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("OpenCounting with IDLifetime set: %v, want ErrInvalidOptions (it comes from Redis)", err)
		}

		// Windows store theirs in each generation.
		wo := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: time.Hour, IDLifetime: time.Hour}
		w := created(t, must(NewWindow(rdb, "stored-window", wo)).on(t))
		first := must(w.TestOrAddManyOnce(ctx, []string{"e1", "e2"}, "batch")).on(t)
		wo.IDLifetime = 2 * time.Hour
		w2 := must(NewWindow(rdb, "stored-window", wo)).on(t)
		if got, err := w2.TestOrAddManyOnce(ctx, []string{"e1", "e2"}, "batch"); !errors.Is(err, ErrParamsMismatch) {
			t.Errorf("a window handle with another IDLifetime replaying a batch: %v, %v, want ErrParamsMismatch (first answers %v)", got, err, first)
		}
		for _, bad := range []time.Duration{time.Millisecond, 1500 * time.Millisecond, -time.Second, (1 << 24) * time.Second} {
			if _, err := NewCounting(rdb, "bad", Options{Capacity: 10, IDLifetime: bad}); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "IDLifetime") {
				t.Errorf("IDLifetime = %v: %v, want ErrInvalidOptions naming IDLifetime", bad, err)
			}
		}
	})
}

// TestDropForgetsRecords: a record belongs to the filter it was written
// for. After Drop and a new filter of the same name, an id used before the
// Drop is applied anew (before the fix it was answered as a replay, wrote
// nothing, and the item tested absent); and Drop takes a rebuild's copies
// and leases with it.
func TestDropForgetsRecords(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		for _, parts := range []int{1, 3} {
			name := fmt.Sprint("reborn-", parts)
			c := created(t, newCounting(t, rdb, name, Options{Capacity: 1000, Partitions: parts}))
			must(c.AddOnce(ctx, "x", "id-1")).on(t)
			must(c.AddManyOnce(ctx, []string{"a", "b", "c"}, "batch-1")).on(t)
			must(c.RemoveOnce(ctx, "x", "id-2")).on(t)
			if err := c.Drop(ctx); err != nil {
				t.Fatal(err)
			}
			created(t, c)
			must(c.AddOnce(ctx, "x", "id-1")).on(t)
			must(c.AddManyOnce(ctx, []string{"a", "b", "c"}, "batch-1")).on(t)
			for _, item := range []string{"x", "a", "b", "c"} {
				if !must(c.Test(ctx, item)).on(t) {
					t.Errorf("P=%d: %q, added under an id used before the Drop, tests absent", parts, item)
				}
			}
			if removed := must(c.RemoveOnce(ctx, "x", "id-2")).on(t); !removed {
				t.Errorf("P=%d: RemoveOnce under an id used before the Drop answered its old answer, not removed", parts)
			}
			if n := must(c.Info(ctx)).on(t).Items; n != 3 {
				t.Errorf("P=%d: Items = %d, want 3", parts, n)
			}
		}
	})
}

// TestInfoEvictionPolicy: Info reports the server's maxmemory-policy and
// whether it can evict the filter's keys or its records (before, README
// advised a volatile-* policy, under which record hashes, which always
// have a TTL, were evicted and a replayed batch applied twice).
func TestInfoEvictionPolicy(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "policy", Options{Capacity: 1000}))
	must(c.Add(ctx, "a")).on(t)
	for _, policy := range []string{"noeviction", "volatile-lru", "allkeys-lru"} {
		rdb.ConfigSet(ctx, "maxmemory-policy", policy)
		in := must(c.Info(ctx)).on(t)
		if in.EvictionPolicy != policy || in.Evicts() != (policy != "noeviction") {
			t.Errorf("under %s: EvictionPolicy %q, Evicts %v", policy, in.EvictionPolicy, in.Evicts())
		}
	}
}

// TestOnceFullMidBatch: a batch under an operation id whose first calls
// to a partition are refused with ErrFull while a later one is applied
// (found by an outside review) leaves a mark of the refused calls, so that
// the id sent again for the same items in another order (or cut into calls
// another way, by an rbloom of another call size) is refused and writes
// nothing, where it applied the calls that found no record. Sent again as
// it was, once there is room, the batch is applied once.
func TestOnceFullMidBatch(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		modes := map[string]func(name string, o Options) (Filter, *filter){
			"counting": func(name string, o Options) (Filter, *filter) {
				c := newCounting(t, rdb, name, o)
				return c, c.f
			},
			"cuckoo": func(name string, o Options) (Filter, *filter) {
				c := newCuckooT(t, rdb, name, o)
				return c, c.f
			},
		}
		for mode, open := range modes {
			t.Run(mode, func(t *testing.T) {
				name := "full-mid-batch-" + mode
				bounded, f := open(name, Options{Capacity: 1000, MaxItems: 5})
				created(t, bounded)
				free, _ := open(name, Options{Capacity: 1000})
				per := f.perCall()
				batch := make([]string, 2*per+5) // two calls refused, the third applied
				for i := range batch {
					batch[i] = fmt.Sprint("item-", i)
				}
				if _, err := bounded.AddManyOnce(ctx, batch, "id"); !errors.Is(err, ErrFull) {
					t.Fatalf("the batch past MaxItems: %v, want ErrFull", err)
				}
				if items := must(free.Info(ctx)).on(t).Items; items != 5 {
					t.Fatalf("after ErrFull: %d items, want 5 (the last call's)", items)
				}
				reordered := slices.Clone(batch)
				slices.Reverse(reordered)
				if _, err := free.AddManyOnce(ctx, reordered, "id"); !errors.Is(err, ErrOpIDReused) {
					t.Errorf("the id sent again for the items in another order: %v, want ErrOpIDReused", err)
				}
				if items := must(free.Info(ctx)).on(t).Items; items != 5 {
					t.Errorf("the id refused for the items in another order wrote: %d items, want 5", items)
				}
				must(free.AddManyOnce(ctx, batch, "id")).on(t)
				heldOnce(t, free, batch, "the batch sent again as it was")

				// The mark of a call refused before its partition existed
				// counts once another process has created the partition
				// (found by an outside review: with the partition made by
				// another call, the mark was in another incarnation).
				// By default such a call is refused with ErrNotFound, and
				// marks nothing; with CreateOnWrite it is refused with
				// ErrFull.
				strict, _ := open(name+"-created", Options{Capacity: 1000, MaxItems: 5})
				before := dump(t, rdb)
				if _, err := strict.AddManyOnce(ctx, batch[:per], "id"); !errors.Is(err, ErrNotFound) {
					t.Errorf("a batch to a filter that does not exist: %v, want ErrNotFound", err)
				}
				if after := dump(t, rdb); !maps.Equal(before, after) {
					t.Error("a batch refused with ErrNotFound wrote")
				}
				bounded, _ = open(name+"-created", Options{Capacity: 1000, MaxItems: 5, CreateOnWrite: true})
				free, _ = open(name+"-created", Options{Capacity: 1000, CreateOnWrite: true})
				if _, err := bounded.AddManyOnce(ctx, batch[:per], "id"); !errors.Is(err, ErrFull) {
					t.Fatalf("one call past MaxItems: %v, want ErrFull", err)
				}
				must(free.Add(ctx, "another process's item")).on(t)
				reordered = slices.Clone(batch[:per])
				slices.Reverse(reordered)
				if _, err := free.AddManyOnce(ctx, reordered, "id"); !errors.Is(err, ErrOpIDReused) {
					t.Errorf("the id sent again for the items in another order, after another process created the filter: %v, want ErrOpIDReused", err)
				}
				if items := must(free.Info(ctx)).on(t).Items; items != 1 {
					t.Errorf("after the id was sent again for the items in another order: %d items, want 1", items)
				}
			})
		}
	})
}

// TestOnceCutBetweenCalls: when the partition is replaced between a
// batch's first call and its later ones (here a Drop lands between two
// commands of the batch's pipeline, as another process's command can),
// the later calls write nothing, and the id sent again for the items in
// another order applies each item once (found by an outside review:
// applied in the new partition with no record of the first call there,
// they were applied again by the reordered batch, 4 items counted twice,
// with ErrOpIDReused).
//
// The partition is replaced by Drop and Create, or, with CreateOnWrite, by
// Drop and the next write.
func TestOnceCutBetweenCalls(t *testing.T) {
	for _, onWrite := range []bool{false, true} {
		t.Run(fmt.Sprint("CreateOnWrite=", onWrite), func(t *testing.T) { testOnceCutBetweenCalls(t, onWrite) })
	}
}

func testOnceCutBetweenCalls(t *testing.T, onWrite bool) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		o := Options{Capacity: 1000, CreateOnWrite: onWrite}
		other := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		t.Cleanup(func() { other.Close() })
		dropper := created(t, newCounting(t, other, "cut", o))
		must(created(t, newCounting(t, rdb, "warm", o)).AddManyOnce(ctx, []string{"x"}, "w")).on(t) // loads add.lua
		cut := &cutPipeline{between: func() {
			if err := dropper.Drop(ctx); err != nil {
				t.Error(err)
			}
			if !onWrite {
				if err := dropper.Create(ctx); err != nil {
					t.Error(err)
				}
			}
		}}
		rdb.AddHook(cut)
		c := newCounting(t, rdb, "cut", o)
		batch := make([]string, c.f.perCall()+4) // two calls
		for i := range batch {
			batch[i] = fmt.Sprint("item-", i)
		}
		_, err := c.AddManyOnce(ctx, batch, "id")
		if !cut.done.Load() {
			t.Fatal("the pipeline was not cut")
		}
		t.Logf("the batch cut by a Drop: %v", err)
		reordered := slices.Clone(batch)
		slices.Reverse(reordered)
		_, err = dropper.AddManyOnce(ctx, reordered, "id")
		t.Logf("the id sent again for the items in another order: %v", err)
		counts := must(dropper.CountMany(ctx, batch)).on(t)
		held := int64(0)
		for i, n := range counts {
			if n > 1 {
				t.Errorf("%s counted %d times", batch[i], n)
			}
			held += int64(n)
		}
		if items := must(dropper.Info(ctx)).on(t).Items; items != held {
			t.Errorf("Info.Items = %d, but %d items are held, each once", items, held)
		}
		if errors.Is(err, ErrOpIDReused) && held != 0 {
			t.Errorf("the id refused for the items in another order, but %d items are held", held)
		}
	})
}

// cutPipeline is a go-redis hook that sends the first pipeline of two or
// more script calls in two round trips, the first call alone, and runs
// between before the rest.
type cutPipeline struct {
	between func()
	done    atomic.Bool
}

func (h *cutPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *cutPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *cutPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) < 2 || cmds[0].Name() != "evalsha" || !h.done.CompareAndSwap(false, true) {
			return next(ctx, cmds)
		}
		err := next(ctx, cmds[:1])
		h.between()
		if err2 := next(ctx, cmds[1:]); err == nil {
			err = err2
		}
		return err
	}
}

// TestOnceLongBatch: a batch under an operation id whose later calls are
// made after its first call's record hash has left the hashes they look
// in (a batch longer than its records' horizon) is applied, once (found
// by an outside review: such calls took the record out of their sight for
// a batch cut short, and the batch failed with ErrDamaged every time it
// was sent, applying its first calls again each time).
func TestOnceLongBatch(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "long", Options{Capacity: 10_000, IDLifetime: 4 * time.Second}))
		clk := newClock(time.UnixMilli(1_700_000_000_000))
		c.f.now = func() time.Time { // a second more at every look: a call a record bucket
			clk.t = clk.t.Add(time.Second)
			return clk.t
		}
		batch := make([]string, 10*c.f.perCall())
		for i := range batch {
			batch[i] = fmt.Sprint("item-", i)
		}
		if _, err := c.AddManyOnce(ctx, batch, "id"); err != nil {
			t.Fatalf("a batch of 10 calls a record bucket apart: %v", err)
		}
		if items := must(c.Info(ctx)).on(t).Items; items != int64(len(batch)) {
			t.Errorf("Info.Items = %d, want %d", items, len(batch))
		}
	})
}

// TestOnceSlowReplay: a batch sent again under its id soon after the
// first send, whose own calls are slow (here a record bucket apart), finds
// every record of the first send and applies nothing: a batch's calls
// file and look for their records by the time the batch started, not by
// their own (found by an outside review: with IDLifetime 1 s and round
// trips stalled 0.7 s, a RemoveManyOnce sent again removed 20,784 of
// 30,000 items a second time).
func TestOnceSlowReplay(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "slow-replay", Options{Capacity: 10_000, IDLifetime: 4 * time.Second}))
		clk := newClock(time.UnixMilli(1_700_000_000_000))
		c.f.now = clk.now
		batch := make([]string, 10*c.f.perCall())
		for i := range batch {
			batch[i] = fmt.Sprint("item-", i)
		}
		must(c.AddMany(ctx, batch)).on(t)
		must(c.AddMany(ctx, batch)).on(t) // each item twice
		must(c.RemoveManyOnce(ctx, batch, "rm")).on(t)
		clk.t = clk.t.Add(500 * time.Millisecond)
		c.f.now = func() time.Time { // the send again: a second more at every look
			clk.t = clk.t.Add(time.Second)
			return clk.t
		}
		must(c.RemoveManyOnce(ctx, batch, "rm")).on(t)
		heldOnce(t, c, batch, "the batch of removes sent again")
	})
}

// heldOnce checks that f holds exactly the items, once each, and that
// each tests present, after what.
func heldOnce(t *testing.T, f Filter, items []string, what string) {
	t.Helper()
	if n := must(f.Info(ctx)).on(t).Items; n != int64(len(items)) {
		t.Errorf("%s: Info.Items = %d, want %d, each item once", what, n, len(items))
	}
	for i, ok := range must(f.TestMany(ctx, items)).on(t) {
		if !ok {
			t.Errorf("%s: %s tests absent", what, items[i])
		}
	}
}
