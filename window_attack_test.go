package rbloom

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestWindowReplayAfterRingExpires: a batch replayed under its operation id
// within IDLifetime, after the ring expired for lack of writes, gets its
// first decisions: the ring made again takes the incarnation its settings
// remember, so the record is found and the batch not applied again.
func TestWindowReplayAfterRingExpires(t *testing.T) {
	rdb := realRedis(t)
	clk := newClock(time.UnixMilli(1_000_000_000_000))
	w := created(t, clocked(must(NewWindow(rdb, "expiring", WindowOptions{EventsPerBucket: 1000, ErrorRate: 0.01,
		Bucket: time.Minute, Span: 2 * time.Minute, Partitions: 1})).on(t), clk))
	must(w.TestOrAddManyOnce(ctx, []string{"x"}, "batch-1")).on(t)
	second := must(w.TestOrAddManyOnce(ctx, []string{"x"}, "batch-2")).on(t)
	if !second[0] {
		t.Fatal("x, added by batch-1, answered new by batch-2")
	}
	// The ring expires (the test clock does not move Redis's TTLs: delete
	// it and move the clock past the time its settings say it expires).
	clk.add(10 * time.Minute)
	rdb.Del(ctx, w.ringKey(0))
	if again := must(w.TestOrAddManyOnce(ctx, []string{"x"}, "batch-2")).on(t); !slices.Equal(again, second) {
		t.Errorf("batch-2 replayed after the ring expired: %v, its first decisions were %v", again, second)
	}
}

// TestWindowOtherPartitions: a handle with more or fewer partitions than
// the stored window gets ErrParamsMismatch, or an answer of seen, even for
// events in partitions the window does not have or that were idle: every
// call touches the root partition's ring, which every number of
// partitions shares, so a partition it lacks cannot answer events new.
func TestWindowOtherPartitions(t *testing.T) {
	rdb := realRedis(t)
	for _, c := range []struct{ stored, other int }{{1, 2}, {4, 1}, {2, 5}} {
		name := fmt.Sprint("parts-", c.stored, "-", c.other)
		o := WindowOptions{EventsPerBucket: 1000, ErrorRate: 0.01, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: c.stored}
		stored := created(t, must(NewWindow(rdb, name, o)).on(t))
		held := events("held", 40)
		must(stored.TestOrAddMany(ctx, held)).on(t)
		o.Partitions = c.other
		other := must(NewWindow(rdb, name, o)).on(t)
		if err := other.Create(ctx); !errors.Is(err, ErrParamsMismatch) {
			t.Errorf("%d partitions over %d: Create: %v, want ErrParamsMismatch", c.other, c.stored, err)
		}
		for _, e := range held {
			for method, call := range map[string]func() (bool, error){
				"TestMany":  func() (bool, error) { return first(other.TestMany(ctx, []string{e})) },
				"TestOrAdd": func() (bool, error) { return other.TestOrAdd(ctx, e) },
			} {
				seen, err := call()
				if err == nil && !seen {
					t.Fatalf("stored with %d partitions, a handle with %d: %s(%q) answered not seen, no error", c.stored, c.other, method, e)
				}
				if err != nil && !errors.Is(err, ErrParamsMismatch) {
					t.Errorf("stored with %d partitions, a handle with %d: %s: %v, want ErrParamsMismatch", c.stored, c.other, method, err)
				}
			}
		}
	}
}

// TestWindowLongPause: a window of 800 buckets written in about 700 of
// them, then left until they all leave the span, works on: one call marks
// them all to clean, in writes small enough for Lua's unpack.
func TestWindowLongPause(t *testing.T) {
	rdb := realRedis(t)
	clk := newClock(time.UnixMilli(1_000_000_000_000))
	w := created(t, clocked(must(NewWindow(rdb, "paused", WindowOptions{EventsPerBucket: 10, ErrorRate: 0.01,
		Bucket: time.Second, Span: 800 * time.Second, Partitions: 1})).on(t), clk))
	for i := range 700 {
		must(w.TestOrAdd(ctx, fmt.Sprint("e", i))).on(t)
		clk.add(time.Second)
	}
	clk.add(2000 * time.Second)
	if seen := must(w.TestOrAddManyOnce(ctx, []string{"e1", "new"}, "after")).on(t); seen[0] || seen[1] {
		t.Errorf("after the pause: %v, want both new (e1 left the span)", seen)
	}
	if seen := must(w.TestOrAdd(ctx, "new")).on(t); !seen {
		t.Error("an event added after the pause answered new")
	}
}

