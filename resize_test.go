package rbloom

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	c := created(t, newCounting(t, client(), "grow", small))
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
	if _, err := c.Add(ctx, "through the old handle"); err != nil {
		t.Errorf("Add through a handle of the old size after the resize: %v, want it to follow the resize", err)
	} else if !must(grown.Test(ctx, "through the old handle")).on(t) {
		t.Error("an Add through a handle of the old size after the resize is not in the resized filter")
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
	c := created(t, newCounting(t, rdb, "ids", Options{Capacity: 100, Partitions: 2}))
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

// TestOnceReplayAfterResize: operation ids applied before a resize that
// keeps the number of partitions, sent again after it (found by an
// outside review). With another k the batch is cut into other calls: the
// replay is refused with ErrOpIDReused, and changes nothing (before, the
// calls past the recorded ones were applied again: 17 of 36 items held
// once tested absent after a RemoveManyOnce replayed). Another IDLifetime
// is refused by Resize (before, the records were looked for in other
// hashes and every id was applied again).
func TestOnceReplayAfterResize(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "once-resized", Options{Capacity: 10000, ErrorRate: 0.01, Partitions: 1})) // k = 7: 36 items a call
	batch := make([]string, 36)
	for i := range batch {
		batch[i] = fmt.Sprint("r-", i)
	}
	for range 2 { // each held twice
		must(c.AddMany(ctx, batch)).on(t)
	}
	must(c.RemoveManyOnce(ctx, batch, "delete-7")).on(t) // each held once
	must(c.AddManyOnce(ctx, batch[:20], "add-8")).on(t)  // those twice again
	fill := func(add func([]string) error) error { return add(slices.Concat(batch, batch[:20])) }
	if _, err := c.Resize(ctx, Options{Capacity: 20000, Partitions: 1, IDLifetime: 2 * time.Hour}, fill); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Resize to another IDLifetime: %v, want ErrInvalidOptions", err)
	}
	g, err := c.Resize(ctx, Options{Capacity: 20000, ErrorRate: 0.0001, Partitions: 1}, fill) // k = 13: 19 a call
	if err != nil {
		t.Fatal(err)
	}
	before := must(g.CountMany(ctx, batch)).on(t)
	if _, err := g.RemoveManyOnce(ctx, batch, "delete-7"); !errors.Is(err, ErrOpIDReused) {
		t.Errorf("RemoveManyOnce sent again after a resize to another k: %v, want ErrOpIDReused", err)
	}
	if _, err := g.AddManyOnce(ctx, batch[:20], "add-8"); !errors.Is(err, ErrOpIDReused) {
		t.Errorf("AddManyOnce sent again after a resize to another k: %v, want ErrOpIDReused", err)
	}
	if after := must(g.CountMany(ctx, batch)).on(t); !slices.Equal(before, after) {
		t.Errorf("replays changed the counts: %v, then %v", before, after)
	}
}

// afterForward is a go-redis hook on the pipelines that carry a call made
// after a forward to a resize's new filter (add.lua's or cuckoo.lua's
// ARGV[4] 'f'): before the first, it runs before; it then holds the
// first's reply until the caller's deadline (hold), and the second (the
// undo's re-send of a refused call) until release is closed, if set.
type afterForward struct {
	before  func()
	hold    bool
	release chan struct{}
	n       atomic.Int32
}

func (h *afterForward) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *afterForward) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *afterForward) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		forwarded := afterForwardCalls(cmds)
		if !forwarded {
			return next(ctx, cmds)
		}
		switch h.n.Add(1) {
		case 1:
			if h.before != nil {
				h.before()
			}
			err := next(ctx, cmds)
			if h.hold {
				<-ctx.Done()
			}
			return err
		case 2:
			if h.release != nil {
				<-h.release
			}
		}
		return next(ctx, cmds)
	}
}

// afterForwardCalls reports whether cmds carry a call made after a forward
// to a resize's new filter (add.lua's or cuckoo.lua's ARGV[4] 'f').
func afterForwardCalls(cmds []redis.Cmder) bool {
	return slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
		a := c.Args()
		nk, _ := a[min(2, len(a)-1)].(int)
		return len(a) > 3+nk+3 && (a[0] == "evalsha" || a[0] == "eval") && a[3+nk+3] == "f"
	})
}

