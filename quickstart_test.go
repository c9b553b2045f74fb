package rbloom_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

// table stands for the database README's quick start guards: its rows,
// and the lock that lets the fill read them when no insert is half done
// (an insert holds it shared from its Add to its commit).
type table struct {
	mu      sync.RWMutex
	rows    map[string]bool
	changes sync.RWMutex
}

func (tb *table) insert(ctx context.Context, f *rbloom.Counting, id string) error {
	tb.changes.RLock()
	defer tb.changes.RUnlock()
	if _, err := f.Add(ctx, id); err != nil { // before the INSERT
		return err // the row is not inserted
	}
	tb.mu.Lock()
	tb.rows[id] = true
	tb.mu.Unlock()
	return nil
}

// fill is the quick start's Source: every id, read in one snapshot taken
// while no insert is half done.
func (tb *table) fill(add func(items []string) error) error {
	tb.changes.Lock()
	tb.mu.RLock()
	ids := make([]string, 0, len(tb.rows))
	for id := range tb.rows {
		ids = append(ids, id)
	}
	tb.mu.RUnlock()
	tb.changes.Unlock()
	return add(ids)
}

// TestQuickStartSurvivesLoss runs README's quick start as written, with
// readers and writers, while Redis loses the filter three ways: a restart
// without persistence, a FLUSHALL, and the eviction of every key. No
// reader ever gets "absent" for a row that exists: each gets ErrNotFound,
// ErrLoading or a connection error until the handle has loaded the filter
// again from its Source, and exact answers after.
func TestQuickStartSurvivesLoss(t *testing.T) {
	srv := rbloomtest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()
	tb := &table{rows: map[string]bool{}}
	for i := range 2000 {
		tb.rows[fmt.Sprint("user:", i)] = true
	}
	f, err := rbloom.NewCounting(rdb, "users", rbloom.Options{Capacity: 100_000, ErrorRate: 0.001, Source: tb.fill})
	if err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	var absent, answered, refused atomic.Int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // a writer: an insert a millisecond
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			_ = tb.insert(ctx, f, fmt.Sprint("new:", i)) // failed inserts insert nothing
			time.Sleep(time.Millisecond)
		}
	}()
	go func() { // a reader of the rows that exist
		defer wg.Done()
		for !stop.Load() {
			tb.mu.RLock()
			ids := make([]string, 0, 64)
			for id := range tb.rows {
				if ids = append(ids, id); len(ids) == cap(ids) {
					break
				}
			}
			tb.mu.RUnlock()
			got, err := f.TestMany(ctx, ids)
			switch {
			case err != nil:
				refused.Add(1) // ask the database
			default:
				answered.Add(1)
				for i, ok := range got {
					if !ok {
						absent.Add(1)
						t.Errorf("%s exists and tested absent", ids[i])
					}
				}
			}
		}
	}()

	restored := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for before := answered.Load(); answered.Load() < before+20; {
			if time.Now().After(deadline) {
				t.Fatalf("after %s: the filter was not loaded again within 20s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	restored("the start")
	for _, lose := range srv.Losses(rdb) {
		lose.Do()
		restored(lose.What)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d reads answered, %d refused (ErrNotFound, ErrLoading or Redis down), %d absent", answered.Load(), refused.Load(), absent.Load())
	if refused.Load() == 0 {
		t.Error("no read was refused: the losses were not seen")
	}
}
