package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/rbloom/rbloom"
)

// window test-or-adds items in a window of generations (rbloom.NewWindow),
// or, with --info, lists its live generations; --create makes it first.
// Every call gives the window's settings, which Redis keeps: other ones
// are refused.
func setupWindow(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	var o rbloom.WindowOptions
	fs.Var(newWhole(&o.EventsPerBucket, 0, 1), "events", "events `N` of one bucket, which each generation is sized for: 1000000, 1_000_000 or 1e6")
	fs.Var(newRate(&o.ErrorRate, rbloom.DefaultErrorRate), "error-rate", "false-positive rate `P` wanted over the whole window: 0.01, 1% or 1e-3")
	fs.DurationVar(&o.Bucket, "bucket", 0, "time `D` of one generation, such as 10m or 1h")
	fs.DurationVar(&o.Span, "span", 0, "time `D` an event is remembered, at least, such as 24h")
	fs.Var(newWhole(&o.Partitions, 0, 1), "partitions", "Redis keys `P` each generation is split over (default: enough for 64 MiB each)")
	create := fs.Bool("create", false, "make the window first if it does not exist: once, where the stream starts (a window Redis lost is refused, never made again empty, without it)")
	info := fs.Bool("info", false, "list the live generations (START, ITEMS, BYTES: its share of the rings, TTL: left in the span; tab-separated) instead of adding items")
	quiet := addQuietFlag(fs)
	return func(ctx context.Context, args []string) error {
		if o.EventsPerBucket == 0 || o.Bucket == 0 || o.Span == 0 {
			return errors.New("give --events N, --bucket D and --span D (a window stores its settings: give the same every time)")
		}
		w, err := rbloom.NewWindow(c.rdb, args[0], o)
		if err != nil {
			return err
		}
		if *create {
			if err := w.Create(ctx); err != nil {
				return err
			}
		}
		return notFoundHint(runWindow(ctx, c, w, args, *info, *quiet))
	}
}

// runWindow lists the generations of w (info), or test-or-adds the items
// of args[1:] or stdin.
func runWindow(ctx context.Context, c *cli, w *rbloom.Window, args []string, info, quiet bool) error {
	if info {
		if len(args) > 1 {
			return errors.New("--info takes no items")
		}
		in, err := w.Info(ctx)
		if err != nil {
			return err
		}
		for _, g := range in.Generations {
			fmt.Fprintf(c.out, "%s\t%d\t%d\t%s\n", g.Start.UTC().Format(time.RFC3339), g.Items, g.Bytes, g.TTL.Round(time.Second))
		}
		return nil
	}
	return c.eachBatch(args[1:], func(items []string) error {
		res, err := w.TestOrAddMany(ctx, items)
		if err != nil {
			return err
		}
		c.answer(quiet, items, res, "seen", "new")
		return nil
	})
}

// notFoundHint adds to a window's ErrNotFound the flag that makes it.
func notFoundHint(err error) error {
	if errors.Is(err, rbloom.ErrNotFound) {
		return fmt.Errorf("%w (here: --create)", err)
	}
	return err
}
