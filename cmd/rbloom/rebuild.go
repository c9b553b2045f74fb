package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/rbloom/rbloom"
)

// setupRebuild is 'rebuild NAME [FILE]': refill an existing filter from the
// items of FILE (or stdin), one a line, which must be all the items it
// should hold: the keys of the table it guards, say. The filter keeps
// serving meanwhile, and adds from other processes go to both the old and
// the new counters (see rbloom's Counting.Rebuild). With sizing flags
// (--capacity, --error-rate, --partitions, or -m and -k) it resizes the
// filter (Counting.Resize), keeping its error rate unless --error-rate is
// given: the cure for an overfull one. On a filter that does not exist,
// the sizing flags say what to load: readers get ErrLoading until done.
func setupRebuild(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	noProgress := addNoProgressFlag(fs)
	s := addSizingFlags(fs)
	return func(ctx context.Context, args []string) error {
		for _, name := range []string{"classic", "cuckoo", "ttl"} {
			if fs.Changed(name) {
				return fmt.Errorf("--%s: a rebuild keeps the filter's mode and TTL", name)
			}
		}
		resize, err := s.given()
		if err != nil {
			return err
		}
		f, err := rbloom.Open(ctx, c.rdb, args[0], rbloom.Options{})
		loaded := false
		switch {
		case errors.Is(err, rbloom.ErrNotFound) && resize:
			// A load: the flags say what to make.
			if f, err = s.filter(c, args[0]); err != nil {
				return err
			}
			resize, loaded = false, true
		case errors.Is(err, rbloom.ErrNotFound):
			return fmt.Errorf("no filter named %q: give --capacity N (and --error-rate P) to load it from the file", args[0])
		case err != nil:
			return err
		}
		sized := s.resized()
		if resize && !fs.Changed("error-rate") && sized.ErrorRate != 0 {
			// --capacity alone keeps the filter's error rate.
			in, err := f.Info(ctx)
			if err != nil {
				return err
			}
			sized.ErrorRate = in.ErrorRate
		}
		var n int64
		var elapsed time.Duration
		fill := func(add func([]string) error) error {
			var err error
			n, _, elapsed, err = c.bulk(ctx, args, "rebuild "+args[0], *noProgress, func(_ context.Context, items []string) ([]bool, error) {
				return nil, add(items)
			})
			return err
		}
		switch f := f.(type) {
		case *rbloom.Counting:
			if resize {
				_, err = f.Resize(ctx, sized, fill)
			} else {
				err = f.Rebuild(ctx, fill)
			}
		case *rbloom.Classic:
			if resize {
				_, err = f.Resize(ctx, sized, fill)
			} else {
				err = f.Rebuild(ctx, fill)
			}
		case *rbloom.Cuckoo:
			if resize {
				_, err = f.Resize(ctx, sized, fill)
			} else {
				err = f.Rebuild(ctx, fill)
			}
		default:
			err = fmt.Errorf("%s is a %T, which this command cannot rebuild", args[0], f)
		}
		if err != nil {
			return err
		}
		what := "rebuilt"
		switch {
		case resize:
			what = "resized"
		case loaded:
			what = "loaded"
		}
		fmt.Fprintf(c.out, "%s %s from %d items in %v (%s)\n", what, args[0], n, elapsed.Round(time.Millisecond), rate(n, elapsed))
		return nil
	}
}
