package rbloom

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The matrix of concurrent operations: every operation that changes a
// filter, run against every other from its own connection, as two
// processes would. The application keeps a source of truth (a table) and
// changes it as README says: an insert is Add then the row, a delete is
// the row then Remove; a change holds a shared lock for both steps, and a
// rebuild's fill takes the lock alone for the moment it reads the table
// (Counting.Rebuild's rule, which examples/cacheguard follows). After
// each pair: no item held tests absent, no operation id was applied
// twice (a replay answers what the first call answered), and every
// failure was an error the operation documents. The filter is made by
// Create before the pair; once a Drop has begun, the other side's calls
// may fail with ErrNotFound (nothing makes the filter again but Create
// and Rebuild), unless the handles have CreateOnWrite, with which pairs
// with Drop run a second time: their writes make it again.

// matrixEnv is what the two operations of a pair share.
type matrixEnv struct {
	t      *testing.T
	name   string
	o      Options
	make   func(Client, string, Options) (deletable, error) // the mode's constructor
	client func() redis.UniversalClient                     // a connection of its own

	lock   sync.RWMutex   // changes share it, the fill's read takes it alone
	table  map[string]int // the source: rows per item
	mu     sync.Mutex
	held   map[string]int       // items added and not removed, by the model
	since  map[string]time.Time // when each held item's last add started
	dropAt time.Time            // when the last Drop returned
	// dropping is set when a Drop begins: from then on the filter may be
	// missing, and a call of a handle without CreateOnWrite may fail with
	// ErrNotFound.
	dropping bool
	errs     []error
}

func (e *matrixEnv) handle() deletable {
	c, err := e.make(e.client(), e.name, e.o)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *matrixEnv) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dropping && !e.o.CreateOnWrite && errors.Is(err, ErrNotFound) {
		return // the filter was dropped: documented, and nothing was done
	}
	e.errs = append(e.errs, err)
}

// insert adds item, then puts its row in the table; it is held from then.
func (e *matrixEnv) insert(c deletable, item string, add func() (bool, error)) {
	e.lock.RLock()
	defer e.lock.RUnlock()
	start := time.Now()
	maybe, err := add()
	if err != nil {
		e.fail(fmt.Errorf("add %s: %w", item, err))
		return
	}
	_ = maybe
	e.mu.Lock()
	e.table[item]++
	e.held[item]++
	e.since[item] = start
	e.mu.Unlock()
}

