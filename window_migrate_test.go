package rbloom

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotMove is a slot migration driven step by step, as redis-cli
// --cluster reshard does it: SETSLOT IMPORTING and MIGRATING, MIGRATE of
// keys, SETSLOT NODE.
type slotMove struct {
	slot           int
	from, into     *redis.Client
	others         []*redis.Client
	fromID, intoID string
}

// startMove sets slot migrating from its owner to another master.
func startMove(t *testing.T, addrs []string, owner string, slot int) *slotMove {
	t.Helper()
	m := &slotMove{slot: slot}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		switch {
		case a == owner:
			m.from = c
		case m.into == nil:
			m.into = c
		default:
			m.others = append(m.others, c)
		}
	}
	m.fromID = must(m.from.Do(ctx, "CLUSTER", "MYID").Text()).on(t)
	m.intoID = must(m.into.Do(ctx, "CLUSTER", "MYID").Text()).on(t)
	must(0, m.into.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID).Err()).on(t)
	must(0, m.from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.intoID).Err()).on(t)
	return m
}

// migrate moves the keys of the slot that keep says, one MIGRATE each.
func (m *slotMove) migrate(t *testing.T, keep func(key string) bool) {
	t.Helper()
	host, port, _ := net.SplitHostPort(m.into.Options().Addr)
	for _, key := range must(m.from.ClusterGetKeysInSlot(ctx, m.slot, 10_000).Result()).on(t) {
		if keep(key) {
			must(0, m.from.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", key).Err()).on(t)
		}
	}
}

// finish moves the slot's other keys and gives it to its new master.
func (m *slotMove) finish(t *testing.T) {
	t.Helper()
	m.migrate(t, func(string) bool { return true })
	for _, c := range append([]*redis.Client{m.into, m.from}, m.others...) {
		must(0, c.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.intoID).Err()).on(t)
	}
}

// TestWindowSlotMigration moves the slot of a window's ring while
// consumers run, with the ring on the new master and its settings still
// on the old one for a while: a window's calls are as available as a
// filter's of the same slot (the reads go on; a script call, which names
// keys on both masters, is refused by Redis with TRYAGAIN as a filter's
// is, and fails at the caller's deadline), and no event the window holds
// is ever answered new.
func TestWindowSlotMigration(t *testing.T) {
	cl, rdb := clusterClient(t)
	w := created(t, must(NewWindow(rdb, "migrating", WindowOptions{EventsPerBucket: 20_000, Bucket: time.Hour, Span: 24 * time.Hour, Partitions: 1})).on(t))
	c := must(NewCounting(rdb, "migrating", Options{Capacity: 1000, Partitions: 1})).on(t) // the same slot
	must(0, c.Create(ctx)).on(t)
	var mu sync.Mutex
	held := events("before", 200)
	must(w.TestOrAddMany(ctx, held)).on(t)
	inFilter := slices.Clone(held[:10])
	must(c.AddMany(ctx, inFilter)).on(t)

	// Each call's deadline: time enough for a read on a loaded machine,
	// far less than a wait for the migration (maxRedirectWait).
	const deadline = 2 * time.Second
	var outcomes []outcome
	call := func(what string, fn func(ctx context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		start := time.Now()
		err := fn(cctx)
		mu.Lock()
		outcomes = append(outcomes, outcome{what, err, time.Since(start)})
		mu.Unlock()
		return err
	}
	// The consumers: each adds new events and repeats held ones; a reader
	// tests held events. Every answer is checked against the events held.
	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for id := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; ; b++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				batch := append(events(fmt.Sprint("c", id, "-", b), 20), held[len(held)-10:]...)
				mu.Unlock()
				var seen []bool
				if call("window add", func(ctx context.Context) (err error) { seen, err = w.TestOrAddMany(ctx, batch); return err }) != nil {
					continue
				}
				for i, e := range batch[20:] {
					if !seen[20+i] {
						errs <- fmt.Errorf("%s, held, answered new", e)
						return
					}
				}
				mu.Lock()
				held = append(held, batch[:20]...)
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			some := slices.Clone(held[max(0, len(held)-300):])
			mu.Unlock()
			var seen []bool
			if call("window test", func(ctx context.Context) (err error) { seen, err = w.TestMany(ctx, some); return err }) == nil {
				if i := slices.Index(seen, false); i >= 0 {
					errs <- fmt.Errorf("%s, held, answered not seen", some[i])
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Add(1)
	go func() { // a filter in the same slot, for comparison
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			call("filter test", func(ctx context.Context) error { _, err := c.TestMany(ctx, inFilter); return err })
			call("filter add", func(ctx context.Context) error { _, err := c.Add(ctx, "x"); return err })
			time.Sleep(5 * time.Millisecond)
		}
	}()

	phase := func(name string, d time.Duration) []outcome {
		mu.Lock()
		from := len(outcomes)
		mu.Unlock()
		time.Sleep(d)
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%s: %s", name, summary(outcomes[from:]))
		return slices.Clone(outcomes[from:])
	}
	phase("before the move", 300*time.Millisecond)
	key := w.f.parts[0].key
	slot := int(keySlot(key[strings.Index(key, "{")+1 : strings.Index(key, "}")]))
	owner := must(cl.SlotOwner(ctx, slot)).on(t)
	m := startMove(t, cl.Addrs(), owner, slot)
	phase("migrating, no key moved", 600*time.Millisecond)
	m.migrate(t, func(key string) bool { return key == w.ringKey(0) })
	split := phase("ring moved, its settings not", 3*deadline/2)
	m.finish(t)
	phase("after the move", 600*time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	for _, o := range outcomes {
		// Past the deadline by a loaded machine's delays, not by a wait
		// for the migration (up to maxRedirectWait).
		if o.took > deadline+time.Second {
			t.Errorf("%s took %v, past its deadline of %v: %v", o.what, o.took, deadline, o.err)
		}
	}
	// While the keys are split, a window's reads go on as a filter's do.
	for _, what := range []string{"window test", "filter test"} {
		ok, n := 0, 0
		for _, o := range split {
			if o.what == what {
				n++
				if o.err == nil {
					ok++
				}
			}
		}
		if n == 0 || ok < n {
			t.Errorf("while the ring's keys were split, %d of %d calls of %s succeeded, want all", ok, n, what)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	seen := must(w.TestMany(ctx, held)).on(t)
	if i := slices.Index(seen, false); i >= 0 {
		t.Errorf("after the move, %s, held, answered not seen", held[i])
	}
}

// outcome is one call made during TestWindowSlotMigration.
type outcome struct {
	what string
	err  error
	took time.Duration
}

// summary counts outcomes by call, with their errors' first words.
func summary(outcomes []outcome) string {
	type count struct {
		ok, failed int
		why        string
		longest    time.Duration
	}
	counts := map[string]*count{}
	for _, o := range outcomes {
		c := counts[o.what]
		if c == nil {
			c = &count{}
			counts[o.what] = c
		}
		c.longest = max(c.longest, o.took)
		if o.err == nil {
			c.ok++
			continue
		}
		c.failed++
		c.why = o.err.Error()
	}
	var out []string
	for _, what := range sortedKeys(counts) {
		c := counts[what]
		s := fmt.Sprintf("%s %d ok %d failed (longest %v)", what, c.ok, c.failed, c.longest.Round(time.Millisecond))
		if c.why != "" {
			s += fmt.Sprintf(" [%.120s]", c.why)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}
