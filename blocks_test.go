package rbloom

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestLocateBlocked: an event's slots are in blockGroups(k) blocks, a
// group of at most groupSlots slots in each, inside the partition; with
// one block (fewer than 2 * blockSlots slots) they are locate's.
func TestLocateBlocked(t *testing.T) {
	for _, c := range []struct {
		k int
		m uint64
	}{{21, 141_917_019}, {6, 14_274}, {10, 260}, {1, 5000}, {2, 2047}, {35, 1 << 30}, {7, 3000}} {
		n, size := blocksOf(c.m)
		g := blockGroups(c.k)
		for i := range 2000 {
			item := fmt.Sprint("e", i)
			if i == 0 {
				item = "" // h1 = h2 = 0
			}
			_, slots := locateBlocked(nil, item, c.k, c.m, 3)
			_, flat := locate(nil, item, c.k, c.m, 3)
			if len(slots) != c.k {
				t.Fatalf("k=%d: %d slots", c.k, len(slots))
			}
			count := make([]int, g)
			block := make([]uint64, g) // the block of each group's first slot
			for s, slot := range slots {
				j := groupOf(s, c.k, g)
				if count[j] == 0 {
					block[j] = slot / size
				}
				count[j]++
				if slot >= n*size || slot/size != block[j] {
					t.Fatalf("k=%d m=%d %q: slot %d (%d) not in its group's block of %d slots (%v)", c.k, c.m, item, s, slot, size, slots)
				}
			}
			for j, c2 := range count {
				if c2 > groupSlots || c2 < c.k/g {
					t.Fatalf("k=%d: group %d has %d slots", c.k, j, c2)
				}
			}
			if n == 1 && fmt.Sprint(slots) != fmt.Sprint(flat) {
				t.Fatalf("m=%d, one block: %v, locate gives %v", c.m, slots, flat)
			}
		}
	}
}

