package rbloom

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestFaultyNetwork runs writers through a proxy that drops requests and
// replies at random, with go-redis's default retries (which re-send a
// script whose reply was lost). Each writer keeps what it knows: adds and
// removes confirmed, and those whose outcome an error left unknown. Then
// every counter must lie between the sum of what is surely held and the sum
// of what may be held: a retry applied twice would push it above. And no
// item surely held may test false.
func TestFaultyNetwork(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	proxy := rbloomtest.NewProxy(t, addr)
	direct := redis.NewClient(&redis.Options{Addr: addr})
	defer direct.Close()
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // default retries
	defer rdb.Close()
	opts := Options{Slots: 40_000, Hashes: 4, Partitions: 2}
	c := must(NewCounting(rdb, "faulty", opts)).on(t)
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Random(7, 0.03)

	type knowledge struct {
		sure, maybeAdded, maybeRemoved map[string]int
		errors, ops                    int
	}
	const writers, steps = 8, 300
	known := make([]*knowledge, writers)
	var wg sync.WaitGroup
	for w := range writers {
		k := &knowledge{sure: map[string]int{}, maybeAdded: map[string]int{}, maybeRemoved: map[string]int{}}
		known[w] = k
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for i := range steps {
				item := fmt.Sprintf("w%d-%d", w, rng.IntN(40))
				k.ops++
				switch {
				case k.sure[item]-k.maybeRemoved[item] > 0 && rng.IntN(2) == 0:
					removed, err := c.Remove(ctx, item)
					switch {
					case err != nil:
						k.maybeRemoved[item]++
						k.errors++
					case !removed:
						t.Errorf("Remove(%q) of an item surely held = false", item)
					default:
						k.sure[item]--
					}
				case i%10 == 0:
					batch := []string{item, item + "-x", item}
					if _, err := c.AddMany(ctx, batch); err != nil {
						for _, b := range batch {
							k.maybeAdded[b]++
						}
						k.errors++
					} else {
						for _, b := range batch {
							k.sure[b]++
						}
					}
				default:
					if _, err := c.Add(ctx, item); err != nil {
						k.maybeAdded[item]++
						k.errors++
					} else {
						k.sure[item]++
					}
				}
			}
		}()
	}
	wg.Wait()
	proxy.Random(0, 0)

	check := must(NewCounting(direct, "faulty", opts)).on(t)
	got := slotValues(t, direct, check.f)
	low := make([]int, len(got))
	high := make([]int, len(got))
	var held []string
	errs, ops := 0, 0
	for _, k := range known {
		errs, ops = errs+k.errors, ops+k.ops
		for item, n := range k.sure {
			for _, s := range globalSlots(check.f, item) {
				low[s] += n - k.maybeRemoved[item]
				high[s] += n
			}
			if n-k.maybeRemoved[item] > 0 {
				held = append(held, item)
			}
		}
		for item, n := range k.maybeAdded {
			for _, s := range globalSlots(check.f, item) {
				high[s] += n
			}
		}
	}
	for s := range got {
		if high[s] >= 15 {
			t.Fatalf("counter %d may reach %d: the workload saturates, make it smaller", s, high[s])
		}
		if got[s] < low[s] || got[s] > high[s] {
			t.Errorf("counter %d = %d, want between %d (surely held) and %d (maybe held)", s, got[s], low[s], high[s])
		}
	}
	for i, ok := range must(check.TestMany(ctx, held)).on(t) {
		if !ok {
			t.Errorf("false negative: %q is surely held", held[i])
		}
	}
	st := proxy.Stats()
	t.Logf("%d operations, %d errors returned; proxy dropped %d requests and %d replies over %d connections",
		ops, errs, st.DroppedRequests, st.DroppedReplies, st.Conns)
	if st.DroppedReplies == 0 {
		t.Error("the proxy dropped no reply: the test proved nothing")
	}
}

// TestFaultyNetworkOnce: batches under operation ids, through a proxy
// that drops requests and replies, each sent again with the same id until
// it succeeds, as a consumer replays what it could not confirm. Every
// batch must then be applied exactly once: the counters equal the sum of
// the batches added minus those removed, exactly, and every replay gets
// the answers of the batch's first run.
func TestFaultyNetworkOnce(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	proxy := rbloomtest.NewProxy(t, addr)
	direct := redis.NewClient(&redis.Options{Addr: addr})
	defer direct.Close()
	// No retries by go-redis: every lost reply reaches the writer, which
	// sends the batch again under its id (TestFaultyNetwork covers
	// go-redis's own retries).
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	defer rdb.Close()
	opts := Options{Slots: 40_000, Hashes: 4, Partitions: 2}
	c := must(NewCounting(rdb, "faulty-once", opts)).on(t)
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Random(11, 0.05)

	const writers, batches = 6, 40
	held := make([]map[string]int, writers) // item -> times held, per writer
	var wg sync.WaitGroup
	var mu sync.Mutex
	retries := 0
	for w := range writers {
		held[w] = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			// until applies op under id, sending it again after each error.
			until := func(op func() ([]bool, error)) []bool {
				for range 50 {
					if got, err := op(); err == nil {
						return got
					}
					mu.Lock()
					retries++
					mu.Unlock()
				}
				t.Errorf("writer %d: 50 tries failed", w)
				return nil
			}
			for b := range batches {
				batch := []string{fmt.Sprint("w", w, "-", rng.IntN(60)), fmt.Sprint("w", w, "-", rng.IntN(60)), fmt.Sprint("w", w, "-x", b)}
				id := fmt.Sprint("writer", w, "/batch", b)
				first := until(func() ([]bool, error) { return c.AddManyOnce(ctx, batch, id) })
				if again := until(func() ([]bool, error) { return c.AddManyOnce(ctx, batch, id) }); first != nil && !slices.Equal(first, again) {
					t.Errorf("%s: replayed answers %v, first %v", id, again, first)
				}
				for _, item := range batch {
					held[w][item]++
				}
				if b%4 == 3 { // remove this batch again
					removed := until(func() ([]bool, error) { return c.RemoveManyOnce(ctx, batch, "rm-"+id) })
					for i, item := range batch {
						if removed != nil && !removed[i] {
							t.Errorf("%s: %q was held and not removed", id, item)
						}
						held[w][item]--
					}
				}
			}
		}()
	}
	wg.Wait()
	proxy.Random(0, 0)

	check := must(NewCounting(direct, "faulty-once", opts)).on(t)
	got := slotValues(t, direct, check.f)
	want := make([]int, len(got))
	for _, h := range held {
		for item, n := range h {
			for _, s := range globalSlots(check.f, item) {
				want[s] += n
			}
		}
	}
	for s := range got {
		if want[s] >= 15 {
			t.Fatalf("counter %d would reach %d: the workload saturates, make it smaller", s, want[s])
		}
		if got[s] != want[s] {
			t.Errorf("counter %d = %d, want exactly %d", s, got[s], want[s])
		}
	}
	st := proxy.Stats()
	t.Logf("%d batches, %d sent again after an error; proxy dropped %d requests and %d replies", writers*batches, retries, st.DroppedRequests, st.DroppedReplies)
	if st.DroppedReplies == 0 || retries == 0 {
		t.Error("no reply dropped or no batch sent again: the test proved nothing")
	}
}
