package rbloom

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestVanishedPartition deletes one partition of a filter, as eviction,
// a DEL or a TTL that ran out on that key alone would: no item it held may
// then test "absent", writes to it fail with ErrDamaged instead of
// recreating it empty, and Info says the filter is damaged.
func TestVanishedPartition(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		for _, how := range []string{"DEL", "PEXPIRE"} {
			c := newCounting(t, rdb, "hurt-"+how, Options{Capacity: 3000, Partitions: 3})
			items := make([]string, 300)
			for i := range items {
				items[i] = fmt.Sprint("item-", i)
			}
			must(c.AddMany(ctx, items))
			lost := c.f.parts[1].key
			if how == "DEL" {
				rdb.Del(ctx, lost)
			} else {
				rdb.PExpire(ctx, lost, time.Millisecond)
				time.Sleep(5 * time.Millisecond)
				if rdb.Exists(ctx, lost).Val() == 1 {
					t.Logf("%s: this server does not expire keys by the clock (miniredis): case left to real Redis", how)
					continue
				}
			}
			var inLost []string
			for i, ok := range must(c.TestMany(ctx, items)) {
				if !ok {
					t.Fatalf("%s: %q tests absent after its partition vanished", how, items[i])
				}
				if p, _ := c.f.locate(nil, items[i]); p == 1 {
					inLost = append(inLost, items[i])
				}
			}
			if len(inLost) == 0 {
				t.Fatal("no item in the lost partition: the test proved nothing")
			}
			if n := must(c.Count(ctx, inLost[0])); n != 15 {
				t.Errorf("%s: Count of an item in the lost partition = %d, want 15 (unknown)", how, n)
			}
			before := dump(t, rdb)
			if _, err := c.Add(ctx, inLost[0]); !errors.Is(err, ErrDamaged) {
				t.Errorf("%s: Add into the lost partition: %v, want ErrDamaged", how, err)
			}
			if _, err := c.RemoveMany(ctx, inLost); !errors.Is(err, ErrDamaged) {
				t.Errorf("%s: Remove from the lost partition: %v, want ErrDamaged", how, err)
			}
			if after := dump(t, rdb); !maps.Equal(before, after) {
				t.Errorf("%s: refused writes changed Redis (the lost partition recreated?)", how)
			}
			if in := must(c.Info(ctx)); !in.Damaged {
				t.Errorf("%s: Info.Damaged = false", how)
			}
			// Dropping and writing again makes a whole new filter.
			if err := c.Drop(ctx); err != nil {
				t.Fatal(err)
			}
			if existed := must(c.Add(ctx, inLost[0])); existed {
				t.Errorf("%s: first Add after Drop = existed", how)
			}
			if in := must(c.Info(ctx)); in.Damaged || in.Items != 1 {
				t.Errorf("%s: after Drop and Add, Info = damaged %v, %d items", how, in.Damaged, in.Items)
			}
		}
	})
}

// TestMustExist checks that with MustExist a filter Redis lost whole is an
// error, not an empty filter.
func TestMustExist(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		for _, parts := range []int{1, 3} {
			c := newCounting(t, rdb, fmt.Sprint("guard-", parts), Options{Capacity: 1000, Partitions: parts, MustExist: true})
			if _, err := c.Test(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Errorf("P=%d: Test before Create: %v, want ErrNotFound", parts, err)
			}
			if err := c.Create(ctx); err != nil {
				t.Fatal(err)
			}
			must(c.Add(ctx, "a"))
			if !must(c.Test(ctx, "a")) || must(c.Test(ctx, "b")) {
				t.Errorf("P=%d: Test after Create and Add(a) is wrong", parts)
			}
			rdb.FlushAll(ctx) // Redis lost everything
			if _, err := c.TestMany(ctx, []string{"a", "b"}); !errors.Is(err, ErrNotFound) {
				t.Errorf("P=%d: TestMany after a flush: %v, want ErrNotFound", parts, err)
			}
			if _, err := c.Count(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Errorf("P=%d: Count after a flush: %v, want ErrNotFound", parts, err)
			}
			if _, err := c.Remove(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Errorf("P=%d: Remove after a flush: %v, want ErrNotFound", parts, err)
			}
		}
	})
}
