package rbloom

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// loadModes are the modes a load is checked on, each with its constructor.
var loadModes = []struct {
	name string
	make func(rdb Client, name string, o Options) (Filter, error)
}{
	{"counting", func(rdb Client, name string, o Options) (Filter, error) { return NewCounting(rdb, name, o) }},
	{"cuckoo", func(rdb Client, name string, o Options) (Filter, error) { return NewCuckoo(rdb, name, o) }},
	{"classic", func(rdb Client, name string, o Options) (Filter, error) { return NewClassic(rdb, name, o) }},
}

// TestLoadIsVisible: a Rebuild that finds the filter missing loads it.
// While its fill runs, reads, counts and TestOrAdd fail with ErrLoading,
// never "absent"; adds are applied and kept; Info says Loading. Once the
// fill returns, the filter answers for every item of the fill and every
// add made meanwhile.
func TestLoadIsVisible(t *testing.T) {
	rdb := realRedis(t)
	for _, mode := range loadModes {
		for _, parts := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/P=%d", mode.name, parts), func(t *testing.T) {
				f := must(mode.make(rdb, fmt.Sprintf("load-%s-%d", mode.name, parts), Options{Capacity: 1000, Partitions: parts})).on(t)
				source := events("row-", 200)
				during := events("during-", 20)
				halfway, resume := make(chan struct{}), make(chan struct{})
				done := make(chan error, 1)
				go func() {
					done <- f.Rebuild(ctx, func(add func([]string) error) error {
						if err := add(source[:100]); err != nil {
							return err
						}
						close(halfway)
						<-resume
						return add(source[100:])
					})
				}()
				<-halfway
				checkLoading(t, f, source)
				if _, err := f.AddMany(ctx, during); err != nil {
					t.Errorf("AddMany during the load: %v, want it applied", err)
				}
				in := must(f.Info(ctx)).on(t)
				if !in.Exists || !in.Loading || !in.Rebuilding {
					t.Errorf("Info during the load: Exists %v, Loading %v, Rebuilding %v; want all true", in.Exists, in.Loading, in.Rebuilding)
				}
				close(resume)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				for _, batch := range [][]string{source, during} {
					got := must(f.TestMany(ctx, batch)).on(t)
					for i, ok := range got {
						if !ok {
							t.Errorf("after the load: %q tests absent", batch[i])
						}
					}
				}
				if in := must(f.Info(ctx)).on(t); in.Loading || in.Rebuilding {
					t.Errorf("Info after the load: Loading %v, Rebuilding %v; want false", in.Loading, in.Rebuilding)
				}
			})
		}
	}
}

// checkLoading checks that every read of f fails with ErrLoading.
func checkLoading(t *testing.T, f Filter, held []string) {
	t.Helper()
	calls := map[string]func() error{
		"TestMany":      func() error { _, err := f.TestMany(ctx, held); return err },
		"CountMany":     func() error { _, err := f.CountMany(ctx, held); return err },
		"TestOrAddMany": func() error { _, err := f.TestOrAddMany(ctx, held[:5]); return err },
	}
	for _, name := range sortedKeys(calls) {
		if err := calls[name](); !errors.Is(err, ErrLoading) {
			t.Errorf("%s during the load: %v, want ErrLoading", name, err)
		}
	}
}

