package rbloom

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRebuild fills a filter with ghosts (rows deleted without their
// Remove, as a crash between the two would leave) and a counter stuck at
// 15, then rebuilds it from the truth while the application keeps adding
// and removing: afterwards nothing held tests false, the ghosts and the
// stuck counter are gone, and no copy is left behind.
func TestRebuild(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := newCounting(t, rdb, "rows", Options{Capacity: 2000, Partitions: 2})
		truth := map[string]bool{}
		for i := range 500 {
			truth[fmt.Sprint("row-", i)] = true
		}
		must(c.AddMany(ctx, keysOf(truth))).on(t)
		for i := range 100 { // deleted from the table, never removed: ghosts
			delete(truth, fmt.Sprint("row-", i))
		}
		for range 20 { // added and removed 20 times: its counters stay at 15
			must(c.Add(ctx, "hot")).on(t)
		}
		for range 20 {
			must(c.Remove(ctx, "hot")).on(t)
		}
		if n := must(c.Count(ctx, "hot")).on(t); n != 15 {
			t.Fatalf("Count(hot) = %d before the rebuild, want 15 (stuck)", n)
		}

		snapshot := keysOf(truth)
		batches := 0
		err := c.Rebuild(ctx, func(add func([]string) error) error {
			for lo := 0; lo < len(snapshot); lo += 100 {
				if err := add(snapshot[lo:min(lo+100, len(snapshot))]); err != nil {
					return err
				}
				// The application goes on between batches: a new row, and a
				// row deleted (DB first, then the filter).
				batches++
				added, deleted := fmt.Sprint("new-", batches), fmt.Sprint("row-", 100+batches)
				must(c.Add(ctx, added)).on(t)
				truth[added] = true
				delete(truth, deleted)
				must(c.Remove(ctx, deleted)).on(t)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		held := keysOf(truth)
		for i, ok := range must(c.TestMany(ctx, held)).on(t) {
			if !ok {
				t.Errorf("false negative after the rebuild: %q", held[i])
			}
		}
		var gone []string
		for i := range 100 + batches + 1 {
			if item := fmt.Sprint("row-", i); !truth[item] {
				gone = append(gone, item)
			}
		}
		still := 0
		for _, ok := range must(c.TestMany(ctx, gone)).on(t) {
			if ok {
				still++
			}
		}
		if still > len(gone)/20 {
			t.Errorf("%d of %d deleted rows still test present after the rebuild", still, len(gone))
		}
		if n := must(c.Count(ctx, "hot")).on(t); n == 15 {
			t.Error("Count(hot) is still 15 after the rebuild")
		}
		for _, k := range rdb.Keys(ctx, "*").Val() {
			if strings.HasSuffix(k, ":next") {
				t.Errorf("key %s left after the rebuild", k)
			}
		}
		// Writes after the rebuild go to the new counters only.
		must(c.Add(ctx, "after")).on(t)
		if !must(c.Test(ctx, "after")).on(t) {
			t.Error("Add after the rebuild is lost")
		}
	})
}

// TestRebuildAbort checks that a rebuild whose fill fails leaves the filter
// as it was, and stops the writes to both.
func TestRebuildAbort(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := newCounting(t, rdb, "kept", Options{Capacity: 1000, Partitions: 2})
		must(c.AddMany(ctx, []string{"a", "b", "c"})).on(t)
		before := filterKeys(t, rdb)
		boom := errors.New("the table went away")
		err := c.Rebuild(ctx, func(add func([]string) error) error {
			if err := add([]string{"a"}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Rebuild with a failing fill: %v, want it", err)
		}
		if after := filterKeys(t, rdb); !maps.Equal(before, after) {
			t.Errorf("an aborted rebuild changed the filter")
		}
		must(c.Add(ctx, "d")).on(t)
		for _, k := range rdb.Keys(ctx, "*").Val() {
			if strings.HasSuffix(k, ":next") {
				t.Errorf("key %s left after an aborted rebuild", k)
			}
		}
	})
}

func keysOf(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// filterKeys is dump without the operation keys, which writes leave.
func filterKeys(t *testing.T, rdb redis.UniversalClient) map[string]string {
	out := dump(t, rdb)
	for k := range out {
		if strings.Contains(k, ":r:") {
			delete(out, k)
		}
	}
	return out
}
