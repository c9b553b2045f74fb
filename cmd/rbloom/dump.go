package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/rbloom/rbloom"
)

// setupDump is 'dump NAME FILE': write the filter to FILE ("-": stdout) in
// rbloom's dump format (rbloom's Counting.Dump), which 'restore' reads
// into any server. FILE is written under a temporary name in its
// directory and renamed at the end, so that a failed dump leaves no
// FILE, and an older FILE stays whole until the new one is.
func setupDump(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		name, file := args[0], args[1]
		f, err := rbloom.Open(ctx, c.rdb, name, rbloom.Options{})
		if errors.Is(err, rbloom.ErrNotFound) && c.isWindow(ctx, name) {
			return fmt.Errorf("%s is a window: dumps hold counting, classic and cuckoo filters, not windows", printable(name))
		}
		if err != nil {
			return err
		}
		start := time.Now()
		var n int64
		if file == "-" {
			n, err = f.Dump(ctx, c.out)
		} else {
			n, err = dumpToFile(ctx, f, file)
		}
		if err != nil {
			return err
		}
		if file != "-" {
			fmt.Fprintf(c.out, "dumped %s to %s: %s\n", printable(name), file, transferRate(n, time.Since(start)))
		}
		return nil
	}
}

// dumpToFile dumps d to a temporary file beside file, then renames it.
func dumpToFile(ctx context.Context, d rbloom.Filter, file string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // after a failure; renamed away otherwise
	n, err := d.Dump(ctx, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	return n, err
}

// transferRate says how many bytes moved in how long.
func transferRate(n int64, d time.Duration) string {
	mib := float64(n) / (1 << 20)
	return fmt.Sprintf("%d bytes in %v (%.1f MiB/s)", n, d.Round(time.Millisecond), mib/max(d.Seconds(), 1e-9))
}

// isWindow reports whether name is a window's (its settings key exists).
func (c *cli) isWindow(ctx context.Context, name string) bool {
	n, err := c.rdb.Exists(ctx, rbloom.DefaultKeyPrefix+"{"+name+"}:window").Result()
	return err == nil && n > 0
}

// setupRestore is 'restore NAME FILE': make the filter NAME from a dump
// ("-": stdin), refusing an existing one unless --replace.
func setupRestore(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	replace := fs.Bool("replace", false, "replace a filter of that name: it is deleted once the whole dump has been read and checked")
	var o rbloom.Options
	fs.DurationVar(&o.TTL, "ttl", 0, "expire the restored filter `D` after it is restored (e.g. 24h; default never)")
	return func(ctx context.Context, args []string) error {
		name, file := args[0], args[1]
		var in io.Reader = c.stdin
		if file != "-" {
			fh, err := os.Open(file)
			if err != nil {
				return err
			}
			defer fh.Close()
			in = fh
		}
		counted := &countingReader{r: in}
		restore := rbloom.Restore
		if *replace {
			restore = rbloom.RestoreReplace
		}
		start := time.Now()
		f, err := restore(ctx, c.rdb, name, o, counted)
		if errors.Is(err, rbloom.ErrExists) {
			return fmt.Errorf("%w (--replace replaces it)", err)
		}
		if err != nil {
			return err
		}
		mode := rbloom.ModeCounting
		switch f.(type) {
		case *rbloom.Classic:
			mode = rbloom.ModeClassic
		case *rbloom.Cuckoo:
			mode = rbloom.ModeCuckoo
		}
		fmt.Fprintf(c.out, "restored %s (%s) from %s: %s\n", printable(name), mode, file, transferRate(counted.n, time.Since(start)))
		return nil
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	return n, err
}
