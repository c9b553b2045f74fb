package rbloom

import (
	"errors"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestOnceAcrossResizedCut: a batch sent under an operation id before a
// resize that cuts batches otherwise (another P, or another k and so
// another number of items per call), sent again after it, through a handle
// of the old size or of the new, is refused with ErrOpIDReused and applies
// nothing: no item counted twice, in whichever partition the new cut puts
// it. A batch sent first after the resize is replayed as usual. On a
// server, and on the cluster, where the partitions are in other slots.
func TestOnceAcrossResizedCut(t *testing.T) {
	t.Run("redis", func(t *testing.T) { onceAcrossResizedCut(t, realRedis(t)) })
	t.Run("cluster", func(t *testing.T) {
		_, rdb := clusterClient(t)
		onceAcrossResizedCut(t, rdb)
	})
}

func onceAcrossResizedCut(t *testing.T, rdb redis.UniversalClient) {
	for _, tc := range []struct {
		name     string
		mode     Mode
		from, to Options
	}{
		{"counting/P2to3", ModeCounting, Options{Capacity: 20000, ErrorRate: 0.001, Partitions: 2}, Options{Capacity: 40000, ErrorRate: 0.001, Partitions: 3}},
		{"counting/P3to2", ModeCounting, Options{Capacity: 20000, ErrorRate: 0.001, Partitions: 3}, Options{Capacity: 40000, ErrorRate: 0.001, Partitions: 2}},
		{"counting/k", ModeCounting, Options{Capacity: 20000, ErrorRate: 0.01, Partitions: 2}, Options{Capacity: 20000, ErrorRate: 0.0001, Partitions: 2}},
		{"cuckoo/P1to4", ModeCuckoo, Options{Capacity: 20000, ErrorRate: 0.001}, Options{Capacity: 40000, ErrorRate: 0.001, Partitions: 4}},
		{"cuckoo/P4to2", ModeCuckoo, Options{Capacity: 20000, ErrorRate: 0.001, Partitions: 4}, Options{Capacity: 40000, ErrorRate: 0.001, Partitions: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "cut-" + tc.name
			open := func(o Options) deletable {
				if tc.mode == ModeCuckoo {
					return newCuckooT(t, rdb, name, o)
				}
				return newCounting(t, rdb, name, o)
			}
			old := open(tc.from)
			if err := old.Create(ctx); err != nil {
				t.Fatal(err)
			}
			batch := events(tc.name+"-", 300)
			must(old.AddManyOnce(ctx, batch, "id")).on(t)
			resize := func(add func([]string) error) error { return add(batch) }
			var err error
			if c, ok := old.(*Cuckoo); ok {
				_, err = c.Resize(ctx, tc.to, resize)
			} else {
				_, err = old.(*Counting).Resize(ctx, tc.to, resize)
			}
			if err != nil {
				t.Fatal(err)
			}
			grown := open(tc.to)
			before := must(grown.CountMany(ctx, batch)).on(t)
			for _, h := range []struct {
				who string
				f   deletable
			}{{"old handle", old}, {"new handle", grown}, {"new handle again", grown}} {
				if _, err := h.f.AddManyOnce(ctx, batch, "id"); !errors.Is(err, ErrOpIDReused) {
					t.Errorf("%s: the id sent again after the resize: %v, want ErrOpIDReused", h.who, err)
				}
				if after := must(grown.CountMany(ctx, batch)).on(t); !slices.Equal(after, before) {
					t.Fatalf("%s: the id sent again applied items a second time: counts %v, then %v", h.who, before, after)
				}
			}
			fresh := events(tc.name+"-fresh-", 300)
			answers := must(grown.AddManyOnce(ctx, fresh, "id2")).on(t)
			if again, err := old.AddManyOnce(ctx, fresh, "id2"); err != nil || !slices.Equal(again, answers) {
				t.Errorf("a batch first sent after the resize, sent again: %v, %v; want %v, nil", again, err, answers)
			}
		})
	}
}

// TestOnceOtherParameters: a batch under an operation id through a handle
// whose parameters no resize came from is refused with ErrParamsMismatch,
// and writes nothing.
func TestOnceOtherParameters(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "once-other", Options{Capacity: 1000, Partitions: 2}))
	other := newCounting(t, rdb, "once-other", Options{Capacity: 5000, Partitions: 2})
	if _, err := other.AddManyOnce(ctx, []string{"a", "b"}, "id"); !errors.Is(err, ErrParamsMismatch) {
		t.Fatalf("AddManyOnce through a handle of other parameters: %v, want ErrParamsMismatch", err)
	}
	if n := must(c.CountMany(ctx, []string{"a", "b"})).on(t); !slices.Equal(n, []int{0, 0}) {
		t.Fatalf("counts after the refused batch: %v, want [0 0]", n)
	}
}
