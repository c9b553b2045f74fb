//go:build unix

package pgsync

import (
	"strings"
	"testing"
	"time"

	"github.com/rbloom/rbloom"
)

// absentAfter checks that keys test absent and that no counter of the
// filter is saturated: a key added and removed as often as the table did
// must leave nothing behind.
func (e *env) absentAfter(t *testing.T, keys ...string) {
	t.Helper()
	f, err := rbloom.OpenCounting(t.Context(), e.rdb, "items", rbloom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ok, err := f.Test(t.Context(), k); err != nil || ok {
			t.Errorf("Test(%q) = %v, %v; want false: the key was deleted as often as inserted", k, ok, err)
		}
	}
	if in, err := f.Info(t.Context()); err != nil || in.Saturated != 0 {
		t.Errorf("Info.Saturated = %d (%v), want 0", in.Saturated, err)
	}
}

// TestHotKeys: a key inserted and deleted 15 times in one transaction, or
// in 40 one-row transactions gathered into one group, ends absent with no
// counter saturated (found by an outside review: the group's adds went
// first, the counters stuck at 15 and the key tested present for ever).
func TestHotKeys(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 100) g`)
	cfg := e.config()
	cfg.MaxDelay = 3 * time.Second // one group for the one-row transactions below
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runSync(t, s)
	e.caughtUp(t, "items")
	var one strings.Builder
	one.WriteString("BEGIN;")
	for range 15 {
		one.WriteString("INSERT INTO items VALUES (5000, 'h'); DELETE FROM items WHERE id = 5000;")
	}
	one.WriteString("COMMIT")
	e.pg.exec(t, one.String())
	e.caughtUp(t, "items")
	e.absentAfter(t, "5000")

	c := e.pg.conn(t)
	for range 20 {
		for _, q := range []string{`INSERT INTO items VALUES (6000, 'h')`, `DELETE FROM items WHERE id = 6000`} {
			if _, err := c.Exec(t.Context(), q); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.caughtUp(t, "items")
	e.absentAfter(t, "5000", "6000")
	e.checkEqual(t, "items")
}
