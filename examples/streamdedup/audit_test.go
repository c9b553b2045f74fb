package main

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The audit is what the end-to-end test trusts to find a broken
// exactly-once; these break it on purpose, each in one way, and check
// that the audit says so.

// Counting batches again without their markers, as a count script without
// the marker would on replay, shows as events counted twice and counts
// above the truth.
func TestAuditCatchesDoubleCounting(t *testing.T) {
	rdb := newRedis(t)
	s := smallSettings("double")
	written := writeStream(t, rdb, s, 200, 0.2, 3)
	c := newTestConsumer(t, rdb, s, "c", 50, time.Hour)
	drain(t, rdb, c)
	auditOK(t, rdb, s, written)

	k := s.keys()
	ids, err := journaledBatches(t.Context(), rdb, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		rdb.Del(t.Context(), k.applied(id))
	}
	batches, err := loadJournals(t.Context(), rdb, k, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if err := c.runBatch(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	wantProblems(t, auditStream(t, rdb, s, written), "counted more than once", "above the truth")
}

// A batch deduplicated and then dropped, its entries acknowledged
// uncounted (a claimer that regroups entries without the journal, in
// effect), shows as events the window added but no one counted.
func TestAuditCatchesUncountedBatch(t *testing.T) {
	rdb := newRedis(t)
	s := smallSettings("uncounted")
	written := writeStream(t, rdb, s, 200, 0.2, 4)
	a := newTestConsumer(t, rdb, s, "a", 50, time.Hour)
	a.crash = func(at string) {
		if at == stepDeduped {
			panic(crash{at})
		}
	}
	pollUntilCrash(t, a)
	ackAllPending(t, rdb, s)
	drain(t, rdb, newTestConsumer(t, rdb, s, "b", 50, 0))
	wantProblems(t, auditStream(t, rdb, s, written), "the window added", "never counted")
}

// Entries acknowledged before they were deduplicated show as events
// neither counted nor held by the window.
func TestAuditCatchesLostEntries(t *testing.T) {
	rdb := newRedis(t)
	s := smallSettings("lost")
	written := writeStream(t, rdb, s, 200, 0, 5)
	a := newTestConsumer(t, rdb, s, "a", 50, time.Hour)
	a.crash = func(at string) { panic(crash{at}) }
	pollUntilCrash(t, a)
	ackAllPending(t, rdb, s)
	drain(t, rdb, newTestConsumer(t, rdb, s, "b", 50, 0))
	wantProblems(t, auditStream(t, rdb, s, written), "lost")
}

// ackAllPending acknowledges every pending entry of s's stream, handled
// or not.
func ackAllPending(t *testing.T, rdb *redis.Client, s settings) {
	t.Helper()
	k := s.keys()
	pending, err := rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: k.stream(), Group: group, Start: "-", End: "+", Count: 10_000}).Result()
	if err != nil || len(pending) == 0 {
		t.Fatalf("pending = %v, %v; want some", pending, err)
	}
	for _, p := range pending {
		if err := rdb.XAck(t.Context(), k.stream(), group, p.ID).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// wantProblems fails unless a's problems mention each of want.
func wantProblems(t *testing.T, a *audit, want ...string) {
	t.Helper()
	all := strings.Join(a.problems(), "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("audit problems %q do not mention %q", a.problems(), w)
		}
	}
	t.Logf("the audit found: %s", strings.Join(a.problems(), "; "))
}
