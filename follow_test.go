package rbloom

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestResizeTestOrAddNoCopies: TestOrAdd from a handle of the old size,
// while a resize fills the new filter, adds an item only where it is
// absent: in a cuckoo filter it stores no second copy, so that one Remove
// after the switch takes the item out, and no TestOrAdd fails with
// ErrFull in a nearly empty filter.
func TestResizeTestOrAddNoCopies(t *testing.T) {
	rdb := realRedis(t)
	for _, mode := range deletableModes {
		t.Run(mode.name, func(t *testing.T) {
			name := "copies-" + mode.name
			old := must(mode.make(rdb, name, Options{Capacity: 1000})).on(t)
			if err := old.Create(ctx); err != nil {
				t.Fatal(err)
			}
			must(old.TestOrAdd(ctx, "x")).on(t)
			resizer := must(mode.make(rdb, name, Options{Capacity: 1000})).on(t)
			filling, resume := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- resize(resizer, Options{Capacity: 4000}, func(add func([]string) error) error {
					if err := add([]string{"x"}); err != nil {
						return err
					}
					close(filling)
					<-resume
					return nil
				})
			}()
			<-filling
			for i := range 10 {
				seen, err := old.TestOrAdd(ctx, "x")
				if err != nil || !seen {
					t.Fatalf("TestOrAdd %d of a held item during the resize = %v, %v; want true, nil", i, seen, err)
				}
			}
			close(resume)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			bigger := must(Open(ctx, rdb, name, Options{})).on(t)
			if n := must(bigger.Count(ctx, "x")).on(t); n != 1 {
				t.Errorf("Count of x after the resize = %d, want 1 (the fill's)", n)
			}
		})
	}
}

// resize resizes the filter of c, whatever its mode.
func resize(c deletable, o Options, fill func(add func([]string) error) error) error {
	switch c := c.(type) {
	case *Counting:
		_, err := c.Resize(ctx, o, fill)
		return err
	case *Cuckoo:
		_, err := c.Resize(ctx, o, fill)
		return err
	}
	return fmt.Errorf("no resize for %T", c)
}

// TestHandlesFollowResize: handles of the old size, made before a Resize
// that changes m, k and P, keep working while it runs and after it
// switches, with no error reaching the application: reads and writes go
// on, every item written through them is held after; a handle of
// parameters no resize came from still gets ErrParamsMismatch.
func TestHandlesFollowResize(t *testing.T) {
	t.Run("redis", func(t *testing.T) { handlesFollowResize(t, realRedis(t)) })
	t.Run("cluster", func(t *testing.T) {
		_, rdb := clusterClient(t)
		handlesFollowResize(t, rdb)
	})
}

// handlesFollowResize is TestHandlesFollowResize on the Redis rdb reaches.
func handlesFollowResize(t *testing.T, rdb Client) {
	for _, mode := range loadModes {
		t.Run(mode.name, func(t *testing.T) {
			name := "follow-" + mode.name
			o := Options{Capacity: 2000, Partitions: 2}
			writer := must(mode.make(rdb, name, o)).on(t)
			if err := writer.Create(ctx); err != nil {
				t.Fatal(err)
			}
			held := events("held-", 300)
			must(writer.AddMany(ctx, held)).on(t)
			reader := must(Open(ctx, rdb, name, Options{})).on(t)

			stop := make(chan struct{})
			errs := make(chan error, 2)
			var written []string // the source: held and written
			var mu sync.Mutex    // held by a change from its add to its write to the source
			go func() {          // the writer: 10 items a batch
				var err error
				for i := 0; err == nil; i++ {
					select {
					case <-stop:
						errs <- nil
						return
					default:
					}
					batch := events(fmt.Sprintf("w%d-", i), 10)
					mu.Lock() // the change: the add, then the source
					if _, err = writer.AddMany(ctx, batch); err == nil {
						written = append(written, batch...)
					}
					mu.Unlock()
				}
				errs <- fmt.Errorf("writer: %w", err)
			}()
			go func() { // the reader of the held items
				for {
					select {
					case <-stop:
						errs <- nil
						return
					default:
					}
					got, err := reader.TestMany(ctx, held)
					if err != nil {
						errs <- fmt.Errorf("reader: %w", err)
						return
					}
					for i, ok := range got {
						if !ok {
							errs <- fmt.Errorf("reader: %s tests absent", held[i])
							return
						}
					}
				}
			}()
			resizer := must(mode.make(rdb, name, o)).on(t)
			fill := func(add func([]string) error) error {
				mu.Lock() // a snapshot while no change is half done
				source := append(slices.Clone(held), written...)
				mu.Unlock()
				return add(source)
			}
			var err error
			switch r := resizer.(type) {
			case *Counting:
				_, err = r.Resize(ctx, Options{Capacity: 8000, Partitions: 3}, fill)
			case *Cuckoo:
				_, err = r.Resize(ctx, Options{Capacity: 8000, Partitions: 3}, fill)
			case *Classic:
				_, err = r.Resize(ctx, Options{Capacity: 8000, Partitions: 3}, fill)
			}
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // the handles go on after the switch
			close(stop)
			for range 2 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			bigger := must(Open(ctx, rdb, name, Options{})).on(t)
			if in := must(bigger.Info(ctx)).on(t); len(in.Partitions) != 3 {
				t.Fatalf("after the resize: %d partitions, want 3", len(in.Partitions))
			}
			for _, batch := range [][]string{held, written} {
				got := must(bigger.TestMany(ctx, batch)).on(t)
				for i, ok := range got {
					if !ok {
						t.Errorf("%s tests absent after the resize", batch[i])
					}
				}
			}
			stranger := must(mode.make(rdb, name, Options{Capacity: 5000})).on(t)
			if _, err := stranger.Test(ctx, "x"); !errors.Is(err, ErrParamsMismatch) {
				t.Errorf("a handle of other parameters: %v, want ErrParamsMismatch", err)
			}
		})
	}
}

