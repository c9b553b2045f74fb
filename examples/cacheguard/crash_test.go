package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// crash is what the crash hook panics with: the process "dies" between the
// filter write and the database write, and nothing after the hook runs.
type crash struct{ step, id string }

// survive runs fn and returns the crash it died of, or nil if it returned.
func survive(fn func()) (c *crash) {
	defer func() {
		if r := recover(); r != nil {
			cr, ok := r.(crash)
			if !ok {
				panic(r)
			}
			c = &cr
		}
	}()
	fn()
	return nil
}

// Inserts and deletes killed between their two writes leave ghosts, never a
// row that the filter says is absent.
func TestCrashBetweenWritesLeavesOnlyGhosts(t *testing.T) {
	tbl := newTable(t)
	rdb := newMiniredis(t)
	g := testGuard(t, tbl, rdb, 10_000)
	ctx := t.Context()
	if _, err := g.warm(ctx); err != nil {
		t.Fatal(err)
	}
	universe := make([]string, 200)
	for i := range universe {
		universe[i] = fmt.Sprintf("k%d", i)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	g.crash = func(step, id string) {
		if rng.Float64() < 0.25 {
			panic(crash{step, id})
		}
	}
	crashed := map[string]bool{}
	crashes := map[string]int{}
	for range 1200 {
		id := universe[rng.IntN(len(universe))]
		c := survive(func() {
			if rng.IntN(2) == 0 {
				_ = g.insert(ctx, id, "v")
			} else {
				_ = g.delete(ctx, id)
			}
		})
		if c != nil {
			crashed[c.id] = true
			crashes[c.step]++
		}
	}
	if crashes["insert"] == 0 || crashes["delete"] == 0 {
		t.Fatalf("crashes = %v, want some at both steps", crashes)
	}

	falseNegatives, ghosts := audit(t, g, universe)
	if len(falseNegatives) > 0 {
		t.Errorf("%d rows test absent in the filter: %q", len(falseNegatives), falseNegatives)
	}
	for _, id := range ghosts {
		if !crashed[id] {
			t.Errorf("ghost %q: no operation on it crashed", id)
		}
	}
	t.Logf("1200 operations, crashes %v: %d rows, %d ghosts, 0 false negatives",
		crashes, len(rows(t, tbl)), len(ghosts))

	// A restarted process finds the record matching the database, loads
	// nothing, and finds every row.
	g = testGuard(t, tbl, rdb, 10_000)
	if n, err := g.warm(ctx); err != nil || n != 0 {
		t.Fatalf("warm after restart = %d, %v; want 0 keys", n, err)
	}
	for _, id := range rows(t, tbl) {
		if _, by, err := g.get(ctx, id); err != nil {
			t.Errorf("get(%q) after restart = %s, %v; want the row", id, by, err)
		}
	}
}

// The audit catches the other order: a row inserted and then, had the
// process not died, added to the filter is answered 404 by the filter.
func TestAuditCatchesTheOtherOrder(t *testing.T) {
	g := testGuard(t, newTable(t), newMiniredis(t), 1000)
	ctx := t.Context()
	if _, err := g.warm(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := g.table.insert(ctx, "lost", "v"); err != nil { // died before the add
		t.Fatal(err)
	}
	if _, by, err := g.get(ctx, "lost"); err == nil || by != byFilter {
		t.Errorf("get(lost) = %s, %v; want 404 by the filter (a false negative)", by, err)
	}
	if falseNegatives, _ := audit(t, g, []string{"lost"}); !slices.Equal(falseNegatives, []string{"lost"}) {
		t.Errorf("audit false negatives = %q, want [lost]", falseNegatives)
	}
}

// A warm killed half-way gives its load up: lookups ask the database
// while the restarted handle loads the filter from the table by itself, and
// the next warm rebuilds it with every key.
func TestWarmKilledHalfWay(t *testing.T) {
	tbl := newTable(t)
	universe := make([]string, 2500)
	for i := range universe {
		universe[i] = fmt.Sprintf("row%d", i)
	}
	seed(t, tbl, universe)
	rdb := newMiniredis(t)
	g := testGuard(t, tbl, rdb, 10_000)
	g.batch = 1000
	ctx := t.Context()

	g.crash = func(step, id string) { panic(crash{step, id}) }
	if c := survive(func() { _, _ = g.warm(ctx) }); c == nil || c.step != "warm" {
		t.Fatalf("warm died of %v, want a crash after its first batch", c)
	}
	g = testGuard(t, tbl, rdb, 10_000) // restarted
	for _, id := range []string{"row0", "row1999", "row2499"} {
		if _, by, err := g.get(ctx, id); err != nil || by != byDatabase {
			t.Errorf("get(%q) after a warm died = %s, %v; want the row, from the database", id, by, err)
		}
	}
	// A delete meanwhile: its remove is not applied to counters being
	// loaded, and the warm's snapshot comes after it.
	if err := g.delete(ctx, "row0"); err != nil {
		t.Fatal(err)
	}

	n, err := g.warm(ctx)
	if err != nil || n != 2499 {
		t.Fatalf("warm = %d, %v; want 2499 keys", n, err)
	}
	falseNegatives, ghosts := audit(t, g, universe)
	if len(falseNegatives) > 0 || len(ghosts) > 0 {
		t.Errorf("audit = %q false negatives, %q ghosts; want none, none", falseNegatives, ghosts)
	}
}
