package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "modernc.org/sqlite"             // registers "sqlite"
)

// table is the table of items, in SQLite or PostgreSQL: the same SQL works
// in both ($1 placeholders, ON CONFLICT DO NOTHING).
type table struct {
	db *sql.DB
}

// schema creates the table of items, and rbloom_meta: one row, the
// lineage and generation of the database's state that the filter follows
// (see lineage.go).
var schema = []string{
	`CREATE TABLE IF NOT EXISTS items (
	id    TEXT PRIMARY KEY,
	value TEXT NOT NULL
)`,
	`CREATE TABLE IF NOT EXISTS rbloom_meta (
	one        INTEGER PRIMARY KEY CHECK (one = 1),
	lineage    TEXT NOT NULL,
	generation BIGINT NOT NULL
)`,
}

// openPostgres opens the PostgreSQL database that url names
// ("postgres://user:pass@host:5432/db") and creates the table if needed.
func openPostgres(ctx context.Context, url string) (*table, error) {
	return openTable(ctx, "pgx", url)
}

// openSQLite opens, creating it if needed, the SQLite database in file
// path. WAL lets readers run while one connection writes; the busy timeout
// makes concurrent writers wait for each other instead of failing.
func openSQLite(ctx context.Context, path string) (*table, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	return openTable(ctx, "sqlite", "file:"+abs+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
}

func openTable(ctx context.Context, driver, dsn string) (*table, error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	for _, stmt := range schema {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			db.Close()
			return nil, fmt.Errorf("create table: %w", err)
		}
	}
	return &table{db: db}, nil
}

func (t *table) Close() error { return t.db.Close() }

// get returns the value of row id, or errNotFound.
func (t *table) get(ctx context.Context, id string) (string, error) {
	var value string
	err := t.db.QueryRowContext(ctx, `SELECT value FROM items WHERE id = $1`, id).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errNotFound
	}
	return value, err
}

// insert inserts row id and reports whether it did: false means that a row
// with that id was already there, and nothing changed.
func (t *table) insert(ctx context.Context, id, value string) (bool, error) {
	res, err := t.db.ExecContext(ctx,
		`INSERT INTO items (id, value) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, id, value)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// delete deletes row id and reports whether there was one.
func (t *table) delete(ctx context.Context, id string) (bool, error) {
	res, err := t.db.ExecContext(ctx, `DELETE FROM items WHERE id = $1`, id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ids calls fn with the id of every row, in one query: one snapshot.
func (t *table) ids(ctx context.Context, fn func(id string) error) error {
	rows, err := t.db.QueryContext(ctx, `SELECT id FROM items`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		if err := fn(id); err != nil {
			return err
		}
	}
	return rows.Err()
}

// meta returns the lineage and generation in rbloom_meta, or "" and 0 when
// the filter was never loaded from this database.
func (t *table) meta(ctx context.Context) (lineage string, generation int64, err error) {
	err = t.db.QueryRowContext(ctx, `SELECT lineage, generation FROM rbloom_meta`).Scan(&lineage, &generation)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil
	}
	return lineage, generation, err
}

// setLineage starts a new lineage: lineage, at generation 0.
func (t *table) setLineage(ctx context.Context, lineage string) error {
	_, err := t.db.ExecContext(ctx, `INSERT INTO rbloom_meta (one, lineage, generation) VALUES (1, $1, 0)
		ON CONFLICT (one) DO UPDATE SET lineage = excluded.lineage, generation = 0`, lineage)
	return err
}

// raiseGeneration sets the generation to gen, unless it is already higher:
// deletes that run at once raise it in any order.
func (t *table) raiseGeneration(ctx context.Context, gen int64) error {
	_, err := t.db.ExecContext(ctx, `UPDATE rbloom_meta SET generation = $1 WHERE generation < $1`, gen)
	return err
}
