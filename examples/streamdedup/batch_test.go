package main

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A consumer dies at each step of its second batch; a consumer that claims
// its entries 7 at a time, not as the 50 they were read in, finishes the
// stream. The counts equal the truth, nothing is counted twice, and a
// journaled batch was replayed whole under its own id.
func TestKillAtEachStep(t *testing.T) {
	rdb := newRedis(t)
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			s := smallSettings("kill-" + step)
			written := writeStream(t, rdb, s, 400, 0.3, 7)
			a := newTestConsumer(t, rdb, s, "a", 50, time.Hour)
			hits := 0
			a.crash = func(at string) {
				if at == step {
					if hits++; hits == 2 {
						panic(crash{at})
					}
				}
			}
			pollUntilCrash(t, a)
			left, err := rdb.XPending(t.Context(), s.keys().stream(), group).Result()
			if err != nil || left.Consumers["a"] != 50 {
				t.Fatalf("after the crash: pending %+v, %v; want 50 entries with a", left, err)
			}

			b := newTestConsumer(t, rdb, s, "b", 7, 0)
			drain(t, rdb, b)
			au := auditOK(t, rdb, s, written)
			if au.Uncounted != 0 || !maps.Equal(au.Counts, au.Truth) {
				t.Errorf("counts %v, %d events uncounted; want the truth %v", au.Counts, au.Uncounted, au.Truth)
			}
			wantReplays := int64(1)
			if step == stepRead {
				wantReplays = 0 // nothing journaled: b journals the entries afresh
			}
			if got := b.stats.replays.Load(); got != wantReplays {
				t.Errorf("b replayed %d batches, want %d", got, wantReplays)
			}
			wantApplied := int64(0)
			if step == stepCounted {
				wantApplied = 1
			}
			if got := b.stats.alreadyApplied.Load(); got != wantApplied {
				t.Errorf("b found %d batches counted already, want %d", got, wantApplied)
			}
			t.Logf("killed at %s: a %s; b %s", step, &a.stats, &b.stats)
		})
	}
}

// Several consumers replaying one batch at the same time, as a slow
// consumer and those that claimed its entries may, get the same answers
// and count it once.
func TestConcurrentReplay(t *testing.T) {
	rdb := newRedis(t)
	s := smallSettings("concurrent")
	written := writeStream(t, rdb, s, 300, 0.3, 9)
	a := newTestConsumer(t, rdb, s, "a", 100, time.Hour)
	a.crash = func(at string) {
		if at == stepDeduped {
			panic(crash{at})
		}
	}
	pollUntilCrash(t, a)

	// The dead consumer's batch, as a claimer finds it.
	k := s.keys()
	pending, err := rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: k.stream(), Group: group, Start: "-", End: "+", Count: 1}).Result()
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending = %v, %v", pending, err)
	}
	owner, err := rdb.Get(t.Context(), k.entry(pending[0].ID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	batches, err := loadJournals(t.Context(), rdb, k, []string{owner})
	if err != nil {
		t.Fatal(err)
	}

	const replayers = 4
	cs := make([]*consumer, replayers)
	var wg sync.WaitGroup
	for i := range cs {
		cs[i] = newTestConsumer(t, rdb, s, fmt.Sprint("r", i), 100, time.Hour)
		wg.Go(func() {
			if err := cs[i].runBatch(t.Context(), batches[0]); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var counted, already []int64
	for _, c := range cs {
		counted = append(counted, c.stats.counted.Load())
		already = append(already, c.stats.alreadyApplied.Load())
	}
	slices.Sort(already)
	if !slices.Equal(already, []int64{0, 1, 1, 1}) {
		t.Errorf("batches found counted already, by replayer: %v; want one counting and three finding it done", already)
	}

	drain(t, rdb, newTestConsumer(t, rdb, s, "b", 100, 0))
	au := auditOK(t, rdb, s, written)
	if au.Uncounted != 0 {
		t.Errorf("%d events uncounted, want 0", au.Uncounted)
	}
	t.Logf("%d replayers of batch %s (%d events): new events counted by each %v", replayers, owner, len(batches[0].events), counted)
}

// The journal puts each entry in one batch: a second batch with some of
// the same entries journals only the others, and names the first batch
// for those.
func TestJournalKeepsEachEntryInOneBatch(t *testing.T) {
	rdb := newRedis(t)
	k := newKeys("journal")
	ctx := t.Context()
	ev := func(n int) event {
		return event{Entry: fmt.Sprintf("1-%d", n), ID: fmt.Sprint("e", n), Country: "FR", Campaign: "c01"}
	}
	e1, e2, e3 := ev(1), ev(2), ev(3)
	if owners, err := journal(ctx, rdb, k, "X", []event{e1, e2}, time.Hour); err != nil || !slices.Equal(owners, []string{"X", "X"}) {
		t.Fatalf("journal X = %v, %v; want [X X]", owners, err)
	}
	if owners, err := journal(ctx, rdb, k, "Y", []event{e2, e3, e1}, time.Hour); err != nil || !slices.Equal(owners, []string{"X", "Y", "X"}) {
		t.Fatalf("journal Y = %v, %v; want [X Y X]", owners, err)
	}
	if owners, err := journal(ctx, rdb, k, "Z", []event{e1}, time.Hour); err != nil || !slices.Equal(owners, []string{"X"}) {
		t.Fatalf("journal Z = %v, %v; want [X]", owners, err)
	}
	batches, err := loadJournals(ctx, rdb, k, []string{"X", "Y"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(batches[0].events, []event{e1, e2}) || !slices.Equal(batches[1].events, []event{e3}) {
		t.Errorf("journals X, Y = %v, %v; want [e1 e2], [e3]", batches[0].events, batches[1].events)
	}
	if n := rdb.Exists(ctx, k.journal("Z")).Val(); n != 0 {
		t.Error("batch Z, which got no entry, has a journal")
	}
	if _, err := loadJournals(ctx, rdb, k, []string{"Z"}); err == nil {
		t.Error("loading a missing journal did not fail")
	}
	for _, key := range []string{k.journal("X"), k.entry(e1.Entry)} {
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s: TTL %v, want at most 1h", key, ttl)
		}
	}
}

// apply counts a batch's new events once, however many times it is called.
func TestApplyCountsOnce(t *testing.T) {
	rdb := newRedis(t)
	k := newKeys("apply")
	ctx := t.Context()
	fr := event{Entry: "1-1", ID: "e1", Country: "FR", Campaign: "c01"}
	us := event{Entry: "1-2", ID: "e2", Country: "US", Campaign: "c01"}
	again := event{Entry: "1-3", ID: "e1", Country: "FR", Campaign: "c01"}
	b := batch{id: "B", events: []event{fr, us, again}}
	for i, want := range []bool{true, false, false} {
		if applied, err := apply(ctx, rdb, k, b, []bool{false, false, true}, time.Hour); err != nil || applied != want {
			t.Fatalf("apply #%d = %v, %v; want %v", i+1, applied, err, want)
		}
	}
	counts, _ := hashInts(ctx, rdb, k.counts())
	counted, _ := hashInts(ctx, rdb, k.counted())
	wantCounts := map[string]int64{"country=FR": 1, "country=US": 1, "campaign=c01": 2}
	if !maps.Equal(counts, wantCounts) || !maps.Equal(counted, map[string]int64{"e1": 1, "e2": 1}) {
		t.Errorf("counts %v, counted %v; want %v, e1 and e2 once", counts, counted, wantCounts)
	}
}
