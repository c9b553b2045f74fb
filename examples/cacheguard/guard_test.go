package main

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

func TestGetInsertDelete(t *testing.T) {
	g := newGuard(t, newTable(t), newMiniredis(t), 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx, 100); err != nil {
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
	g := newGuard(t, newTable(t), newMiniredis(t), 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx, 100); err != nil {
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
	g := newGuard(t, newTable(t), newMiniredis(t), 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx, 100); err != nil {
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

// Until warm has marked the filter ready, its "absent" is no answer: rows
// that were there before the filter are found in the database, and deletes
// do not remove keys that may not have been added yet.
func TestFilterNotReady(t *testing.T) {
	tbl := newTable(t)
	seed(t, tbl, []string{"old1", "old2"})
	g := newGuard(t, tbl, newMiniredis(t), 1000)
	ctx := t.Context()

	value, by, err := g.get(ctx, "old1")
	if err != nil || by != byDatabase || value != "seed old1" {
		t.Errorf("get(old1) before warm = %q, %s, %v; want the row, from the database", value, by, err)
	}
	// No filter yet, so none to guard an insert: it is refused, not
	// let through to become a row the filter will not know.
	if err := g.insert(ctx, "new", "v"); !errors.Is(err, rbloom.ErrNotFound) {
		t.Fatalf("insert(new) before warm = %v, want rbloom.ErrNotFound", err)
	}
	if got := rows(t, tbl); len(got) != 2 {
		t.Errorf("rows after a refused insert = %q, want old1 and old2", got)
	}
	if _, by, err := g.get(ctx, "old2"); err != nil || by != byDatabase {
		t.Errorf("get(old2) before warm = %s, %v; want the row, from the database", by, err)
	}
	if s := g.stats.snapshot(); s.FilterUnavailable != 2 || s.AnsweredByFilter != 0 {
		t.Errorf("stats = %+v, want 2 lookups with the filter unavailable", s)
	}

	n, err := g.warm(ctx, 100)
	if err != nil || n != 2 {
		t.Fatalf("warm = %d, %v; want 2 keys", n, err)
	}
	if _, by, err := g.get(ctx, "nope"); !errors.Is(err, errNotFound) || by != byFilter {
		t.Errorf("get(nope) after warm = %s, %v; want not found, by the filter", by, err)
	}
	if n, err := g.warm(ctx, 100); err != nil || n != 0 {
		t.Errorf("second warm = %d, %v; want 0 keys (the filter is ready)", n, err)
	}
}

// When Redis fails, lookups ask the database and inserts are refused.
func TestRedisDown(t *testing.T) {
	tbl := newTable(t)
	m := rbloomtest.NewMiniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	defer rdb.Close()
	g := newGuard(t, tbl, rdb, 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx, 100); err != nil {
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
