//go:build unix

package pgsync

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rbloom/rbloom"
)

// walNow returns the server's current WAL position.
func (e *env) walNow(t testing.TB) pglogrepl.LSN {
	t.Helper()
	c := e.pg.conn(t)
	defer c.Close(context.Background())
	var lsn pglogrepl.LSN
	if err := c.QueryRow(t.Context(), `SELECT pg_current_wal_lsn()`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// caughtUp waits until the sync's state records every change before the
// server's current WAL position as applied.
func (e *env) caughtUp(t testing.TB, filter string) {
	t.Helper()
	target := e.walNow(t)
	key := stateKey("", filter)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := readState(t.Context(), e.rdb, key)
		if err == nil && st.Phase == "loaded" && st.LSN >= target && st.Pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sync did not catch up with %s: state %+v, %v", target, st, err)
		}
	}
}

// rowKeys returns the table's keys.
func (e *env) rowKeys(t testing.TB) []string {
	t.Helper()
	c := e.pg.conn(t)
	defer c.Close(context.Background())
	rows, err := c.Query(t.Context(), `SELECT id::text FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// checkEqual checks that the filter holds exactly the table's keys: every
// key present, Info.Items equal to the row count.
func (e *env) checkEqual(t testing.TB, filter string) {
	t.Helper()
	keys := e.rowKeys(t)
	f, err := rbloom.OpenCounting(t.Context(), e.rdb, filter, rbloom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := f.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if in.Items != int64(len(keys)) {
		t.Errorf("Info.Items = %d, want %d (the table's rows)", in.Items, len(keys))
	}
	if len(keys) == 0 {
		return
	}
	present, err := f.TestMany(t.Context(), keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range present {
		if !p {
			t.Errorf("Test(%q) = false, want true: a row's key is absent", keys[i])
		}
	}
}

// runSync runs a Sync in the background until the test ends or stop is
// called; stop returns Run's error.
func runSync(t testing.TB, s *Sync) (stop func() error) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			cancel()
			err, stopped = <-done, true
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestFollow: a load, then inserts, updates that change the key or not,
// deletes, a truncate inside a transaction with inserts after it, and a
// restart, the filter equal to the table after each.
func TestFollow(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 12000) g`)
	s, err := New(e.config())
	if err != nil {
		t.Fatal(err)
	}
	stop := runSync(t, s)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
	if st := s.Stats(); st.Loaded != 12000 || st.Phase != "streaming" {
		t.Errorf("Stats() = %+v, want 12000 loaded, streaming", st)
	}

	e.pg.exec(t,
		`INSERT INTO items SELECT g, 'y' FROM generate_series(20001, 20500) g`,
		`UPDATE items SET v = 'z' WHERE id <= 100`,                       // key unchanged
		`UPDATE items SET id = id + 100000 WHERE id BETWEEN 101 AND 300`, // key changed
		`DELETE FROM items WHERE id BETWEEN 301 AND 1000`,
		`BEGIN; INSERT INTO items VALUES (5000000, 'a'); DELETE FROM items WHERE id = 5000000; INSERT INTO items VALUES (5000000, 'b'); COMMIT`,
	)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
	f, _ := rbloom.OpenCounting(t.Context(), e.rdb, "items", rbloom.Options{})
	gone := make([]string, 0, 900)
	for i := 101; i <= 1000; i++ {
		gone = append(gone, fmt.Sprint(i))
	}
	present, _ := f.TestMany(t.Context(), gone)
	ghosts := 0
	for _, p := range present {
		if p {
			ghosts++
		}
	}
	if ghosts > 45 { // 1% target; 5% is far off
		t.Errorf("%d of %d deleted keys test present", ghosts, len(gone))
	}
	if st := s.Stats(); st.RemoveMisses != 0 {
		t.Errorf("Stats().RemoveMisses = %d, want 0", st.RemoveMisses)
	}

	// A restart goes on from the state, without a load.
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v, want context.Canceled", err)
	}
	e.pg.exec(t, `DELETE FROM items WHERE id BETWEEN 1001 AND 2000`)
	s2, _ := New(e.config())
	runSync(t, s2)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
	if st := s2.Stats(); st.Loaded != 0 || st.Applied != 1000 {
		t.Errorf("after restart Stats() = %+v, want nothing loaded and 1000 applied", st)
	}

	e.pg.exec(t, `BEGIN; INSERT INTO items VALUES (7000000, 'a'); TRUNCATE items; INSERT INTO items SELECT g, 't' FROM generate_series(1, 50) g; DELETE FROM items WHERE id = 50; COMMIT`)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
}