// TestWindowHeldPastPosition200: window.lua reads the ring's positions
// 200 at a time (Lua's stack): events held at positions past the first
// chunk answer seen, and an event from every bucket of the span too.
func TestWindowHeldPastPosition200(t *testing.T) {
	rdb := realRedis(t)
	clk := newClock(time.UnixMilli(1_000_000_000_000))
	w := created(t, clocked(must(NewWindow(rdb, "positions", WindowOptions{EventsPerBucket: 10, ErrorRate: 0.01,
		Bucket: time.Second, Span: 800 * time.Second, Partitions: 1})).on(t), clk))
	var events []string
	for i := range 450 {
		events = append(events, fmt.Sprint("e", i))
		must(w.TestOrAdd(ctx, events[i])).on(t)
		clk.add(time.Second)
	}
	for name, seen := range map[string][]bool{
		"TestOrAddMany": must(w.TestOrAddMany(ctx, events)).on(t),
		"TestMany":      must(w.TestMany(ctx, events)).on(t),
	} {
		for i, s := range seen {
			if !s {
				t.Fatalf("%s: event %d of 450, one a bucket, answered new", name, i)
			}
		}
	}
}

// TestWindowLostPartition: a partition whose ring and settings are gone
// while the root's live (FLUSHALL of one cluster master, say) is
// ErrDamaged from every method: its events cannot be told from new ones,
// and made again, empty, it would answer them new.
func TestWindowLostPartition(t *testing.T) {
	rdb := realRedis(t)
	w := created(t, must(NewWindow(rdb, "lost", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 3})).on(t))
	held := events("held", 60)
	must(w.TestOrAddMany(ctx, held)).on(t)
	victim := (w.root + 1) % 3
	rdb.Del(ctx, w.ringKey(victim), w.settingsKey(victim))
	if _, err := w.TestMany(ctx, held); !errors.Is(err, ErrDamaged) {
		t.Errorf("TestMany: %v, want ErrDamaged", err)
	}
	if _, err := w.TestOrAddMany(ctx, held); !errors.Is(err, ErrDamaged) {
		t.Errorf("TestOrAddMany: %v, want ErrDamaged", err)
	}
	if _, err := w.Info(ctx); !errors.Is(err, ErrDamaged) {
		t.Errorf("Info: %v, want ErrDamaged", err)
	}
	// Dropped, it is not found; made again, it works.
	must(0, w.Drop(ctx)).on(t)
	if _, err := w.TestOrAddMany(ctx, held); !errors.Is(err, ErrNotFound) {
		t.Errorf("TestOrAddMany after Drop: %v, want ErrNotFound", err)
	}
	must(0, w.Create(ctx)).on(t)
	if seen := must(w.TestOrAddMany(ctx, held)).on(t); slices.Contains(seen, true) {
		t.Error("after Drop, events answered seen")
	}
}

// TestWindowWaitReplicas: with WaitReplicas, a window's write returns once
// the replica has it, and fails with ErrNotReplicated when it cannot.
func TestWindowWaitReplicas(t *testing.T) {
	_, replica, rdb, rep := startReplicated(t)
	o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 2, WaitReplicas: 1, WaitTimeout: 2 * time.Second}
	w := created(t, must(NewWindow(rdb, "replicated", o)).on(t))
	held := events("held", 50)
	must(w.TestOrAddMany(ctx, held)).on(t)
	onReplica := must(NewWindow(rep, "replicated", o)).on(t)
	if seen := must(onReplica.TestMany(ctx, held)).on(t); slices.Contains(seen, false) {
		t.Error("the replica does not have events of a write that waited for it")
	}
	replica.Stop()
	o.WaitTimeout = 200 * time.Millisecond
	w = must(NewWindow(rdb, "replicated", o)).on(t)
	if _, err := w.TestOrAdd(ctx, "late"); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("TestOrAdd with the replica down: %v, want ErrNotReplicated", err)
	}
}

