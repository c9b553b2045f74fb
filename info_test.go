package rbloom

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestInfoFill: Info's scan counts exactly the non-zero and saturated
// slots, and the false-positive rate it derives from them predicts the
// rate measured on items never added, also past capacity, where the
// estimate from Items alone misses adds of items already present.
func TestInfoFill(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		for _, mode := range []Mode{ModeCounting, ModeClassic} {
			o := Options{Capacity: 1000, Partitions: 2}
			f, err := newFilter(rdb, "fill-"+mode.String(), mode, o)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.create(ctx); err != nil {
				t.Fatal(err)
			}
			items := make([]string, 5000)
			for i := range items {
				items[i] = fmt.Sprint("item-", i%4000) // 1,000 added twice
			}
			if _, err := f.add(ctx, items); err != nil {
				t.Fatal(err)
			}
			in, err := f.info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var nonZero, saturated uint64
			for _, v := range slotValues(t, rdb, f) {
				if v != 0 {
					nonZero++
				}
				if v == 15 && mode == ModeCounting {
					saturated++
				}
			}
			if in.NonZero != nonZero || in.Saturated != saturated {
				t.Errorf("%s: NonZero, Saturated = %d, %d; the slots hold %d, %d", mode, in.NonZero, in.Saturated, nonZero, saturated)
			}
			if in.Fill != 5 || !in.Overfull() {
				t.Errorf("%s: 5,000 adds for a capacity of 1,000: Fill = %v, Overfull = %v; want 5, true", mode, in.Fill, in.Overfull())
			}
			absent := make([]string, 20000)
			for i := range absent {
				absent[i] = fmt.Sprint("never-", i)
			}
			res, err := f.test(ctx, absent)
			if err != nil {
				t.Fatal(err)
			}
			positives := 0
			for _, ok := range res {
				if ok {
					positives++
				}
			}
			measured := float64(positives) / float64(len(absent))
			if d := math.Abs(measured - in.MeasuredFalsePositiveRate); d > 0.03 {
				t.Errorf("%s: MeasuredFalsePositiveRate %.3f, but %.3f of items never added test present", mode, in.MeasuredFalsePositiveRate, measured)
			}
			t.Logf("%s: measured FPR %.3f, Info's estimate from slots %.3f, from Items %.3f", mode, measured, in.MeasuredFalsePositiveRate, in.FalsePositiveRate)
		}
	})
}

// TestInfoIDLifetime: Info reports the stored id lifetime.
func TestInfoIDLifetime(t *testing.T) {
	rdb := miniRedis(t)
	c := created(t, newCounting(t, rdb, "ids", Options{Capacity: 100, IDLifetime: 90 * time.Second}))
	must(c.Add(ctx, "a")).on(t)
	opened := must(OpenCounting(ctx, rdb, "ids", Options{})).on(t)
	if got := must(opened.Info(ctx)).on(t).IDLifetime; got != 90*time.Second {
		t.Errorf("Info.IDLifetime = %v, want 1m30s", got)
	}
}