// matrixOps are the operations of the matrix, each a loop of its kind on
// items of its own, named after the operation and the pair's side.
var matrixOps = map[string]func(e *matrixEnv, side string){
	"Add": func(e *matrixEnv, side string) {
		c := e.handle()
		for i := range 40 {
			item := fmt.Sprintf("%s-add-%d", side, i)
			e.insert(c, item, func() (bool, error) { return c.Add(ctx, item) })
		}
	},
	"TestOrAdd": func(e *matrixEnv, side string) {
		c := e.handle()
		for i := range 40 {
			item := fmt.Sprintf("%s-toa-%d", side, i)
			// An item answered present was not added by this call: the
			// model holds it only when the call added it.
			e.lock.RLock()
			start := time.Now()
			seen, err := c.TestOrAdd(ctx, item)
			if err != nil {
				e.fail(fmt.Errorf("TestOrAdd %s: %w", item, err))
			} else if !seen {
				e.mu.Lock()
				e.table[item]++
				e.held[item]++
				e.since[item] = start
				e.mu.Unlock()
			}
			e.lock.RUnlock()
		}
	},
	"AddOnce": func(e *matrixEnv, side string) {
		c := e.handle()
		for i := range 20 {
			item, id := fmt.Sprintf("%s-once-%d", side, i), fmt.Sprintf("%s-op-%d", side, i)
			e.insert(c, item, func() (bool, error) {
				first, err := c.AddOnce(ctx, item, id)
				if err != nil {
					return false, err
				}
				if again, err := c.AddOnce(ctx, item, id); err != nil {
					return false, fmt.Errorf("replay of %s: %w", id, err)
				} else if again != first {
					return false, fmt.Errorf("replay of %s answered %v; the first call %v", id, again, first)
				}
				return first, nil
			})
		}
	},
	"AddManyOnce": func(e *matrixEnv, side string) {
		c := e.handle()
		for i := range 5 {
			batch := make([]string, 30)
			for j := range batch {
				batch[j] = fmt.Sprintf("%s-batch-%d-%d", side, i, j)
			}
			id := fmt.Sprintf("%s-batch-%d", side, i)
			e.lock.RLock()
			start := time.Now()
			first, err := c.AddManyOnce(ctx, batch, id)
			if err == nil {
				var again []bool
				if again, err = c.AddManyOnce(ctx, batch, id); err == nil && !slices.Equal(again, first) {
					err = fmt.Errorf("the replay answered %v, the first call %v", again, first)
				}
			}
			if err != nil {
				e.fail(fmt.Errorf("AddManyOnce %s: %w", id, err))
			} else {
				e.mu.Lock()
				for _, item := range batch {
					e.table[item]++
					e.held[item]++
					e.since[item] = start
				}
				e.mu.Unlock()
			}
			e.lock.RUnlock()
		}
	},
	// Remove and RemoveOnce take items added twice before the pair starts
	// (see setup), one row each time: a remove applied twice, or to
	// counters that never held its item, makes one of them test absent.
	"Remove": func(e *matrixEnv, side string) {
		c := e.handle()
		for i := range 40 {
			item := fmt.Sprintf("%s-rm-%d", side, i)
			e.remove(item, func() error { _, err := c.Remove(ctx, item); return err })
		}
	},
	"RemoveOnce": func(e *matrixEnv, side string) {
		c := e.handle()
		for i := range 20 {
			item, id := fmt.Sprintf("%s-rmonce-%d", side, i), fmt.Sprintf("%s-rmop-%d", side, i)
			e.remove(item, func() error {
				first, err := c.RemoveOnce(ctx, item, id)
				if err != nil {
					return err
				}
				if again, err := c.RemoveOnce(ctx, item, id); err != nil {
					return fmt.Errorf("replay of %s: %w", id, err)
				} else if again != first {
					return fmt.Errorf("replay of %s answered %v; the first call %v", id, again, first)
				}
				return nil
			})
		}
	},
	"Rebuild": func(e *matrixEnv, side string) {
		c := e.handle()
		for range 2 {
			err := c.Rebuild(ctx, func(add func([]string) error) error {
				e.lock.Lock() // the fill's moment: no change half done
				var rows []string
				for item, n := range e.table {
					for range n {
						rows = append(rows, item)
					}
				}
				e.lock.Unlock()
				for lo := 0; lo < len(rows); lo += 25 {
					if err := add(rows[lo:min(lo+25, len(rows))]); err != nil {
						return err
					}
					time.Sleep(time.Millisecond) // let the other side run
				}
				return nil
			})
			if err != nil && !errors.Is(err, ErrRebuilding) && !errors.Is(err, ErrRebuildLost) {
				e.fail(fmt.Errorf("Rebuild: %w", err))
			}
		}
	},
	"Create": func(e *matrixEnv, side string) {
		c := e.handle()
		for range 20 {
			if err := c.Create(ctx); err != nil {
				e.fail(fmt.Errorf("Create: %w", err))
			}
		}
	},
	"Drop": func(e *matrixEnv, side string) {
		c := e.handle()
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
		e.mu.Lock()
		e.dropping = true
		e.mu.Unlock()
		if err := c.Drop(ctx); err != nil {
			e.fail(fmt.Errorf("Drop: %w", err))
		}
		e.mu.Lock()
		e.dropAt = time.Now()
		e.mu.Unlock()
	},
}

// remove deletes one row of item, then removes it from the filter.
func (e *matrixEnv) remove(item string, remove func() error) {
	e.lock.RLock()
	defer e.lock.RUnlock()
	e.mu.Lock()
	e.table[item]--
	e.mu.Unlock()
	if err := remove(); err != nil {
		e.fail(fmt.Errorf("remove %s: %w", item, err))
		return
	}
	e.mu.Lock()
	e.held[item]--
	e.mu.Unlock()
}