// TestWindowStateDamage: a ring whose state no window writes is refused,
// never read: a cleaning cursor that is no multiple of W (the mask's
// period) would clear the live generations out of phase, and a ring
// whose incarnation is not the one its settings remember (overwritten, or
// another window's ring put in its place) would replay no operation id:
// a held event answered new, or a replayed batch applied again.
func TestWindowStateDamage(t *testing.T) {
	rdb := realRedis(t)
	clk := newClock(time.UnixMilli(1_000_000_000_000))
	o := WindowOptions{EventsPerBucket: 1000, ErrorRate: 0.01, Bucket: time.Minute, Span: time.Minute, Partitions: 1}
	w := created(t, clocked(must(NewWindow(rdb, "state", o)).on(t), clk))
	if first := must(w.TestOrAddManyOnce(ctx, []string{"x", "y"}, "op")).on(t); !slices.Equal(first, []bool{false, false}) {
		t.Fatalf("x and y on an empty window answered %v, want new", first)
	}
	ring := w.ringKey(0)
	qc := (clk.now().UnixMilli() / time.Minute.Milliseconds()) % int64(w.r.w)
	be := func(v int64) string { return string(binary.BigEndian.AppendUint64(nil, uint64(v))) }
	rdb.SetRange(ctx, ring, int64(ringPositionsByte+ringPositionSize*((qc+1)%int64(w.r.w))), be(-2))
	rdb.SetRange(ctx, ring, ringCursorByte, be(1))
	for range 2 {
		if seen, err := w.TestOrAdd(ctx, "x"); err == nil && !seen {
			t.Fatal("misaligned cursor: x, added in this bucket, answered new, no error")
		}
	}
	rdb.Del(ctx, ring, w.settingsKey(0))
	must(0, w.Create(ctx)).on(t)
	first := must(w.TestOrAddManyOnce(ctx, []string{"x", "y"}, "op2")).on(t)
	rdb.SetRange(ctx, ring, incByte, "DAMAGED!")
	if again, err := w.TestOrAddManyOnce(ctx, []string{"x", "y"}, "op2"); err == nil && !slices.Equal(again, first) {
		t.Errorf("incarnation overwritten: the replay answered %v, its first decisions %v, no error", again, first)
	}
}

// TestWindowBatchOrderWhileClearing: a batch whose first call finds its
// bucket's position still being cleared keeps its order: of two equal
// events in it, the first answers new and the second seen: a later call
// of the same pipeline must not be applied before a first that answered
// '~', even when it finishes the clearing.
func TestWindowBatchOrderWhileClearing(t *testing.T) {
	rdb := realRedis(t)
	clk := newClock(time.UnixMilli(1_000_000_000_000))
	w := created(t, clocked(must(NewWindow(rdb, "reorder", WindowOptions{EventsPerBucket: 30_000, ErrorRate: 0.01,
		Bucket: time.Minute, Span: 10 * time.Minute, Partitions: 1})).on(t), clk))
	must(w.TestOrAdd(ctx, "first")).on(t)
	if size := rdb.StrLen(ctx, w.ringKey(0)).Val(); size < 3*4*32768 {
		t.Fatalf("a ring of %d bytes is cleared in fewer than 3 calls", size)
	}
	clk.add(time.Duration(w.r.w) * time.Minute) // the same position, whose generation left the span
	batch := []string{"X"}
	for i := range 300 {
		batch = append(batch, fmt.Sprint("fill-", i))
	}
	batch = append(batch, "X")
	got := must(w.TestOrAddMany(ctx, batch)).on(t)
	if got[0] || !got[len(got)-1] {
		t.Errorf("of two equal events in one batch, the first answered %v and the second %v: want false, true", got[0], got[len(got)-1])
	}
}

