package rbloom

import (
	"errors"
	"fmt"
	"testing"
)

// TestOnceSurvivesReload: an operation id applied before the filter was
// lost (its partitions deleted, not dropped), or while a load that was
// given up ran, is not applied again by its replay once the filter is
// loaded again: the load takes the filter's kept incarnation, in which
// the id's record still answers. The table holds x in two rows; the
// delete of row 1 is an event delivered twice.
func TestOnceSurvivesReload(t *testing.T) {
	rdb := realRedis(t)
	rows := func(n int) func(add func([]string) error) error {
		return func(add func([]string) error) error {
			xs := make([]string, n)
			for i := range xs {
				xs[i] = "x"
			}
			return add(xs)
		}
	}
	check := func(t *testing.T, c *Counting) {
		t.Helper()
		if n := must(c.Count(ctx, "x")).on(t); n != 1 {
			t.Fatalf("loaded from a table of one row of x: Count(x) = %d", n)
		}
		if _, err := c.RemoveOnce(ctx, "x", "del-row1"); err != nil {
			t.Fatalf("the delete of row 1 delivered again: %v", err)
		}
		if ok := must(c.Test(ctx, "x")).on(t); !ok {
			t.Fatal("x, held by row 2, tests absent: the delete of row 1 was applied twice")
		}
	}
	for _, p := range []int{1, 3} {
		o := Options{Capacity: 1000, Partitions: p}
		t.Run("partitions deleted/"+fmt.Sprint(p), func(t *testing.T) {
			c := created(t, newCounting(t, rdb, fmt.Sprint("reload-del-", p), o))
			must(c.AddMany(ctx, []string{"x", "x"})).on(t)
			must(c.RemoveOnce(ctx, "x", "del-row1")).on(t)
			for _, part := range c.f.parts {
				rdb.Del(ctx, part.key) // evicted, or deleted by hand: not a Drop
			}
			if err := c.Rebuild(ctx, rows(1)); err != nil {
				t.Fatal(err)
			}
			check(t, c)
		})
		t.Run("load given up/"+fmt.Sprint(p), func(t *testing.T) {
			c := newCounting(t, rdb, fmt.Sprint("reload-given-up-", p), o)
			err := c.Rebuild(ctx, func(add func([]string) error) error {
				if err := rows(2)(add); err != nil {
					return err
				}
				must(c.RemoveOnce(ctx, "x", "del-row1")).on(t) // row 1 deleted while the load runs
				return errors.New("the database went away")
			})
			if err == nil {
				t.Fatal("a load whose fill failed succeeded")
			}
			if err := c.Rebuild(ctx, rows(1)); err != nil {
				t.Fatal(err)
			}
			check(t, c)
		})
	}
}
