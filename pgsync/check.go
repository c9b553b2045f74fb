package pgsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// target is the table and key column a sync follows, as the database
// names them.
type target struct {
	oid    uint32
	name   string // schema-qualified and quoted, for SQL
	column string // as in the catalog
	attnum int16
	typ    uint32 // the key column's type, as checked: a change stops the stream
	// published are the tables the publication held at the start: the
	// stream stops on a change of any other (a table that came to inherit
	// from this one, whose rows SELECT would show but the sync misses).
	published map[uint32]bool
	// keyVersion is the version (xmin) of the key column's catalog row:
	// every ALTER of the column writes it (a rename undone too, whose
	// changes the stream would name by the column renamed to its name);
	// pubVersion names the versions of the catalog rows that say what the
	// publication sends of the table (see publicationVersion).
	keyVersion, pubVersion string
}

// version names the catalog's versions that the sync follows: a change
// of either, even undone, stops it.
func (t target) version() string { return "key " + t.keyVersion + ", publication " + t.pubVersion }

// keyTypes are the types whose text form identifies a value: two keys are
// equal exactly when their texts are, in the snapshot and in the stream
// alike. numeric is not (1.0 = 1.00), nor are floats, json or arrays, nor
// char(n): the load's key::text drops the blanks that pad it, which the
// stream's text keeps.
var keyTypes = []string{"int2", "int4", "int8", "text", "varchar", "uuid"}

// checkTarget checks that the table and key column exist, that the key's
// type can be read as text, and that the replica identity gives the old
// key of an UPDATE or DELETE. It reads only.
func checkTarget(ctx context.Context, db *pgx.Conn, cfg Config) (target, error) {
	var t target
	var ident, kind string
	err := db.QueryRow(ctx, `SELECT c.oid, format('%I.%I', n.nspname, c.relname), c.relreplident::text, c.relkind::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, cfg.Table).
		Scan(&t.oid, &t.name, &ident, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("%w: table %q does not exist: check -table (Config.Table; schema.table outside the search_path)", ErrInvalid, cfg.Table)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "42") || pe.Code == "3F000") {
		// A name the server cannot parse, or a schema that does not exist.
		return t, fmt.Errorf("%w: table %q: %v", ErrInvalid, cfg.Table, err)
	}
	if err != nil {
		return t, fmt.Errorf("pgsync: postgres: table %q: %w", cfg.Table, err)
	}
	switch kind {
	case "r":
	case "p":
		// Rows join and leave a partitioned table by ATTACH and DETACH,
		// and a leaf's TRUNCATE, none of which the stream carries.
		return t, fmt.Errorf("%w: %s is a partitioned table: rows that ATTACH, DETACH or a leaf's TRUNCATE add or remove reach no stream; follow a plain table", ErrInvalid, t.name)
	default:
		return t, fmt.Errorf("%w: %s is not a table (relkind %s): follow a plain table (-table)", ErrInvalid, t.name, kind)
	}
	// The load reads the table alone, but a child's rows would be in
	// SELECT FROM it, and their changes come under the child's oid.
	var children bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhparent = $1)`, t.oid).Scan(&children); err != nil {
		return t, fmt.Errorf("pgsync: postgres: children of %s: %w", t.name, err)
	}
	if children {
		return t, fmt.Errorf("%w: %s has tables that inherit from it, whose rows its SELECT shows but whose changes the stream names by their own table: follow a table without children", ErrInvalid, t.name)
	}
	var typ, generated string
	err = db.QueryRow(ctx, `SELECT a.attname, a.attnum, a.xmin::text, a.atttypid, a.attgenerated::text,
			CASE WHEN ty.typtype = 'd' THEN (SELECT b.typname FROM pg_type b WHERE b.oid = ty.typbasetype) ELSE ty.typname END
		FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid
		WHERE a.attrelid = $1 AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped`, t.oid, cfg.KeyColumn).
		Scan(&t.column, &t.attnum, &t.keyVersion, &t.typ, &generated, &typ)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("%w: table %s has no column %q: check -key (Config.KeyColumn)", ErrInvalid, t.name, cfg.KeyColumn)
	}
	if err != nil {
		return t, fmt.Errorf("pgsync: postgres: column %q: %w", cfg.KeyColumn, err)
	}
	if !slices.Contains(keyTypes, typ) {
		return t, fmt.Errorf("%w: key column %s.%s is of type %s, whose text does not identify a value: want one of %v",
			ErrInvalid, t.name, t.column, typ, keyTypes)
	}
	if generated != "" {
		return t, fmt.Errorf("%w: key column %s.%s is a generated column, which PostgreSQL's logical replication does not send: follow a plain column (the one it is computed from, or a copy kept by a trigger)",
			ErrInvalid, t.name, t.column)
	}
	if err := checkKeyText(ctx, db, t, typ); err != nil {
		return t, err
	}
	if err := checkIdentity(ctx, db, t, ident); err != nil {
		return t, err
	}
	return t, checkUnique(ctx, db, t)
}