// TestWindowTouchesEveryPartition: a handle whose events all land in the
// root partition still touches every other partition's ring once every
// half bucket, so that none expires before the root's (it would then be
// ErrDamaged for good), also after a pause.
func TestWindowTouchesEveryPartition(t *testing.T) {
	rdb := realRedis(t)
	const bucket = 100 * time.Millisecond
	w := created(t, must(NewWindow(rdb, "touch", WindowOptions{EventsPerBucket: 1000, Bucket: bucket, Span: 3 * bucket, Partitions: 2})).on(t))
	var rootOnly []string
	for i := 0; len(rootOnly) < 5; i++ {
		e := fmt.Sprint("e", i)
		if p, _ := w.f.locate(nil, e); p == w.root {
			rootOnly = append(rootOnly, e)
		}
	}
	other := 1 - w.root
	must(w.TestOrAddMany(ctx, rootOnly)).on(t)
	before := rdb.HGet(ctx, w.settingsKey(other), "ring").Val()
	for range 5 {
		time.Sleep(2 * bucket)
		must(w.TestOrAddMany(ctx, rootOnly)).on(t)
	}
	if after := rdb.HGet(ctx, w.settingsKey(other), "ring").Val(); after <= before {
		t.Errorf("the other partition's ring was not touched: it expires at %s, as before", after)
	}
}

// TestWindowPartitionExpired: a partition whose ring expired with nothing
// of the span in it (its settings say so) is made again, not ErrDamaged,
// while the root lives.
func TestWindowPartitionExpired(t *testing.T) {
	rdb := realRedis(t)
	clk := newClock(time.UnixMilli(1_000_000_000_000))
	w := created(t, clocked(must(NewWindow(rdb, "expired", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 2 * time.Minute, Partitions: 2})).on(t), clk))
	must(w.TestOrAddMany(ctx, events("e", 20))).on(t)
	other := 1 - w.root
	rdb.Del(ctx, w.ringKey(other))
	rdb.HSet(ctx, w.settingsKey(other), "ring", clk.now().UnixMilli()-1)
	if _, err := w.TestOrAddMany(ctx, events("f", 20)); err != nil {
		t.Errorf("after a partition's ring expired: %v", err)
	}
}

// TestWindowDropOrder: Drop deletes the root partition's ring last, so a
// call made while it runs fails with ErrDamaged instead of making the
// root again beside partitions about to be deleted (which left the
// window ErrDamaged for good); once it is done, the window is new.
func TestWindowDropOrder(t *testing.T) {
	rdb := realRedis(t)
	w := created(t, must(NewWindow(rdb, "dropping", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 2 * time.Minute, Partitions: 4})).on(t))
	held := events("e", 40)
	must(w.TestOrAddMany(ctx, held)).on(t)
	for p := range w.f.parts { // Drop's first step
		if p != w.root {
			rdb.Del(ctx, w.ringKey(p), w.settingsKey(p))
		}
	}
	if _, err := w.TestOrAddMany(ctx, held); !errors.Is(err, ErrDamaged) {
		t.Errorf("a call during Drop: %v, want ErrDamaged", err)
	}
	must(0, w.Drop(ctx)).on(t)
	if _, err := w.TestOrAddMany(ctx, held); !errors.Is(err, ErrNotFound) {
		t.Errorf("a call after Drop: %v, want ErrNotFound", err)
	}
	must(0, w.Create(ctx)).on(t)
	if seen := must(w.TestOrAddMany(ctx, held)).on(t); slices.Contains(seen, true) {
		t.Error("after Drop, events answered seen")
	}
}

// TestWindowStateBucketsApart: a ring whose positions hold buckets more
// than the span apart is damage. The script marks every generation older
// than the span before it writes, so no window leaves a state where one
// generation is over gens buckets behind the newest; a position rewritten
// with another bucket of its own residue (moved back or forward by W, or
// a clean one given a bucket ahead of the clock by at most W, which the
// clock check lets pass) made the generations it pushed out of the span
// answer their events new, with no error.
func TestWindowStateBucketsApart(t *testing.T) {
	onBoth(t, testWindowStateBucketsApart)
}

