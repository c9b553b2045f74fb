//go:build unix

package pgsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbloom/rbloom"
)

// stopsWithin runs s until it returns or the bound passes, and returns its
// error (nil when it was still running at the bound).
func stopsWithin(t *testing.T, s *Sync, bound time.Duration, during func()) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	during()
	err := <-done
	if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// refused runs cfg once and checks that it fails with a permanent error
// saying says, before writing anything to Redis or making a slot.
func (e *env) refused(t *testing.T, cfg Config, says string) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = stopsWithin(t, s, 20*time.Second, func() {})
	if !Permanent(err) || !strings.Contains(err.Error(), says) {
		t.Errorf("Run = %v, want a permanent error saying %q", err, says)
	}
	if n, _ := e.rdb.DBSize(t.Context()).Result(); n != 0 {
		t.Errorf("Redis holds %d keys after the refusal, want 0", n)
	}
	if slots := e.slots(t); slots != "" {
		t.Errorf("slots after the refusal: %q, want none", slots)
	}
}

// TestRefusedBeforeWriting: setups the sync cannot follow are refused at
// start, before any write, with what to grant or fix (found by an outside
// review: a generated key loaded then stopped; missing privileges wrote a
// slot and a filter, then were retried for ever).
func TestRefusedBeforeWriting(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 100) g`,
		`CREATE TABLE gen (a bigint PRIMARY KEY, k bigint GENERATED ALWAYS AS (a * 2) STORED UNIQUE)`,
		`CREATE PUBLICATION gen_pub FOR TABLE gen`,
		`CREATE ROLE noselect LOGIN REPLICATION`,
		`CREATE ROLE norepl LOGIN`, `GRANT SELECT ON items TO norepl`,
		`CREATE TABLE words (w text PRIMARY KEY)`, `INSERT INTO words VALUES ('café'), ('a')`,
		`CREATE PUBLICATION words_pub FOR TABLE words`,
		`CREATE ROLE latin LOGIN REPLICATION`, `GRANT SELECT ON words TO latin`,
		`ALTER ROLE latin SET client_encoding = 'LATIN1'`,
		`CREATE TABLE tenants (id bigint PRIMARY KEY, tenant int)`, `INSERT INTO tenants VALUES (1, 0), (2, 1)`,
		`ALTER TABLE tenants ENABLE ROW LEVEL SECURITY`, `CREATE POLICY t0 ON tenants FOR SELECT USING (tenant = 0)`,
		`CREATE PUBLICATION tenants_pub FOR TABLE tenants`,
		`CREATE ROLE tenant0 LOGIN REPLICATION`, `GRANT SELECT ON tenants TO tenant0`)
	as := func(user string) string { return strings.Replace(e.pg.URL, "postgres@", user+"@", 1) }
	words := func(c *Config) { c.Table, c.KeyColumn, c.Publication = "words", "w", "words_pub" }
	for _, c := range []struct {
		name, says string
		mut        func(*Config)
	}{
		{"generated key", "generated", func(c *Config) { c.Table, c.KeyColumn, c.Publication = "gen", "k", "gen_pub" }},
		{"no SELECT", "GRANT SELECT", func(c *Config) { c.DatabaseURL = as("noselect") }},
		{"no REPLICATION", "REPLICATION", func(c *Config) { c.DatabaseURL = as("norepl") }},
		{"no database", "database", func(c *Config) { c.DatabaseURL = strings.Replace(e.pg.URL, "/postgres?", "/nope?", 1) }},
		// The keys of the load and the stream would be LATIN1 bytes.
		{"client_encoding in the URL", "client_encoding", func(c *Config) { words(c); c.DatabaseURL = e.pg.URL + "&client_encoding=LATIN1" }},
		{"client_encoding of the role", "client_encoding", func(c *Config) { words(c); c.DatabaseURL = as("latin") }},
		// The load would see only tenant 0's rows, the stream all.
		{"row-level security", "row-level security", func(c *Config) {
			c.Table, c.Publication, c.DatabaseURL = "tenants", "tenants_pub", as("tenant0")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := e.config()
			c.mut(&cfg)
			e.refused(t, cfg, c.says)
		})
	}
	// The command returns these, not retries them.
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := Command(ctx, []string{"-db", as("noselect"), "-table", "items", "-key", "id", "-filter", "items",
		"-slot", "items_slot", "-publication", "items_pub", "-redis", e.rdb.Options().Addr}, &out, &errOut)
	if !Permanent(err) {
		t.Errorf("Command without SELECT = %v, want a permanent error (stderr %q)", err, errOut.String())
	}
}

// TestKeyMustBeUnique: a key column that may hold a value in several rows
// is refused (found by an outside review: a value held by 30 rows, then
// deleted from all, kept its counters at 15 for ever); a column that is
// the whole primary key or a unique index's only column is followed.
func TestKeyMustBeUnique(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t,
		`CREATE TABLE pairs (a bigint, b bigint, PRIMARY KEY (a, b))`,
		`CREATE TABLE mails (id bigint PRIMARY KEY, email text, nick text, code text)`,
		`CREATE UNIQUE INDEX ON mails (nick) WHERE nick <> ''`,
		`CREATE UNIQUE INDEX ON mails (code, nick)`,
		`ALTER TABLE mails REPLICA IDENTITY FULL`,
		`CREATE PUBLICATION p FOR TABLE pairs, mails`)
	for _, c := range []struct{ table, col string }{{"pairs", "a"}, {"mails", "email"}, {"mails", "nick"}, {"mails", "code"}} {
		t.Run(c.table+"."+c.col, func(t *testing.T) {
			cfg := e.config()
			cfg.Table, cfg.KeyColumn, cfg.Publication = c.table, c.col, "p"
			e.refused(t, cfg, "unique")
		})
	}
}

// TestLatin1Refused: in a database whose encoding is not UTF-8, a text key
// is refused (found by an outside review: the load stored UTF-8, the
// stream Latin-1 bytes, and the filter held both); an integer key, the
// same bytes in every encoding, is followed.
func TestLatin1Refused(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t, `CREATE DATABASE lat ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`)
	lat := *e.pg
	lat.URL = strings.Replace(e.pg.URL, "/postgres?", "/lat?", 1)
	lat.exec(t, `CREATE TABLE words (w text PRIMARY KEY, n int UNIQUE)`, `ALTER TABLE words REPLICA IDENTITY FULL`,
		`INSERT INTO words VALUES ('é', 1), ('a', 2)`,
		`CREATE PUBLICATION words_pub FOR TABLE words`)
	cfg := e.config()
	cfg.DatabaseURL, cfg.Table, cfg.KeyColumn, cfg.Publication = lat.URL, "words", "w", "words_pub"
	e.refused(t, cfg, "UTF8")
	cfg.KeyColumn = "n"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runSync(t, s)
	e.caughtUp(t, "items")
	f, _ := rbloom.OpenCounting(t.Context(), e.rdb, "items", rbloom.Options{})
	if in, err := f.Info(t.Context()); err != nil || in.Items != 2 {
		t.Errorf("Info.Items = %d, %v; want 2", in.Items, err)
	}
}

// secondSync runs a sync of the filter of e's running sync, changed by
// mut, and returns its error.
func secondSync(t *testing.T, e *env, mut func(*Config)) error {
	t.Helper()
	cfg := e.config()
	cfg.SlotWait = 500 * time.Millisecond
	mut(&cfg)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return stopsWithin(t, s, 20*time.Second, func() {})
}

// TestOneSyncPerFilter: while a sync follows a filter, another with the
// same flags, another slot or -reload fails with ErrBusy and changes
// nothing, and the first goes on (found by an outside review: a second
// sync dropped the first's slot during its load, or loaded the filter
// twice through another slot).
func TestOneSyncPerFilter(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 200000) g`)
	first, _ := New(e.config())
	stop := runSync(t, first)
	for i := 0; first.Stats().Loaded == 0 && i < 1000; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if st := first.Stats(); st.Phase != "loading" {
		t.Fatalf("first sync: %+v, want it loading", st)
	}
	if err := secondSync(t, e, func(*Config) {}); !errors.Is(err, ErrBusy) {
		t.Errorf("a second sync during the load: %v, want ErrBusy", err)
	}
	e.caughtUp(t, "items")
	// Caught up is the state's word: the stream may start a moment later.
	for i := 0; !strings.Contains(e.slots(t), "items_slot true") && i < 500; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	for name, mut := range map[string]func(*Config){
		"same flags":   func(*Config) {},
		"another slot": func(c *Config) { c.Slot = "other_slot" },
		"reload":       func(c *Config) { c.Reload = true },
	} {
		before := e.slots(t)
		if err := secondSync(t, e, mut); !errors.Is(err, ErrBusy) {
			t.Errorf("a second sync (%s) while the first streams: %v, want ErrBusy", name, err)
		}
		if after := e.slots(t); after != before {
			t.Errorf("%s: slots\n%s\nwant\n%s", name, after, before)
		}
	}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := Command(ctx, []string{"-db", e.pg.URL, "-table", "items", "-key", "id", "-filter", "items",
		"-slot", "items_slot", "-publication", "items_pub", "-redis", e.rdb.Options().Addr, "-slot-wait", "500ms"}, &out, &errOut)
	if !errors.Is(err, ErrBusy) {
		t.Errorf("Command while a sync streams = %v, want ErrBusy (stderr %q)", err, errOut.String())
	}
	e.pg.exec(t, `DELETE FROM items WHERE id <= 1000`, `INSERT INTO items VALUES (300000, 'y')`)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("first sync: %v, want context.Canceled", err)
	}
}

