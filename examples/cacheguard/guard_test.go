package main

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"

	"github.com/rbloom/rbloom/rbloomtest"
)

func TestGetInsertDelete(t *testing.T) {
	g := testGuard(t, newTable(t), newMiniredis(t), 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx); err != nil {
		t.Fatal(err)
	}
	get := func(id string, wantValue string, wantErr error, wantBy answeredBy) {
		t.Helper()
		value, by, err := g.get(ctx, id)
		if value != wantValue || !errors.Is(err, wantErr) || by != wantBy {
			t.Errorf("get(%q) = %q, %s, %v; want %q, %s, %v", id, value, by, err, wantValue, wantBy, wantErr)
		}
	}
	if err := g.insert(ctx, "a1", "hello"); err != nil {
		t.Fatal(err)
	}
	get("a1", "hello", nil, byDatabase)
	get("zz", "", errNotFound, byFilter)
	if err := g.delete(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	get("a1", "", errNotFound, byFilter)
	if err := g.delete(ctx, "a1"); !errors.Is(err, errNotFound) {
		t.Errorf("second delete(a1) = %v, want %v", err, errNotFound)
	}
	if err := g.insert(ctx, "a1", "again"); err != nil {
		t.Fatal(err)
	}
	get("a1", "again", nil, byDatabase)

	got := g.stats.snapshot()
	want := statsJSON{Lookups: 4, AnsweredByFilter: 2, SentToDatabase: 2, AbsentAnsweredByFilterRatio: 1}
	if got != want {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
}

// A duplicate insert takes back its own add: the key keeps one count, so
// one delete clears it, and repeated duplicates cannot saturate it.
func TestDuplicateInsertTakesBackItsAdd(t *testing.T) {
	g := testGuard(t, newTable(t), newMiniredis(t), 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.insert(ctx, "x", "1"); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if err := g.insert(ctx, "x", "2"); !errors.Is(err, errExists) {
			t.Fatalf("duplicate insert(x) = %v, want %v", err, errExists)
		}
	}
	if n := count(t, g, "x"); n != 1 {
		t.Errorf("count(x) after 20 duplicate inserts = %d, want 1", n)
	}
	if err := g.delete(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, g, "x"); n != 0 {
		t.Errorf("count(x) after delete = %d, want 0", n)
	}
}

// A delete that finds no row removes nothing: the key in the filter may be
// someone else's false positive.
func TestDeleteWithoutRowRemovesNothing(t *testing.T) {
	g := testGuard(t, newTable(t), newMiniredis(t), 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := g.filter.Add(ctx, filterItem("ghost")); err != nil {
		t.Fatal(err)
	}
	if err := g.delete(ctx, "ghost"); !errors.Is(err, errNotFound) {
		t.Errorf("delete(ghost) = %v, want %v", err, errNotFound)
	}
	if n := count(t, g, "ghost"); n != 1 {
		t.Errorf("count(ghost) = %d, want 1", n)
	}
}

// While the filter is missing (never made, or lost by Redis) or being
// loaded, its "absent" is no answer: lookups of rows go to the database
// while the handle loads the filter from the table by itself, an insert
// meanwhile is kept, and then the filter answers again.
func TestFilterLoadedBySource(t *testing.T) {
	tbl := newTable(t)
	seed(t, tbl, []string{"old1", "old2"})
	rdb := newMiniredis(t)
	g := testGuard(t, tbl, rdb, 1000)
	ctx := t.Context()
	lookups := 0
	found := func(when string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			lookups++
			if _, by, err := g.get(ctx, id); err != nil {
				t.Errorf("get(%q) %s = %s, %v; want the row", id, when, by, err)
			}
		}
	}
	found("before any load", "old1")
	if s := g.stats.snapshot(); s.FilterUnavailable != 1 {
		t.Errorf("stats = %+v, want the lookup sent to the database, the filter unavailable", s)
	}
	if err := g.insert(ctx, "new", "v"); err != nil {
		t.Fatalf("insert(new) while the filter loads = %v", err)
	}
	answered := func(when string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			found(when, "old1", "old2", "new")
			lookups++
			if _, by, err := g.get(ctx, "nope"); by == byFilter && errors.Is(err, errNotFound) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("get(nope) %s: not answered by the filter within 10s", when)
			}
		}
	}
	answered("after the load")

	// Redis loses everything: the filter and its record.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	answered("after Redis lost the filter")
	if s := g.stats.snapshot(); s.Lookups != int64(lookups) || s.FilterUnavailable < 2 {
		t.Errorf("stats = %+v, want %d lookups, some with the filter unavailable", s, lookups)
	}
}

// Redis loses the filter while an insert is between its add and its
// INSERT, and a lookup starts the load: the load's snapshot waits for the
// INSERT (the fill's rule), so the row is in the filter it loads.
func TestFillWaitsForInserts(t *testing.T) {
	rdb := newMiniredis(t)
	g := testGuard(t, newTable(t), rdb, 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx); err != nil {
		t.Fatal(err)
	}
	g.crash = func(step, id string) {
		if step != "insert" {
			return
		}
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Error(err)
		}
		go g.get(ctx, "other")             // starts the load
		time.Sleep(100 * time.Millisecond) // time enough to read a snapshot, were it not held back
	}
	if err := g.insert(ctx, "new", "v"); err != nil {
		t.Fatal(err)
	}
	g.crash = nil
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, by, _ := g.get(ctx, "nope"); by == byFilter {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the filter was not loaded within 10s")
		}
	}
	if _, by, err := g.get(ctx, "new"); err != nil {
		t.Errorf("get(new) after the load = %s, %v; want the row", by, err)
	}
}

// A handle without a Source (the sync mode's) reads a missing filter as
// ErrNotFound: lookups ask the database all the same.
func TestLookupOfMissingFilter(t *testing.T) {
	tbl := newTable(t)
	seed(t, tbl, []string{"old"})
	rdb := newMiniredis(t)
	f, err := rbloom.NewCounting(rdb, "items", rbloom.Options{Capacity: 1000})
	if err != nil {
		t.Fatal(err)
	}
	g := &guard{table: tbl, filter: f, rdb: rdb, record: recordKey("items")}
	if _, err := f.Test(t.Context(), "x"); !errors.Is(err, rbloom.ErrNotFound) {
		t.Fatalf("Test on no filter = %v, want rbloom.ErrNotFound", err)
	}
	if value, by, err := g.get(t.Context(), "old"); err != nil || by != byDatabase {
		t.Errorf("get(old) on no filter = %q, %s, %v; want the row, from the database", value, by, err)
	}
}

// When Redis fails, lookups ask the database and inserts are refused.
func TestRedisDown(t *testing.T) {
	tbl := newTable(t)
	m := rbloomtest.NewMiniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer rdb.Close()
	g := testGuard(t, tbl, rdb, 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.insert(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	m.Close()

	if value, by, err := g.get(ctx, "a"); err != nil || by != byDatabase || value != "1" {
		t.Errorf("get(a) with Redis down = %q, %s, %v; want the row, from the database", value, by, err)
	}
	if err := g.insert(ctx, "b", "2"); err == nil {
		t.Error("insert(b) with Redis down succeeded, want an error")
	}
	if got := rows(t, tbl); len(got) != 1 {
		t.Errorf("rows = %q, want only a", got)
	}
}