func testWindowStateBucketsApart(t *testing.T, rdb *redis.Client) {
	clk := newClock(time.UnixMilli(1_000_000_000_000))
	w := created(t, clocked(must(NewWindow(rdb, "apart", WindowOptions{EventsPerBucket: 1000, ErrorRate: 0.01,
		Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 1})).on(t), clk))
	W := int64(w.r.w)
	var held []string
	for b := range 3 { // three generations: c-2, c-1, c
		evs := events(fmt.Sprint("g", b, "-"), 50)
		must(w.TestOrAddMany(ctx, evs)).on(t)
		held = append(held, evs...)
		if b < 2 {
			clk.add(time.Minute)
		}
	}
	c := clk.now().UnixMilli() / time.Minute.Milliseconds()
	ring, settings := w.ringKey(0), w.settingsKey(0)
	ringWas, settingsWas := rdb.Get(ctx, ring).Val(), rdb.HGetAll(ctx, settings).Val()
	be := func(v int64) string { return string(binary.BigEndian.AppendUint64(nil, uint64(v))) }
	for _, tc := range []struct {
		name   string
		q, was int64 // the position and the bucket it held
		now    int64
	}{
		{"a live generation moved back by W", (c - 1) % W, c - 1, c - 1 - W},
		{"a live generation moved forward by W", (c - 2) % W, c - 2, c - 2 + W},
		{"a clean position given a bucket ahead of the clock", (c + 4) % W, 0, c + 4},
	} {
		for name, call := range map[string]func() ([]bool, error){
			"TestMany":          func() ([]bool, error) { return w.TestMany(ctx, held) },
			"TestOrAddMany":     func() ([]bool, error) { return w.TestOrAddMany(ctx, held) },
			"TestOrAddManyOnce": func() ([]bool, error) { return w.TestOrAddManyOnce(ctx, held, "apart") },
		} {
			// Each call on the ring as the three generations left it.
			rdb.Set(ctx, ring, ringWas, 0)
			rdb.Del(ctx, settings)
			rdb.HSet(ctx, settings, settingsWas)
			at := int64(ringPositionsByte + ringPositionSize*int(tc.q))
			if got := rdb.GetRange(ctx, ring, at, at+7).Val(); got != be(tc.was) {
				t.Fatalf("position %d does not hold bucket %d", tc.q, tc.was)
			}
			rdb.SetRange(ctx, ring, at, be(tc.now))
			seen, err := call()
			if err == nil && slices.Contains(seen, false) {
				t.Errorf("%s, %s: %d of %d held events answered new, no error", tc.name, name, len(seen)-countTrue(seen), len(seen))
			} else if err != nil && !errors.Is(err, ErrDamaged) {
				t.Errorf("%s, %s: %v, want ErrDamaged", tc.name, name, err)
			}
		}
	}
}

func countTrue(bs []bool) (n int) {
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// TestWindowRootLost: the root partition's ring and settings lost together
// (DEL, eviction) while the other partitions live is damage, not a new
// window: every method fails with ErrDamaged, and no held event of the
// root's share is answered new or not seen, nor a replayed batch's share
// applied again. A fresh handle sees the same.
func TestWindowRootLost(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 3}
		w := created(t, must(NewWindow(rdb, "rootlost", o)).on(t))
		held := events("held", 60)
		must(w.TestOrAddManyOnce(ctx, held, "first")).on(t)
		rdb.Del(ctx, w.ringKey(w.root), w.settingsKey(w.root))
		for _, h := range []*Window{w, must(NewWindow(rdb, "rootlost", o)).on(t)} {
			wantDamaged(t, held, "after the root's ring and settings were lost", map[string]func() ([]bool, error){
				"TestMany":          func() ([]bool, error) { return h.TestMany(ctx, held) },
				"TestOrAddMany":     func() ([]bool, error) { return h.TestOrAddMany(ctx, held) },
				"TestOrAddManyOnce": func() ([]bool, error) { return h.TestOrAddManyOnce(ctx, held, "first") },
				"Info":              func() ([]bool, error) { _, err := h.Info(ctx); return nil, err },
				"Create":            func() ([]bool, error) { return nil, h.Create(ctx) },
			})
		}
		must(0, w.Drop(ctx)).on(t)
		must(0, w.Create(ctx)).on(t)
		if seen := must(w.TestOrAddMany(ctx, held)).on(t); slices.Contains(seen, true) {
			t.Error("after Drop, events answered seen")
		}
	})
}

