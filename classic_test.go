package rbloom

import (
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestClassic(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newClassicT(t, rdb, "bits", Options{Capacity: 1000}))
		if ok := must(c.Test(ctx, "a")).on(t); ok {
			t.Error("Test(a) on an empty filter = true")
		}
		if existed := must(c.Add(ctx, "a")).on(t); existed {
			t.Error("first Add(a) = true")
		}
		if existed := must(c.Add(ctx, "a")).on(t); !existed {
			t.Error("second Add(a) = false")
		}
		got := must(c.AddMany(ctx, []string{"b", "c", "b"})).on(t)
		if want := []bool{false, false, true}; !equal(got, want) {
			t.Errorf("AddMany = %v, want %v", got, want)
		}
		got = must(c.TestMany(ctx, []string{"a", "b", "c", "d"})).on(t)
		if want := []bool{true, true, true, false}; !equal(got, want) {
			t.Errorf("TestMany = %v, want %v", got, want)
		}
		in := must(c.Info(ctx)).on(t)
		if in.Mode != ModeClassic || in.Items != 5 || in.Slots != 9586 {
			t.Errorf("Info = %+v", in)
		}
		// Bits are one per slot: the string is a quarter of a counting one.
		if n := rdb.StrLen(ctx, c.f.parts[0].key).Val(); n != 64+(9586+7)/8 {
			t.Errorf("STRLEN = %d, want %d", n, 64+(9586+7)/8)
		}
	})
}

// TestClassicTestOrAdd: TestOrAdd adds only what tests absent, so the item
// count counts distinct items, where Add counts every add.
func TestClassicTestOrAdd(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newClassicT(t, rdb, "distinct", Options{Capacity: 1000}))
		got := must(c.TestOrAddMany(ctx, []string{"a", "b", "a", "c", "b"})).on(t)
		if !slices.Equal(got, []bool{false, false, true, false, true}) {
			t.Errorf("TestOrAddMany = %v", got)
		}
		if seen := must(c.TestOrAdd(ctx, "a")).on(t); !seen {
			t.Error("TestOrAdd(a) after a was added = false")
		}
		if in := must(c.Info(ctx)).on(t); in.Items != 3 {
			t.Errorf("Info.Items = %d after 3 distinct items, want 3", in.Items)
		}
	})
}