// TestWindowLayoutsNeverShareAHeader: a window in blocks has at least a
// slot more a partition than the flat one of the same options, so their
// rings' headers differ: a process of an earlier rbloom, which makes a
// window's settings again when they are gone, is refused by a ring in
// blocks rather than read it flat.
func TestWindowLayoutsNeverShareAHeader(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialed
	defer rdb.Close()
	checked := 0
	for _, n := range []uint64{1, 2, 10, 100, 1000, 12_345, 100_000, 1_000_000} {
		for _, p := range []float64{0.5, 0.1, 0.01, 1e-3, 1e-6, 1e-9} {
			for _, gens := range []int{1, 3, 24, 100} {
				for _, parts := range []int{0, 1, 3, 16} {
					o := WindowOptions{EventsPerBucket: n, ErrorRate: p, Bucket: time.Minute, Span: time.Duration(gens) * time.Minute, Partitions: parts}
					w, err := NewWindow(rdb, "w", o)
					if err != nil {
						continue // too many partitions for so few slots, say
					}
					for i, part := range w.f.parts {
						if i < len(w.flat.f.parts) && part.head[:identitySize] == w.flat.f.parts[i].head[:identitySize] {
							t.Fatalf("%+v: partition %d has the same header in both layouts (m = %d)", o, i, w.f.h.m)
						}
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d option sets", checked)
}

// TestWindowBlocksKeepTheErrorRate: a generation holding its
// EventsPerBucket answers seen for absent events at no more than its share
// of ErrorRate, with the extra slots blockedSlots gives it (blocks hold
// unequal numbers of events).
func TestWindowBlocksKeepTheErrorRate(t *testing.T) {
	rdb := realRedis(t)
	const n, p = 20_000, 0.02
	w := must(NewWindow(rdb, "rate", WindowOptions{EventsPerBucket: n, ErrorRate: p, Bucket: time.Hour, Span: time.Hour, Partitions: 2})).on(t)
	if blocks, _ := blocksOf(w.f.h.m); blocks < 10 {
		t.Fatalf("%d blocks a partition: too few to test", blocks)
	}
	for lo := 0; lo < n; lo += 1000 {
		must(w.TestOrAddMany(ctx, events(fmt.Sprint("in", lo, "-"), 1000))).on(t)
	}
	absent := events("out", 200_000)
	seen := must(w.TestMany(ctx, absent)).on(t)
	fp := 0
	for _, s := range seen {
		if s {
			fp++
		}
	}
	// One generation of the two tested holds events: its share of p.
	perGen := 1 - math.Pow(1-p, 0.5)
	rate := float64(fp) / float64(len(absent))
	t.Logf("%d of %d absent events answered seen: %.5f, a generation's share of ErrorRate %.5f (flat slots would be %d, blocks %d)",
		fp, len(absent), rate, perGen, w.flat.f.h.m, w.f.h.m)
	// 200,000 tests at 0.01: a standard deviation of 0.00022.
	if rate > perGen*1.1 {
		t.Errorf("false-positive rate %.5f, want at most %.5f", rate, perGen)
	}
}

// flatHandle is a handle of the layout rbloom made windows in before blocks
// (Window.flat), standing for a process of that version: it reads and
// writes that layout only.
func flatHandle(w *Window) *Window { return w.flat }

// TestWindowAdoptsFlat: a window made before blocks keeps its layout: a
// handle of this version reads and writes its events where they are, and
// so does one of the earlier version after it; a window made again after a
// Drop has blocks, which the earlier version refuses, and a handle that
// used the flat layout follows it.
func TestWindowAdoptsFlat(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		clk := newClock(time.UnixMilli(1_000_000_000_000))
		o := WindowOptions{EventsPerBucket: 1000, ErrorRate: 0.001, Bucket: time.Minute, Span: 3 * time.Minute, Partitions: 3}
		old := clocked(must(NewWindow(rdb, "upgraded", o)).on(t), clk)
		before := flatHandle(old)
		var held []string
		for b := range 3 {
			evs := events(fmt.Sprint("old", b, "-"), 100)
			if seen := must(before.TestOrAddManyOnce(ctx, evs, fmt.Sprint("op", b))).on(t); seen[0] {
				t.Fatal("a new event answered seen")
			}
			held = append(held, evs...)
			clk.add(time.Minute)
		}
		w := clocked(must(NewWindow(rdb, "upgraded", o)).on(t), clk)
		for name, got := range map[string][]bool{
			"TestMany":      must(w.TestMany(ctx, held)).on(t),
			"TestOrAddMany": must(w.TestOrAddMany(ctx, held)).on(t),
		} {
			for i, s := range got {
				if !s {
					t.Fatalf("%s: event %q of the flat window answered new", name, held[i])
				}
			}
		}
		// A replay of the earlier version's batch gets its first answers.
		if seen := must(w.TestOrAddManyOnce(ctx, held[200:], "op2")).on(t); seen[0] {
			t.Errorf("replayed batch answered %v, want its first answers (new)", seen[:3])
		}
		if !w.useFlat.Load() {
			t.Fatal("the handle did not take the flat layout")
		}
		added := events("new", 100)
		must(w.TestOrAddMany(ctx, added)).on(t)
		for i, s := range must(before.TestMany(ctx, added)).on(t) {
			if !s {
				t.Fatalf("event %q added by this version answered new to the earlier one", added[i])
			}
		}
		if in := must(w.Info(ctx)).on(t); in.Blocks {
			t.Error("Info of the flat window says Blocks")
		}

		// Dropped and made again by another handle of this version: blocks.
		fresh := clocked(must(NewWindow(rdb, "upgraded", o)).on(t), clk)
		if err := fresh.Drop(ctx); err != nil {
			t.Fatal(err)
		}
		again := events("again", 100)
		must(fresh.TestOrAddMany(ctx, again)).on(t)
		if s := rdb.HGet(ctx, fresh.settingsKey(fresh.root), "s").Val(); !strings.Contains(s, ";blocks=") {
			t.Fatalf("the new window's settings %q do not say blocks", s)
		}
		if _, err := before.TestMany(ctx, again); !errors.Is(err, ErrParamsMismatch) {
			t.Errorf("the earlier version on a window with blocks: %v, want ErrParamsMismatch", err)
		}
		for i, s := range must(w.TestMany(ctx, again)).on(t) {
			if !s {
				t.Fatalf("the handle that used the flat layout: event %q of the new window answered new", again[i])
			}
		}
		if w.useFlat.Load() {
			t.Error("the handle kept the flat layout")
		}
		if in := must(w.Info(ctx)).on(t); !in.Blocks {
			t.Error("Info of the new window does not say Blocks")
		}
	})
}

// TestWindowAdoptsFlatAfterIdle: a window made before blocks, idle for
// longer than its span: the root's ring and settings are gone, another
// partition's settings live (three buckets longer). A handle of this
// version makes the window again in the flat layout, which those settings
// (and the incarnation that replays its ids) are of, rather than fail.
func TestWindowAdoptsFlatAfterIdle(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		clk := newClock(time.UnixMilli(1_000_000_000_000))
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 3 * time.Minute, Partitions: 3}
		before := flatHandle(clocked(must(NewWindow(rdb, "idle", o)).on(t), clk))
		must(before.TestOrAddMany(ctx, events("old", 100))).on(t)
		clk.add(10 * time.Minute)
		// What the TTLs would have done by now (the test clock is not Redis's).
		for p := range before.f.parts {
			rdb.Del(ctx, before.ringKey(p))
		}
		rdb.Del(ctx, before.settingsKey(before.root))
		w := clocked(must(NewWindow(rdb, "idle", o)).on(t), clk)
		evs := events("new", 100)
		must(w.TestOrAddMany(ctx, evs)).on(t)
		for i, s := range must(before.TestMany(ctx, evs)).on(t) {
			if !s {
				t.Fatalf("event %q answered new to a handle of the flat layout", evs[i])
			}
		}
	})
}