// TestLoadGivenUp: a load whose fill fails leaves nothing it made, so the
// filter is missing again (ErrNotFound), not half loaded; a load whose
// process died (its lease gone, its partitions marked) leaves a filter
// that reads ErrLoading, that Open, Info and Drop see, and that the next
// Rebuild loads.
func TestLoadGivenUp(t *testing.T) {
	rdb := realRedis(t)
	c := newCounting(t, rdb, "given-up", Options{Capacity: 1000, Partitions: 3})
	boom := errors.New("the source failed")
	err := c.Rebuild(ctx, func(add func([]string) error) error {
		if err := add(events("x-", 50)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Rebuild with a failing fill: %v, want %v", err, boom)
	}
	if _, err := c.Test(ctx, "x-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Test after a load given up: %v, want ErrNotFound", err)
	}
	checkNoKeys(t, rdb, c.f, "a load given up")

	// A load that died: claimed, then its lease lapsed.
	r := rebuilder{f: c.f, g: c.f, token: "dead", inc: randomIncarnation(), ttl: "0"}
	if err := r.start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.f.parts {
		rdb.Del(ctx, leaseKey(p.key), copyKey(p.key))
	}
	if _, err := c.Test(ctx, "x-1"); !errors.Is(err, ErrLoading) {
		t.Errorf("Test after a load died: %v, want ErrLoading", err)
	}
	opened := must(Open(ctx, rdb, "given-up", Options{})).on(t)
	if in := must(opened.Info(ctx)).on(t); !in.Loading || in.Rebuilding {
		t.Errorf("Info after a load died: Loading %v, Rebuilding %v; want true, false", in.Loading, in.Rebuilding)
	}
	if err := c.Rebuild(ctx, func(add func([]string) error) error { return add(events("x-", 50)) }); err != nil {
		t.Fatal(err)
	}
	if ok := must(c.Test(ctx, "x-1")).on(t); !ok {
		t.Error("x-1 tests absent after the load was done again")
	}
	if err := opened.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	checkNoKeys(t, rdb, c.f, "Drop")
}

// checkNoKeys checks that no partition of f, copy or lease exists (the
// records of operations stay, until they expire).
func checkNoKeys(t *testing.T, rdb *redis.Client, f *filter, after string) {
	t.Helper()
	for _, p := range f.parts {
		if n := rdb.Exists(ctx, p.key, copyKey(p.key), leaseKey(p.key)).Val(); n != 0 {
			t.Errorf("%s left %d of %s, its copy and its lease", after, n, p.key)
		}
	}
}

// TestSourceRestores: a handle given Options.Source loads a missing filter
// by itself, one load at a time whatever the number of handles: reads get
// ErrLoading meanwhile, never "absent", and writes are applied.
func TestSourceRestores(t *testing.T) {
	rdb := realRedis(t)
	source := events("row-", 500)
	var fills atomic.Int32
	fill := func(add func([]string) error) error {
		fills.Add(1)
		time.Sleep(50 * time.Millisecond) // long enough for the other handles to ask
		return add(source)
	}
	o := Options{Capacity: 2000, Partitions: 2, Source: fill}
	handles := []*Counting{newCounting(t, rdb, "restored", o), newCounting(t, rdb, "restored", o)}
	for round, lose := range []func(){func() {}, func() { rdb.FlushAll(ctx) }} {
		lose()
		fills.Store(0)
		if _, err := handles[0].Add(ctx, "written"); err != nil {
			t.Fatalf("round %d: Add on a missing filter with a Source: %v, want it kept", round, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for ready := false; !ready; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: not restored after 10s", round)
			}
			ready = true
			for _, h := range handles {
				got, err := h.TestMany(ctx, append(source, "written"))
				switch {
				case errors.Is(err, ErrLoading):
					ready = false
				case err != nil:
					t.Fatalf("round %d: TestMany: %v", round, err)
				default:
					for i, ok := range got {
						if !ok {
							t.Fatalf("round %d: item %d tests absent", round, i)
						}
					}
				}
			}
		}
		if n := fills.Load(); n != 1 {
			t.Errorf("round %d: %d fills ran, want 1", round, n)
		}
	}
}

// TestCreateOnWrite: a handle with CreateOnWrite makes the filter with its
// first write, and reads a missing filter as empty; a handle without
// still gets ErrNotFound.
func TestCreateOnWrite(t *testing.T) {
	rdb := realRedis(t)
	lax := newCounting(t, rdb, "lax", Options{Capacity: 100, CreateOnWrite: true, TTL: time.Hour})
	strict := newCounting(t, rdb, "lax", Options{Capacity: 100})
	if ok, err := lax.Test(ctx, "a"); ok || err != nil {
		t.Errorf("Test of a missing filter with CreateOnWrite = %v, %v; want false, nil", ok, err)
	}
	if _, err := strict.Test(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Test of a missing filter without = %v, want ErrNotFound", err)
	}
	must(lax.Add(ctx, "a")).on(t)
	if ok := must(strict.Test(ctx, "a")).on(t); !ok {
		t.Error("a tests absent after the write that made the filter")
	}
	if ttl := rdb.PTTL(ctx, lax.f.parts[0].key).Val(); ttl <= 0 {
		t.Errorf("TTL of the filter made by a write = %v, want about an hour", ttl)
	}
}

// TestMakeOutOfMemory: a Create that Redis refuses half-way for lack of
// memory leaves no partition behind, so that the name is free for the next
// try and nothing holds memory that no command sees. (A load that fails
// after its claim made partitions: TestLoadGivenUp.)
func TestMakeOutOfMemory(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t, "--maxmemory", "24mb", "--maxmemory-policy", "noeviction")})
	defer rdb.Close()
	// 8 partitions of about 4.6 MB, after 16 MB of other data: the first
	// fit, the others are refused.
	rdb.Set(ctx, "ballast", strings.Repeat("x", 16<<20), 0)
	c := newCounting(t, rdb, "huge", Options{Capacity: 8_000_000, ErrorRate: 0.01, Partitions: 8})
	if err := c.Create(ctx); err == nil {
		t.Fatalf("Create of %d partitions in 24 MB: no error", len(c.f.parts))
	}
	checkNoKeys(t, rdb, c.f, "Create out of memory")
}