// wantDamaged runs each call, which must fail with ErrDamaged, and fails
// the test if one answers a held event new or not seen.
func wantDamaged(t *testing.T, held []string, what string, calls map[string]func() ([]bool, error)) {
	t.Helper()
	for name, call := range calls {
		seen, err := call()
		if !errors.Is(err, ErrDamaged) {
			t.Errorf("%s %s: %v, want ErrDamaged", name, what, err)
		}
		if i := slices.Index(seen, false); i >= 0 {
			t.Fatalf("%s answered held event %q new or not seen", name, held[i])
		}
	}
}

// TestWindowRootExpiredFirst: when a window is idle, its rings expire, the
// root's first, while the root's settings never do: then the window
// forgot, and answers every event new without an error. (The other
// partitions' settings may live on: they do not say the root was lost.)
func TestWindowRootExpiredFirst(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		clk := newClock(time.UnixMilli(1_000_000_000_000))
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 3 * time.Minute, Partitions: 3, IDLifetime: time.Minute}
		w := created(t, clocked(must(NewWindow(rdb, "rootexpired", o)).on(t), clk))
		must(w.TestOrAddMany(ctx, events("old", 60))).on(t)
		if ttl := rdb.PTTL(ctx, w.settingsKey(w.root)).Val(); ttl != -1 {
			t.Fatalf("the root's settings expire in %v: a window Redis lost would be made again by a call", ttl)
		}
		root := rdb.PTTL(ctx, w.ringKey(w.root)).Val()
		longest := root
		for p := range w.f.parts {
			ring := rdb.PTTL(ctx, w.ringKey(p)).Val()
			if p != w.root && ring <= root {
				t.Fatalf("partition %d's ring lives %v, the root's %v: the root's must expire first", p, ring, root)
			}
			longest = max(longest, ring)
		}
		// What the TTLs did (the test clock is not Redis's).
		clk.add(longest + time.Second)
		for p := range w.f.parts {
			rdb.Del(ctx, w.ringKey(p))
		}
		if _, err := w.TestMany(ctx, events("new", 60)); err != nil {
			t.Errorf("TestMany after the rings expired: %v", err)
		}
		if _, err := w.Info(ctx); err != nil {
			t.Errorf("Info after the rings expired: %v", err)
		}
		if seen := must(w.TestOrAddMany(ctx, events("old", 60))).on(t); slices.Contains(seen, true) {
			t.Error("events of the expired window answered seen")
		}
	})
}

// TestWindowMadeAtOnce: processes making one new window at the same
// moment (Create, then a call) get no error (the root's settings are written before any other
// partition's ring, so a root missing beside live partitions is told from
// one being made), and every event answered is seen by all.
func TestWindowMadeAtOnce(t *testing.T) {
	rdb := realRedis(t)
	o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 6}
	for round := range 30 {
		name := fmt.Sprint("atonce-", round)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for g := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w, err := NewWindow(rdb, name, o)
				if err == nil {
					err = w.Create(ctx)
				}
				if err == nil {
					_, err = w.TestOrAddMany(ctx, events(fmt.Sprint("g", g, "-"), 30))
				}
				errs[g] = err
			}()
		}
		wg.Wait()
		for g, err := range errs {
			if err != nil {
				t.Fatalf("round %d, process %d making the window: %v", round, g, err)
			}
		}
		w := created(t, must(NewWindow(rdb, name, o)).on(t))
		for g := range errs {
			if seen := must(w.TestMany(ctx, events(fmt.Sprint("g", g, "-"), 30))).on(t); slices.Contains(seen, false) {
				t.Fatalf("round %d: an event of process %d not seen", round, g)
			}
		}
	}
}

