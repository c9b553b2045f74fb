package rbloom

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Regression tests for paths that answered "absent" for a held item, or
// dropped an item, without an error: each failed on the code before its fix.

// TestCreateOnDamagedFilter: Create on a filter one of whose partitions
// vanished must fail with ErrDamaged and write nothing, for every index;
// before, it recreated the partition empty and its items tested absent.
func TestCreateOnDamagedFilter(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := newCounting(t, rdb, "create", Options{Capacity: 2000, Partitions: 4})
		for p := range 4 {
			c.Drop(ctx)
			created(t, c)
			items := heldItems(t, c, 200)
			rdb.Del(ctx, c.f.parts[p].key)
			before := dump(t, rdb)
			if err := c.Create(ctx); !errors.Is(err, ErrDamaged) {
				t.Errorf("partition %d lost: Create = %v, want ErrDamaged", p, err)
			}
			if after := dump(t, rdb); !maps.Equal(before, after) {
				t.Errorf("partition %d lost: Create wrote to Redis", p)
			}
			for _, item := range inPartition(c, items, p) {
				if !must(c.Test(ctx, item)).on(t) {
					t.Fatalf("partition %d lost, then Create: %q tests absent", p, item)
				}
			}
		}
	})
}

// TestLostPartitionSingleReads: losing any one partition, the one at
// rbloom:{name} included, must leave every item it held "may be present"
// for Test and Count as for TestMany; before, losing the root partition
// made single reads of its items answer absent.
func TestLostPartitionSingleReads(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		// One name, so that one of the four is the root partition.
		c := newCounting(t, rdb, "single", Options{Capacity: 2000, Partitions: 4})
		for p := range 4 {
			c.Drop(ctx)
			created(t, c)
			items := heldItems(t, c, 200)
			rdb.Del(ctx, c.f.parts[p].key)
			lost := inPartition(c, items, p)
			if len(lost) == 0 {
				t.Fatalf("no item in partition %d: the test proves nothing", p)
			}
			for _, item := range lost {
				if !must(c.Test(ctx, item)).on(t) {
					t.Fatalf("partition %d (%s) lost: Test(%q) = false, want true", p, c.f.parts[p].key, item)
				}
				if !must(c.TestMany(ctx, []string{item})).on(t)[0] {
					t.Fatalf("partition %d (%s) lost: TestMany([%q]) = false, want true", p, c.f.parts[p].key, item)
				}
				if n := must(c.Count(ctx, item)).on(t); n != 15 {
					t.Fatalf("partition %d lost: Count(%q) = %d, want 15 (unknown)", p, item, n)
				}
			}
		}
	})
}

// TestOnceIDReuse: an operation id used again for another item, or for
// another operation, must be an error or be applied, never a silent
// success that drops the item.
func TestOnceIDReuse(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "reuse", Options{Capacity: 1000}))
		if must(c.AddOnce(ctx, "item", "topic/0/100")).on(t) {
			t.Fatal("first AddOnce = true, want false")
		}
		before := dump(t, rdb)
		if _, err := c.AddOnce(ctx, "other-item", "topic/0/100"); !errors.Is(err, ErrOpIDReused) {
			t.Errorf("AddOnce of another item with a used id = %v, want ErrOpIDReused", err)
		}
		if after := dump(t, rdb); !maps.Equal(before, after) {
			t.Error("the refused AddOnce wrote to Redis")
		}
		// The same call again is a replay: the first answer, nothing added.
		if must(c.AddOnce(ctx, "item", "topic/0/100")).on(t) || must(c.Count(ctx, "item")).on(t) != 1 {
			t.Error("a replayed AddOnce did not return the first answer, or added again")
		}

		// Add and remove ids are apart: removing with the id of an add
		// removes.
		must(c.AddOnce(ctx, "x", "evt-1")).on(t)
		if !must(c.RemoveOnce(ctx, "x", "evt-1")).on(t) {
			t.Error("RemoveOnce(x, evt-1) after AddOnce(x, evt-1) = false, want true")
		}
		if must(c.Test(ctx, "x")).on(t) {
			t.Error("x still present after RemoveOnce")
		}
		if _, err := c.RemoveOnce(ctx, "y", "evt-1"); !errors.Is(err, ErrOpIDReused) {
			t.Errorf("RemoveOnce of another item with a used id = %v, want ErrOpIDReused", err)
		}

		// A RemoveOnce that found nothing is recorded too: replayed after
		// the item was added, it still answers false and removes nothing.
		if must(c.RemoveOnce(ctx, "z", "del-z")).on(t) {
			t.Fatal("RemoveOnce of an absent item = true")
		}
		must(c.Add(ctx, "z")).on(t)
		if must(c.RemoveOnce(ctx, "z", "del-z")).on(t) || !must(c.Test(ctx, "z")).on(t) {
			t.Error("a replayed RemoveOnce removed an item added after the first call")
		}
	})
}

