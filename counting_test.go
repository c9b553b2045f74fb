package rbloom

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var ctx = context.Background()

func TestCountingBasics(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "users", Options{Capacity: 1000}))
		steps := []struct {
			op   string // add, test, remove, count
			item string
			want any
		}{
			{"test", "a", false},
			{"count", "a", 0},
			{"remove", "a", false}, // absent: nothing changes
			{"add", "a", false},
			{"add", "a", true},
			{"test", "a", true},
			{"count", "a", 2},
			{"add", "", false}, // the empty string is an item like any other
			{"test", "", true},
			{"remove", "a", true},
			{"count", "a", 1},
			{"remove", "a", true},
			{"test", "a", false},
			{"remove", "a", false},
			{"test", "", true},
		}
		for i, s := range steps {
			var got any
			var err error
			switch s.op {
			case "add":
				got, err = c.Add(ctx, s.item)
			case "test":
				got, err = c.Test(ctx, s.item)
			case "remove":
				got, err = c.Remove(ctx, s.item)
			case "count":
				got, err = c.Count(ctx, s.item)
			}
			if err != nil || got != s.want {
				t.Fatalf("step %d: %s(%q) = %v, %v; want %v", i, s.op, s.item, got, err, s.want)
			}
		}
		in := must(c.Info(ctx)).on(t)
		if !in.Exists || in.Mode != ModeCounting || in.Items != 1 || in.Slots != 9586 || in.Hashes != 7 ||
			in.Capacity != 1000 || in.ErrorRate != 0.01 || in.Bytes < 64+4793 {
			t.Errorf("Info = %+v, want an existing counting filter, 1 item, m 9586, k 7, n 1000, p 0.01", in)
		}
	})
}

func TestBatches(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "batch", Options{Capacity: 10_000}))
		// More items than one script call takes, with repeats.
		items := make([]string, 700)
		for i := range items {
			items[i] = fmt.Sprint("item-", i%500)
		}
		added := must(c.AddMany(ctx, items)).on(t)
		for i, existed := range added {
			if want := i >= 500; existed != want {
				t.Fatalf("AddMany[%d] (%q) = %v, want %v", i, items[i], existed, want)
			}
		}
		for i, ok := range must(c.TestMany(ctx, items)).on(t) {
			if !ok {
				t.Fatalf("TestMany[%d] (%q) = false after AddMany", i, items[i])
			}
		}
		removed := must(c.RemoveMany(ctx, append(items[:600:600], "never-added"))).on(t)
		for i, ok := range removed[:600] {
			if !ok {
				t.Fatalf("RemoveMany[%d] (%q) = false, want true", i, items[i])
			}
		}
		if removed[600] {
			t.Errorf("RemoveMany(never-added) = true, want false")
		}
		// item-0..199 were added twice, item-200..499 once; item-0..99 were
		// removed twice, item-100..499 once. item-100..199 are still held.
		counts := must(c.f.count(ctx, items[:500])).on(t)
		for i, n := range counts {
			if i >= 100 && i < 200 && n < 1 {
				t.Fatalf("Count(%q) = %d, but it is still held", items[i], n)
			}
		}
		if in := must(c.Info(ctx)).on(t); in.Items != 100 {
			t.Errorf("Info.Items = %d, want 100", in.Items)
		}
		for _, empty := range [][]string{nil, {}} {
			if r, err := c.AddMany(ctx, empty); err != nil || len(r) != 0 {
				t.Errorf("AddMany(%v) = %v, %v; want [], nil", empty, r, err)
			}
			if r, err := c.TestMany(ctx, empty); err != nil || len(r) != 0 {
				t.Errorf("TestMany(%v) = %v, %v; want [], nil", empty, r, err)
			}
		}
	})
}

// TestSticky checks that a counter at 15 is never decremented: its true
// count is unknown, and decrementing it could make an item still held test
// false.
func TestSticky(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "sticky", Options{Slots: 1, Hashes: 1}))
		for i := range 16 {
			must(c.Add(ctx, fmt.Sprint("x", i))).on(t)
		}
		if n := must(c.Count(ctx, "x0")).on(t); n != 15 {
			t.Fatalf("Count after 16 adds = %d, want 15", n)
		}
		for i := range 16 {
			if !must(c.Remove(ctx, fmt.Sprint("x", i))).on(t) {
				t.Fatalf("Remove(x%d) = false, want true: the counter is non-zero", i)
			}
		}
		if n := must(c.Count(ctx, "x0")).on(t); n != 15 {
			t.Errorf("Count after removing all = %d, want 15 (sticky)", n)
		}
		// Below 15, counters go down and up exactly.
		d := created(t, newCounting(t, rdb, "exact", Options{Slots: 1, Hashes: 1}))
		must(d.AddMany(ctx, []string{"a", "b", "c"})).on(t)
		must(d.RemoveMany(ctx, []string{"a", "b"})).on(t)
		if n := must(d.Count(ctx, "c")).on(t); n != 1 {
			t.Errorf("Count = %d, want 1", n)
		}
	})
}

