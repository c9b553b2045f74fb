package rbloom

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestConcurrentWriters has 16 goroutines, each on its own connection, add
// and remove overlapping items at the same time. Each goroutine keeps its
// own multiset; their sum is the model. Afterwards every counter must equal
// the model's exact sum, and no item held may test false.
func TestConcurrentWriters(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	const (
		writers = 16
		steps   = 400
		window  = 200 // writer w uses items w*50 .. w*50+199: each is shared by 4
	)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	probe := created(t, newCounting(t, admin, "crowd", Options{Slots: 50_000, Hashes: 5}))

	held := make([]map[string]int, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		held[w] = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
			defer rdb.Close()
			c, err := NewCounting(rdb, "crowd", Options{Slots: 50_000, Hashes: 5})
			if err != nil {
				errs <- err
				return
			}
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			mine := held[w]
			for range steps {
				item := fmt.Sprint("item-", w*50+rng.IntN(window))
				switch {
				case mine[item] > 0 && rng.IntN(8) != 0:
					if ok, err := c.Remove(ctx, item); err != nil || !ok {
						errs <- fmt.Errorf("writer %d: Remove(%q) = %v, %v", w, item, ok, err)
						return
					}
					mine[item]--
				case rng.IntN(8) == 0:
					batch := []string{item, item}
					if _, err := c.AddMany(ctx, batch); err != nil {
						errs <- err
						return
					}
					for _, b := range batch {
						mine[b]++
					}
				default:
					if _, err := c.Add(ctx, item); err != nil {
						errs <- err
						return
					}
					mine[item]++
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	total, largest := checkHeld(t, admin, probe.f, held...)
	t.Logf("%d writers x %d steps; %d distinct items held at the end, largest counter %d",
		writers, steps, len(total), largest)
}

// TestFalsePositiveRate fills filters to capacity and measures the rate at
// which 200,000 items never added test true: within 20% of the target.
func TestFalsePositiveRate(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 100,000 items")
	}
	rdb := realRedis(t)
	const n, p = 100_000, 0.01
	added := make([]string, n)
	for i := range added {
		added[i] = fmt.Sprint("member-", i)
	}
	never := make([]string, 2*n)
	for i := range never {
		never[i] = fmt.Sprint("stranger-", i)
	}
	counting := created(t, must(NewCounting(rdb, "fpr-counting", Options{Capacity: n, ErrorRate: p})).on(t))
	classic := created(t, must(NewClassic(rdb, "fpr-classic", Options{Capacity: n, ErrorRate: p})).on(t))
	partitioned := created(t, must(NewCounting(rdb, "fpr-partitioned", Options{Capacity: n, ErrorRate: p, Partitions: 7})).on(t))
	for _, f := range []Filter{counting, classic, partitioned} {
		if _, err := f.AddMany(ctx, added); err != nil {
			t.Fatal(err)
		}
		for i, ok := range must(f.TestMany(ctx, added)).on(t) {
			if !ok {
				t.Fatalf("%T: false negative for %q", f, added[i])
			}
		}
		positives := 0
		for _, ok := range must(f.TestMany(ctx, never)).on(t) {
			if ok {
				positives++
			}
		}
		rate := float64(positives) / float64(len(never))
		t.Logf("%T: %d of %d never-added items test true: rate %.5f, target %v", f, positives, len(never), rate, p)
		if rate < 0.8*p || rate > 1.2*p {
			t.Errorf("%T: false-positive rate %.5f, want within 20%% of %v", f, rate, p)
		}
	}
	// A cuckoo filter at capacity is at its planned load, where its rate
	// is CuckooFalsePositiveRate's, at most the target.
	for _, tc := range []struct {
		p     float64
		parts int
	}{{0.03, 1}, {0.01, 1}, {0.01, 3}, {0.001, 1}} {
		c := created(t, must(NewCuckoo(rdb, fmt.Sprint("fpr-cuckoo-", tc.p, "-", tc.parts), Options{Capacity: n, ErrorRate: tc.p, Partitions: tc.parts})).on(t))
		must(c.AddMany(ctx, added)).on(t)
		in := must(c.Info(ctx)).on(t)
		want := CuckooFalsePositiveRate(in.Load, c.f.h.k)
		positives := 0
		for _, ok := range must(c.TestMany(ctx, never)).on(t) {
			if ok {
				positives++
			}
		}
		rate := float64(positives) / float64(len(never))
		t.Logf("cuckoo p=%v P=%d, f=%d, load %.3f: rate %.5f, expected %.5f", tc.p, tc.parts, c.f.h.k, in.Load, rate, want)
		if rate < 0.8*want || rate > 1.2*want || rate > tc.p {
			t.Errorf("cuckoo p=%v P=%d: false-positive rate %.5f, want within 20%% of %.5f and at most %v", tc.p, tc.parts, rate, want, tc.p)
		}
	}
}
