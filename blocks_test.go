package rbloom

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestLocateBlocked: an event's slots are in blockGroups(k) blocks, a
// group of at most groupSlots slots in each, inside the partition; with
// one block (fewer than 2 * blockSlots slots) they are locate's.
func TestLocateBlocked(t *testing.T) {
	for _, c := range []struct {
		k int
		m uint64
	}{{21, 141_917_019}, {6, 14_274}, {10, 260}, {1, 5000}, {2, 2047}, {35, 1 << 30}, {7, 3000}} {
		n, size := blocksOf(c.m)
		g := blockGroups(c.k)
		for i := range 2000 {
			item := fmt.Sprint("e", i)
			if i == 0 {
				item = "" // h1 = h2 = 0
			}
			_, slots := locateBlocked(nil, item, c.k, c.m, 3)
			_, flat := locate(nil, item, c.k, c.m, 3)
			if len(slots) != c.k {
				t.Fatalf("k=%d: %d slots", c.k, len(slots))
			}
			count := make([]int, g)
			block := make([]uint64, g) // the block of each group's first slot
			for s, slot := range slots {
				j := groupOf(s, c.k, g)
				if count[j] == 0 {
					block[j] = slot / size
				}
				count[j]++
				if slot >= n*size || slot/size != block[j] {
					t.Fatalf("k=%d m=%d %q: slot %d (%d) not in its group's block of %d slots (%v)", c.k, c.m, item, s, slot, size, slots)
				}
			}
			for j, c2 := range count {
				if c2 > groupSlots || c2 < c.k/g {
					t.Fatalf("k=%d: group %d has %d slots", c.k, j, c2)
				}
			}
			if n == 1 && fmt.Sprint(slots) != fmt.Sprint(flat) {
				t.Fatalf("m=%d, one block: %v, locate gives %v", c.m, slots, flat)
			}
		}
	}
}

// TestWindowBlocksKeepTheErrorRate: a generation holding its
// EventsPerBucket answers seen for absent events at no more than its share
// of ErrorRate, with the extra slots blockedSlots gives it (blocks hold
// unequal numbers of events).
func TestWindowBlocksKeepTheErrorRate(t *testing.T) {
	rdb := realRedis(t)
	const n, p = 20_000, 0.02
	w := created(t, must(NewWindow(rdb, "rate", WindowOptions{EventsPerBucket: n, ErrorRate: p, Bucket: time.Hour, Span: time.Hour, Partitions: 2})).on(t))
	if blocks, _ := blocksOf(w.f.h.m); blocks < 10 {
		t.Fatalf("%d blocks a partition: too few to test", blocks)
	}
	for lo := 0; lo < n; lo += 1000 {
		must(w.TestOrAddMany(ctx, events(fmt.Sprint("in", lo, "-"), 1000))).on(t)
	}
	absent := events("out", 200_000)
	seen := must(w.TestMany(ctx, absent)).on(t)
	fp := 0
	for _, s := range seen {
		if s {
			fp++
		}
	}
	// One generation of the two tested holds events: its share of p.
	perGen := 1 - math.Pow(1-p, 0.5)
	rate := float64(fp) / float64(len(absent))
	t.Logf("%d of %d absent events answered seen: %.5f, a generation's share of ErrorRate %.5f (%d slots a partition)",
		fp, len(absent), rate, perGen, w.f.h.m)
	// 200,000 tests at 0.01: a standard deviation of 0.00022.
	if rate > perGen*1.1 {
		t.Errorf("false-positive rate %.5f, want at most %.5f", rate, perGen)
	}
}

// TestWindowSettingsGoneRingLives: the settings outlive the ring; a ring
// whose settings are gone is ErrDamaged from every method, not read as
// the caller's.
func TestWindowSettingsGoneRingLives(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 3 * time.Minute, Partitions: 1}
		before := created(t, must(NewWindow(rdb, "gone", o)).on(t))
		held := events("held", 50)
		must(before.TestOrAddMany(ctx, held)).on(t)
		rdb.Del(ctx, before.settingsKey(0))
		w := must(NewWindow(rdb, "gone", o)).on(t)
		for name, call := range map[string]func() error{
			"TestMany":          func() error { _, err := w.TestMany(ctx, held); return err },
			"TestOrAddMany":     func() error { _, err := w.TestOrAddMany(ctx, held); return err },
			"TestOrAddManyOnce": func() error { _, err := w.TestOrAddManyOnce(ctx, held, "id"); return err },
			"Info":              func() error { _, err := w.Info(ctx); return err },
			"Create":            func() error { return w.Create(ctx) },
		} {
			if err := call(); !errors.Is(err, ErrDamaged) {
				t.Errorf("%s: %v, want ErrDamaged", name, err)
			}
		}
	})
}