// TestNothingCreated checks that no call but Create and Rebuild creates a
// key of a filter that does not exist: by default every read and write
// fails with ErrNotFound; with CreateOnWrite, reads and removes answer
// "absent" without creating a key (BITFIELD would create one).
func TestNothingCreated(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		strict := newCounting(t, rdb, "missing", Options{Capacity: 100})
		calls := map[string]func() error{
			"Test":       func() error { _, err := strict.Test(ctx, "a"); return err },
			"TestMany":   func() error { _, err := strict.TestMany(ctx, []string{"a", "b"}); return err },
			"Count":      func() error { _, err := strict.Count(ctx, "a"); return err },
			"Add":        func() error { _, err := strict.Add(ctx, "a"); return err },
			"AddMany":    func() error { _, err := strict.AddMany(ctx, []string{"a", "b"}); return err },
			"AddOnce":    func() error { _, err := strict.AddOnce(ctx, "a", "id-1"); return err },
			"TestOrAdd":  func() error { _, err := strict.TestOrAdd(ctx, "a"); return err },
			"Remove":     func() error { _, err := strict.Remove(ctx, "a"); return err },
			"RemoveMany": func() error { _, err := strict.RemoveMany(ctx, []string{"a", "b"}); return err },
			"RemoveOnce": func() error { _, err := strict.RemoveOnce(ctx, "a", "id-2"); return err },
			"Resize": func() error {
				_, err := strict.Resize(ctx, Options{Capacity: 200}, func(func([]string) error) error { return nil })
				return err
			},
		}
		for _, name := range sortedKeys(calls) {
			if err := calls[name](); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s on a missing filter: %v, want ErrNotFound", name, err)
			}
		}
		if in := must(strict.Info(ctx)).on(t); in.Exists || in.Items != 0 {
			t.Errorf("Info on a missing filter = %+v", in)
		}
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
			t.Errorf("keys after calls refused with ErrNotFound: %v, want none", keys)
		}

		c := newCounting(t, rdb, "ghost", Options{Capacity: 100, CreateOnWrite: true})
		if ok := must(c.Test(ctx, "a")).on(t); ok {
			t.Error("Test on a missing filter = true")
		}
		if n := must(c.Count(ctx, "a")).on(t); n != 0 {
			t.Errorf("Count on a missing filter = %d", n)
		}
		if ok := must(c.Remove(ctx, "a")).on(t); ok {
			t.Error("Remove on a missing filter = true")
		}
		must(c.RemoveMany(ctx, []string{"a", "b"})).on(t)
		in := must(c.Info(ctx)).on(t)
		if in.Exists || in.Items != 0 {
			t.Errorf("Info on a missing filter = %+v", in)
		}
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
			t.Errorf("keys after reads of a missing filter: %v, want none", keys)
		}
	})
}

