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
