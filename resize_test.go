package rbloom

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestResize grows an overfull filter (3,000 items in a filter for 1,000,
// one partition) into one for 20,000 in 3 partitions, and shrinks it back,
// while writers and readers whose handles were opened before the resize
// keep going from connections of their own. Writers insert (Add, then the
// row) and delete (the row, then Remove); a reader tests the rows that
// never leave. No read ever answers absent for a row held; a handle of the
// old size is told to reopen (ErrParamsMismatch), and does; afterwards
// every row held tests present and the filter has its new size.
func TestResize(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		rdb := realRedis(t)
		testResize(t, func() redis.UniversalClient { return redis.NewClient(rdb.Options()) })
	})
	t.Run("cluster", func(t *testing.T) {
		_, rdb := clusterClient(t)
		testResize(t, func() redis.UniversalClient { return redis.NewClusterClient(rdb.Options()) })
	})
}

func testResize(t *testing.T, client func() redis.UniversalClient) {
	small := Options{Capacity: 1000, Partitions: 1}
	big := Options{Capacity: 20_000, Partitions: 3}
	c := newCounting(t, client(), "grow", small)
	stable := make([]string, 3000)
	for i := range stable {
		stable[i] = fmt.Sprint("stable-", i)
	}
	must(c.AddMany(ctx, stable)).on(t)
	if in := must(c.Info(ctx)).on(t); !in.Overfull() {
		t.Fatalf("the filter is not overfull before the resize: %+v", in)
	}

	var lock sync.RWMutex // changes share it; the fill takes it alone
	var mu sync.Mutex
	table := map[string]bool{}
	for _, item := range stable {
		table[item] = true
	}
	var stop atomic.Bool
	var reopened, ops atomic.Int64
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// reopen retries op, reopening h when it was resized under it.
	reopen := func(h **Counting, op func(*Counting) error) {
		for try := 0; ; try++ {
			err := op(*h)
			switch {
			case err == nil:
				return
			case errors.Is(err, ErrParamsMismatch) && try < 50:
				if o, oerr := OpenCounting(ctx, (*h).f.rdb, "grow", Options{}); oerr == nil {
					*h = o
					reopened.Add(1)
				}
			case errors.Is(err, ErrDamaged) && try < 50: // around the switch
				time.Sleep(5 * time.Millisecond)
			default:
				fail("%v", err)
				return
			}
		}
	}
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := newCounting(t, client(), "grow", small)
			var mine []string
			for i := 0; i < 2000 && !stop.Load(); i++ {
				ops.Add(1)
				lock.RLock()
				if i%3 == 2 && len(mine) > 0 {
					item := mine[0]
					mine = mine[1:]
					mu.Lock()
					delete(table, item)
					mu.Unlock()
					reopen(&h, func(h *Counting) error { _, err := h.Remove(ctx, item); return err })
				} else {
					item := fmt.Sprintf("w%d-%d", w, i)
					reopen(&h, func(h *Counting) error { _, err := h.Add(ctx, item); return err })
					mu.Lock()
					table[item] = true
					mu.Unlock()
					mine = append(mine, item)
				}
				lock.RUnlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		h := newCounting(t, client(), "grow", small)
		for i := 0; !stop.Load(); i++ {
			sample := stable[i*37%2900 : i*37%2900+100]
			var got []bool
			reopen(&h, func(h *Counting) error {
				var err error
				got, err = h.TestMany(ctx, sample)
				return err
			})
			for j, ok := range got {
				if !ok {
					fail("%q tests absent during the resize", sample[j])
				}
			}
		}
	}()

	fill := func(add func([]string) error) error {
		lock.Lock()
		mu.Lock()
		rows := slices.Sorted(maps.Keys(table))
		mu.Unlock()
		lock.Unlock()
		for lo := 0; lo < len(rows); lo += 200 {
			if err := add(rows[lo:min(lo+200, len(rows))]); err != nil {
				return err
			}
			time.Sleep(2 * time.Millisecond) // the writers go on meanwhile
		}
		return nil
	}
	grown, err := c.Resize(ctx, big, fill)
	if err != nil {
		t.Fatalf("Resize: %v", err)
	}
	if _, err := c.Add(ctx, "through the old handle"); !errors.Is(err, ErrParamsMismatch) {
		t.Errorf("Add through a handle of the old size after the resize: %v, want ErrParamsMismatch", err)
	}
	time.Sleep(50 * time.Millisecond) // the writers go on after the switch
	shrunk, err := grown.Resize(ctx, Options{Capacity: 10_000, Partitions: 1}, fill)
	if err != nil {
		t.Fatalf("Resize back to one partition: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d changes by writers opened before the resizes; %d reopens", ops.Load(), reopened.Load())
	for _, f := range failures {
		t.Error(f)
	}

	in := must(shrunk.Info(ctx)).on(t)
	if in.Capacity != 10_000 || len(in.Partitions) != 1 || in.Overfull() || in.Damaged {
		t.Errorf("after the resizes: capacity %d, %d partitions, overfull %v, damaged %v", in.Capacity, len(in.Partitions), in.Overfull(), in.Damaged)
	}
	held := slices.Sorted(maps.Keys(table))
	for i, ok := range must(shrunk.TestMany(ctx, held)).on(t) {
		if !ok {
			t.Errorf("%q is held and tests absent after the resizes", held[i])
		}
	}
	for _, p := range append(grown.f.parts, shrunk.f.parts...) {
		for _, k := range []string{copyKey(p.key), leaseKey(p.key)} {
			if n := must(shrunk.f.rdb.(redis.UniversalClient).Exists(ctx, k).Result()).on(t); n != 0 {
				t.Errorf("%s is left after the resizes", k)
			}
		}
	}
}

// TestResizeKeepsIDs: a resize that keeps the number of partitions keeps
// every item's partition key, and the ids recorded there: a RemoveOnce sent
// again after the switch is not applied again.
func TestResizeKeepsIDs(t *testing.T) {
	rdb := realRedis(t)
	c := newCounting(t, rdb, "ids", Options{Capacity: 100, Partitions: 2})
	must(c.AddMany(ctx, []string{"x", "x"})).on(t)
	must(c.RemoveOnce(ctx, "x", "del-1")).on(t)
	bigger, err := c.Resize(ctx, Options{Capacity: 10_000, Partitions: 2}, func(add func([]string) error) error {
		return add([]string{"x"})
	})
	if err != nil {
		t.Fatal(err)
	}
	must(bigger.RemoveOnce(ctx, "x", "del-1")).on(t)
	if !must(bigger.Test(ctx, "x")).on(t) {
		t.Error("x, held once, tests absent: the RemoveOnce replayed after the resize was applied again")
	}
}