// TestConcurrentOperations runs the matrix on a single server and on the
// 3-master cluster.
func TestConcurrentOperations(t *testing.T) {
	for _, mode := range deletableModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Run("redis", func(t *testing.T) {
				rdb := realRedis(t)
				runMatrix(t, mode.make, func() redis.UniversalClient { return redis.NewClient(rdb.Options()) }, 2)
			})
			t.Run("cluster", func(t *testing.T) {
				_, rdb := clusterClient(t)
				runMatrix(t, mode.make, func() redis.UniversalClient { return redis.NewClusterClient(rdb.Options()) }, 3)
			})
		})
	}
}

func runMatrix(t *testing.T, mk func(Client, string, Options) (deletable, error), client func() redis.UniversalClient, parts int) {
	ops := slices.Sorted(maps.Keys(matrixOps))
	var mu sync.Mutex // the operations of a pair open clients at once
	var clients []redis.UniversalClient
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	newClient := func() redis.UniversalClient {
		c := client()
		mu.Lock()
		clients = append(clients, c)
		mu.Unlock()
		return c
	}
	type pair struct {
		a, b    string
		onWrite bool
	}
	var pairs []pair
	for i, a := range ops {
		for _, b := range ops[i:] {
			drops := a == "Drop" || b == "Drop"
			removes := a == "Remove" || a == "RemoveOnce" || b == "Remove" || b == "RemoveOnce"
			if removes && drops {
				// A remove of an item the dropped filter held, applied to
				// its successor, removes an item never added there: the
				// caller's rule, not rbloom's, forbids it.
				continue
			}
			pairs = append(pairs, pair{a, b, false})
			if drops {
				pairs = append(pairs, pair{a, b, true})
			}
		}
	}
	for _, pr := range pairs {
		a, b := pr.a, pr.b
		{
			name := fmt.Sprintf("m-%s-%s", a, b)
			if pr.onWrite {
				name += "-cow"
				b += " (CreateOnWrite)"
			}
			e := &matrixEnv{t: t, name: name, make: mk, client: newClient,
				o:     Options{Capacity: 2000, ErrorRate: 0.01, Partitions: parts, CreateOnWrite: pr.onWrite},
				table: map[string]int{}, held: map[string]int{}, since: map[string]time.Time{}}
			setup := created(t, e.handle())
			base := make([]string, 100)
			for j := range base {
				base[j] = fmt.Sprintf("base-%d", j)
			}
			must(setup.AddMany(ctx, base)).on(t)
			for _, item := range base {
				e.table[item], e.held[item], e.since[item] = 1, 1, time.Time{}
			}
			for _, side := range []string{"a", "b"} {
				for j := range 40 {
					for _, item := range []string{fmt.Sprintf("%s-rm-%d", side, j), fmt.Sprintf("%s-rmonce-%d", side, j)} {
						must(setup.AddMany(ctx, []string{item, item})).on(t)
						e.table[item], e.held[item], e.since[item] = 2, 2, time.Time{}
					}
				}
			}
			var wg sync.WaitGroup
			for side, op := range map[string]string{"a": pr.a, "b": pr.b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					matrixOps[op](e, side)
				}()
			}
			wg.Wait()
			for _, err := range e.errs {
				t.Errorf("%s against %s: %v", a, b, err)
			}
			var held []string
			for item, n := range e.held {
				if n > 0 && (e.dropAt.IsZero() || e.since[item].After(e.dropAt)) {
					held = append(held, item)
				}
			}
			slices.Sort(held)
			absent := 0
			for j, ok := range must(setup.TestMany(context.Background(), held)).on(t) {
				if !ok {
					absent++
					if absent <= 3 {
						t.Errorf("%s against %s: %q is held and tests absent", a, b, held[j])
					}
				}
			}
			if absent > 3 {
				t.Errorf("%s against %s: %d held items test absent", a, b, absent)
			}
		}
	}
}
