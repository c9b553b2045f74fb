//go:build unix

package pgsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rbloom/rbloom"
)

// slots returns the server's replication slots as text.
func (e *env) slots(t testing.TB) string {
	t.Helper()
	c := e.pg.conn(t)
	defer c.Close(context.Background())
	rows, err := c.Query(t.Context(), `SELECT slot_name, active, coalesce(confirmed_flush_lsn::text, '') FROM pg_replication_slots ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		var name, lsn string
		var active bool
		if err := rows.Scan(&name, &active, &lsn); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %v %s\n", name, active, lsn)
	}
	return b.String()
}

// loadedThenStopped runs a sync until it streams, and stops it.
func (e *env) loadedThenStopped(t *testing.T) {
	t.Helper()
	s, _ := New(e.config())
	stop := runSync(t, s)
	e.caughtUp(t, "items")
	stop()
	// PostgreSQL releases the slot when it notices the connection closed.
	c := e.pg.conn(t)
	defer c.Close(context.Background())
	if _, err := waitSlot(t.Context(), c, "items_slot", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestBadInput: each configuration that cannot give a correct sync fails
// with a clear error and writes nothing, to Redis or to PostgreSQL.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t,
		`INSERT INTO items SELECT g, 'x' FROM generate_series(1, 100) g`,
		`CREATE TABLE docs (id bigint PRIMARY KEY, doc jsonb, score float8, n numeric)`,
		`CREATE TABLE loose (id bigint, v text)`,
		`CREATE TABLE other (id bigint PRIMARY KEY)`,
		`CREATE PUBLICATION docs_pub FOR TABLE docs`,
		`CREATE PUBLICATION loose_pub FOR TABLE loose`,
		`CREATE PUBLICATION other_pub FOR TABLE other`,
		`CREATE PUBLICATION notrunc_pub FOR TABLE items WITH (publish = 'insert, update, delete')`,
		// Found by an outside review: a char(n) key, whose load trimmed what
		// the stream padded; a partitioned table and a table with a child,
		// whose rows come and go without changes the stream names.
		`CREATE TABLE padded (id char(8) PRIMARY KEY)`,
		`CREATE PUBLICATION padded_pub FOR TABLE padded`,
		`CREATE TABLE parted (id bigint PRIMARY KEY) PARTITION BY RANGE (id)`,
		`CREATE PUBLICATION parted_pub FOR TABLE parted`,
		`CREATE TABLE parent (id bigint PRIMARY KEY)`,
		`CREATE TABLE child () INHERITS (parent)`,
		`CREATE PUBLICATION parent_pub FOR TABLE parent`,
	)
	ctx := t.Context()
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) // before the snapshot; undone by cleanup
		mut   func(*Config)
		want  error
		says  string
	}{
		{name: "table missing", mut: func(c *Config) { c.Table = "nope" }, want: ErrInvalid, says: `table "nope" does not exist`},
		{name: "column missing", mut: func(c *Config) { c.KeyColumn = "nope" }, want: ErrInvalid, says: `no column "nope"`},
		{name: "jsonb key", mut: func(c *Config) { c.Table, c.KeyColumn, c.Publication = "docs", "doc", "docs_pub" }, want: ErrInvalid, says: "of type jsonb"},
		{name: "float key", mut: func(c *Config) { c.Table, c.KeyColumn, c.Publication = "docs", "score", "docs_pub" }, want: ErrInvalid, says: "of type float8"},
		{name: "numeric key", mut: func(c *Config) { c.Table, c.KeyColumn, c.Publication = "docs", "n", "docs_pub" }, want: ErrInvalid, says: "of type numeric"},
		{name: "char(n) key", mut: func(c *Config) { c.Table, c.Publication = "padded", "padded_pub" }, want: ErrInvalid, says: "of type bpchar"},
		{name: "partitioned table", mut: func(c *Config) { c.Table, c.Publication = "parted", "parted_pub" }, want: ErrInvalid, says: "partitioned table"},
		{name: "table with a child", mut: func(c *Config) { c.Table, c.Publication = "parent", "parent_pub" }, want: ErrInvalid, says: "inherit from it"},
		{name: "key not in the replica identity", mut: func(c *Config) { c.KeyColumn = "v" }, want: ErrInvalid, says: "replica identity"},
		{name: "table without primary key", mut: func(c *Config) { c.Table, c.Publication = "loose", "loose_pub" }, want: ErrInvalid, says: "REPLICA IDENTITY FULL"},
		{name: "replica identity nothing", setup: func(t *testing.T) {
			e.pg.exec(t, `ALTER TABLE items REPLICA IDENTITY NOTHING`)
			t.Cleanup(func() { e.pg.exec(t, `ALTER TABLE items REPLICA IDENTITY DEFAULT`) })
		}, want: ErrInvalid, says: "replica identity"},
		{name: "publication missing", mut: func(c *Config) { c.Publication = "nope" }, want: ErrInvalid, says: `publication "nope" does not exist`},
		{name: "publication of another table", mut: func(c *Config) { c.Publication = "other_pub" }, want: ErrInvalid, says: "does not include table"},
		{name: "publication without truncate", mut: func(c *Config) { c.Publication = "notrunc_pub" }, want: ErrInvalid, says: "truncate false"},
		{name: "bad slot name", mut: func(c *Config) { c.Slot = "Items-Slot" }, want: ErrInvalid, says: "Config.Slot"},
		{name: "classic filter", setup: func(t *testing.T) {
			f, _ := rbloom.NewClassic(e.rdb, "items", rbloom.Options{Capacity: 1000})
			if err := f.Create(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Add(ctx, "x"); err != nil {
				t.Fatal(err)
			}
		}, want: ErrFilter, says: "counting"},
		{name: "filter loaded by someone else", setup: func(t *testing.T) {
			f, _ := rbloom.NewCounting(e.rdb, "items", rbloom.Options{Capacity: 1000})
			if err := f.Create(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Add(ctx, "x"); err != nil {
				t.Fatal(err)
			}
		}, want: ErrFilter, says: "no sync loaded it"},
		{name: "slot of another consumer", setup: func(t *testing.T) {
			e.pg.exec(t, `SELECT pg_create_logical_replication_slot('items_slot', 'pgoutput')`)
		}, want: ErrInvalid, says: "another consumer's slot"},
		{name: "slot missing", setup: func(t *testing.T) {
			e.loadedThenStopped(t)
			e.pg.exec(t, `SELECT pg_drop_replication_slot('items_slot')`)
		}, want: ErrSlotMissing, says: "does not exist"},
		{name: "slot active", setup: func(t *testing.T) {
			e.loadedThenStopped(t)
			repl, _, err := connectReplication(ctx, e.pg.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { repl.Close(context.Background()) })
			err = pglogrepl.StartReplication(ctx, repl, "items_slot", 0, pglogrepl.StartReplicationOptions{
				Mode: pglogrepl.LogicalReplication, PluginArgs: []string{"proto_version '1'", "publication_names 'items_pub'"}})
			if err != nil {
				t.Fatal(err)
			}
		}, mut: func(c *Config) { c.SlotWait = 0 }, want: ErrSlotActive, says: "used by another process"},
		{name: "reload while the previous sync streams", setup: func(t *testing.T) {
			e.loadedThenStopped(t)
			holdSlot(t, e)
		}, mut: func(c *Config) { c.SlotWait, c.Slot, c.Reload = 0, "new_slot", true }, want: ErrSlotActive, says: "previous sync"},
		{name: "table created again", setup: func(t *testing.T) {
			e.loadedThenStopped(t)
			e.pg.exec(t, `DROP TABLE items`, `CREATE TABLE items (id bigint PRIMARY KEY, v text)`, `ALTER PUBLICATION items_pub ADD TABLE items`)
		}, want: ErrFilter, says: "dropped and created again"},
		{name: "state of another table", setup: func(t *testing.T) {
			e.loadedThenStopped(t)
		}, mut: func(c *Config) { c.Table, c.Publication = "other", "other_pub" }, want: ErrFilter, says: "follows"},
		{name: "key column added again", setup: func(t *testing.T) {
			e.loadedThenStopped(t)
			e.pg.exec(t, `ALTER TABLE items DROP COLUMN id`, `ALTER TABLE items ADD COLUMN id bigint PRIMARY KEY`)
		}, want: ErrFilter, says: "dropped and added again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() {
				e.rdb.FlushAll(context.Background())
				c := e.pg.conn(t)
				defer c.Close(context.Background())
				for _, name := range []string{"items_slot", "new_slot"} {
					if _, err := waitSlot(context.Background(), c, name, 10*time.Second); err != nil {
						t.Fatal(err)
					}
				}
				e.pg.exec(t, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots`)
			})
			if c.setup != nil {
				c.setup(t)
			}
			cfg := e.config()
			if c.mut != nil {
				c.mut(&cfg)
			}
			redisBefore, slotsBefore := snapshot(t, e.rdb), e.slots(t)
			var err error
			if s, nerr := New(cfg); nerr != nil {
				err = nerr
			} else {
				err = s.Run(ctx)
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || !strings.HasPrefix(err.Error(), "pgsync: ") {
				t.Errorf("Run = %v, want %v saying %q", err, c.want, c.says)
			}
			if !Permanent(err) && c.want != ErrSlotActive {
				t.Errorf("Permanent(%v) = false", err)
			}
			t.Log(err)
			if after := snapshot(t, e.rdb); !reflect.DeepEqual(redisBefore, after) {
				t.Errorf("Run wrote to Redis: %d keys before, %d after", len(redisBefore), len(after))
			}
			if after := e.slots(t); after != slotsBefore {
				t.Errorf("Run changed the slots:\n%s\nwant\n%s", after, slotsBefore)
			}
		})
	}
}