// TestWindowDropOtherPartitions: Drop from a handle with another
// Partitions (fewer, or automatic) deletes the whole window, not only the
// partitions it would have; the window made again works, and nothing of
// the dropped one is seen. Rings it left would outlive the root's
// settings, and every call on the window made again would fail with
// ErrDamaged, for as long as calls kept them alive.
func TestWindowDropOtherPartitions(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 8}
		for _, dropper := range []int{3, 0} {
			name := fmt.Sprint("drop-other-", dropper)
			w := created(t, must(NewWindow(rdb, name, o)).on(t))
			old := events("old", 200)
			must(w.TestOrAddManyOnce(ctx, old, "first")).on(t)
			d := o
			d.Partitions = dropper
			must(0, must(NewWindow(rdb, name, d)).on(t).Drop(ctx)).on(t)
			if left := rdb.Keys(ctx, "rbloom:{"+name+"*:ring").Val(); len(left) > 0 {
				t.Errorf("Partitions %d: Drop left %v", dropper, left)
			}
			w = created(t, must(NewWindow(rdb, name, o)).on(t))
			if seen := must(w.TestOrAddManyOnce(ctx, old, "first")).on(t); slices.Contains(seen, true) {
				t.Errorf("Partitions %d: an event of the dropped window answered seen", dropper)
			}
			must(w.TestOrAddMany(ctx, events("new", 200))).on(t)
		}
		// A window that lost every key but one partition's (none the
		// headers of which Drop reads): the window made again works, by
		// Drop's mark (the ring Drop left is kept, a documented limit).
		name := "drop-damaged"
		w := created(t, must(NewWindow(rdb, name, o)).on(t))
		must(w.TestOrAddMany(ctx, events("old", 200))).on(t)
		witnesses := witnessKeys(w.f.prefix, name)
		last := ""
		for p, part := range w.f.parts {
			if p != w.root && !slices.Contains(witnesses, part.key) {
				last = part.key
			}
		}
		if last == "" {
			t.Fatal("every partition is a witness: the test needs another")
		}
		for _, part := range w.f.parts {
			if part.key != last {
				rdb.Del(ctx, windowKeys(part.key)...)
			}
		}
		d := o
		d.Partitions = 1
		must(0, must(NewWindow(rdb, name, d)).on(t).Drop(ctx)).on(t)
		must(0, w.Create(ctx)).on(t)
		for range 2 {
			if _, err := w.TestOrAddMany(ctx, events("new", 200)); err != nil {
				t.Fatalf("the window made again after dropping a damaged one: %v", err)
			}
		}
	})
}

// beforePipeline is a go-redis hook that runs do once, before the first
// pipeline (or transaction) of the client for which match is true.
type beforePipeline struct {
	match func(cmds []redis.Cmder) bool
	do    func()
	done  atomic.Bool
}

func (h *beforePipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *beforePipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *beforePipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.match(cmds) && h.done.CompareAndSwap(false, true) {
			h.do()
		}
		return next(ctx, cmds)
	}
}

// rootCreation says whether cmds carry window.lua's call that makes the
// root's ring of w (ARGV[9] '1' on KEYS[1], the root's ring).
func rootCreation(w *Window) func(cmds []redis.Cmder) bool {
	return func(cmds []redis.Cmder) bool { return ringCreation(cmds, w.ringKey(w.root)) }
}

