//go:build unix

package pgsync

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestSessionGone: a lease is taken over only when its holder's session
// has ended. Another user's live session, whose start a user without
// pg_read_all_stats cannot see, is not taken for ended.
func TestSessionGone(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t, `CREATE ROLE holder LOGIN`, `CREATE ROLE watcher LOGIN`)
	as := func(user string) *pgx.Conn {
		c, err := pgx.Connect(context.Background(), strings.Replace(e.pg.URL, "postgres@", user+"@", 1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	h := as("holder")
	var pid, start int64
	if err := h.QueryRow(t.Context(), `SELECT pid, (extract(epoch FROM backend_start) * 1e6)::int8 FROM pg_stat_activity WHERE pid = pg_backend_pid()`).
		Scan(&pid, &start); err != nil {
		t.Fatal(err)
	}
	live := holder{pid: fmt.Sprint(pid), start: fmt.Sprint(start)}
	for _, c := range []struct {
		name string
		db   *pgx.Conn
		h    holder
		gone bool
	}{
		{"live, seen by a superuser", e.pg.conn(t), live, false},
		{"live, seen by another user", as("watcher"), live, false},
		{"pid reused by a later session", e.pg.conn(t), holder{pid: live.pid, start: fmt.Sprint(start - 1)}, true},
		{"ended", e.pg.conn(t), holder{pid: "999999", start: live.start}, true},
	} {
		if got, err := sessionGone(t.Context(), c.db, c.h); err != nil || got != c.gone {
			t.Errorf("%s: sessionGone = %v, %v; want %v", c.name, got, err, c.gone)
		}
	}
}
