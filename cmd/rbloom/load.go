package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
)

// load and unload stream a file of items, one a line, through AddMany or
// RemoveMany in batches (see readBatches), and print one summary line.

func setupLoad(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	s := addSizingFlags(fs)
	noProgress := addNoProgressFlag(fs)
	return func(ctx context.Context, args []string) error {
		f, err := c.openForWrite(ctx, args[0], s)
		if err != nil {
			return err
		}
		n, maybe, elapsed, err := c.bulk(ctx, args, "load "+args[0], *noProgress, f.AddMany)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "loaded %d items into %s in %v (%s); %d may have been present already\n",
			n, args[0], elapsed.Round(time.Millisecond), rate(n, elapsed), maybe)
		in, err := f.Info(ctx)
		if err != nil {
			return err
		}
		warnOverfull(c, in)
		return nil
	}
}

func setupUnload(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	noProgress := addNoProgressFlag(fs)
	return func(ctx context.Context, args []string) error {
		f, err := c.openCounting(ctx, args[0], "remove items")
		if err != nil {
			return err
		}
		n, removed, elapsed, err := c.bulk(ctx, args, "unload "+args[0], *noProgress, f.RemoveMany)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "unloaded %d items from %s in %v (%s); %d removed, %d definitely absent\n",
			n, args[0], elapsed.Round(time.Millisecond), rate(n, elapsed), removed, n-removed)
		return nil
	}
}

func addNoProgressFlag(fs *pflag.FlagSet) *bool {
	return fs.Bool("no-progress", false, "draw no progress bar, even on a terminal")
}

// bulk applies op to every line of the file args[1] (stdin when absent or
// "-") and returns how many items it applied to, for how many op answered
// true, and how long it took. After an error, the items counted are those
// done before the batch that failed.
func (c *cli) bulk(ctx context.Context, args []string, label string, noProgress bool,
	op func(context.Context, []string) ([]bool, error)) (n, yes int64, elapsed time.Duration, err error) {
	in, size, closeIn, err := c.input(args[1:])
	if err != nil {
		return 0, 0, 0, err
	}
	defer closeIn()
	var bar *progress
	if !noProgress && c.isTerminal(c.stderr) {
		bar = newProgress(c.stderr, label, size)
	}
	start := time.Now()
	err = readBatches(in, func(items []string, read int64) error {
		res, err := op(ctx, items)
		if err != nil {
			return err
		}
		n += int64(len(items))
		for _, ok := range res {
			if ok {
				yes++
			}
		}
		bar.update(n, read)
		return nil
	})
	bar.finish()
	if err != nil {
		return n, yes, 0, fmt.Errorf("stopped after %d items: %w", n, err)
	}
	return n, yes, time.Since(start), nil
}

// input opens the file named in args, or takes stdin, and returns its size
// when it is a regular file (the progress bar then shows the time left),
// else 0, and the function that closes it.
func (c *cli) input(args []string) (io.Reader, int64, func(), error) {
	in, closeIn := c.stdin, func() {}
	if len(args) > 0 && args[0] != "-" {
		f, err := os.Open(args[0])
		if err != nil {
			return nil, 0, nil, err
		}
		in, closeIn = f, func() { f.Close() }
	}
	var size int64
	if f, ok := in.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			size = st.Size()
		}
	}
	return in, size, closeIn, nil
}