// TestPartitionNames: a filter named like another's partition ("Y/j") would
// share that key: its Drop would damage Y, and its Rebuild would replace
// Y's partition with its own items, so that Y's items there test absent.
// Such names are refused, by the constructors and by Open.
func TestPartitionNames(t *testing.T) {
	rdb := realRedis(t)
	y := created(t, newCounting(t, rdb, "y", Options{Capacity: 1000, Partitions: 4}))
	items := heldItems(t, y, 100)
	var shared string // a partition tag of y of the form y/j
	for _, p := range y.f.parts {
		if tag := p.key[len("rbloom:{") : len(p.key)-1]; tag != "y" {
			shared = tag
			break
		}
	}
	for _, name := range []string{shared, "y/0", "users/12", "a/b/3"} {
		if _, err := NewCounting(rdb, name, Options{Capacity: 1000, Partitions: 4}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("NewCounting(%q) = %v, want ErrInvalidOptions", name, err)
		}
		if _, err := Open(ctx, rdb, name, Options{}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Open(%q) = %v, want ErrInvalidOptions", name, err)
		}
	}
	for _, name := range []string{"y/x", "2024/users", "a/b", "v1.0/2b"} {
		if _, err := NewCounting(rdb, name, Options{Capacity: 10}); err != nil {
			t.Errorf("NewCounting(%q) = %v", name, err)
		}
	}
	for i, ok := range must(y.TestMany(ctx, items)).on(t) {
		if !ok {
			t.Fatalf("%q tests absent", items[i])
		}
	}
}

// TestBatchOnce: a batch under one id, spread over partitions and over
// several script calls and round trips, is applied once: sent again it
// gets the first answers and changes nothing; sent again with other items
// it fails with ErrOpIDReused.
func TestBatchOnce(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := created(t, newCounting(t, rdb, "batches", Options{Capacity: 100_000, Partitions: 3}))
		items := make([]string, 12_000) // more than one round trip's 9,362 at k = 7
		for i := range items {
			items[i] = fmt.Sprint("event-", i%11_000) // some twice: answered true the second time
		}
		first := must(c.AddManyOnce(ctx, items, "topic/0/0-11999")).on(t)
		before := dump(t, rdb)
		again := must(c.AddManyOnce(ctx, items, "topic/0/0-11999")).on(t)
		if !slices.Equal(first, again) {
			t.Error("a replayed batch got other answers")
		}
		if after := dump(t, rdb); !maps.Equal(before, after) {
			t.Error("a replayed batch changed Redis")
		}
		if n := must(c.Info(ctx)).on(t).Items; n != int64(len(items)) {
			t.Errorf("Info.Items = %d after a batch and its replay, want %d", n, len(items))
		}
		other := slices.Clone(items)
		other[5] = "another event"
		if _, err := c.AddManyOnce(ctx, other, "topic/0/0-11999"); !errors.Is(err, ErrOpIDReused) {
			t.Errorf("the batch id with another item: %v, want ErrOpIDReused", err)
		}
		removed := must(c.RemoveManyOnce(ctx, items[:100], "deletes/7")).on(t)
		if replay := must(c.RemoveManyOnce(ctx, items[:100], "deletes/7")).on(t); !slices.Equal(removed, replay) {
			t.Error("a replayed remove batch got other answers")
		}
		if n := must(c.Info(ctx)).on(t).Items; n != int64(len(items)-100) {
			t.Errorf("Info.Items = %d after a remove batch and its replay, want %d", n, len(items)-100)
		}

		b := created(t, newClassicT(t, rdb, "dedup", Options{Capacity: 1000}))
		seen := must(b.AddManyOnce(ctx, []string{"e1", "e2", "e1"}, "b1")).on(t)
		if !slices.Equal(seen, []bool{false, false, true}) || !slices.Equal(must(b.AddManyOnce(ctx, []string{"e1", "e2", "e1"}, "b1")).on(t), seen) {
			t.Errorf("classic AddManyOnce = %v, then not the same again", seen)
		}
	})
}
