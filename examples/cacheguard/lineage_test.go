package main

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A guard restarted on another database than the one its filter was loaded
// from (another SQLite file, with other rows) rebuilds the filter from its
// rows: none is answered 404.
func TestRestartOnAnotherDatabase(t *testing.T) {
	rdb := newRedis(t)
	a, b := newTable(t), newTable(t)
	seed(t, a, ids(0, 100))
	seed(t, b, ids(50, 200)) // 50 of a's ids, and 100 others
	if _, n := restart(t, a, rdb); n != 100 {
		t.Fatalf("warm on a loaded %d keys, want 100", n)
	}

	g, n := restart(t, b, rdb)
	if n != 150 {
		t.Errorf("warm on b loaded %d keys, want 150", n)
	}
	allFound(t, g, ids(0, 200))
}

// A database restored from a backup holds rows that the service deleted,
// and removed from the filter, after the backup was taken: a guard
// restarted on it loads the rows again, whether the service died right
// after the deletes or was restarted in between. So does a guard restarted
// on the newer database, put back after the restored one has served. A
// restart on the database the filter follows loads nothing.
func TestRestartOnRestoredBackup(t *testing.T) {
	for _, restartBetween := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart between=%v", restartBetween), func(t *testing.T) {
			restoredBackup(t, restartBetween)
		})
	}
}

func restoredBackup(t *testing.T, restartBetween bool) {
	rdb := newRedis(t)
	ctx := t.Context()
	universe := ids(0, 200)
	live := newTable(t)
	seed(t, live, ids(0, 100))
	if _, n := restart(t, live, rdb); n != 100 {
		t.Fatalf("first warm loaded %d keys, want 100", n)
	}
	g, n := restart(t, live, rdb)
	if n != 0 {
		t.Errorf("warm after a restart on the same database loaded %d keys, want 0", n)
	}

	saved := backup(t, live) // taken while the service runs: k0..k99
	for _, id := range ids(0, 30) {
		if err := g.delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids(100, 120) {
		if err := g.insert(ctx, id, "v"); err != nil {
			t.Fatal(err)
		}
	}
	if restartBetween {
		if g, n = restart(t, live, rdb); n != 0 {
			t.Errorf("warm after a restart on the same database loaded %d keys, want 0", n)
		}
	}
	allFound(t, g, universe)

	// The database is restored from the backup.
	restored := openFile(t, saved)
	g, n = restart(t, restored, rdb)
	if n != 100 {
		t.Errorf("warm on the restored backup loaded %d keys, want 100", n)
	}
	allFound(t, g, universe)
	for _, id := range ids(50, 60) {
		if err := g.delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// The newer database is put back: k30..k119.
	g, n = restart(t, live, rdb)
	if n != 90 {
		t.Errorf("warm on the newer database put back loaded %d keys, want 90", n)
	}
	allFound(t, g, universe)
	if _, n = restart(t, live, rdb); n != 0 {
		t.Errorf("warm after a restart on the same database loaded %d keys, want 0", n)
	}
}

// The filter's record lost (deleted, evicted) while the filter survives:
// the clock starts again from 0, and nothing is trusted until warm has
// loaded the rows under a new lineage, so that a backup whose generation
// the new clock reaches again is not trusted either.
func TestRestartAfterRecordLost(t *testing.T) {
	rdb := newRedis(t)
	ctx := t.Context()
	live := newTable(t)
	seed(t, live, ids(0, 100))
	g, _ := restart(t, live, rdb)
	del := func(g *guard, from, to int) {
		t.Helper()
		for _, id := range ids(from, to) {
			if err := g.delete(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	del(g, 0, 10)
	saved := backup(t, live) // k10..k99, 11 clock ticks in
	del(g, 10, 20)
	if err := rdb.Del(ctx, recordKey("items")).Err(); err != nil {
		t.Fatal(err)
	}

	g, n := restart(t, live, rdb)
	if n != 80 {
		t.Errorf("warm after the record was lost loaded %d keys, want 80", n)
	}
	del(g, 20, 30) // the clock passes 11 again
	g, n = restart(t, openFile(t, saved), rdb)
	if n != 90 {
		t.Errorf("warm on the backup loaded %d keys, want 90", n)
	}
	allFound(t, g, ids(0, 100))
}

// Rows inserted by another tool, straight into the table, are answered
// 404 by the filter: the one case the rule cannot see. Deleting the row of
// rbloom_meta makes the next start load them.
func TestRowsInsertedBehindTheService(t *testing.T) {
	rdb := newRedis(t)
	ctx := t.Context()
	tbl := newTable(t)
	seed(t, tbl, ids(0, 10))
	restart(t, tbl, rdb)
	seed(t, tbl, ids(10, 20)) // another tool, while the service is down

	g, n := restart(t, tbl, rdb)
	if _, by, err := g.get(ctx, "k15"); n != 0 || err == nil || by != byFilter {
		t.Errorf("warm = %d keys, get(k15) = %s, %v; want 0 keys, 404 by the filter (a false negative)", n, by, err)
	}
	if _, err := tbl.db.ExecContext(ctx, `DELETE FROM rbloom_meta`); err != nil {
		t.Fatal(err)
	}
	if g, n = restart(t, tbl, rdb); n != 20 {
		t.Errorf("warm after DELETE FROM rbloom_meta loaded %d keys, want 20", n)
	}
	allFound(t, g, ids(0, 20))
}

// ids returns "k<from>" .. "k<to-1>".
func ids(from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("k%d", i))
	}
	return out
}

// restart returns a guard over tbl and the filter "items" in rdb, as a
// process started anew has it after warm, and the number of keys warm
// loaded.
func restart(t *testing.T, tbl *table, rdb redis.UniversalClient) (*guard, int) {
	t.Helper()
	g := testGuard(t, tbl, rdb, 10_000)
	n, err := g.warm(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return g, n
}

// allFound checks that get finds every row of g's table, and that the
// filter holds the key of every row (universe must hold every row).
func allFound(t *testing.T, g *guard, universe []string) {
	t.Helper()
	var lost []string
	for _, id := range rows(t, g.table) {
		if _, by, err := g.get(t.Context(), id); err != nil {
			lost = append(lost, fmt.Sprintf("%s (%v, by the %s)", id, err, by))
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d rows not found: %q", len(lost), lost)
	}
	if falseNegatives, _ := audit(t, g, universe); len(falseNegatives) > 0 {
		t.Errorf("%d rows test absent in the filter: %q", len(falseNegatives), falseNegatives)
	}
}
