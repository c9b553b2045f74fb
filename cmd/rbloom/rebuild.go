package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// setupRebuild is 'rebuild NAME [FILE]': refill an existing filter from the
// items of FILE (or stdin), one a line, which must be all the items it
// should hold: the keys of the table it guards, say. The filter keeps
// serving meanwhile, and writes from other processes go to both the old and
// the new counters (see rbloom's Counting.Rebuild).
func setupRebuild(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	noProgress := addNoProgressFlag(fs)
	return func(ctx context.Context, args []string) error {
		f, err := c.open(ctx, args[0])
		if err != nil {
			return err
		}
		var n int64
		var elapsed time.Duration
		err = f.Rebuild(ctx, func(add func([]string) error) error {
			var err error
			n, _, elapsed, err = c.bulk(ctx, args, "rebuild "+args[0], *noProgress, func(_ context.Context, items []string) ([]bool, error) {
				return nil, add(items)
			})
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "rebuilt %s from %d items in %v (%s)\n", args[0], n, elapsed.Round(time.Millisecond), rate(n, elapsed))
		return nil
	}
}
