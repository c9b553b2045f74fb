//go:build unix

package pgsync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
	"github.com/redis/go-redis/v9"
)

// world is one case of TestWorldChanges: a database of the shared server
// with the table items (rows 1..1000), its own Redis, and a sync running
// as the command runs it.
type world struct {
	*env
	server *postgres // the shared server, for a restart
	redis  *rbloomtest.Server
	db     string // the case's database
	cfg    Config
	s      *Sync
	errs   chan error // the runner's error, once it gave up
}

// worldRows is the number of rows a case starts with; worldStable the
// keys 1..worldStable that stay in the table throughout every case that
// keeps the table, which the reader tests.
const worldRows, worldStable = 1000, 500

// sql runs statements in the case's database.
func (w *world) sql(t *testing.T, sqls ...string) { t.Helper(); w.pg.exec(t, sqls...) }

// churn writes inserts, deletes and key changes of rows past the stable
// keys, in transactions of their own.
func (w *world) churn(t *testing.T, round int) {
	t.Helper()
	b := 10000 * (round + 1)
	w.sql(t,
		fmt.Sprintf(`INSERT INTO items SELECT g, 'c' FROM generate_series(%d, %d) g`, b, b+99),
		fmt.Sprintf(`DELETE FROM items WHERE id BETWEEN %d AND %d`, b, b+19),
		fmt.Sprintf(`UPDATE items SET id = id + 500000 WHERE id BETWEEN %d AND %d`, b+20, b+39),
		fmt.Sprintf(`BEGIN; DELETE FROM items WHERE id = %d; INSERT INTO items VALUES (%d, 'again'); COMMIT`, b+50, b+50),
	)
}

// running reports whether the sync still runs.
func (w *world) running() bool {
	select {
	case err := <-w.errs:
		w.errs <- err
		return false
	default:
		return true
	}
}