// TestRefused checks every way a write or read can be refused: nothing in
// Redis may change.
func TestRefused(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		must(created(t, newCounting(t, rdb, "small", Options{Capacity: 100})).Add(ctx, "a")).on(t)
		must(created(t, newClassicT(t, rdb, "bits", Options{Capacity: 100})).Add(ctx, "a")).on(t)
		rdb.Set(ctx, keyOf(DefaultKeyPrefix, "plain"), "hello", 0)
		rdb.Set(ctx, keyOf(DefaultKeyPrefix, "empty"), "", 0)
		rdb.HSet(ctx, keyOf(DefaultKeyPrefix, "hash"), "f", "v")
		rdb.Set(ctx, keyOf(DefaultKeyPrefix, "short"), newCounting(t, rdb, "x", Options{Capacity: 100}).f.parts[0].head+"\x00\x00", 0)
		future := []byte(newCounting(t, rdb, "x", Options{Capacity: 100}).f.parts[0].head + string(make([]byte, 4793)))
		future[6] = 2
		rdb.Set(ctx, keyOf(DefaultKeyPrefix, "future"), string(future), 0)
		before := dump(t, rdb)

		tests := []struct {
			name string
			o    Options
			want error
		}{
			{"small", Options{Capacity: 200}, ErrParamsMismatch},
			{"small", Options{Capacity: 100, Hashes: 3}, ErrParamsMismatch},
			{"bits", Options{Capacity: 100}, ErrParamsMismatch}, // classic, opened as counting
			{"plain", Options{Capacity: 100}, ErrNotFilter},
			{"empty", Options{Capacity: 100}, ErrNotFilter},
			{"hash", Options{Capacity: 100}, ErrNotFilter},
			{"short", Options{Capacity: 100}, ErrDamaged},
			{"future", Options{Capacity: 100}, ErrNotFilter},
		}
		for _, tt := range tests {
			c := newCounting(t, rdb, tt.name, tt.o)
			ops := map[string]func() error{
				"Add":        func() error { _, err := c.Add(ctx, "a"); return err },
				"AddMany":    func() error { _, err := c.AddMany(ctx, []string{"a", "b"}); return err },
				"Remove":     func() error { _, err := c.Remove(ctx, "a"); return err },
				"RemoveMany": func() error { _, err := c.RemoveMany(ctx, []string{"a", "b"}); return err },
				"Test":       func() error { _, err := c.Test(ctx, "a"); return err },
				"Count":      func() error { _, err := c.Count(ctx, "a"); return err },
				"Info":       func() error { _, err := c.Info(ctx); return err },
			}
			for _, op := range slices.Sorted(maps.Keys(ops)) {
				if err := ops[op](); !errors.Is(err, tt.want) {
					t.Errorf("%s on %s with %+v: error %v, want %v", op, tt.name, tt.o, err, tt.want)
				}
			}
		}
		if after := dump(t, rdb); !maps.Equal(before, after) {
			t.Errorf("refused operations changed Redis:\nbefore %q\nafter  %q", before, after)
		}
	})
}

func TestCreate(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := newCounting(t, rdb, "made", Options{Capacity: 100, TTL: time.Hour})
		if err := c.Create(ctx); err != nil {
			t.Fatal(err)
		}
		in := must(c.Info(ctx)).on(t)
		if !in.Exists || in.Items != 0 || in.TTL <= 0 {
			t.Errorf("Info after Create = %+v, want an empty filter with a TTL", in)
		}
		if n := rdb.StrLen(ctx, c.f.parts[0].key).Val(); n != c.f.h.size() {
			t.Errorf("STRLEN = %d, want %d", n, c.f.h.size())
		}
		if err := c.Create(ctx); err != nil {
			t.Errorf("second Create: %v", err)
		}
		other := newCounting(t, rdb, "made", Options{Capacity: 1000})
		if err := other.Create(ctx); !errors.Is(err, ErrParamsMismatch) {
			t.Errorf("Create with other parameters: %v, want ErrParamsMismatch", err)
		}
		if n := must(c.Count(ctx, "x")).on(t); n != 0 {
			t.Errorf("Count on a created filter = %d", n)
		}
	})
}

// TestTTL: the TTL is given when the filter is made (by Create, or with
// CreateOnWrite by the first write), and later writes do not extend it.
func TestTTL(t *testing.T) {
	for _, onWrite := range []bool{false, true} {
		t.Run(fmt.Sprint("CreateOnWrite=", onWrite), func(t *testing.T) { testTTL(t, onWrite) })
	}
}

func testTTL(t *testing.T, onWrite bool) {
	// made returns a handle of the filter, made by Create, or left to its
	// first write with CreateOnWrite.
	made := func(t *testing.T, rdb *redis.Client, name string, o Options) *Counting {
		o.CreateOnWrite = onWrite
		c := newCounting(t, rdb, name, o)
		if !onWrite {
			created(t, c)
		}
		return c
	}
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := made(t, rdb, "ttl", Options{Capacity: 100, TTL: time.Hour})
		must(c.Add(ctx, "a")).on(t)
		rdb.PExpire(ctx, c.f.parts[0].key, time.Minute) // later writes must not extend it
		must(c.Add(ctx, "b")).on(t)
		must(c.Remove(ctx, "a")).on(t)
		if ttl := rdb.PTTL(ctx, c.f.parts[0].key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("PTTL = %v, want at most 1m: set once, at creation", ttl)
		}
		if in := must(c.Info(ctx)).on(t); in.TTL <= 0 || in.TTL > time.Minute {
			t.Errorf("Info.TTL = %v", in.TTL)
		}
		// Every partition gets the TTL: they are created together.
		e := made(t, rdb, "parts", Options{Capacity: 100, Partitions: 3, TTL: time.Hour})
		must(e.Add(ctx, "a")).on(t)
		for _, p := range e.f.parts {
			if ttl := rdb.PTTL(ctx, p.key).Val(); ttl <= 59*time.Minute {
				t.Errorf("PTTL %s = %v, want about 1h", p.key, ttl)
			}
		}
		d := made(t, rdb, "forever", Options{Capacity: 100})
		must(d.Add(ctx, "a")).on(t)
		if ttl := rdb.PTTL(ctx, d.f.parts[0].key).Val(); ttl != -1 {
			t.Errorf("PTTL without TTL = %v, want -1 (none)", ttl)
		}
	})
}