// TestTwoStartTogether: syncs of one filter started at once, on one slot
// or two, leave one following the table and the other refused, whichever
// wins (found by an outside review: both exited, or both loaded).
func TestTwoStartTogether(t *testing.T) {
	for _, other := range []string{"items_slot", "other_slot"} {
		t.Run(other, func(t *testing.T) {
			e := newEnv(t)
			e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 30000) g`)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			errs := make(chan error, 2)
			for _, slot := range []string{"items_slot", other} {
				cfg := e.config()
				cfg.Slot, cfg.SlotWait = slot, 0
				s, _ := New(cfg)
				go func() { errs <- s.Run(ctx) }()
			}
			var err error
			select {
			case err = <-errs:
			case <-time.After(30 * time.Second):
				t.Fatal("neither sync stopped")
			}
			if !errors.Is(err, ErrBusy) {
				t.Errorf("the sync that lost: %v, want ErrBusy", err)
			}
			e.pg.exec(t, `DELETE FROM items WHERE id <= 1000`, `INSERT INTO items VALUES (100000, 'y')`)
			e.caughtUp(t, "items")
			e.checkEqual(t, "items")
			if n := strings.Count(e.slots(t), "\n"); n != 1 {
				t.Errorf("%d slots, want 1:\n%s", n, e.slots(t))
			}
			cancel()
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Errorf("the sync that won: %v, want context.Canceled", err)
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer safe for the command's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMessages: errors and warnings name the cause and the fix in the
// command's words (found by an outside review: a flushed Redis blamed
// another sync and printed Lua's false; REPLICA IDENTITY NOTHING on the
// primary key advised making it the primary key; a missing -db named
// Config.DatabaseURL; a first run held by an open transaction, and a load
// far past -capacity, said nothing).
func TestMessages(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 5000) g`, `ALTER TABLE items REPLICA IDENTITY NOTHING`)
	s, _ := New(e.config())
	err := stopsWithin(t, s, 20*time.Second, func() {})
	if err == nil || !strings.Contains(err.Error(), "REPLICA IDENTITY DEFAULT (id is its primary key)") {
		t.Errorf("REPLICA IDENTITY NOTHING: %v, want the advice REPLICA IDENTITY DEFAULT", err)
	}
	e.pg.exec(t, `ALTER TABLE items REPLICA IDENTITY DEFAULT`)

	t.Setenv("DATABASE_URL", "")
	var out lockedBuffer
	err = Command(t.Context(), []string{"-table", "items", "-key", "id", "-filter", "items", "-slot", "items_slot",
		"-publication", "items_pub", "-redis", e.rdb.Options().Addr}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "-db") {
		t.Errorf("Command without -db: %v, want an error naming -db", err)
	}

	open := e.pg.conn(t)
	if _, err := open.Exec(t.Context(), `BEGIN; INSERT INTO items VALUES (100000, 'open')`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- Command(ctx, []string{"-db", e.pg.URL, "-table", "items", "-key", "id", "-filter", "items", "-slot", "items_slot",
			"-publication", "items_pub", "-redis", e.rdb.Options().Addr, "-capacity", "1000"}, &out, &errOut)
	}()
	for i := 0; i < 100 && !strings.Contains(errOut.String(), "open"); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := open.Exec(t.Context(), `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	e.caughtUp(t, "items")
	for i := 0; i < 50 && !strings.Contains(errOut.String(), "capacity"); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if got := errOut.String(); !strings.Contains(got, "waits for the transactions open") || !strings.Contains(got, "past its capacity") {
		t.Errorf("the command's stderr:\n%s\nwant what the first run waits for, and a warning about -capacity", got)
	}
	cancel()
	<-done

	s, _ = New(e.config())
	err = stopsWithin(t, s, 20*time.Second, func() {
		for i := 0; i < 200 && s.Stats().Phase != "streaming"; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		e.caughtUp(t, "items")
		e.rdb.FlushAll(t.Context())
		e.pg.exec(t, `INSERT INTO items VALUES (100001, 'y')`)
	})
	if msg := fmt.Sprint(err); !strings.Contains(msg, "gone from Redis") || strings.Contains(msg, "false") || strings.Contains(msg, "another sync") {
		t.Errorf("Run after FLUSHALL: %v, want an error saying the state is gone from Redis, blaming no other sync", err)
	}
}