// checkKeyText checks that a text key's bytes are the same in the load
// and the stream: pgoutput sends the server's encoding, the load's SELECT
// the client's (UTF-8), so they agree only in a UTF-8 database. Integers
// and uuids are ASCII in every encoding.
func checkKeyText(ctx context.Context, db *pgx.Conn, t target, typ string) error {
	if typ != "text" && typ != "varchar" {
		return nil
	}
	var enc string
	if err := db.QueryRow(ctx, `SHOW server_encoding`).Scan(&enc); err != nil {
		return fmt.Errorf("pgsync: postgres: %w", err)
	}
	if enc != "UTF8" {
		return fmt.Errorf("%w: database encoding is %s, not UTF8: the stream would send the text keys of %s.%s in %s and the load in UTF-8, as other bytes; follow a table of a UTF8 database, or an integer or uuid key",
			ErrInvalid, enc, t.name, t.column, enc)
	}
	// The connections' encoding (the URL's client_encoding, or one set
	// for the database or the role) converts the keys of both the load
	// and the stream: not UTF-8, they are other bytes than the
	// application's.
	if err := db.QueryRow(ctx, `SHOW client_encoding`).Scan(&enc); err != nil {
		return fmt.Errorf("pgsync: postgres: %w", err)
	}
	if enc != "UTF8" {
		return fmt.Errorf("%w: client_encoding is %s, not UTF8: the text keys of %s.%s would reach the filter in %s; remove client_encoding from the URL, or ALTER DATABASE / ALTER ROLE ... RESET client_encoding",
			ErrInvalid, enc, t.name, t.column, enc)
	}
	return nil
}

