package rbloom

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

var soakFor = flag.Duration("soak", 0, "how long TestSoak runs: go test -run TestSoak -soak=5m (default 20s, 1m under CI with -race, 2s with -short)")

// TestSoak has 32 goroutines share one client (go-redis's default pool) and
// add, test and remove overlapping items on a filter of 4 partitions, one
// call or a batch at a time, for 20 seconds, a minute in CI's pass with the
// race detector (its passes on other servers check what the servers do,
// not races: 20 seconds there; -soak sets another time). Each
// goroutine keeps its own multiset of what it added and not yet removed, and
// checks as it goes that none of those items tests false; their sum is the
// model. At the end every counter equals the model, no held item tests
// false, and closing the client leaves no goroutine and no connection behind.
func TestSoak(t *testing.T) {
	d := *soakFor
	if d == 0 {
		d = 20 * time.Second
		if os.Getenv("CI") != "" && raceDetector {
			d = time.Minute
		}
		if testing.Short() {
			d = 2 * time.Second
		}
	}
	addr := rbloomtest.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	clientsBefore := serverStat(t, admin, "clients", "connected_clients")
	goroutinesBefore := runtime.NumGoroutine()

	const (
		workers = 32
		window  = 200 // worker w uses items w*100 .. w*100+199: each is shared by 2
		// maxHeld bounds how many times a worker holds an item: 4 per item
		// at most, so that a counter of the model reaches 15 only if 4 of
		// the 3,300 items share it: about 10^-4 such counters in 4 x 10^6.
		maxHeld = 2
	)
	opts := Options{Slots: 4_000_000, Hashes: 5, Partitions: 4}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	// go-redis keeps pipelines (all of rbloom's calls) in a pool of their
	// own, and spills to the main pool when that one is busy.
	poolSize, pipelinePoolSize := rdb.Options().PoolSize, rdb.Options().PipelinePoolSize
	if pipelinePoolSize == 0 {
		pipelinePoolSize = redis.DefaultPipelinePoolSize
	}
	c := created(t, newCounting(t, rdb, "soak", opts))

	var (
		wg                 sync.WaitGroup
		calls, itemOps     atomic.Int64
		falseNeg           atomic.Int64
		errMu              sync.Mutex
		errs               []error
		held               = make([]map[string]int, workers)
		deadline           = time.Now().Add(d)
		maxClientsObserved atomic.Int64
	)
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	start := time.Now()
	for w := range workers {
		held[w] = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			mine := held[w]
			pick := func() string { return fmt.Sprint("item-", w*100+rng.IntN(window)) }
			heldItems := func(n int) []string {
				var out []string
				for item, k := range mine {
					if k > 0 && len(out) < n {
						out = append(out, item)
					}
				}
				return out
			}
			for time.Now().Before(deadline) {
				item := pick()
				calls.Add(1)
				switch r := rng.IntN(100); {
				case r < 30 && mine[item] < maxHeld: // Add
					if _, err := c.Add(ctx, item); err != nil {
						fail(fmt.Errorf("worker %d: Add: %w", w, err))
						return
					}
					mine[item]++
					itemOps.Add(1)
				case r < 50 && mine[item] > 0: // Remove what it holds
					ok, err := c.Remove(ctx, item)
					if err != nil || !ok {
						fail(fmt.Errorf("worker %d: Remove(%q) held %d times = %v, %v", w, item, mine[item], ok, err))
						return
					}
					mine[item]--
					itemOps.Add(1)
				case r < 75: // Test, Count
					ok, err := c.Test(ctx, item)
					if err != nil {
						fail(fmt.Errorf("worker %d: Test: %w", w, err))
						return
					}
					if mine[item] > 0 && !ok {
						falseNeg.Add(1)
						fail(fmt.Errorf("worker %d: false negative: %q held %d times tests false", w, item, mine[item]))
					}
					if r >= 70 && mine[item] > 0 {
						if n, err := c.Count(ctx, item); err != nil || n < mine[item] {
							fail(fmt.Errorf("worker %d: Count(%q) = %d, %v; held at least %d times", w, item, n, err, mine[item]))
						}
					}
					itemOps.Add(1)
				case r < 85: // AddMany
					var batch []string
					for range 16 {
						if it := pick(); mine[it] < maxHeld {
							mine[it]++ // counted now, so that a repeat in the batch is capped too
							batch = append(batch, it)
						}
					}
					if _, err := c.AddMany(ctx, batch); err != nil {
						fail(fmt.Errorf("worker %d: AddMany: %w", w, err))
						return
					}
					itemOps.Add(int64(len(batch)))
				case r < 93: // TestMany of what it holds
					batch := heldItems(32)
					oks, err := c.TestMany(ctx, batch)
					if err != nil {
						fail(fmt.Errorf("worker %d: TestMany: %w", w, err))
						return
					}
					for i, ok := range oks {
						if !ok {
							falseNeg.Add(1)
							fail(fmt.Errorf("worker %d: false negative: %q held %d times tests false in TestMany", w, batch[i], mine[batch[i]]))
						}
					}
					itemOps.Add(int64(len(batch)))
				default: // RemoveMany of what it holds
					batch := heldItems(8)
					oks, err := c.RemoveMany(ctx, batch)
					if err != nil {
						fail(fmt.Errorf("worker %d: RemoveMany: %w", w, err))
						return
					}
					for i, ok := range oks {
						if !ok {
							fail(fmt.Errorf("worker %d: RemoveMany: %q held %d times was not removed", w, batch[i], mine[batch[i]]))
							return
						}
						mine[batch[i]]--
					}
					itemOps.Add(int64(len(batch)))
				}
				if w == 0 && calls.Load()%64 == 0 {
					if n, err := connectedClients(admin); err == nil {
						maxClientsObserved.Store(max(maxClientsObserved.Load(), n))
					}
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs[:min(len(errs), 10)] {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	t.Logf("%d goroutines for %v: %d calls (%.0f calls/s), %d item operations (%.0f/s); false negatives: %d",
		workers, took.Round(time.Millisecond), calls.Load(), float64(calls.Load())/took.Seconds(),
		itemOps.Load(), float64(itemOps.Load())/took.Seconds(), falseNeg.Load())

	// The model: every counter is the sum of what the workers hold.
	total, largest := checkHeld(t, admin, c.f, held...)
	if in := must(c.Info(ctx)).on(t); in.Items != int64(sumValues(maps.Values(total))) {
		t.Errorf("Info.Items = %d, want %d", in.Items, sumValues(maps.Values(total)))
	}
	t.Logf("%d distinct items held at the end, largest counter %d", len(total), largest)

	// Connections: all back in the pool, no more than its size; none left
	// on the server once the client is closed.
	st := rdb.PoolStats()
	for _, p := range []struct {
		name string
		size int
		st   *redis.PoolStats
	}{
		{"main", poolSize, st},
		{"pipeline", pipelinePoolSize, (*redis.PoolStats)(st.PipelineStats)},
	} {
		if p.st == nil {
			continue
		}
		t.Logf("%s pool (size %d): %d hits, %d misses, %d timeouts, %d connections (%d idle, %d stale)",
			p.name, p.size, p.st.Hits, p.st.Misses, p.st.Timeouts, p.st.TotalConns, p.st.IdleConns, p.st.StaleConns)
		if int(p.st.TotalConns) > p.size || p.st.IdleConns != p.st.TotalConns {
			t.Errorf("%s pool holds %d connections, %d idle: want at most %d, all idle once every call returned",
				p.name, p.st.TotalConns, p.st.IdleConns, p.size)
		}
	}
	t.Logf("the server saw at most %d clients (the admin included)", maxClientsObserved.Load())
	if n := maxClientsObserved.Load(); n > int64(poolSize+pipelinePoolSize)+clientsBefore {
		t.Errorf("the server saw %d clients, more than the pools' %d + %d and the admin", n, poolSize, pipelinePoolSize)
	}
	if err := rdb.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	waitUntil := time.Now().Add(5 * time.Second)
	for serverStat(t, admin, "clients", "connected_clients") != clientsBefore && time.Now().Before(waitUntil) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := serverStat(t, admin, "clients", "connected_clients"); n != clientsBefore {
		t.Errorf("%d clients connected after Close, %d before the client was made", n, clientsBefore)
	}
	for runtime.NumGoroutine() > goroutinesBefore && time.Now().Before(waitUntil) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutinesBefore {
		var stacks bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Errorf("%d goroutines after Close, %d before the client was made:\n%s", n, goroutinesBefore, stacks.String())
	}
}

// connectedClients returns connected_clients from INFO clients.
func connectedClients(rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO clients has no connected_clients")
}

func sumValues(values func(func(int) bool)) int {
	n := 0
	for v := range values {
		n += v
	}
	return n
}