// TestFullMidResizeUndone: an add sent to a resize's new filter, then
// refused with ErrFull by the old one (MaxItems reached by another writer
// meanwhile), is taken out of the new filter: also when the caller's
// deadline passes before the undo (found by an outside review: the undo
// was skipped, and the item stayed behind a plain ErrFull). When the
// switch comes before the undo can tell the refused call apart, ErrFull
// says that the items may stay, as false positives.
func TestFullMidResizeUndone(t *testing.T) {
	admin := realRedis(t)
	for _, hold := range []bool{false, true} {
		name := fmt.Sprint("undo-max-", hold)
		o := Options{Capacity: 1000, Partitions: 1}
		other := created(t, newCounting(t, admin, name, o))
		base := []string{"b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"}
		must(other.AddMany(ctx, base)).on(t)
		hook := &afterForward{hold: hold, before: func() { must(other.AddMany(ctx, []string{"o1", "o2"})).on(t) }}
		wrdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, ContextTimeoutEnabled: true})
		defer wrdb.Close()
		wrdb.AddHook(hook)
		wo := o
		wo.MaxItems = 10
		writer := newCounting(t, wrdb, name, wo)
		var werr error
		g, err := other.Resize(ctx, Options{Capacity: 2000, Partitions: 1}, func(add func([]string) error) error {
			if err := add(base); err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, werr = writer.AddOnce(wctx, "x", "e1")
			return add([]string{"o1", "o2"})
		})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(werr, ErrFull) {
			t.Fatalf("slow reply %v: AddOnce mid-resize: %v, want ErrFull", hold, werr)
		}
		if n := must(g.Count(ctx, "x")).on(t); n != 0 {
			t.Errorf("slow reply %v: answered ErrFull, and x is in the resized filter (count %d)", hold, n)
		}
		if _, err := g.AddOnce(ctx, "x", "e1"); !errors.Is(err, ErrFull) {
			t.Errorf("slow reply %v: e1 sent again after the switch: %v, want ErrFull", hold, err)
		}
	}

	// A full cuckoo filter; the undo's re-send held until the resize is done.
	o := Options{Slots: 16, Hashes: 13, Partitions: 1}
	old := created(t, newCuckooT(t, admin, "undo-switched", o))
	var held []string
	for i := range 60 {
		if _, err := old.Add(ctx, fmt.Sprint("b", i)); err == nil {
			held = append(held, fmt.Sprint("b", i))
		}
	}
	hook := &afterForward{release: make(chan struct{})}
	wrdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr})
	defer wrdb.Close()
	wrdb.AddHook(hook)
	writer := newCuckooT(t, wrdb, "undo-switched", o)
	done := make(chan error)
	g, err := old.Resize(ctx, Options{Slots: 64, Hashes: 13, Partitions: 1}, func(add func([]string) error) error {
		if err := add(held); err != nil {
			return err
		}
		go func() { _, err := writer.AddOnce(ctx, "x", "ev-x"); done <- err }()
		for hook.n.Load() < 2 {
			time.Sleep(time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	close(hook.release)
	werr := <-done
	n := must(g.Count(ctx, "x")).on(t)
	if !errors.Is(werr, ErrFull) || n > 0 && !strings.Contains(werr.Error(), "false positives") {
		t.Errorf("AddOnce refused by the full filter, its undo after the switch: %v, and x has %d copies in the resized filter: want ErrFull saying so", werr, n)
	}
}

// TestOnceForwardedThenSwitched: an AddManyOnce of a handle of the old
// size, forwarded to the resize's new filter, whose call to the old
// partition comes only after the switch (a hook holds it), is recorded in
// the resized filter and answered: sent again on a reopened handle, it is
// not applied a second time (found by an outside review: the count went
// from 1 to 2, after ErrParamsMismatch).
func TestOnceForwardedThenSwitched(t *testing.T) {
	admin := realRedis(t)
	for _, mode := range []string{"counting", "cuckoo"} {
		name := "fwd-switched-" + mode
		o := Options{Capacity: 10000, Partitions: 1}
		open := func(rdb *redis.Client) Filter {
			if mode == "cuckoo" {
				return newCuckooT(t, rdb, name, o)
			}
			return newCounting(t, rdb, name, o)
		}
		resizer := created(t, open(admin))
		must(resizer.Add(ctx, "base")).on(t)
		hook := &afterForward{release: make(chan struct{})}
		hook.n.Store(1) // hold the first call after the forward
		wrdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr})
		defer wrdb.Close()
		wrdb.AddHook(hook)
		writer := open(wrdb)
		done := make(chan error)
		fill := func(add func([]string) error) error {
			if err := add([]string{"base"}); err != nil {
				return err
			}
			go func() { _, err := writer.AddManyOnce(ctx, []string{"x", "y"}, "event-1"); done <- err }()
			for hook.n.Load() < 2 {
				time.Sleep(time.Millisecond)
			}
			return nil
		}
		var err error
		if mode == "cuckoo" {
			_, err = resizer.(*Cuckoo).Resize(ctx, Options{Capacity: 20000, Partitions: 1}, fill)
		} else {
			_, err = resizer.(*Counting).Resize(ctx, Options{Capacity: 20000, Partitions: 1}, fill)
		}
		if err != nil {
			t.Fatal(err)
		}
		close(hook.release)
		if err := <-done; err != nil {
			t.Errorf("%s: AddManyOnce whose call came after the switch: %v, want it done", mode, err)
		}
		re := must(Open(ctx, admin, name, Options{})).on(t)
		if _, err := re.AddManyOnce(ctx, []string{"x", "y"}, "event-1"); err != nil {
			t.Errorf("%s: event-1 sent again: %v", mode, err)
		}
		for _, item := range []string{"x", "y"} {
			var n int
			switch f := re.(type) {
			case *Counting:
				n = must(f.Count(ctx, item)).on(t)
			case *Cuckoo:
				n = must(f.Count(ctx, item)).on(t)
			}
			if n != 1 {
				t.Errorf("%s: Count(%s) = %d after event-1 and its replay, want 1", mode, item, n)
			}
		}
	}
}

// TestOnceForwardSlowReplay: a batch under an operation id made while a
// resize runs, whose calls to the old filter fail after its items were
// forwarded to the new filter's copies, and which is sent again soon after
// with slow calls (a record bucket apart), adds its items to the new
// filter once. The forward is a batch of its own under an id derived from
// the caller's; its calls file and look for their records by the time the
// caller's batch started, as the caller's calls do. Before, each filed by
// its own time (found in a reading of the change of 30059fb): the send
// again failed, the new filter's copies "vanished", as its later forward
// calls missed the first one's record and answered '?'.
func TestOnceForwardSlowReplay(t *testing.T) {
	admin := realRedis(t)
	o := Options{Capacity: 10_000, Partitions: 1, IDLifetime: 4 * time.Second}
	c := created(t, newCounting(t, admin, "fwd-slow", o))
	wrdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr})
	defer wrdb.Close()
	wrdb.AddHook(&failForwarded{})
	w := newCounting(t, wrdb, "fwd-slow", o) // the writer, with its own clock
	batch := make([]string, 10*w.f.perCall())
	for i := range batch {
		batch[i] = fmt.Sprint("item-", i)
	}
	fill := func(add func([]string) error) error {
		sent := time.Now()
		if _, err := w.AddManyOnce(ctx, batch, "id"); err == nil {
			t.Fatal("the calls after the forward were failed, and AddManyOnce returned nil")
		}
		look := sent.Add(500 * time.Millisecond)
		w.f.now = func() time.Time { // the send again: a second more at every look
			look = look.Add(time.Second)
			return look
		}
		must(w.AddManyOnce(ctx, batch, "id")).on(t)
		return nil
	}
	o.Capacity = 20_000
	g := must(c.Resize(ctx, o, fill)).on(t)
	twice := 0
	for _, n := range must(g.CountMany(ctx, batch)).on(t) {
		if n != 1 {
			twice++
		}
	}
	if twice > 0 {
		t.Errorf("%d of %d items counted otherwise than once in the resized filter", twice, len(batch))
	}
	if n := must(g.Info(ctx)).on(t).Items; n != int64(len(batch)) {
		t.Errorf("Info.Items = %d in the resized filter, want %d", n, len(batch))
	}
}

// failForwarded is a go-redis hook that fails, unsent, the first pipeline
// of calls made after a forward to a resize's new filter
// (afterForwardCalls).
type failForwarded struct{ done bool }

func (h *failForwarded) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *failForwarded) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *failForwarded) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		forwarded := afterForwardCalls(cmds)
		if forwarded && !h.done {
			h.done = true
			err := errors.New("injected: the calls after the forward are lost")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}