// TestRebuildFillPanics: a fill that panics gives the filter up at once,
// as a fill that fails does, so that a process that recovers from the
// panic does not hold the filter with a lease it renews for ever.
func TestRebuildFillPanics(t *testing.T) {
	rdb := realRedis(t)
	c := newCounting(t, rdb, "panics", Options{Capacity: 1000})
	func() {
		defer func() { _ = recover() }()
		_ = c.Rebuild(ctx, func(add func([]string) error) error {
			if err := add(events("p-", 10)); err != nil {
				return err
			}
			panic("the source broke")
		})
	}()
	if err := c.Rebuild(ctx, func(add func([]string) error) error { return add(events("p-", 10)) }); err != nil {
		t.Fatalf("Rebuild after a fill panicked: %v, want the filter free", err)
	}
	if !must(c.Test(ctx, "p-1")).on(t) {
		t.Error("p-1 tests absent after the load")
	}
}

// TestSourceRestoresOnCluster: a handle with a Source loads a filter of
// partitions on several masters, and again once every master lost it;
// no read answers absent for an item of the source meanwhile.
func TestSourceRestoresOnCluster(t *testing.T) {
	c, rdb := clusterClient(t)
	source := events("row-", 600)
	o := Options{Capacity: 3000, Partitions: 6, Source: func(add func([]string) error) error { return add(source) }}
	f := must(NewCounting(rdb, "restored-cluster", o)).on(t)
	for round, lose := range []func(){func() {}, func() { _, _ = c.DoAll(ctx, "FLUSHALL") }} {
		lose()
		deadline := time.Now().Add(20 * time.Second)
		for ready := false; !ready; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: not restored after 20s", round)
			}
			got, err := f.TestMany(ctx, source)
			switch {
			case errors.Is(err, ErrLoading) || errors.Is(err, ErrNotFound):
				time.Sleep(20 * time.Millisecond)
			case err != nil:
				t.Fatalf("round %d: TestMany: %v", round, err)
			default:
				for i, ok := range got {
					if !ok {
						t.Fatalf("round %d: %s tests absent", round, source[i])
					}
				}
				ready = true
			}
		}
	}
}

// TestLoadCutByRestart: Redis restarts without persistence in the middle
// of a load from a Source, losing what the load had made. Readers never
// get "absent" for a source row: they get ErrLoading, ErrNotFound or a
// connection error until a later load, started by the handle itself,
// has put every row back; then exact answers.
func TestLoadCutByRestart(t *testing.T) {
	srv := rbloomtest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	source := events("row-", 2000)
	var fills atomic.Int32
	halfway, resume := make(chan struct{}), make(chan struct{})
	fill := func(add func([]string) error) error {
		if fills.Add(1) == 1 {
			if err := add(source[:1000]); err != nil {
				return err
			}
			close(halfway)
			<-resume // the restart comes here
		}
		return add(source)
	}
	c := newCounting(t, rdb, "cut-load", Options{Capacity: 5000, Partitions: 3, Source: fill})
	if _, err := c.Test(ctx, "row-0"); !errors.Is(err, ErrLoading) && !errors.Is(err, ErrNotFound) {
		t.Fatalf("Test of a missing filter with a Source: %v, want ErrLoading or ErrNotFound", err)
	}
	<-halfway
	srv.Restart()
	close(resume)
	deadline := time.Now().Add(20 * time.Second)
	var refused int
	for {
		if time.Now().After(deadline) {
			t.Fatalf("not loaded again 20s after the restart (%d fills, %d reads refused)", fills.Load(), refused)
		}
		got, err := c.TestMany(ctx, source)
		if err != nil {
			refused++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for i, ok := range got {
			if !ok {
				t.Fatalf("%s tests absent after the restart (fill %d)", source[i], fills.Load())
			}
		}
		break
	}
	t.Logf("%d fills, %d reads refused before the filter was loaded again", fills.Load(), refused)
	if fills.Load() < 2 {
		t.Errorf("%d fills: the load cut by the restart was not run again", fills.Load())
	}
}
