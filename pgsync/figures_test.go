//go:build unix

package pgsync

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rbloom/rbloom"
)

// TestFigures measures the figures of README.md on real servers; it runs
// only with PGSYNC_FIGURES=1 (about a minute):
//
//	PGSYNC_FIGURES=1 go test -run TestFigures -v -count=1 .
func TestFigures(t *testing.T) {
	if os.Getenv("PGSYNC_FIGURES") == "" {
		t.Skip("set PGSYNC_FIGURES=1 to measure README.md's figures")
	}
	e := newEnv(t)
	cfg := e.config()
	cfg.Capacity = 2_000_000
	// The initial load: a table of 1,000,000 rows, from the start of the
	// first run to the filter holding every row and the stream caught up.
	e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(900000001, 901000000) g`)
	s, _ := New(cfg)
	start := time.Now()
	stop := runSync(t, s)
	e.caughtUp(t, "items")
	loaded := time.Since(start)
	stop()
	e.checkEqual(t, "items")
	t.Logf("initial load: 1000000 rows in %v: %.0f rows/s", loaded.Round(time.Millisecond), 1e6/loaded.Seconds())

	// Saturation: a backlog of changes in the WAL, then the time to apply it.
	conn := e.pg.conn(t)
	ctx := t.Context()
	exec := func(sql string, args ...any) {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, shape := range []struct {
		name string
		fill func() int // returns the changes it made
	}{
		{"transactions of 1,000 changes", func() int {
			for i := range 200 {
				b := i * 1000
				if i%2 == 0 {
					exec(`INSERT INTO items SELECT g, 'x' FROM generate_series($1::int8, $1::int8 + 999) g`, b+1)
				} else {
					exec(`UPDATE items SET id = id + 10000000 WHERE id BETWEEN $1::int8 - 999 AND $1::int8`, b-1000+1000)
				}
			}
			return 100*1000 + 100*2000
		}},
		{"transactions of 1 change", func() int {
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					c := e.pg.conn(t)
					defer c.Close(context.Background())
					for i := range 15000 {
						if _, err := c.Exec(ctx, `INSERT INTO items VALUES ($1, 'y')`, 50_000_000+w*100_000+i); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			return 60000
		}},
	} {
		n := shape.fill()
		s, _ := New(cfg)
		var first time.Time // the first group applied: before it, the start and the server's decoding up to the backlog
		s.applied = func([]time.Time) {
			if first.IsZero() {
				first = time.Now()
			}
		}
		start, cpu := time.Now(), processCPU(t)
		stop := runSync(t, s)
		e.caughtUp(t, "items")
		el, cpu := time.Since(start), processCPU(t)-cpu
		stop()
		e.checkEqual(t, "items")
		t.Logf("saturation, %s: %d changes in %v: %.0f changes/s; the first group applied after %v; this process's CPU time (the sync's) %v, %.1f µs a change (Stats: %d applied in %d transactions)",
			shape.name, n, el.Round(time.Millisecond), float64(n)/el.Seconds(), first.Sub(start).Round(time.Millisecond),
			cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(n), s.Stats().Applied, s.Stats().Transactions)
	}

	// Lag at a steady 2,000 changes/s: inserts and deletes in transactions
	// of one change; every 10th insert is timed from its commit to the
	// moment the filter holds it.
	s = must(New(cfg))
	var applyLags []time.Duration // per transaction, commit (server clock) to applied
	s.applied = func(commits []time.Time) {
		now := time.Now()
		for _, c := range commits {
			applyLags = append(applyLags, now.Sub(c))
		}
	}
	stop = runSync(t, s)
	defer stop()
	e.caughtUp(t, "items")
	f, err := rbloom.OpenCounting(ctx, e.rdb, "items", rbloom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const rate, seconds = 2000, 20
	type sample struct {
		key string
		at  time.Time
	}
	var mu sync.Mutex
	var waiting []sample
	var lags []time.Duration
	pollCtx, stopPoll := context.WithCancel(ctx)
	var poll sync.WaitGroup
	// The first second is apart: after an idle stream PostgreSQL's
	// walsender was seen sending the first few hundred milliseconds of
	// changes in one burst.
	t0 := time.Now()
	var warmup time.Duration
	var gaps []time.Duration // between the poller's passes
	poll.Go(func() {
		last := time.Now()
		for pollCtx.Err() == nil {
			gaps = append(gaps, time.Since(last))
			last = time.Now()
			mu.Lock()
			batch := slices.Clone(waiting)
			mu.Unlock()
			if len(batch) > 0 {
				keys := make([]string, len(batch))
				for i, s := range batch {
					keys[i] = s.key
				}
				present, err := f.TestMany(pollCtx, keys)
				now := time.Now()
				if err == nil {
					mu.Lock()
					done := map[string]bool{}
					for i, p := range present {
						if p {
							if batch[i].at.Sub(t0) < time.Second {
								warmup = max(warmup, now.Sub(batch[i].at))
							} else {
								lags = append(lags, now.Sub(batch[i].at))
							}
							done[batch[i].key] = true
						}
					}
					waiting = slices.DeleteFunc(waiting, func(s sample) bool { return done[s.key] })
					mu.Unlock()
				}
			}
			time.Sleep(500 * time.Microsecond)
		}
	})
	// Two connections, 1,000 changes/s each, paced.
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			c, err := pgx.Connect(ctx, e.pg.URL)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close(context.Background())
			start := time.Now()
			for i := range rate / 2 * seconds {
				if d := time.Until(start.Add(time.Duration(i) * time.Second / (rate / 2))); d > 0 {
					time.Sleep(d)
				}
				id := int64(100_000_000 + w*10_000_000 + i/2)
				var err error
				if i%2 == 0 {
					_, err = c.Exec(ctx, `INSERT INTO items VALUES ($1, 'z')`, id)
					if err == nil && i%20 == 0 {
						mu.Lock()
						waiting = append(waiting, sample{fmt.Sprint(id), time.Now()})
						mu.Unlock()
					}
				} else {
					_, err = c.Exec(ctx, `DELETE FROM items WHERE id = $1`, id-1000) // a row inserted half a second ago
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
			t.Logf("writer %d: %d changes in %v", w, rate/2*seconds, time.Since(start).Round(time.Millisecond))
		})
	}
	wg.Wait()
	e.caughtUp(t, "items")
	time.Sleep(50 * time.Millisecond)
	stopPoll()
	poll.Wait()
	e.checkEqual(t, "items")
	stop()
	slices.Sort(lags)
	slices.Sort(applyLags)
	if len(lags) == 0 || len(applyLags) == 0 {
		t.Fatal("no lag samples")
	}
	slices.Sort(gaps)
	t.Logf("the reader's passes: every %v at p50, %v at p99, %v at most (%d passes)",
		gaps[len(gaps)/2].Round(10*time.Microsecond), gaps[len(gaps)*99/100].Round(10*time.Microsecond), gaps[len(gaps)-1].Round(10*time.Microsecond), len(gaps))
	t.Logf("the sync's own lag, per transaction (commit timestamp to applied): p50 %v, p99 %v (%d transactions)",
		applyLags[len(applyLags)/2].Round(100*time.Microsecond), applyLags[len(applyLags)*99/100].Round(100*time.Microsecond), len(applyLags))
	q := func(p float64) time.Duration { return lags[int(p*float64(len(lags)-1))].Round(100 * time.Microsecond) }
	st := s.Stats()
	t.Logf("lag at %d changes/s, from commit to filter, after the first second: p50 %v, p99 %v, max %v (%d samples); in the first second at most %v; Stats: %.0f changes/s, last apply lag %v, retained WAL %d bytes",
		rate, q(0.5), q(0.99), lags[len(lags)-1].Round(100*time.Microsecond), len(lags), warmup.Round(time.Millisecond), st.PerSecond, st.LastApplyLag.Round(time.Millisecond), st.RetainedWALBytes)
}

// processCPU is the CPU time this process has used: during a saturation
// run, the sync's (and the test's wait for it), which the load of other
// processes on the machine changes less than the run's duration.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