// checkUnique checks that no two rows can hold the same key: the filter
// counts each row's key, and a value many rows hold would saturate its
// counters (a ghost for ever once they are deleted). The key must be the
// only key column of a valid unique index without predicate or
// expression: a one-column primary key, or a UNIQUE column. NULLs, which
// such an index allows many of, are not in the filter.
func checkUnique(ctx context.Context, db *pgx.Conn, t target) error {
	var unique bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = $1 AND i.indisunique
		AND i.indisvalid AND i.indnkeyatts = 1 AND i.indkey[0] = $2 AND i.indpred IS NULL AND i.indexprs IS NULL)`,
		t.oid, t.attnum).Scan(&unique)
	if err != nil {
		return fmt.Errorf("pgsync: postgres: indexes of %s: %w", t.name, err)
	}
	if !unique {
		return fmt.Errorf("%w: key column %s.%s is not unique (not a one-column primary key, nor the only column of a unique index without WHERE): a value held by many rows would saturate its counters; follow a unique column, or ALTER TABLE %s ADD UNIQUE (%s)",
			ErrInvalid, t.name, t.column, t.name, quoteIdent(t.column))
	}
	return nil
}

// checkIdentity checks that the replica identity gives the old key of an
// UPDATE or DELETE.
func checkIdentity(ctx context.Context, db *pgx.Conn, t target, ident string) error {
	var inIdentity, primary bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = $1 AND i.indisprimary AND $2 = ANY (i.indkey::int2[]))`,
		t.oid, t.attnum).Scan(&primary)
	if err != nil {
		return fmt.Errorf("pgsync: postgres: primary key of %s: %w", t.name, err)
	}
	switch ident {
	case "f":
		inIdentity = true
	case "d", "i":
		err = db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = $1
			AND (CASE WHEN $2 = 'd' THEN i.indisprimary ELSE i.indisreplident END) AND $3 = ANY (i.indkey::int2[]))`,
			t.oid, ident, t.attnum).Scan(&inIdentity)
		if err != nil {
			return fmt.Errorf("pgsync: postgres: replica identity of %s: %w", t.name, err)
		}
	}
	if inIdentity {
		return nil
	}
	fix := fmt.Sprintf("make %s the primary key (REPLICA IDENTITY DEFAULT) or ALTER TABLE %s REPLICA IDENTITY FULL", t.column, t.name)
	if primary {
		fix = fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY DEFAULT (%s is its primary key)", t.name, t.column)
	}
	return fmt.Errorf("%w: the replica identity of %s does not include %s, so a DELETE would not tell which key to remove: %s",
		ErrInvalid, t.name, t.column, fix)
}

// checkAccess checks that the sync's user may do what the sync does: read
// the table (the load) and stream (the REPLICATION attribute).
func checkAccess(ctx context.Context, db *pgx.Conn, t target) error {
	var user string
	var sel, repl bool
	err := db.QueryRow(ctx, `SELECT current_user, has_column_privilege($1::oid, $2::int2, 'SELECT'),
		(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)`, t.oid, t.attnum).Scan(&user, &sel, &repl)
	if err != nil {
		return fmt.Errorf("pgsync: postgres: privileges: %w", err)
	}
	if !sel {
		return fmt.Errorf("%w: user %s may not read %s.%s, which the load reads: GRANT SELECT ON %s TO %s",
			ErrInvalid, user, t.name, t.column, t.name, quoteIdent(user))
	}
	if !repl {
		return fmt.Errorf("%w: user %s lacks the REPLICATION attribute, which streaming from a slot needs: ALTER ROLE %s REPLICATION",
			ErrInvalid, user, quoteIdent(user))
	}
	return checkRowSecurity(ctx, db, t, user)
}

// checkRowSecurity checks that the load sees every row: row-level security
// hides rows from a SELECT, and the stream sends them all, so a load
// through a policy would leave out keys the table holds.
func checkRowSecurity(ctx context.Context, db *pgx.Conn, t target, user string) error {
	var filtered bool
	err := db.QueryRow(ctx, `SELECT c.relrowsecurity AND NOT (r.rolsuper OR r.rolbypassrls OR
			(c.relowner = r.oid AND NOT c.relforcerowsecurity))
		FROM pg_class c, pg_roles r WHERE c.oid = $1::oid AND r.rolname = current_user`, t.oid).Scan(&filtered)
	if err != nil {
		return fmt.Errorf("pgsync: postgres: row security: %w", err)
	}
	if filtered {
		return fmt.Errorf("%w: %s has row-level security, which would hide rows from the load that the stream sends: ALTER ROLE %s BYPASSRLS, or ALTER TABLE %s DISABLE ROW LEVEL SECURITY",
			ErrInvalid, t.name, quoteIdent(user), t.name)
	}
	return nil
}

// checkPublication checks that the publication exists and publishes every
// change of the table's key column, unfiltered. It reads only.
func checkPublication(ctx context.Context, db *pgx.Conn, cfg Config, t *target) error {
	var wal string
	if err := db.QueryRow(ctx, `SHOW wal_level`).Scan(&wal); err != nil {
		return fmt.Errorf("pgsync: postgres: %w", err)
	}
	if wal != "logical" {
		return fmt.Errorf("%w: wal_level is %s: logical replication needs wal_level = logical (postgresql.conf, then restart)", ErrInvalid, wal)
	}
	var ins, upd, del, trunc bool
	err := db.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1`,
		cfg.Publication).Scan(&ins, &upd, &del, &trunc)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: publication %q does not exist: CREATE PUBLICATION %s FOR TABLE %s", ErrInvalid, cfg.Publication, cfg.Publication, t.name)
	}
	if err != nil {
		return fmt.Errorf("pgsync: postgres: publication %q: %w", cfg.Publication, err)
	}
	if !ins || !upd || !del || !trunc {
		return fmt.Errorf("%w: publication %q does not publish every kind of change (insert %v, update %v, delete %v, truncate %v): a change it leaves out would be missed; ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')",
			ErrInvalid, cfg.Publication, ins, upd, del, trunc, quoteIdent(cfg.Publication))
	}
	var row []byte
	err = db.QueryRow(ctx, `SELECT to_jsonb(p) FROM pg_publication_tables p
		WHERE p.pubname = $1 AND format('%I.%I', p.schemaname, p.tablename) = $2`, cfg.Publication, t.name).Scan(&row)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: publication %q does not include table %s: ALTER PUBLICATION %s ADD TABLE %s",
			ErrInvalid, cfg.Publication, t.name, cfg.Publication, t.name)
	}
	if err != nil {
		return fmt.Errorf("pgsync: postgres: publication %q: %w", cfg.Publication, err)
	}
	var pt struct { // PostgreSQL 15 and later: column lists and row filters
		Attnames  []string `json:"attnames"`
		Rowfilter *string  `json:"rowfilter"`
	}
	_ = json.Unmarshal(row, &pt)
	if pt.Rowfilter != nil {
		return fmt.Errorf("%w: publication %q filters the rows of %s (WHERE %s): the filter would miss rows; ALTER PUBLICATION %s SET TABLE %s (without WHERE), or a publication of its own for the sync",
			ErrInvalid, cfg.Publication, t.name, *pt.Rowfilter, quoteIdent(cfg.Publication), t.name)
	}
	if pt.Attnames != nil && !slices.Contains(pt.Attnames, t.column) {
		return fmt.Errorf("%w: publication %q leaves column %s of %s out: its changes would not carry the key; ALTER PUBLICATION %s SET TABLE %s (without a column list), or a publication of its own for the sync",
			ErrInvalid, cfg.Publication, t.column, t.name, quoteIdent(cfg.Publication), t.name)
	}
	if t.pubVersion, err = publicationVersion(ctx, db, cfg.Publication, t.oid); err != nil {
		return err
	}
	rows, err := db.Query(ctx, `SELECT format('%I.%I', schemaname, tablename)::regclass::oid FROM pg_publication_tables WHERE pubname = $1`, cfg.Publication)
	if err != nil {
		return fmt.Errorf("pgsync: postgres: publication %q: %w", cfg.Publication, err)
	}
	t.published = map[uint32]bool{}
	for rows.Next() {
		var oid uint32
		if err := rows.Scan(&oid); err != nil {
			return fmt.Errorf("pgsync: postgres: publication %q: %w", cfg.Publication, err)
		}
		t.published[oid] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgsync: postgres: publication %q: %w", cfg.Publication, err)
	}
	return nil
}