// TestScriptFlush checks that writes survive the loss of the script cache
// (restart, failover, SCRIPT FLUSH), in single calls and in pipelines.
func TestScriptFlush(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "flush", Options{Capacity: 10_000}))
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	for round := range 3 {
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AddMany(ctx, items); err != nil {
			t.Fatalf("round %d: AddMany after SCRIPT FLUSH: %v", round, err)
		}
		rdb.ScriptFlush(ctx)
		if _, err := c.Add(ctx, "one"); err != nil {
			t.Fatalf("round %d: Add after SCRIPT FLUSH: %v", round, err)
		}
	}
	if n := must(c.Count(ctx, "0")).on(t); n != 3 {
		t.Errorf("Count = %d, want 3: each round added once", n)
	}
}

// TestOnce checks that an operation id is applied once, even when the same
// event reaches two consumers at the same time.
func TestOnce(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "stream", Options{Capacity: 1000, Partitions: 2}))
		for range 3 {
			if existed := must(c.AddOnce(ctx, "order:1", "topic-0-offset-17")).on(t); existed {
				t.Fatal("AddOnce answered existed for the first add")
			}
		}
		if n := must(c.Count(ctx, "order:1")).on(t); n != 1 {
			t.Fatalf("Count after 3 AddOnce with one id = %d, want 1", n)
		}
		must(c.AddOnce(ctx, "order:1", "topic-0-offset-18")).on(t) // another event
		// The delete event arrives twice, to two consumers at once.
		var wg sync.WaitGroup
		answers := make([]bool, 8)
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error // t.Fatal belongs to the test's goroutine
				if answers[i], err = c.RemoveOnce(ctx, "order:1", "topic-0-offset-40"); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for i, removed := range answers {
			if !removed {
				t.Errorf("consumer %d: RemoveOnce = false, want the first answer (true) for everyone", i)
			}
		}
		if n := must(c.Count(ctx, "order:1")).on(t); n != 1 {
			t.Errorf("Count after the delete delivered 8 times = %d, want 1", n)
		}
		if _, err := c.RemoveOnce(ctx, "order:1", ""); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("RemoveOnce with no id: %v, want ErrInvalidOptions", err)
		}
	})
}

// TestMaxItems: with MaxItems, an add that would take a partition past
// its share fails with ErrFull and adds nothing; removes make room again.
func TestMaxItems(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "bounded", Options{Capacity: 1000, MaxItems: 3}))
		must(c.AddMany(ctx, []string{"a", "b"})).on(t)
		before := dump(t, rdb)
		if _, err := c.AddMany(ctx, []string{"c", "d"}); !errors.Is(err, ErrFull) {
			t.Errorf("AddMany past MaxItems: %v, want ErrFull", err)
		}
		if after := dump(t, rdb); !maps.Equal(before, after) {
			t.Error("the refused add wrote to Redis")
		}
		must(c.Add(ctx, "c")).on(t)
		if _, err := c.AddOnce(ctx, "d", "id-d"); !errors.Is(err, ErrFull) {
			t.Errorf("AddOnce past MaxItems: %v, want ErrFull", err)
		}
		must(c.Remove(ctx, "a")).on(t)
		must(c.AddOnce(ctx, "d", "id-d")).on(t) // the refusal recorded nothing
		for _, item := range []string{"b", "c", "d"} {
			if !must(c.Test(ctx, item)).on(t) {
				t.Errorf("%q tests absent", item)
			}
		}
		// Another handle without the bound is not held to it.
		must(newCounting(t, rdb, "bounded", Options{Capacity: 1000}).Add(ctx, "e")).on(t)

		// With P partitions, each holds its share: 10 items over 2
		// partitions, at most 5 each.
		p := created(t, newCounting(t, rdb, "bounded-parts", Options{Capacity: 1000, Partitions: 2, MaxItems: 10}))
		added := 0
		for i := range 40 {
			_, err := p.Add(ctx, fmt.Sprint("i", i))
			switch {
			case err == nil:
				added++
			case !errors.Is(err, ErrFull):
				t.Fatal(err)
			}
		}
		if in := must(p.Info(ctx)).on(t); added != 10 || in.Items != 10 {
			t.Errorf("40 adds with MaxItems 10 over 2 partitions: %d added, Info.Items %d; want 10", added, in.Items)
		}
	})
}
