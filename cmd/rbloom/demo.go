package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// demo plays the use rbloom is made for: a filter of the keys of a table,
// from which rows are then deleted. It fills a counting filter and, for
// comparison, a classic one, removes half of the items from the counting
// filter, and measures what a user relies on: no false negatives, deleted
// items forgotten, and the false-positive rate against the target.
func demo(ctx context.Context, rdb redis.UniversalClient, where string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n, p := new(int), new(float64)
	fs.Var(newWhole(n, 100_000, 0), "n", "items to add")
	fs.Var(newRate(p, 0.01), "p", "target false-positive rate")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if *n < 2 {
		return fmt.Errorf("demo: -n %d: want at least 2 items", *n)
	}
	opts := rbloom.Options{Capacity: uint64(*n), ErrorRate: *p}
	counting, err := rbloom.NewCounting(rdb, "rbloom-demo-counting", opts)
	if err != nil {
		return err
	}
	classic, err := rbloom.NewClassic(rdb, "rbloom-demo-classic", opts)
	if err != nil {
		return err
	}
	for _, f := range []rbloom.Filter{counting, classic} {
		if err := f.Drop(ctx); err != nil {
			return err
		}
		defer f.Drop(ctx)
		if err := f.Create(ctx); err != nil { // the rows start empty
			return err
		}
	}
	fmt.Fprintf(out, "rbloom demo on %s: %d items, target false-positive rate %g\n", where, *n, *p)

	rows := items("row:", *n)
	kept, deleted := rows[:*n/2], rows[*n/2:]
	strangers := items("stranger:", *n)

	start := time.Now()
	if _, err := counting.AddMany(ctx, rows); err != nil {
		return err
	}
	if _, err := classic.AddMany(ctx, rows); err != nil {
		return err
	}
	fmt.Fprintf(out, "added %d items to a counting and a classic filter in %v\n", *n, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if _, err := counting.RemoveMany(ctx, deleted); err != nil {
		return err
	}
	fmt.Fprintf(out, "removed %d of them from the counting filter in %v\n\n", len(deleted), time.Since(start).Round(time.Millisecond))

	for _, c := range []struct {
		name string
		f    rbloom.Filter
	}{{"counting", counting}, {"classic", classic}} {
		misses, err := countTrue(ctx, c.f, kept)
		if err != nil {
			return err
		}
		ghosts, err := countTrue(ctx, c.f, deleted)
		if err != nil {
			return err
		}
		fps, err := countTrue(ctx, c.f, strangers)
		if err != nil {
			return err
		}
		info, err := c.f.Info(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s filter (m=%d, k=%d, %d bytes in Redis):\n", c.name, info.Slots, info.Hashes, info.Bytes)
		fmt.Fprintf(out, "  false negatives:    %d of %d kept items (must be 0)\n", len(kept)-misses, len(kept))
		fmt.Fprintf(out, "  deleted still seen: %d of %d (%.2f%%)\n", ghosts, len(deleted), pct(ghosts, len(deleted)))
		fmt.Fprintf(out, "  false positives:    %d of %d never added (%.3f%%, target %.3f%% at capacity)\n",
			fps, len(strangers), pct(fps, len(strangers)), 100**p)
		if misses != len(kept) {
			return fmt.Errorf("%s filter: %d false negatives", c.name, len(kept)-misses)
		}
	}
	return nil
}

func items(prefix string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(prefix, i)
	}
	return s
}

// countTrue returns how many of items test as maybe present.
func countTrue(ctx context.Context, f rbloom.Filter, items []string) (int, error) {
	res, err := f.TestMany(ctx, items)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, ok := range res {
		if ok {
			n++
		}
	}
	return n, nil
}

func pct(a, b int) float64 { return 100 * float64(a) / float64(b) }
