package main

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

// newTable returns a table in a new SQLite file in t.TempDir().
func newTable(t *testing.T) *table {
	t.Helper()
	return openFile(t, filepath.Join(t.TempDir(), "items.db"))
}

// openFile opens the table in the SQLite file path, creating it if needed,
// and closes it when the test ends.
func openFile(t *testing.T, path string) *table {
	t.Helper()
	tbl, err := openSQLite(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}

// backup copies tbl's database, as it is now, into a new SQLite file and
// returns its path. VACUUM INTO makes a consistent copy while the database
// is in use, WAL included, as a backup tool would.
func backup(t *testing.T, tbl *table) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "backup.db")
	if _, err := tbl.db.ExecContext(t.Context(), `VACUUM INTO $1`, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// newMiniredis returns a client of a new in-memory Redis.
func newMiniredis(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.NewMiniredis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newRedis returns a client of a new redis-server (see rbloomtest.StartRedis).
func newRedis(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// testGuard returns a guard over tbl with a filter "items" of capacity
// items at 1% in rdb, filled 100 keys at a time. It does not warm the
// filter.
func testGuard(t *testing.T, tbl *table, rdb redis.UniversalClient, capacity uint64) *guard {
	t.Helper()
	g, err := newGuard(tbl, rdb, "items", rbloom.Options{Capacity: capacity, ErrorRate: 0.01}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.batch = 100
	return g
}

// seed inserts rows with the given ids straight into the table, in one
// transaction, as if they were there before the filter.
func seed(t *testing.T, tbl *table, ids []string) {
	t.Helper()
	tx, err := tbl.db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := tx.Exec(`INSERT INTO items (id, value) VALUES ($1, $2)`, id, "seed "+id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// rows returns the ids of every row, sorted.
func rows(t *testing.T, tbl *table) []string {
	t.Helper()
	var ids []string
	if err := tbl.ids(t.Context(), func(id string) error { ids = append(ids, id); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// audit compares the filter with the table for every id in universe (which
// must hold every row): falseNegatives are rows whose key tests absent, the
// one thing that must never happen; ghosts are keys that test present
// without a row (left by a crash, or false positives).
func audit(t *testing.T, g *guard, universe []string) (falseNegatives, ghosts []string) {
	t.Helper()
	ctx := context.Background()
	keys := make([]string, len(universe))
	for i, id := range universe {
		keys[i] = filterItem(id)
	}
	present, err := g.filter.TestMany(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	inTable := map[string]bool{}
	for _, id := range rows(t, g.table) {
		inTable[id] = true
	}
	for i, id := range universe {
		switch {
		case inTable[id] && !present[i]:
			falseNegatives = append(falseNegatives, id)
		case !inTable[id] && present[i]:
			ghosts = append(ghosts, id)
		}
		delete(inTable, id)
	}
	if len(inTable) > 0 {
		t.Fatalf("audit: %d rows are not in the universe", len(inTable))
	}
	return falseNegatives, ghosts
}

// count returns how many times the filter holds id (its smallest counter).
func count(t *testing.T, g *guard, id string) int {
	t.Helper()
	n, err := g.filter.Count(context.Background(), filterItem(id))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