// TestResizeTestOrAddFalsePositive: a TestOrAdd during a resize, of an item
// that the new filter answers present only as a false positive, is added
// to the new filter all the same once the old one added it, so that the
// item stays held when the items that made the false positive go.
func TestResizeTestOrAddFalsePositive(t *testing.T) {
	rdb := realRedis(t)
	small := Options{Slots: 64, Hashes: 2, Partitions: 1}
	others := events("other-", 30)
	// Find an item the small filter answers present for, once it holds
	// the others: hashing does not depend on the name.
	scratch := newCounting(t, rdb, "scratch", small)
	if err := scratch.Create(ctx); err != nil {
		t.Fatal(err)
	}
	must(scratch.AddMany(ctx, others)).on(t)
	var z string
	for i := 0; z == ""; i++ {
		if c := fmt.Sprint("z-", i); must(scratch.Test(ctx, c)).on(t) {
			z = c
		}
	}
	old := newCounting(t, rdb, "fp", Options{Capacity: 1000})
	if err := old.Create(ctx); err != nil {
		t.Fatal(err)
	}
	resizer := newCounting(t, rdb, "fp", Options{Capacity: 1000})
	grown, err := resizer.Resize(ctx, small, func(add func([]string) error) error {
		if err := add(others); err != nil {
			return err
		}
		if seen := must(old.TestOrAdd(ctx, z)).on(t); seen {
			t.Errorf("TestOrAdd(%s) during the resize = true, want false: the old filter lacks it", z)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	must(grown.RemoveMany(ctx, others)).on(t)
	if !must(grown.Test(ctx, z)).on(t) {
		t.Errorf("%s, added by a TestOrAdd during the resize, tests absent once the items of its false positive are removed", z)
	}
}

// TestOnceFollowsResize: an operation id replayed through a handle of the
// old size after a resize follows it, and gets its first answers (the
// resize kept P and k, so the records are where the resized filter looks);
// replayed after a resize to another P, it is refused with ErrOpIDReused,
// never an internal error, and applies nothing (see TestOnceAcrossResizedCut).
func TestOnceFollowsResize(t *testing.T) {
	rdb := realRedis(t)
	o := Options{Capacity: 20000, ErrorRate: 0.001, Partitions: 2}
	c := newCounting(t, rdb, "once-follow", o)
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	first := must(c.AddManyOnce(ctx, []string{"a"}, "id1")).on(t)
	old := newCounting(t, rdb, "once-follow", o)
	grown := must(c.Resize(ctx, Options{Capacity: 40000, ErrorRate: 0.001, Partitions: 2}, func(add func([]string) error) error {
		return add([]string{"a"})
	})).on(t)
	again, err := old.AddManyOnce(ctx, []string{"a"}, "id1")
	if err != nil || !equal(again, first) {
		t.Fatalf("the id replayed through a handle of the old size = %v, %v; want %v, nil", again, err, first)
	}
	if n := must(grown.Count(ctx, "a")).on(t); n != 1 {
		t.Errorf("Count(a) after the replay = %d, want 1", n)
	}

	batch := events("b-", 10)
	must(grown.AddManyOnce(ctx, batch, "id2")).on(t)
	regrown := must(grown.Resize(ctx, Options{Capacity: 40000, ErrorRate: 0.001, Partitions: 3}, func(add func([]string) error) error {
		return add(append([]string{"a"}, batch...))
	})).on(t)
	before := must(regrown.CountMany(ctx, batch)).on(t)
	for range 3 {
		if _, err := regrown.AddManyOnce(ctx, batch, "id2"); !errors.Is(err, ErrOpIDReused) {
			t.Errorf("replay after a resize to another P: %v, want ErrOpIDReused", err)
		}
		if after := must(regrown.CountMany(ctx, batch)).on(t); !slices.Equal(after, before) {
			t.Fatalf("a replay refused as reused applied items: counts %v, then %v", before, after)
		}
	}
}

// TestFollowTwoResizes: a handle two resizes behind (A, then B, then C)
// follows both, for reads and writes, and so does the handle Resize was
// first called on.
func TestFollowTwoResizes(t *testing.T) {
	rdb := realRedis(t)
	sizes := []Options{{Capacity: 1000, Partitions: 1}, {Capacity: 3000, Partitions: 3}, {Capacity: 5000, Partitions: 2}}
	a := newCounting(t, rdb, "two-resizes", sizes[0])
	if err := a.Create(ctx); err != nil {
		t.Fatal(err)
	}
	items := events("x-", 50)
	must(a.AddMany(ctx, items)).on(t)
	stale := newCounting(t, rdb, "two-resizes", sizes[0])
	fill := func(add func([]string) error) error { return add(items) }
	b := must(a.Resize(ctx, sizes[1], fill)).on(t)
	must(b.Resize(ctx, sizes[2], fill)).on(t)
	for _, h := range []*Counting{stale, a} {
		got, err := h.TestMany(ctx, items)
		if err != nil {
			t.Fatalf("TestMany through a handle two resizes behind: %v", err)
		}
		for i, ok := range got {
			if !ok {
				t.Fatalf("%s tests absent", items[i])
			}
		}
		if _, err := h.Add(ctx, "late"); err != nil {
			t.Fatalf("Add through a handle two resizes behind: %v", err)
		}
	}
}