// holdSlot streams from items_slot on a connection of the test's, as
// another consumer would, until the test ends.
func holdSlot(t *testing.T, e *env) {
	t.Helper()
	repl, _, err := connectReplication(t.Context(), e.pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repl.Close(context.Background()) })
	err = pglogrepl.StartReplication(t.Context(), repl, "items_slot", 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: []string{"proto_version '1'", "publication_names 'items_pub'"}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCommandBadInput: the command line reports a bad table in one
// error, writes nothing, and returns without retrying.
func TestCommandBadInput(t *testing.T) {
	e := newEnv(t)
	var out, errOut bytes.Buffer
	err := Command(t.Context(), []string{"-db", e.pg.URL, "-table", "nope", "-key", "id", "-filter", "items",
		"-slot", "items_slot", "-publication", "items_pub", "-redis", e.rdb.Options().Addr}, &out, &errOut)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `table "nope" does not exist`) {
		t.Errorf("Command = %v, want ErrInvalid about the table", err)
	}
	if n, _ := e.rdb.DBSize(t.Context()).Result(); n != 0 {
		t.Errorf("Redis holds %d keys, want 0", n)
	}
	// A slot another process streams from: an error after -slot-wait, not a retry loop.
	e.loadedThenStopped(t)
	holdSlot(t, e)
	before := snapshot(t, e.rdb)
	start := time.Now()
	err = Command(t.Context(), []string{"-db", e.pg.URL, "-table", "items", "-key", "id", "-filter", "items",
		"-slot", "items_slot", "-publication", "items_pub", "-redis", e.rdb.Options().Addr, "-slot-wait", "500ms"}, &out, &errOut)
	if !errors.Is(err, ErrSlotActive) || time.Since(start) > 10*time.Second {
		t.Errorf("Command on an active slot = %v after %v, want ErrSlotActive after -slot-wait", err, time.Since(start))
	}
	if after := snapshot(t, e.rdb); !reflect.DeepEqual(before, after) {
		t.Error("Command wrote to Redis")
	}
	if err := Command(t.Context(), []string{"-table", "items", "extra"}, &out, &errOut); !errors.Is(err, ErrInvalid) {
		t.Errorf("Command with an extra argument = %v, want ErrInvalid", err)
	}
}
