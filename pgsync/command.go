package pgsync

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Command runs the sync from command-line arguments (without the program
// name), as `rbloom sync` and `rbloom-sync` do: it follows the table until
// ctx is done, and then returns nil. Connection failures (a PostgreSQL or
// Redis restart) are retried with backoff; errors that need the operator
// (see Permanent) are returned, and so is ErrSlotActive once -slot-wait
// has passed, and every error with -once. With
// -stats it prints the sync's progress to stdout at that interval.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sync -db URL -table T -key COLUMN -filter NAME -slot SLOT -publication PUB [flags]\n\n"+
			"Keeps the counting filter NAME equal to the keys of T, from PostgreSQL logical replication.\n"+
			"Create the publication first: CREATE PUBLICATION PUB FOR TABLE T;\n\n")
		fs.PrintDefaults()
	}
	var (
		cfg       Config
		redisAddr string
		statsEach time.Duration
		once      bool
		capacity  float64
	)
	fs.StringVar(&cfg.DatabaseURL, "db", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	fs.StringVar(&cfg.Table, "table", "", "the table followed (required)")
	fs.StringVar(&cfg.KeyColumn, "key", "", "the key column (required)")
	fs.StringVar(&cfg.Filter, "filter", "", "the counting filter's name (required)")
	fs.StringVar(&cfg.Slot, "slot", "", "the logical replication slot, created at the first run (required)")
	fs.StringVar(&cfg.Publication, "publication", "", "the publication of the table (required)")
	fs.StringVar(&redisAddr, "redis", os.Getenv("REDIS_URL"), "Redis address host:port or redis:// URL (default $REDIS_URL)")
	fs.Float64Var(&capacity, "capacity", 1e6, "items the filter is sized for, when the sync creates it")
	fs.Float64Var(&cfg.ErrorRate, "error-rate", 0.01, "false-positive rate at capacity, when the sync creates it")
	fs.StringVar(&cfg.KeyPrefix, "key-prefix", "", "the filter's Redis key prefix (default rbloom:)")
	fs.BoolVar(&cfg.Reload, "reload", false, "drop the slot and the sync's state, and load the filter again from the table, in place (readers go on with the old filter until the switch)")
	fs.DurationVar(&cfg.SlotWait, "slot-wait", 30*time.Second, "how long to wait for a slot, or the filter's lease, held by another process (one that crashed releases them)")
	fs.DurationVar(&statsEach, "stats", 0, "print progress at this interval (0: never)")
	fs.BoolVar(&once, "once", false, "return the first error instead of retrying")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("pgsync: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", ErrInvalid, fs.Args())
	}
	for _, req := range []struct{ flag, value string }{{"-db (or $DATABASE_URL)", cfg.DatabaseURL}, {"-table", cfg.Table},
		{"-key", cfg.KeyColumn}, {"-filter", cfg.Filter}, {"-slot", cfg.Slot}, {"-publication", cfg.Publication}} {
		if req.value == "" {
			return fmt.Errorf("%w: %s is required (see -help)", ErrInvalid, req.flag)
		}
	}
	if capacity < 1 || capacity > 1e15 {
		return fmt.Errorf("%w: -capacity %g: want 1 to 1e15 items", ErrInvalid, capacity)
	}
	cfg.Capacity = uint64(capacity)
	if redisAddr == "" {
		return fmt.Errorf("%w: -redis (or $REDIS_URL) is required", ErrInvalid)
	}
	var ro *redis.Options
	if strings.Contains(redisAddr, "://") {
		var err error
		if ro, err = redis.ParseURL(redisAddr); err != nil {
			return fmt.Errorf("%w: -redis: %v", ErrInvalid, err)
		}
	} else {
		ro = &redis.Options{Addr: redisAddr}
	}
	rdb := redis.NewClient(ro)
	defer rdb.Close()
	cfg.Redis = rdb
	s, err := New(cfg)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	var printers sync.WaitGroup
	defer printers.Wait() // nothing is written to stdout or stderr after Command returns
	defer close(done)
	printers.Go(func() { tell(s, stderr, done) })
	if statsEach > 0 {
		printers.Go(func() {
			tick := time.NewTicker(statsEach)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					st := s.Stats()
					fmt.Fprintf(stdout, "phase=%s loaded=%d applied=%d per_second=%.0f lag=%v lag_bytes=%d applied_lsn=%s server_lsn=%s retained_wal_bytes=%d remove_misses=%d replayed=%d\n",
						st.Phase, st.Loaded, st.Applied, st.PerSecond, st.Lag.Round(time.Millisecond), st.LagBytes,
						st.AppliedLSN, st.ServerLSN, st.RetainedWALBytes, st.RemoveMisses, st.Replayed)
				}
			}
		})
	}
	backoff := 100 * time.Millisecond
	for {
		began := time.Now()
		err := s.Run(ctx)
		if time.Since(began) > time.Minute {
			backoff = 100 * time.Millisecond // it ran well for a while
		}
		if ctx.Err() != nil {
			return nil
		}
		if once || Permanent(err) || errors.Is(err, ErrSlotActive) || errors.Is(err, ErrBusy) { // waited for: -slot-wait
			return err
		}
		fmt.Fprintf(stderr, "rbloom-sync: %v (retrying in %v)\n", err, backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// tell prints to stderr, once each, what the sync waits for and what it
// warns of, until done is closed.
func tell(s *Sync, stderr io.Writer, done <-chan struct{}) {
	var waiting, warning string
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		st := s.Stats()
		if st.Waiting != "" && st.Waiting != waiting {
			fmt.Fprintf(stderr, "rbloom-sync: %s\n", st.Waiting)
		}
		if st.Warning != "" && st.Warning != warning {
			fmt.Fprintf(stderr, "rbloom-sync: warning: %s\n", st.Warning)
		}
		waiting, warning = st.Waiting, st.Warning
	}
}
