package main

import (
	"context"
	"strconv"
	"strings"
	"unicode"

	"github.com/spf13/pflag"
)

// The item commands print, for each item in order, one line:
// ANSWER<tab>ITEM. The answer comes first so that `cut -f1` reads it
// whatever the item holds.

func setupAdd(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	s := addSizingFlags(fs)
	quiet := addQuietFlag(fs)
	return func(ctx context.Context, args []string) error {
		f, err := c.openForWrite(ctx, args[0], s)
		if err != nil {
			return err
		}
		return c.eachBatch(args[1:], func(items []string) error {
			res, err := f.AddMany(ctx, items)
			if err != nil {
				return err
			}
			c.answer(*quiet, items, res, "maybe", "new")
			return nil
		})
	}
}

func setupTest(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	quiet := addQuietFlag(fs)
	return func(ctx context.Context, args []string) error {
		f, err := c.open(ctx, args[0])
		if err != nil {
			return err
		}
		absent := false
		err = c.eachBatch(args[1:], func(items []string) error {
			res, err := f.TestMany(ctx, items)
			if err != nil {
				return err
			}
			for _, ok := range res {
				absent = absent || !ok
			}
			c.answer(*quiet, items, res, "maybe", "absent")
			return nil
		})
		if err == nil && absent {
			err = errAbsent
		}
		return err
	}
}

func setupRemove(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	quiet := addQuietFlag(fs)
	return func(ctx context.Context, args []string) error {
		f, err := c.openCounting(ctx, args[0], "remove items")
		if err != nil {
			return err
		}
		return c.eachBatch(args[1:], func(items []string) error {
			res, err := f.RemoveMany(ctx, items)
			if err != nil {
				return err
			}
			c.answer(*quiet, items, res, "removed", "absent")
			return nil
		})
	}
}

func setupCount(c *cli, fs *pflag.FlagSet) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		f, err := c.openCounting(ctx, args[0], "count items")
		if err != nil {
			return err
		}
		return c.eachBatch(args[1:], func(items []string) error {
			// The library has no CountMany: one round trip per item.
			for _, item := range items {
				n, err := f.Count(ctx, item)
				if err != nil {
					return err
				}
				c.printItem(strconv.Itoa(n), item)
			}
			return nil
		})
	}
}

func addQuietFlag(fs *pflag.FlagSet) *bool {
	return fs.BoolP("quiet", "q", false, "print nothing per item (the exit status still tells)")
}

// eachBatch calls fn with the items given as arguments or, when there are
// none, with batches of the lines of stdin, flushing the output after each
// batch so that answers to items typed at a terminal come at once.
func (c *cli) eachBatch(args []string, fn func(items []string) error) error {
	if len(args) > 0 {
		return fn(args)
	}
	return readBatches(c.stdin, func(items []string, _ int64) error {
		if err := fn(items); err != nil {
			return err
		}
		return c.out.Flush()
	})
}

// answer prints one line per item: yes or no after res.
func (c *cli) answer(quiet bool, items []string, res []bool, yes, no string) {
	if quiet {
		return
	}
	for i, item := range items {
		word := no
		if res[i] {
			word = yes
		}
		c.printItem(word, item)
	}
}

func (c *cli) printItem(answer, item string) {
	c.out.WriteString(answer)
	c.out.WriteByte('\t')
	c.out.WriteString(printable(item))
	c.out.WriteByte('\n')
}

// printable returns item as it is, or quoted as in Go when it holds a
// control character, so that each item takes exactly one line of output.
func printable(item string) string {
	if strings.IndexFunc(item, unicode.IsControl) >= 0 {
		return strconv.Quote(item)
	}
	return item
}