// slotInfo is a row of pg_replication_slots.
type slotInfo struct {
	exists    bool
	plugin    string
	logical   bool
	database  string
	active    bool
	activePID int32
	confirmed pglogrepl.LSN // confirmed_flush_lsn: what the sync told the slot it holds
	lost      bool          // invalidated: the WAL it needs is gone (max_slot_wal_keep_size)
}

// readSlot reads the slot's row, if any.
func readSlot(ctx context.Context, db *pgx.Conn, name string) (slotInfo, error) {
	var s slotInfo
	var typ string
	var plugin, database *string
	var pid *int32
	var confirmed *string
	err := db.QueryRow(ctx, `SELECT plugin, slot_type, database, active, active_pid, confirmed_flush_lsn::text, coalesce(wal_status = 'lost', false)
		FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&plugin, &typ, &database, &s.active, &pid, &confirmed, &s.lost)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("pgsync: postgres: slot %s: %w", name, err)
	}
	s.exists, s.logical = true, typ == "logical"
	if plugin != nil {
		s.plugin = *plugin
	}
	if database != nil {
		s.database = *database
	}
	if pid != nil {
		s.activePID = *pid
	}
	if confirmed != nil {
		if s.confirmed, err = pglogrepl.ParseLSN(*confirmed); err != nil {
			return s, fmt.Errorf("pgsync: postgres: slot %s: confirmed_flush_lsn %q: %w", name, *confirmed, err)
		}
	}
	return s, nil
}

// waitSlot reads the slot until no process streams from it, for up to
// wait, and fails with ErrSlotActive after that.
func waitSlot(ctx context.Context, db *pgx.Conn, name string, wait time.Duration) (slotInfo, error) {
	deadline := time.Now().Add(wait)
	for {
		s, err := readSlot(ctx, db, name)
		if err != nil || !s.active {
			return s, err
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("%w: slot %s is used by another process (pid %d): stop it, or choose another slot", ErrSlotActive, name, s.activePID)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkSlot checks that an existing slot can be the sync's: logical,
// pgoutput, in the connected database.
func checkSlot(s slotInfo, name, database string) error {
	if s.exists && (!s.logical || s.plugin != "pgoutput" || s.database != database) {
		return fmt.Errorf("%w: slot %s is not a pgoutput logical slot of database %s (plugin %q, database %q): it is another consumer's; choose another -slot", ErrInvalid, name, database, s.plugin, s.database)
	}
	return nil
}

// publicationVersion names the versions (xmin) of the catalog rows that
// say what the publication sends of the table: its own row (publish,
// FOR ALL TABLES), the table's membership (row filter, column list) and
// its schema's (FOR TABLES IN SCHEMA). Any ALTER PUBLICATION that could
// change what is sent writes one of them, and a change undone writes it
// again: the rows look as before, the version does not. The stream is
// decoded with the catalog as it was at each change, so a publication
// that left changes out for a moment, then was put back, leaves no other
// trace than this. VACUUM, even FREEZE or FULL, keeps xmin.
func publicationVersion(ctx context.Context, db *pgx.Conn, pub string, table uint32) (string, error) {
	schema := `'-'` // before PostgreSQL 15, no publication holds a schema
	var version int
	if err := db.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return "", fmt.Errorf("pgsync: postgres: %w", err)
	}
	if version >= 150000 {
		schema = `coalesce((SELECT n.xmin::text FROM pg_publication_namespace n JOIN pg_class c ON c.relnamespace = n.pnnspid
			WHERE n.pnpubid = p.oid AND c.oid = $2), '-')`
	}
	var v string
	err := db.QueryRow(ctx, `SELECT p.oid::text || '/' || p.xmin::text
		|| '/' || coalesce((SELECT r.xmin::text FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = $2), '-')
		|| '/' || `+schema+` FROM pg_publication p WHERE p.pubname = $1`, pub, table).Scan(&v)
	if err != nil {
		return "", fmt.Errorf("pgsync: postgres: publication %q: %w", pub, err)
	}
	return v, nil
}
