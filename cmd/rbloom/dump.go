package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/rbloom/rbloom"
)

// setupDump is 'dump NAME FILE': write the filter or window to FILE ("-":
// stdout) in rbloom's dump format (rbloom's Counting.Dump, Window.Dump),
// which 'restore' reads into any server. FILE is written under a
// temporary name in its directory and renamed at the end, so that a
// failed dump leaves no FILE, and an older FILE stays whole until the
// new one is.
func setupDump(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		name, file := args[0], args[1]
		var dump func(io.Writer) (int64, error)
		f, err := rbloom.Open(ctx, c.rdb, name, rbloom.Options{})
		switch {
		case errors.Is(err, rbloom.ErrNotFound) && c.isWindow(ctx, name):
			dump = func(w io.Writer) (int64, error) {
				return rbloom.DumpWindow(ctx, c.rdb, name, rbloom.WindowOptions{}, w)
			}
		case err != nil:
			return err
		default:
			dump = func(w io.Writer) (int64, error) { return f.Dump(ctx, w) }
		}
		start := time.Now()
		var n int64
		if file == "-" {
			n, err = dump(c.out)
		} else {
			n, err = dumpToFile(dump, file)
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

// dumpToFile dumps to a temporary file beside file, then renames it.
func dumpToFile(dump func(io.Writer) (int64, error), file string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // after a failure; renamed away otherwise
	n, err := dump(tmp)
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

// setupRestore is 'restore NAME FILE': make the filter or window NAME
// from a dump ("-": stdin), refusing an existing one unless --replace.
func setupRestore(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	replace := fs.Bool("replace", false, "replace a filter or window of that name: it is deleted once the whole dump has been read and checked")
	var o rbloom.Options
	fs.DurationVar(&o.TTL, "ttl", 0, "expire the restored filter `D` after it is restored (e.g. 24h; default never; not for a window, whose keys expire as it sets them)")
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
		buffered := bufio.NewReader(counted)
		if isWindowDump(buffered) {
			if o.TTL != 0 {
				return fmt.Errorf("--ttl: %s holds a window, whose keys expire as the window sets them", file)
			}
			restore := rbloom.RestoreWindow
			if *replace {
				restore = rbloom.RestoreWindowReplace
			}
			start := time.Now()
			_, err := restore(ctx, c.rdb, name, rbloom.WindowOptions{}, buffered)
			if err != nil { // ErrExists names --replace
				return err
			}
			fmt.Fprintf(c.out, "restored %s (window) from %s: %s\n", printable(name), file, transferRate(counted.n, time.Since(start)))
			return nil
		}
		restore := rbloom.Restore
		if *replace {
			restore = rbloom.RestoreReplace
		}
		start := time.Now()
		f, err := restore(ctx, c.rdb, name, o, buffered)
		if err != nil { // ErrExists names --replace
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

// isWindowDump reports whether the dump r starts with is a window's: its
// version (bytes 8-11, docs/format.md's Dumps) is 2. Anything else goes
// to Restore, which says what is wrong with it.
func isWindowDump(r *bufio.Reader) bool {
	head, err := r.Peek(12)
	return err == nil && string(head[:8]) == "RBLMDUMP" && binary.BigEndian.Uint32(head[8:]) == 2
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
