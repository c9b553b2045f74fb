package rbloom

import (
	"errors"
	"fmt"
	"maps"
	"strings"
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
			c := created(t, newCounting(t, rdb, "hurt-"+how, Options{Capacity: 3000, Partitions: 3}))
			items := make([]string, 300)
			for i := range items {
				items[i] = fmt.Sprint("item-", i)
			}
			must(c.AddMany(ctx, items)).on(t)
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
			for i, ok := range must(c.TestMany(ctx, items)).on(t) {
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
			if n := must(c.Count(ctx, inLost[0])).on(t); n != 15 {
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
			if in := must(c.Info(ctx)).on(t); !in.Damaged {
				t.Errorf("%s: Info.Damaged = false", how)
			}
			// Dropping and making it again makes a whole new filter; a
			// write alone does not make it.
			if err := c.Drop(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Add(ctx, inLost[0]); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: Add after Drop: %v, want ErrNotFound", how, err)
			}
			created(t, c)
			if existed := must(c.Add(ctx, inLost[0])).on(t); existed {
				t.Errorf("%s: first Add after Drop = existed", how)
			}
			if in := must(c.Info(ctx)).on(t); in.Damaged || in.Items != 1 {
				t.Errorf("%s: after Drop and Add, Info = damaged %v, %d items", how, in.Damaged, in.Items)
			}
		}
	})
}