// keepRunning runs s as Command does: again, after a pause, when Run
// fails with an error that running again may cure, until ctx is done or
// an error the operator must act on (Permanent, ErrBusy, ErrSlotActive).
func keepRunning(ctx context.Context, s *Sync) error {
	for {
		err := s.Run(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if Permanent(err) || errors.Is(err, ErrBusy) || errors.Is(err, ErrSlotActive) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// reader tests keys again and again, counting the answers "absent" and
// the reads that failed (a missing filter fails with ErrNotFound: it
// never answers "absent").
type reader struct {
	absent, failed, reads atomic.Int64
	firstErr              atomic.Value
	stop                  atomic.Bool
	done                  chan struct{}
}

func startReader(t *testing.T, rdb *redis.Client, keys []string) *reader {
	t.Helper()
	f, err := rbloom.OpenCounting(t.Context(), rdb, "items", rbloom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for !r.stop.Load() {
			got, err := f.TestMany(context.Background(), keys)
			r.reads.Add(1)
			if err != nil {
				r.failed.Add(1)
				r.firstErr.CompareAndSwap(nil, err.Error())
				time.Sleep(20 * time.Millisecond)
				continue
			}
			for _, ok := range got {
				if !ok {
					r.absent.Add(1)
				}
			}
			time.Sleep(2 * time.Millisecond) // other engineers share the cores
		}
	}()
	t.Cleanup(func() { r.stop.Store(true); <-r.done })
	return r
}

// worldCase is one change of the world while the sync streams. The sync
// must either follow it (stops nil: the filter ends equal to the table
// and the sync still runs) or stop with the named error, saying says;
// never go on wrong. In both, no key of the table may test absent.
type worldCase struct {
	name   string
	slow   bool   // skipped under -short
	dbOpts string // appended to CREATE DATABASE
	redis  []string
	setup  []string // run before the sync starts
	cfg    func(w *world, c *Config)
	change func(t *testing.T, w *world)
	stops  error
	says   string
	// emptied says why readers may see keys absent: the change emptied
	// the filter from outside, which no sync can keep readers from; the
	// sync must stop.
	emptied string
}

// do returns a change that runs statements.
func do(sqls ...string) func(*testing.T, *world) {
	return func(t *testing.T, w *world) { t.Helper(); w.sql(t, sqls...) }
}

// worldCases: every change of the world around a running sync the
// matrix checks. Elsewhere: a second sync during the load
// (TestOneSyncPerFilter), syncs started together (TestTwoStartTogether),
// a stalled sync fenced (TestStaleSyncFenced), Redis back from an older
// snapshot (TestRolledBackStateRefused), a text key in a LATIN1 database
// refused at start (TestLatin1Refused), crashes (TestCrashPoints,
// TestEndToEnd).
var worldCases = []worldCase{
	// DDL of the table and its key column.
	{name: "table renamed", stops: ErrInvalid, says: "does not exist",
		change: do(`ALTER TABLE items RENAME TO items_renamed`, `INSERT INTO items_renamed VALUES (5000, 'y')`)},
	{name: "key column renamed", stops: ErrInvalid, says: "no column",
		change: do(`ALTER TABLE items RENAME id TO ident`, `INSERT INTO items VALUES (5000, 'y')`)},
	{name: "tables swapped", stops: ErrInvalid, says: "now another table",
		setup: []string{`CREATE TABLE items2 (id bigint PRIMARY KEY, v text)`, `ALTER PUBLICATION items_pub ADD TABLE items2`,
			`INSERT INTO items2 SELECT g, 'x' FROM generate_series(1, 1000) g`},
		change: do(`BEGIN; ALTER TABLE items RENAME TO items_old; ALTER TABLE items2 RENAME TO items; COMMIT`,
			`INSERT INTO items VALUES (5000, 'y')`)},
	{name: "key columns swapped", stops: ErrInvalid, says: "column",
		setup: []string{`ALTER TABLE items ADD COLUMN other bigint UNIQUE`, `UPDATE items SET other = id + 1000000`,
			`ALTER TABLE items REPLICA IDENTITY FULL`},
		change: do(`BEGIN; ALTER TABLE items RENAME id TO id_old; ALTER TABLE items RENAME other TO id; COMMIT`,
			`INSERT INTO items VALUES (5000, 'y', 5001)`)},
	{name: "key column dropped and added again", stops: ErrInvalid, says: "column",
		setup: []string{`ALTER TABLE items ADD COLUMN other bigint UNIQUE`, `ALTER TABLE items REPLICA IDENTITY FULL`},
		change: do(`ALTER TABLE items DROP COLUMN id`, `ALTER TABLE items ADD COLUMN id bigint UNIQUE`,
			`INSERT INTO items (id, v, other) VALUES (5000, 'y', 1)`)},
	{name: "key column retyped", stops: ErrInvalid, says: "type",
		change: do(`ALTER TABLE items ALTER id TYPE char(8)`, `INSERT INTO items VALUES ('k1', 'x')`)},
	{name: "table dropped", stops: ErrInvalid, says: "does not exist",
		change: do(`DROP TABLE items`)},
	{name: "table dropped and created again", stops: ErrInvalid, says: "table",
		change: do(`DROP TABLE items`, `CREATE TABLE items (id bigint PRIMARY KEY, v text)`,
			`INSERT INTO items SELECT g, 'x' FROM generate_series(1, 1000) g`)},
	{name: "child table", stops: ErrInvalid, says: "inherit",
		change: do(`CREATE TABLE kid () INHERITS (items)`, `INSERT INTO kid VALUES (999999, 'x')`)},

	// The publication.
	{name: "table dropped from the publication", stops: ErrInvalid, says: "publication",
		change: do(`ALTER PUBLICATION items_pub DROP TABLE items`, `DELETE FROM items WHERE id BETWEEN 600 AND 610`)},
	{name: "publication dropped", stops: ErrInvalid, says: "publication",
		change: do(`DROP PUBLICATION items_pub`, `DELETE FROM items WHERE id BETWEEN 600 AND 610`)},
	{name: "publication without update and delete", stops: ErrInvalid, says: "publication",
		change: do(`ALTER PUBLICATION items_pub SET (publish = 'insert, truncate')`,
			`DELETE FROM items WHERE id BETWEEN 600 AND 610`, `UPDATE items SET id = id + 100000 WHERE id BETWEEN 700 AND 710`)},
	{name: "row filter", stops: ErrInvalid, says: "publication",
		change: do(`ALTER PUBLICATION items_pub SET TABLE items WHERE (id > 50)`, `DELETE FROM items WHERE id BETWEEN 600 AND 610`)},
	{name: "key left out of the publication", stops: ErrInvalid, says: "publication",
		change: do(`ALTER PUBLICATION items_pub SET TABLE items (v)`, `INSERT INTO items VALUES (5000, 'y')`)},

	// Changes undone before the sync looks (attacks from outside): the
	// stream carries what was sent meanwhile, the catalog looks as before.
	{name: "row filter added and removed in one transaction", stops: ErrInvalid, says: "publication",
		change: do(`BEGIN; ALTER PUBLICATION items_pub SET TABLE items WHERE (id > 50000); INSERT INTO items VALUES (7000, 'y');
			ALTER PUBLICATION items_pub SET TABLE items; COMMIT`)},
	{name: "table dropped from the publication and added back", stops: ErrInvalid, says: "publication",
		change: do(`ALTER PUBLICATION items_pub DROP TABLE items`, `INSERT INTO items VALUES (7000, 'y')`,
			`ALTER PUBLICATION items_pub ADD TABLE items`)},
	{name: "key columns swapped and swapped back in one transaction", stops: ErrInvalid, says: "column",
		setup: []string{`ALTER TABLE items ADD COLUMN other bigint UNIQUE`, `UPDATE items SET other = id + 1000000`,
			`ALTER TABLE items REPLICA IDENTITY FULL`},
		change: do(`BEGIN; ALTER TABLE items RENAME id TO id_old; ALTER TABLE items RENAME other TO id; INSERT INTO items VALUES (7000, 'y', 7001);
			ALTER TABLE items RENAME id TO other; ALTER TABLE items RENAME id_old TO id; COMMIT`)},
	{name: "schema dropped from the publication and added back in one transaction", stops: ErrInvalid, says: "altered",
		setup: []string{`DROP PUBLICATION items_pub`, `CREATE PUBLICATION items_pub FOR TABLES IN SCHEMA public`},
		change: do(`BEGIN; ALTER PUBLICATION items_pub DROP TABLES IN SCHEMA public; INSERT INTO items VALUES (7000, 'y');
			ALTER PUBLICATION items_pub ADD TABLES IN SCHEMA public; COMMIT`)},
	{name: "publication dropped and created again", stops: ErrInvalid, says: "publication",
		change: do(`BEGIN; DROP PUBLICATION items_pub; INSERT INTO items VALUES (7000, 'y'); CREATE PUBLICATION items_pub FOR TABLE items; COMMIT`,
			`INSERT INTO items VALUES (7001, 'y')`)},
	{name: "key column retyped and back in one transaction", stops: ErrInvalid, says: "reload",
		change: do(`BEGIN; ALTER TABLE items ALTER id TYPE text; INSERT INTO items VALUES ('007000', 'y');
			DELETE FROM items WHERE id = '007000'; ALTER TABLE items ALTER id TYPE bigint USING id::bigint; COMMIT`,
			`INSERT INTO items VALUES (7001, 'y')`)},
	{name: "key removed from the filter by hand", stops: ErrFilter, says: "absent from filter",
		emptied: "a key of the table removed by hand tests absent",
		change: func(t *testing.T, w *world) {
			f, err := rbloom.OpenCounting(t.Context(), w.rdb, "items", rbloom.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Remove(t.Context(), "600"); err != nil {
				t.Fatal(err)
			}
			w.sql(t, `DELETE FROM items WHERE id = 600`)
		}},
	{name: "filter deleted and created again", stops: ErrFilter, says: "made again",
		emptied: "an empty filter made by hand answers absent for every key",
		change: func(t *testing.T, w *world) {
			f, err := rbloom.NewCounting(w.rdb, "items", w.cfg.filterOptions())
			if err != nil {
				t.Fatal(err)
			}
			if err := w.rdb.Del(t.Context(), "rbloom:{items}").Err(); err != nil {
				t.Fatal(err)
			}
			if err := f.Create(t.Context()); err != nil {
				t.Fatal(err)
			}
			w.sql(t, `INSERT INTO items VALUES (7000, 'y')`)
		}},

	{name: "other tables added to the publication", stops: ErrInvalid, says: "added to the publication", change: do(`CREATE TABLE t2 (a int PRIMARY KEY)`, `CREATE TABLE t3 (a int PRIMARY KEY)`,
		`ALTER PUBLICATION items_pub ADD TABLE t2`, `ALTER PUBLICATION items_pub SET TABLE items, t3`,
		`INSERT INTO t3 VALUES (1)`, `INSERT INTO items VALUES (7000, 'y')`)},

	// Other syncs and the stream's content.
	{name: "second sync on the filter", change: func(t *testing.T, w *world) {
		for _, slot := range []string{w.cfg.Slot, w.cfg.Slot + "_other"} {
			cfg := w.cfg
			cfg.Slot, cfg.SlotWait = slot, 300*time.Millisecond
			s, _ := New(cfg)
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			err := s.Run(ctx)
			cancel()
			if !errors.Is(err, ErrBusy) {
				t.Errorf("a second sync through slot %s: %v, want ErrBusy", slot, err)
			}
		}
	}},
	{name: "hot key 15 times in one transaction", change: func(t *testing.T, w *world) {
		var b strings.Builder
		b.WriteString("BEGIN;")
		for range 16 {
			b.WriteString("INSERT INTO items VALUES (5000, 'h'); DELETE FROM items WHERE id = 5000;")
			b.WriteString("DELETE FROM items WHERE id = 5; INSERT INTO items VALUES (5, 'h');") // a stable key
		}
		b.WriteString("COMMIT")
		w.sql(t, b.String())
		w.caughtUp(t, "items")
		w.absentAfter(t, "5000")
	}},
	{name: "hot key in 40 transactions of one group", slow: true,
		cfg: func(_ *world, c *Config) { c.MaxDelay = 3 * time.Second },
		change: func(t *testing.T, w *world) {
			c := w.pg.conn(t)
			for range 20 {
				for _, q := range []string{`INSERT INTO items VALUES (6000, 'h')`, `DELETE FROM items WHERE id = 6000`} {
					if _, err := c.Exec(t.Context(), q); err != nil {
						t.Fatal(err)
					}
				}
			}
			w.caughtUp(t, "items")
			w.absentAfter(t, "6000")
		}},
	{name: "every key changed in one transaction", change: do(
		`BEGIN; UPDATE items SET id = -id; UPDATE items SET id = -id + 1; INSERT INTO items VALUES (1, 'x'); COMMIT`,
		`BEGIN; INSERT INTO items VALUES (8000, 's'); SAVEPOINT a; DELETE FROM items WHERE id <= 700; ROLLBACK TO a; COMMIT`,
		`INSERT INTO items VALUES (8001, 'u') ON CONFLICT (id) DO NOTHING`,
		`INSERT INTO items VALUES (8001, 'u') ON CONFLICT (id) DO UPDATE SET id = 8002`)},
	{name: "TRUNCATE", change: do(
		`BEGIN; TRUNCATE items; INSERT INTO items SELECT g, 't' FROM generate_series(1, 800) g; COMMIT`,
		`BEGIN; TRUNCATE items; INSERT INTO items SELECT g, 't' FROM generate_series(1, 700) g; DELETE FROM items WHERE id > 600; COMMIT`)},

	// Redis.
	{name: "filter deleted", stops: ErrFilter, says: "vanished",
		change: func(t *testing.T, w *world) {
			if err := w.rdb.Del(t.Context(), "rbloom:{items}").Err(); err != nil {
				t.Fatal(err)
			}
			w.sql(t, `INSERT INTO items VALUES (5000, 'y')`)
		}},
	{name: "Redis restarted with its data", redis: []string{"--appendonly", "yes", "--appendfsync", "always"},
		change: func(t *testing.T, w *world) { w.redis.Restart(); w.churn(t, 7) }},
	{name: "Redis restarted empty", stops: ErrFilter, says: "gone from Redis",
		change: func(t *testing.T, w *world) { w.redis.Restart(); w.churn(t, 7) }},

	{name: "Redis permissions revoked", stops: ErrInvalid, says: "permission",
		cfg: func(w *world, c *Config) {
			if err := w.rdb.Do(context.Background(), "ACL", "SETUSER", "syncer", "on", ">pw", "~*", "+@all").Err(); err != nil {
				panic(err)
			}
			c.Redis = redis.NewClient(&redis.Options{Addr: w.redis.Addr(), Username: "syncer", Password: "pw"})
		},
		change: func(t *testing.T, w *world) {
			if err := w.rdb.Do(t.Context(), "ACL", "SETUSER", "syncer", "-@scripting").Err(); err != nil {
				t.Fatal(err)
			}
			w.churn(t, 7)
		}},

	// PostgreSQL.
	{name: "PostgreSQL restarted",
		change: func(t *testing.T, w *world) { w.server.restart(); w.churn(t, 7) }},
	{name: "slot dropped", stops: ErrSlotMissing, says: "does not exist",
		change: func(t *testing.T, w *world) {
			w.churn(t, 7)
			c := w.pg.conn(t)
			for i := 0; ; i++ { // the runner takes the slot again after each terminate
				_, err := c.Exec(t.Context(), `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots WHERE slot_name = $1 AND active`, w.cfg.Slot)
				if err == nil {
					_, err = c.Exec(t.Context(), `SELECT pg_drop_replication_slot($1)`, w.cfg.Slot)
				}
				if err == nil {
					break
				}
				if i == 50 {
					t.Fatalf("drop slot: %v", err)
				}
			}
		}},
	{name: "privileges revoked", stops: ErrInvalid, says: "GRANT SELECT",
		setup: []string{`CREATE ROLE syncer LOGIN REPLICATION`, `GRANT SELECT ON items TO syncer`},
		cfg: func(w *world, c *Config) {
			c.DatabaseURL = strings.Replace(w.pg.URL, "postgres@", "syncer@", 1)
		},
		change: func(t *testing.T, w *world) {
			// The stream goes on: PostgreSQL checks neither at its messages.
			w.sql(t, `REVOKE SELECT ON items FROM syncer`, `ALTER ROLE syncer NOREPLICATION`)
			w.churn(t, 7)
			w.caughtUp(t, "items")
			w.checkEqual(t, "items")
			// Its next run is refused, writing nothing.
			w.sql(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'syncer'`)
		}},
	{name: "LATIN1 database, integer key", dbOpts: `ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`,
		change: func(t *testing.T, w *world) { w.sql(t, `UPDATE items SET v = 'é' WHERE id > 900`) }},
}

// TestWorldChanges: each change of the world while the sync streams
// (worldCases) is followed, the filter ending equal to the table, or
// stops the sync with a named error; a reader of the keys that stay in
// the table never sees one absent. The cases share one PostgreSQL server,
// a database each.
func TestWorldChanges(t *testing.T) {
	server := startPostgres(t)
	for i, c := range worldCases {
		t.Run(c.name, func(t *testing.T) {
			if c.slow && testing.Short() {
				t.Skip("slow: not with -short")
			}
			runWorldCase(t, server, i, c)
		})
	}
}

func runWorldCase(t *testing.T, server *postgres, i int, c worldCase) {
	w := &world{server: server, db: fmt.Sprintf("world%d", i), redis: rbloomtest.StartServer(t, c.redis...)}
	server.exec(t, fmt.Sprintf(`CREATE DATABASE %s %s`, w.db, c.dbOpts))
	pg := *server
	pg.URL = strings.Replace(server.URL, "/postgres?", "/"+w.db+"?", 1)
	rdb := redis.NewClient(&redis.Options{Addr: w.redis.Addr()})
	t.Cleanup(func() { rdb.Close() })
	w.env = &env{pg: &pg, rdb: rdb}
	w.sql(t, `CREATE TABLE items (id bigint PRIMARY KEY, v text)`, `CREATE PUBLICATION items_pub FOR TABLE items`,
		fmt.Sprintf(`INSERT INTO items SELECT g, 'x' FROM generate_series(1, %d) g`, worldRows))
	w.sql(t, c.setup...)
	w.cfg = w.config()
	w.cfg.Slot = w.db // slots are the server's, not a database's
	w.cfg.SlotWait = 2 * time.Second
	if c.cfg != nil {
		c.cfg(w, &w.cfg)
		if w.cfg.Redis != rdb {
			t.Cleanup(func() { w.cfg.Redis.Close() })
		}
	}
	var err error
	if w.s, err = New(w.cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	w.errs = make(chan error, 1)
	go func() { w.errs <- keepRunning(ctx, w.s) }()
	t.Cleanup(func() {
		cancel()
		<-w.errs
		// The server has room for 10 slots: the cases drop theirs.
		c := server.conn(t)
		if _, err := waitSlot(context.Background(), c, w.cfg.Slot, 10*time.Second); err == nil {
			_, _ = c.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, w.cfg.Slot)
		}
	})
	w.caughtUp(t, "items")
	w.churn(t, 0)
	w.caughtUp(t, "items")

	stable := make([]string, worldStable)
	for k := range stable {
		stable[k] = strconv.Itoa(k + 1)
	}
	r := startReader(t, rdb, stable)
	for r.reads.Load() < 3 {
		time.Sleep(5 * time.Millisecond)
	}
	c.change(t, w)

	if c.stops == nil {
		w.churn(t, 8)
		w.caughtUp(t, "items")
		w.checkEqual(t, "items")
		if !w.running() {
			t.Errorf("the sync stopped: %v", <-w.errs)
		}
	} else {
		select {
		case err := <-w.errs:
			w.errs <- err
			if !errors.Is(err, c.stops) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("the sync stopped with %v, want %v saying %q", err, c.stops, c.says)
			} else {
				t.Logf("stopped: %v", err)
			}
		case <-time.After(20 * time.Second):
			w.caughtUp(t, "items")
			t.Errorf("the sync went on for 20s after the change, want %v saying %q; %s", c.stops, c.says, w.absentRows(t))
		}
	}
	r.stop.Store(true)
	<-r.done
	if n := r.absent.Load(); n > 0 && c.emptied != "" {
		t.Logf("%d keys tested absent in %d reads: %s", n, r.reads.Load(), c.emptied)
	} else if n > 0 {
		t.Errorf("%d keys the table held throughout tested absent, in %d reads", n, r.reads.Load())
	}
	if n := r.failed.Load(); n > 0 {
		t.Logf("%d of %d reads failed (first: %v)", n, r.reads.Load(), r.firstErr.Load())
	}
}

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

// absentRows tells how many of the table's keys test absent.
func (w *world) absentRows(t *testing.T) string {
	t.Helper()
	keys := w.rowKeys(t)
	f, err := rbloom.OpenCounting(t.Context(), w.rdb, "items", rbloom.Options{})
	if err != nil {
		return err.Error()
	}
	got, err := f.TestMany(t.Context(), keys)
	if err != nil {
		return err.Error()
	}
	var absent []string
	for i, ok := range got {
		if !ok {
			absent = append(absent, keys[i])
		}
	}
	return fmt.Sprintf("%d of the table's %d keys test absent %v", len(absent), len(keys), absent[:min(len(absent), 5)])
}

// TestChangedWhileDown: a publication altered and put back, or a filter
// deleted and made again, while no sync ran is refused at the next start:
// the stream it would resume from was decoded with the altered
// publication, and the filter lost its keys. A state written before the
// sync kept those versions gets them at its next start.
func TestChangedWhileDown(t *testing.T) {
	e, stop := following(t, 100)
	stop()
	refused := func() error {
		t.Helper()
		s, err := New(e.config())
		if err != nil {
			t.Fatal(err)
		}
		return stopsWithin(t, s, 10*time.Second, func() {})
	}
	e.pg.exec(t, `BEGIN; ALTER PUBLICATION items_pub SET TABLE items WHERE (id > 50000); INSERT INTO items VALUES (7000, 'y');
		ALTER PUBLICATION items_pub SET TABLE items; COMMIT`)
	if err := refused(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "altered since") {
		t.Errorf("Run after the publication was altered and put back: %v, want ErrInvalid saying it was altered since; %s",
			err, (&world{env: e}).absentRows(t))
	}
	cfg := e.config()
	cfg.Reload = true
	s, _ := New(cfg)
	stop = runSync(t, s)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
	stop()

	f, _ := rbloom.NewCounting(e.rdb, "items", cfg.filterOptions())
	if err := e.rdb.Del(t.Context(), "rbloom:{items}").Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.pg.exec(t, `INSERT INTO items VALUES (7001, 'y')`)
	if err := refused(); !errors.Is(err, ErrFilter) || !strings.Contains(err.Error(), "made again") {
		t.Errorf("Run on a filter deleted and made again: %v, want ErrFilter saying it was made again; %s", err, (&world{env: e}).absentRows(t))
	}

	s, _ = New(cfg) // reload
	stop = runSync(t, s)
	e.caughtUp(t, "items")
	stop()
	key := stateKey("", "items")
	want := e.rdb.HMGet(t.Context(), key, "catalog", "inc").Val()
	e.rdb.HDel(t.Context(), key, "catalog", "inc")
	s, _ = New(e.config())
	stop = runSync(t, s)
	streaming(t, s) // after the fields are written
	e.caughtUp(t, "items")
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run on a state without catalog and inc: %v, want it to go on", err)
	}
	if got := e.rdb.HMGet(t.Context(), key, "catalog", "inc").Val(); fmt.Sprint(got) != fmt.Sprint(want) || got[1] == nil {
		t.Errorf("state's catalog and inc after the run: %q, want %q", got, want)
	}
	e.checkEqual(t, "items")
}

// TestSlotTakenOver: a sync of another filter, reloaded through the slot
// of a stopped sync, makes the slot again; the stopped sync's next start
// is refused, never streamed from the new slot (whose changes begin after
// the ones the filter misses).
func TestSlotTakenOver(t *testing.T) {
	e, stop := following(t, 100)
	stop()
	cfg := e.config()
	cfg.Filter, cfg.Reload = "other", true
	s, _ := New(cfg)
	stop = runSync(t, s)
	e.caughtUp(t, "other")
	e.pg.exec(t, `INSERT INTO items VALUES (7000, 'y')`)
	e.caughtUp(t, "other")
	stop()
	first, _ := New(e.config())
	if err := stopsWithin(t, first, 10*time.Second, func() {}); !Permanent(err) || !strings.Contains(err.Error(), "made again") {
		t.Errorf("Run of the first sync after another filter's reload took its slot: %v, want a permanent error saying the slot was made again; %s",
			err, (&world{env: e}).absentRows(t))
	}
}

// TestLostKeysStopAgain: a sync stopped because a remove found its key
// absent stops the same way when run again, until a reload.
func TestLostKeysStopAgain(t *testing.T) {
	e, stop := following(t, 100)
	stop()
	f, err := rbloom.OpenCounting(t.Context(), e.rdb, "items", rbloom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Remove(t.Context(), "50"); err != nil {
		t.Fatal(err)
	}
	e.pg.exec(t, `DELETE FROM items WHERE id = 50`)
	for i := range 2 {
		s, _ := New(e.config())
		if err := stopsWithin(t, s, 10*time.Second, func() {}); !errors.Is(err, ErrFilter) || !strings.Contains(err.Error(), "absent from filter") {
			t.Errorf("run %d: %v, want ErrFilter saying a key was absent", i, err)
		}
	}
	cfg := e.config()
	cfg.Reload = true
	s, _ := New(cfg)
	runSync(t, s)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
}

// TestSlotInvalidated: a slot PostgreSQL invalidated (past
// max_slot_wal_keep_size while the sync was down) has lost changes: the
// sync's next start stops with ErrSlotMissing, never retries for ever.
func TestSlotInvalidated(t *testing.T) {
	e, stop := following(t, 100)
	stop()
	e.pg.exec(t, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`, `SELECT pg_reload_conf()`)
	for i := 0; ; i++ {
		e.pg.exec(t, `INSERT INTO items SELECT g, repeat('w', 200) FROM generate_series(1000000 + 40000 * `+strconv.Itoa(i)+`, 1000000 + 40000 * `+strconv.Itoa(i)+` + 39999) g`,
			`SELECT pg_switch_wal()`, `CHECKPOINT`)
		var status string
		c := e.pg.conn(t)
		if err := c.QueryRow(t.Context(), `SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'items_slot'`).Scan(&status); err != nil {
			t.Fatal(err)
		}
		c.Close(context.Background())
		if status == "lost" {
			break
		}
		if i == 20 {
			t.Fatalf("slot not invalidated: wal_status %s", status)
		}
	}
	e.pg.exec(t, `ALTER SYSTEM RESET max_slot_wal_keep_size`, `SELECT pg_reload_conf()`)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	s, _ := New(e.config())
	if err := keepRunning(ctx, s); !errors.Is(err, ErrSlotMissing) {
		t.Errorf("the sync on an invalidated slot: %v, want ErrSlotMissing", err)
	}
}

// TestPublicationGrows: tables added to the publication stop a running
// sync (their changes could be a child table's), but leave what the
// publication sends of the followed table as it was: the next start goes
// on, no reload needed.
func TestPublicationGrows(t *testing.T) {
	e, stop := following(t, 100)
	stop()
	e.pg.exec(t, `CREATE TABLE t2 (a int PRIMARY KEY)`, `CREATE TABLE t3 (a int PRIMARY KEY)`,
		`ALTER PUBLICATION items_pub ADD TABLE t2`, `ALTER PUBLICATION items_pub SET TABLE items, t3`,
		`INSERT INTO t3 VALUES (1)`, `INSERT INTO items VALUES (7000, 'y')`)
	s, _ := New(e.config())
	runSync(t, s)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
}
