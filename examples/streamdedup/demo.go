package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log"
	mathrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// crash is what a demo consumer panics with to die at a step: it abandons
// the batch there, as a killed process would, and a fresh consumer takes
// its place.
type crash struct{ step string }

// demoCommand runs a producer and a few consumers in one process, some of
// which crash mid-batch, then audits the counts.
func demoCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	addr := fs.String("redis", "", "address of Redis (empty: an in-memory one)")
	var s settings
	s.register(fs, "clicks-"+strings.ToLower(rand.Text()[:6]))
	var c clicks
	c.register(fs)
	consumers := fs.Int("consumers", 3, "consumers in the group")
	size := fs.Int("batch", 100, "entries read or claimed at a time")
	minIdle := fs.Duration("min-idle", time.Second, "claim entries pending this long with another consumer")
	crashes := fs.Int("crashes", 3, "at most this many consumers die mid-batch, at a random step")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up if the stream is not drained by then")
	// By default the window ends the run at capacity, where its target
	// rate applies.
	perBucket := fs.Lookup("events-per-bucket")
	perBucket.DefValue, perBucket.Usage = "0", perBucket.Usage+" (0: -events)"
	s.eventsPerBucket = 0
	_ = fs.Parse(args)
	if s.eventsPerBucket == 0 {
		s.eventsPerBucket = uint64(c.events)
	}

	rdb, closeRedis, err := connect(ctx, *addr)
	if err != nil {
		return err
	}
	defer closeRedis()
	k := s.keys()
	if err := ensureGroup(ctx, rdb, k); err != nil {
		return err
	}
	w, err := openWindow(ctx, rdb, s)
	if err != nil {
		return err
	}

	start := time.Now()
	run, stop := context.WithCancel(ctx)
	var (
		wg     sync.WaitGroup
		total  stats
		died   atomic.Int64
		budget atomic.Int64
	)
	budget.Store(int64(*crashes))
	written := c.generate(s.name)
	// Spread the crashes over the run: about one in odds of the steps of
	// all batches dies, until the budget is spent.
	odds := max(1, len(steps)*len(written) / *size / (*crashes+1))
	for i := range *consumers {
		wg.Go(func() {
			// Each life is a new consumer with a new name: the dead one's
			// entries stay pending until someone claims them.
			for life := 0; run.Err() == nil; life++ {
				con, err := newConsumer(ctx, rdb, s, fmt.Sprintf("consumer-%d.%d", i, life), *size, *minIdle)
				if err != nil {
					panic(err) // the settings were checked by s.window above
				}
				con.crash = func(step string) {
					if budget.Load() > 0 && mathrand.IntN(odds) == 0 && budget.Add(-1) >= 0 {
						panic(crash{step})
					}
				}
				if cr := survive(func() { con.run(run) }); cr != nil {
					died.Add(1)
					log.Printf("%s died at step %s; its entries wait for another consumer to claim them", con.name, cr.step)
				}
				total.add(&con.stats)
			}
		})
	}

	log.Printf("producing %d entries (%d clicks, %.0f%% written twice) to %s", len(written), c.events, 100*c.dupRate, k.stream())
	err = produce(ctx, rdb, k, written, 0)
	if err == nil {
		err = waitDrained(ctx, rdb, k, *timeout)
	}
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	log.Printf("drained in %v by %d consumers (%d crashed): %s", time.Since(start).Round(time.Millisecond), *consumers, died.Load(), &total)

	a, err := runAudit(ctx, rdb, k, w, written)
	if err != nil {
		return err
	}
	a.print(os.Stdout)
	if *addr != "" {
		// Journals and markers expire by themselves; so do these, after a while.
		for _, key := range []string{k.stream(), k.counts(), k.counted()} {
			rdb.Expire(ctx, key, s.ttl)
		}
		fmt.Printf("keys left in Redis under %s* for %v\n", k.prefix, s.ttl)
	}
	if p := a.problems(); len(p) > 0 {
		return fmt.Errorf("not exactly once: %s", strings.Join(p, "; "))
	}
	return nil
}

// survive runs fn and returns the crash it died of, or nil if it returned.
func survive(fn func()) (c *crash) {
	defer func() {
		if r := recover(); r != nil {
			cr, ok := r.(crash)
			if !ok {
				panic(r)
			}
			c = &cr
		}
	}()
	fn()
	return nil
}