// TestMissingIsNotFound checks that a filter Redis lost whole is an
// error, not an empty filter, by default.
func TestMissingIsNotFound(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		for _, parts := range []int{1, 3} {
			c := newCounting(t, rdb, fmt.Sprint("guard-", parts), Options{Capacity: 1000, Partitions: parts})
			if _, err := c.Test(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Errorf("P=%d: Test before Create: %v, want ErrNotFound", parts, err)
			}
			if err := c.Create(ctx); err != nil {
				t.Fatal(err)
			}
			must(c.Add(ctx, "a")).on(t)
			if !must(c.Test(ctx, "a")).on(t) || must(c.Test(ctx, "b")).on(t) {
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

// damages are the ways the key of one partition can vanish or change
// under a filter of three. vanish tells whether the key is then gone.
var damages = []struct {
	name   string
	vanish bool
	do     func(t *testing.T, rdb *redis.Client, f *filter, p int)
}{
	{"DEL", true, func(t *testing.T, rdb *redis.Client, f *filter, p int) {
		rdb.Del(ctx, f.parts[p].key)
	}},
	{"PEXPIRE", true, func(t *testing.T, rdb *redis.Client, f *filter, p int) {
		rdb.PExpire(ctx, f.parts[p].key, time.Millisecond)
		waitFor(t, "the key to expire", func() bool { return rdb.Exists(ctx, f.parts[p].key).Val() == 0 })
	}},
	{"another type", false, func(t *testing.T, rdb *redis.Client, f *filter, p int) {
		rdb.Del(ctx, f.parts[p].key)
		rdb.RPush(ctx, f.parts[p].key, "x")
	}},
	{"emptied", false, func(t *testing.T, rdb *redis.Client, f *filter, p int) {
		rdb.Set(ctx, f.parts[p].key, "", redis.KeepTTL)
	}},
	{"truncated", false, func(t *testing.T, rdb *redis.Client, f *filter, p int) {
		v := rdb.Get(ctx, f.parts[p].key).Val()
		rdb.Set(ctx, f.parts[p].key, v[:len(v)/2], redis.KeepTTL)
	}},
	{"another partition", false, func(t *testing.T, rdb *redis.Client, f *filter, p int) {
		rdb.Set(ctx, f.parts[p].key, rdb.Get(ctx, f.parts[(p+1)%len(f.parts)].key).Val(), redis.KeepTTL)
	}},
	{"another filter's partition", false, func(t *testing.T, rdb *redis.Client, f *filter, p int) {
		other := created(t, must(NewCounting(rdb, "other", Options{Capacity: 500, Partitions: len(f.parts)})).on(t))
		must(other.Add(ctx, "x")).on(t)
		rdb.Set(ctx, f.parts[p].key, rdb.Get(ctx, other.f.parts[p].key).Val(), redis.KeepTTL)
		other.Drop(ctx)
	}},
}

// TestDamageMatrix damages each partition of a filter, the one at
// rbloom:{name} included, in each way a key can vanish or change, and
// calls every public method: no read may answer "absent" for an item the
// filter held (an error is allowed where the key holds something else),
// no write may change Redis, Open must not call the filter missing, and
// Info must say it is damaged.
func TestDamageMatrix(t *testing.T) {
	rdb := realRedis(t)
	for _, mode := range deletableModes {
		t.Run(mode.name, func(t *testing.T) {
			c, err := mode.make(rdb, "matrix", Options{Capacity: 3000, Partitions: 3})
			if err != nil {
				t.Fatal(err)
			}
			damageMatrix(t, rdb, c)
		})
	}
}

func damageMatrix(t *testing.T, rdb *redis.Client, c deletable) {
	const parts = 3
	root := shareOf(keySlot("matrix"), parts)
	for _, dmg := range damages {
		for p := range parts {
			where := fmt.Sprintf("%s of partition %d", dmg.name, p)
			if p == root {
				where += " (the root)"
			}
			c.Drop(ctx)
			created(t, c)
			items := heldItems(t, c, 300)
			dmg.do(t, rdb, c.core(), p)
			damagedReads(t, where, c, items, dmg.vanish)

			// Open needs the root: without it, only ErrDamaged will do.
			// A key that holds something else may make it fail, never
			// with ErrNotFound; a handle it returns must read as safely.
			o, err := Open(ctx, rdb, "matrix", Options{})
			switch {
			case p == root && dmg.vanish && !errors.Is(err, ErrDamaged):
				t.Errorf("%s: Open = %v, want ErrDamaged", where, err)
			case p != root && dmg.vanish && err != nil:
				t.Errorf("%s: Open = %v, want the filter (its root is sound)", where, err)
			case errors.Is(err, ErrNotFound):
				t.Errorf("%s: Open = %v", where, err)
			case err == nil:
				damagedReads(t, where+", opened", o.(deletable), items, dmg.vanish)
			}

			lost := inPartition(c, items, p)
			before := dump(t, rdb)
			for name, write := range map[string]func() error{
				"Add":        func() error { _, err := c.Add(ctx, lost[0]); return err },
				"AddMany":    func() error { _, err := c.AddMany(ctx, lost); return err },
				"AddOnce":    func() error { _, err := c.AddOnce(ctx, lost[0], "once"); return err },
				"Remove":     func() error { _, err := c.Remove(ctx, lost[0]); return err },
				"RemoveMany": func() error { _, err := c.RemoveMany(ctx, lost); return err },
				"RemoveOnce": func() error { _, err := c.RemoveOnce(ctx, lost[0], "once"); return err },
				"Create":     func() error { return c.Create(ctx) },
			} {
				if err := write(); err == nil {
					t.Errorf("%s: %s succeeded", where, name)
				}
			}
			if after := dump(t, rdb); !maps.Equal(before, after) {
				for k, v := range after {
					if before[k] != v {
						t.Errorf("%s: refused writes changed %s (%d bytes, was %d)", where, k, len(v), len(before[k]))
					}
				}
			}
			in, err := c.Info(ctx)
			if err != nil || !in.Damaged {
				t.Errorf("%s: Info = damaged %v, error %v; want damaged", where, in != nil && in.Damaged, err)
			}
		}
	}
}

// damagedReads checks that the reads of a damaged filter never answer
// "absent" for an item it held: they answer "may be present", or, when
// the key holds something else (not vanish), may fail instead.
func damagedReads(t *testing.T, where string, c deletable, items []string, vanish bool) {
	t.Helper()
	check := func(call string, present bool, err error) bool {
		t.Helper()
		switch {
		case err != nil && vanish:
			t.Errorf("%s: %s = %v, want an answer", where, call, err)
		case err == nil && !present:
			t.Errorf("%s: %s answers absent for a held item", where, call)
		default:
			return true
		}
		return false
	}
	res, err := c.TestMany(ctx, items)
	for i := range items {
		if !check("TestMany", err != nil || res[i], err) {
			break
		}
	}
	for _, item := range items {
		ok, err := c.Test(ctx, item)
		n, err2 := c.Count(ctx, item)
		if !check("Test("+item+")", ok, err) || !check("Count("+item+")", n > 0, err2) {
			return
		}
	}
}

// TestEvictedPartition fills a Redis that evicts keys at random until it
// evicts a partition of the filter, whichever that is: reads must still
// answer "may be present" for every item the filter held, writes to the
// lost partition must fail and change nothing, and Info must say damaged.
func TestEvictedPartition(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "evicted", Options{Capacity: 20000, Partitions: 3}))
	items := heldItems(t, c, 2000)
	used := serverStat(t, rdb, "memory", "used_memory")
	rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-random")
	rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(used+256<<10))
	lost := -1
	junk := strings.Repeat("j", 1000)
	for i := 0; i < 20000 && lost < 0; i++ {
		rdb.Set(ctx, fmt.Sprint("junk-", i), junk, 0)
		for p, part := range c.f.parts {
			if rdb.Exists(ctx, part.key).Val() == 0 {
				lost = p
			}
		}
	}
	rdb.ConfigSet(ctx, "maxmemory", "0")
	if lost < 0 {
		t.Fatal("20,000 junk keys evicted no partition")
	}
	survivors := 0
	for _, part := range c.f.parts {
		survivors += int(rdb.Exists(ctx, part.key).Val())
	}
	if survivors == 0 {
		if _, err := c.TestMany(ctx, items); !errors.Is(err, ErrNotFound) {
			t.Errorf("every partition evicted: TestMany = %v, want ErrNotFound", err)
		}
		t.Skip("every partition was evicted at once: the filter is missing (ErrNotFound), rightly")
	}
	t.Logf("partition %d evicted first; %d of 3 left", lost, survivors)
	damagedReads(t, "evicted", c, items, true)
	before := dump(t, rdb)
	if _, err := c.AddMany(ctx, inPartition(c, items, lost)); !errors.Is(err, ErrDamaged) {
		t.Errorf("AddMany into the evicted partition: %v, want ErrDamaged", err)
	}
	if err := c.Create(ctx); !errors.Is(err, ErrDamaged) {
		t.Errorf("Create: %v, want ErrDamaged", err)
	}
	if after := dump(t, rdb); !maps.Equal(before, after) {
		t.Error("refused writes changed Redis")
	}
	if in := must(c.Info(ctx)).on(t); !in.Damaged {
		t.Error("Info.Damaged = false")
	}
}