// TestWindowDropWhileMade: a Drop that runs while another process writes
// or makes the window leaves a window that Create makes again and that
// works. Two orders, made to happen with hooks: (1) the other process
// writes between Drop's deletion of the other partitions and of the root,
// so that rings it makes stay beside no root; (2) the other process's
// Create wrote the root's settings and made the other rings before the
// Drop, and makes the root's ring after it, beside none. Either could
// leave the window ErrDamaged for as long as calls came: the first leaves
// Drop's mark, by which the next window made keeps the rings, and in the
// second the root is not made (that Create fails, once).
func TestWindowDropWhileMade(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 4}
		opts := rdb.Options()
		other := func() *redis.Client {
			c := redis.NewClient(&redis.Options{Addr: opts.Addr})
			t.Cleanup(func() { c.Close() })
			return c
		}
		works := func(name string) {
			t.Helper()
			w := created(t, must(NewWindow(rdb, name, o)).on(t))
			for range 3 {
				if _, err := w.TestOrAddMany(ctx, events("after", 100)); err != nil {
					t.Fatalf("%s: a call after the Drop: %v", name, err)
				}
			}
			if seen := must(w.TestMany(ctx, events("after", 100))).on(t); slices.Contains(seen, false) {
				t.Fatalf("%s: an event added after the Drop not seen", name)
			}
		}

		// (1) made between Drop's two steps.
		dropping := other()
		maker := created(t, must(NewWindow(other(), "made-in-drop", o)).on(t))
		dropping.AddHook(&beforePipeline{
			match: func(cmds []redis.Cmder) bool { // Drop's deletion of the root
				return slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
					return c.Name() == "del" && slices.Contains(c.Args(), any(maker.ringKey(maker.root)))
				})
			},
			do: func() {
				_, err := maker.TestOrAddMany(ctx, events("during", 100))
				t.Logf("a call during the Drop: %v", err)
			},
		})
		must(0, must(NewWindow(dropping, "made-in-drop", o)).on(t).Drop(ctx)).on(t)
		mark := rdb.PTTL(ctx, maker.settingsKey(maker.root)).Val()
		for p := range maker.f.parts {
			if ring := rdb.PTTL(ctx, maker.ringKey(p)).Val(); ring > 0 && ring >= mark {
				t.Errorf("partition %d's ring, left beside no root, lives %v, Drop's mark %v: the mark must outlive it", p, ring, mark)
			}
		}
		works("made-in-drop")

		// (2) the root's ring made after the Drop.
		making := other()
		maker = must(NewWindow(making, "root-after-drop", o)).on(t)
		dropper := must(NewWindow(other(), "root-after-drop", o)).on(t)
		making.AddHook(&beforePipeline{match: rootCreation(maker), do: func() {
			if err := dropper.Drop(ctx); err != nil {
				t.Errorf("Drop: %v", err)
			}
		}})
		if err := maker.Create(ctx); !errors.Is(err, ErrNotFound) {
			t.Errorf("the Create across the Drop: %v, want ErrNotFound", err)
		}
		works("root-after-drop")
	})
}

// TestWindowDropsUnderWriters: Drops at random moments while writers write
// the window, and make it again once they find it gone, never leave it
// stuck: once the writers stop, a new handle's Create and calls work at
// once, every round. Calls during a Drop may fail.
func TestWindowDropsUnderWriters(t *testing.T) {
	rdb := realRedis(t)
	o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 4}
	rng := rand.New(rand.NewPCG(5, 6))
	for round := range 20 {
		name := fmt.Sprint("drops-", round)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
				defer c.Close()
				w, _ := NewWindow(c, name, o)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					_, err := w.TestOrAddMany(ctx, events(fmt.Sprint("g", g, "-", i, "-"), 20))
					if errors.Is(err, ErrNotFound) {
						_ = w.Create(ctx) // races the Drops too
					}
				}
			}()
		}
		// The dropper's round trips take 5 ms more, as on a slow link, so
		// that writers make the window between Drop's steps.
		slow := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		slow.AddHook(slowPipelines(5 * time.Millisecond))
		d := must(NewWindow(slow, name, o)).on(t)
		for range 3 {
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
			must(0, d.Drop(ctx)).on(t)
		}
		close(stop)
		wg.Wait()
		slow.Close()
		w := created(t, must(NewWindow(rdb, name, o)).on(t))
		if _, err := w.TestOrAddMany(ctx, events("after", 50)); err != nil {
			t.Fatalf("round %d: the first call after the drops and writers: %v", round, err)
		}
	}
}

// slowPipelines is a go-redis hook that delays every pipeline by d.
type slowPipelines time.Duration

func (h slowPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h slowPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h slowPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(time.Duration(h))
		return next(ctx, cmds)
	}
}