// TestWindowSettingsGoneRingLives: the settings say where a ring's events
// are; a ring whose settings are gone is ErrDamaged from every method, not
// read in the caller's layout.
func TestWindowSettingsGoneRingLives(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 3 * time.Minute, Partitions: 1}
		before := flatHandle(must(NewWindow(rdb, "gone", o)).on(t))
		held := events("held", 50)
		must(before.TestOrAddMany(ctx, held)).on(t)
		rdb.Del(ctx, before.settingsKey(0))
		w := must(NewWindow(rdb, "gone", o)).on(t)
		for name, call := range map[string]func() error{
			"TestMany":          func() error { _, err := w.TestMany(ctx, held); return err },
			"TestOrAddMany":     func() error { _, err := w.TestOrAddMany(ctx, held); return err },
			"TestOrAddManyOnce": func() error { _, err := w.TestOrAddManyOnce(ctx, held, "id"); return err },
			"Info":              func() error { _, err := w.Info(ctx); return err },
		} {
			if err := call(); !errors.Is(err, ErrDamaged) {
				t.Errorf("%s: %v, want ErrDamaged", name, err)
			}
		}
	})
}

// TestWindowLayoutsRace: handles of both layouts making one window at
// once: whichever layout the window takes, every event a call answered
// for is held there, or a call fails.
func TestWindowLayoutsRace(t *testing.T) {
	rdb := realRedis(t)
	for round := range 20 {
		rdb.FlushAll(ctx)
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 3 * time.Minute, Partitions: 1 + round%3}
		handles := []*Window{flatHandle(must(NewWindow(rdb, "race", o)).on(t)), must(NewWindow(rdb, "race", o)).on(t)}
		var mu sync.Mutex
		var answered []string
		var wg sync.WaitGroup
		for h, w := range handles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range 5 {
					evs := events(fmt.Sprint("h", h, "b", b, "-"), 40)
					if _, err := w.TestOrAddMany(ctx, evs); err == nil {
						mu.Lock()
						answered = append(answered, evs...)
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		reader := must(NewWindow(rdb, "race", o)).on(t)
		seen, err := reader.TestMany(ctx, answered)
		if err != nil {
			t.Logf("round %d: %d events answered, then %v", round, len(answered), err)
			continue
		}
		for i, s := range seen {
			if !s {
				t.Fatalf("round %d: event %q answered, then not seen", round, answered[i])
			}
		}
	}
}

// BenchmarkWindowLayouts compares a window in blocks with one of the flat
// layout (Window.flat), of the seed's settings (24 hours of 1-hour
// buckets, 1e-9) and the size RBLOOM_LAYOUTS gives (events a bucket x
// partitions, each window; the seed's half is 20833333x8, 3.7 GB), on one
// redis-server, their past generations written as full ones: batches of
// 1,000 events, 15% repeats, taking turns between the windows. It reports
// the server's µs an event (INFO commandstats) of each and their ratio.
// Without RBLOOM_LAYOUTS it is skipped: it is worth running at gigabytes.
func BenchmarkWindowLayouts(b *testing.B) {
	size := os.Getenv("RBLOOM_LAYOUTS")
	var n uint64
	var parts int
	if _, err := fmt.Sscanf(size, "%dx%d", &n, &parts); err != nil {
		b.Skip("set RBLOOM_LAYOUTS=<events a bucket>x<partitions>, for instance 20833333x8 (two windows of 3.7 GB)")
	}
	rdb := realRedis(b)
	clk := newClock(time.UnixMilli(1_000_000_000_000))
	o := WindowOptions{EventsPerBucket: n, ErrorRate: 1e-9, Bucket: time.Hour, Span: 24 * time.Hour, Partitions: parts}
	windows := []*Window{
		clocked(must(NewWindow(rdb, "layouts-flat", o)).on(b), clk).flat,
		clocked(must(NewWindow(rdb, "layouts-blocks", o)).on(b), clk),
	}
	for _, w := range windows {
		must(w.TestOrAdd(ctx, "first")).on(b)
		fillPast(b, rdb, w, clk.now().UnixMilli()/time.Hour.Milliseconds(), n)
	}
	var usec [2]float64
	var evs [2]int
	r := 0
	for b.Loop() {
		v := r % 2
		if r%4 >= 2 {
			v = 1 - v // ABBA: neither always goes first
		}
		batch := events(fmt.Sprint("b", r, "-"), 1000)
		if r >= 2 {
			copy(batch[:150], events(fmt.Sprint("b", r-2, "-"), 150)) // the same window's
		}
		c0, u0 := commandStat(b, rdb, "evalsha")
		must(windows[v].TestOrAddManyOnce(ctx, batch, fmt.Sprint("op", r))).on(b)
		c1, u1 := commandStat(b, rdb, "evalsha")
		usec[v] += u1*float64(c1) - u0*float64(c0)
		evs[v] += len(batch)
		r++
	}
	flat, blocks := usec[0]/float64(max(1, evs[0])), usec[1]/float64(max(1, evs[1]))
	b.ReportMetric(flat, "flat-µs/event")
	b.ReportMetric(blocks, "blocks-µs/event")
	b.ReportMetric(blocks/flat, "blocks/flat")
}

// TestClusterWindowAdoptsFlat: on a 3-master cluster, a handle of this
// version finds a flat window's layout from settings on several masters.
func TestClusterWindowAdoptsFlat(t *testing.T) {
	_, rdb := clusterClient(t)
	o := WindowOptions{EventsPerBucket: 10_000, Bucket: time.Hour, Span: 24 * time.Hour, Partitions: 6}
	before := flatHandle(must(NewWindow(rdb, "cluster-upgraded", o)).on(t))
	held := events("held", 300)
	must(before.TestOrAddMany(ctx, held)).on(t)
	w := must(NewWindow(rdb, "cluster-upgraded", o)).on(t)
	for i, s := range must(w.TestOrAddMany(ctx, held)).on(t) {
		if !s {
			t.Fatalf("event %q of the flat window answered new", held[i])
		}
	}
	if !w.useFlat.Load() {
		t.Error("the handle did not take the flat layout")
	}
}

// TestWindowAdoptedAcrossRestart: a flat window, written by a process of
// the earlier layout and by a handle of this version that took it, while
// redis-server is killed and started again (appendfsync always): every
// event a call answered for is seen after the restart, by both handles and
// by a new one, which takes the flat layout from the stored settings; an
// id sent before the restart replays its first answers.
func TestWindowAdoptedAcrossRestart(t *testing.T) {
	srv := rbloomtest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	o := WindowOptions{EventsPerBucket: 10_000, Bucket: time.Hour, Span: 3 * time.Hour, Partitions: 3}
	before := flatHandle(must(NewWindow(rdb, "restarted", o)).on(t))
	w := must(NewWindow(rdb, "restarted", o)).on(t)
	first := events("first", 200)
	answers := must(before.TestOrAddManyOnce(ctx, first, "id")).on(t)
	must(w.TestOrAddMany(ctx, events("adopt", 10))).on(t)
	if !w.useFlat.Load() {
		t.Fatal("the handle did not take the flat layout")
	}
	var mu sync.Mutex
	var answered []string
	var wg sync.WaitGroup
	for h, l := range []*Window{before, w} {
		wg.Add(1)
		go func() { // writes that run into the restart: errors are allowed
			defer wg.Done()
			for b := range 60 {
				evs := events(fmt.Sprint("h", h, "b", b, "-"), 20)
				if _, err := l.TestOrAddMany(ctx, evs); err == nil {
					mu.Lock()
					answered = append(answered, evs...)
					mu.Unlock()
				}
			}
		}()
	}
	srv.Restart()
	wg.Wait()
	for h, l := range []*Window{before, w} { // the scripts loaded again
		evs := events(fmt.Sprint("after", h, "-"), 50)
		must(l.TestOrAddMany(ctx, evs)).on(t)
		answered = append(answered, evs...)
	}
	answered = append(answered, first...)
	fresh := must(NewWindow(rdb, "restarted", o)).on(t)
	for name, l := range map[string]*Window{"earlier layout": before, "adopted": w, "new handle": fresh} {
		for i, s := range must(l.TestMany(ctx, answered)).on(t) {
			if !s {
				t.Fatalf("%s: event %q answered for before the restart is not seen", name, answered[i])
			}
		}
	}
	if again := must(fresh.TestOrAddManyOnce(ctx, first, "id")).on(t); fmt.Sprint(again) != fmt.Sprint(answers) {
		t.Errorf("the id sent again after the restart answered %v, first %v", again, answers)
	}
	if !fresh.useFlat.Load() {
		t.Error("the new handle did not take the flat layout")
	}
	t.Logf("%d events answered for, around a restart", len(answered))
}
