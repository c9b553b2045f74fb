package pgsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rbloom/rbloom"
)

// Run checks the table, the publication, the slot and the filter, then
// loads the table into the filter if it is not loaded yet, and follows
// the table until ctx is done (it then returns ctx.Err()) or something
// fails. Everything is checked before the first write: a bad
// configuration fails with ErrInvalid, ErrFilter, ErrSlotMissing,
// ErrSlotActive or ErrWindowPassed and writes nothing. Run may be called
// again after it returns, by this process or another: it goes on from
// what the filter holds (see README.md for the crash points).
func (s *Sync) Run(ctx context.Context) error {
	err := s.run(ctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if noPermission(err) && !Permanent(err) {
		return fmt.Errorf("%w: the sync's Redis user may not run a command it needs (%v): running again cannot cure it; give the user scripts (EVAL, EVALSHA) and reads and writes of the filter's keys (ACL SETUSER)", ErrInvalid, err)
	}
	return err
}

// noPermission reports whether err is Redis refusing the sync's user a
// command (an ACL): NOPERM, or its words inside a script (Redis 7.0, then
// Valkey and Redis 8).
func noPermission(err error) bool {
	if err == nil {
		return false
	}
	m := err.Error()
	return strings.Contains(m, "NOPERM") || strings.Contains(m, "ACL failure") || strings.Contains(m, "user executing the script can't")
}

func (s *Sync) run(ctx context.Context) error {
	cfg := s.cfg
	s.update(func(st *Stats) { st.Phase = "starting" })
	db, err := connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	t, err := checkTarget(ctx, db, cfg)
	if err != nil {
		return err
	}
	if err := checkPublication(ctx, db, cfg, &t); err != nil {
		return err
	}
	if err := checkAccess(ctx, db, t); err != nil {
		return err
	}
	repl, sysid, err := connectReplication(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer repl.Close(context.Background())
	if err := s.at("checked"); err != nil {
		return err
	}
	l, err := s.takeLease(ctx, db, sysid)
	if err != nil {
		return err
	}
	defer l.release()
	lctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	go l.hold(lctx, cfg.Filter, lost)
	err = s.follow(lctx, db, repl, t)
	if cause := context.Cause(lctx); ctx.Err() == nil && lctx.Err() != nil && cause != nil {
		return cause // the lease was lost: that is why the run stopped
	}
	return err
}

// follow checks the state, the slot and the filter, loads the table if
// needed, and streams. The caller holds the filter's lease.
func (s *Sync) follow(ctx context.Context, db *pgx.Conn, repl *pgconn.PgConn, t target) error {
	cfg := s.cfg
	var database string
	if err := db.QueryRow(ctx, `SELECT current_database()`).Scan(&database); err != nil {
		return fmt.Errorf("pgsync: postgres: %w", err)
	}
	key := stateKey(cfg.KeyPrefix, cfg.Filter)
	st, err := readState(ctx, cfg.Redis, key)
	if err != nil {
		return err
	}
	slot, err := readSlot(ctx, db, cfg.Slot)
	if err != nil {
		return err
	}
	if err := checkSlot(slot, cfg.Slot, database); err != nil {
		return err
	}

	// The filter: a counting one, or none.
	f, err := rbloom.OpenCounting(ctx, cfg.Redis, cfg.Filter, rbloom.Options{KeyPrefix: cfg.KeyPrefix})
	exists := err == nil
	switch {
	case err == nil, errors.Is(err, rbloom.ErrNotFound):
	case errors.Is(err, rbloom.ErrParamsMismatch):
		return fmt.Errorf("%w: %v: a sync keeps a counting filter; choose another -filter, or reload (-reload) to replace it", ErrFilter, err)
	case errors.Is(err, rbloom.ErrNotFilter), errors.Is(err, rbloom.ErrDamaged):
		if !cfg.Reload {
			return fmt.Errorf("%w: %v: reload to replace it", ErrFilter, err)
		}
	default:
		return fmt.Errorf("pgsync: redis: %w", err)
	}

	var inc string
	if exists {
		if inc, _, err = readIncarnation(ctx, cfg.Redis, filterKey(cfg.KeyPrefix, cfg.Filter)); err != nil {
			return err
		}
	}

	fresh := false
	switch {
	case cfg.Reload:
		fresh = true
	case !st.exists:
		if exists {
			return fmt.Errorf("%w: filter %s exists but no sync loaded it (no %s): drop it, choose another name, or reload", ErrFilter, cfg.Filter, key)
		}
		if slot.exists {
			return fmt.Errorf("%w: slot %s exists but the filter has no sync state: it is another consumer's slot, or the state was lost; choose another slot, drop it (SELECT pg_drop_replication_slot('%s')), or reload",
				ErrInvalid, cfg.Slot, cfg.Slot)
		}
		fresh = true
	case st.Table != t.name || st.Column != t.column || st.Slot != cfg.Slot || st.Publication != cfg.Publication:
		return fmt.Errorf("%w: filter %s follows %s.%s through slot %s and publication %s, not %s.%s through %s and %s: run the sync with its flags, choose another -filter, or reload (-reload) to follow the new ones",
			ErrFilter, cfg.Filter, st.Table, st.Column, st.Slot, st.Publication, t.name, t.column, cfg.Slot, cfg.Publication)
	case st.Phase != "loaded":
		fresh = true // a load that did not finish: its snapshot is gone, start again
	case st.OID != fmt.Sprint(t.oid):
		return fmt.Errorf("%w: table %s was dropped and created again since filter %s was loaded (oid %s, now %d): reload (-reload)", ErrFilter, t.name, cfg.Filter, st.OID, t.oid)
	case st.Attnum != "" && st.Attnum != fmt.Sprint(t.attnum):
		return fmt.Errorf("%w: column %s of %s is another column than when filter %s was loaded (attribute %s, now %d): it was dropped and added again, or another was renamed to its name; reload (-reload)",
			ErrFilter, t.column, t.name, cfg.Filter, st.Attnum, t.attnum)
	case !slot.exists:
		return fmt.Errorf("%w: slot %s, which the sync of filter %s streams from, does not exist: the changes since it was dropped are lost to the filter; reload (-reload)", ErrSlotMissing, cfg.Slot, cfg.Filter)
	case slot.lost:
		return fmt.Errorf("%w: slot %s, which the sync of filter %s streams from, was invalidated (it held more WAL than max_slot_wal_keep_size): the changes since are lost to the filter; reload (-reload)", ErrSlotMissing, cfg.Slot, cfg.Filter)
	case !exists:
		return fmt.Errorf("%w: filter %s is missing from Redis though the sync loaded it (evicted, deleted, a Redis without persistence?): reload (-reload)", ErrFilter, cfg.Filter)
	case st.Inc != "" && st.Inc != inc:
		return fmt.Errorf("%w: filter %s was deleted and made again (Create, or a load by something else) since the sync loaded it: the keys the sync put in it are gone; reload (-reload)", ErrFilter, cfg.Filter)
	case st.Catalog != "" && st.Catalog != t.version():
		return fmt.Errorf("%w: key column %s or publication of %s was altered since filter %s was loaded (catalog rows now %s, were %s): even if it looks as before now, changes sent meanwhile may have been left out or read from another column; reload (-reload)",
			ErrInvalid, t.column, t.name, cfg.Filter, t.version(), st.Catalog)
	case slot.confirmed > st.LSN:
		// The sync confirms to the slot only what its state says the
		// filter holds: a state behind the slot came back from an older
		// Redis (a restart from a snapshot that missed the last writes),
		// and the changes between are lost to the filter.
		return fmt.Errorf("%w: filter %s's sync state holds changes up to %s, but slot %s was told %s: Redis lost the filter's last writes (restarted from an older snapshot?), or the slot was dropped and made again by another sync (a -reload of another filter through it?); reload (-reload)",
			ErrFilter, cfg.Filter, st.LSN, cfg.Slot, slot.confirmed)
	case st.Pending > st.LSN:
		if st.PendingV != callsVersion {
			return fmt.Errorf("%w: a group of transactions was left pending by a version of pgsync that cuts groups into calls otherwise (%q, this one %q): replaying it could apply changes twice; run that version until nothing is pending, or reload (-reload)",
				ErrFilter, st.PendingV, callsVersion)
		}
		if err := replayAllowed(st.PendingAt, time.Now()); err != nil {
			return err
		}
	}
	if slot.exists {
		if slot, err = waitSlot(ctx, db, cfg.Slot, cfg.SlotWait); err != nil {
			return err
		}
	}
	if cfg.Reload && st.exists && st.Slot != "" && st.Slot != cfg.Slot {
		// The sync being replaced used another slot: it must not be running.
		if _, err := waitSlot(ctx, db, st.Slot, cfg.SlotWait); err != nil {
			return fmt.Errorf("%w (the filter's previous sync)", err)
		}
	}

	// Every check passed: from here on the sync writes.
	if fresh {
		if f == nil {
			if f, err = rbloom.NewCounting(cfg.Redis, cfg.Filter, cfg.filterOptions()); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
		}
		if st, f, err = s.load(ctx, db, repl, t, f, slot.exists); err != nil {
			return err
		}
		s.cfg.Reload = false // loaded: a later Run goes on from here
		inc = st.Inc
	} else if st.Inc == "" || st.Catalog == "" {
		// A state of a version that did not keep them: from now on.
		st.Inc, st.Catalog = inc, t.version()
		if err := cfg.Redis.HSet(ctx, key, "inc", st.Inc, "catalog", st.Catalog).Err(); err != nil {
			return fmt.Errorf("pgsync: redis: %w", err)
		}
	}
	str := &stream{s: s, cfg: cfg, conn: repl, db: db, f: f, t: t, key: key, inc: inc,
		cp: st.CP, applied: st.LSN, pending: st.Pending, pendingAt: st.PendingAt, keyIdx: -1}
	s.mu.Lock()
	s.stats.Phase, s.appliedLSN = "streaming", st.LSN
	s.mu.Unlock()
	return str.run(ctx)
}

// connect opens a connection; a refusal no retry cures (no such
// database, user or password) is ErrInvalid.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	if _, err := pgconn.ParseConfig(url); err != nil {
		return nil, fmt.Errorf("%w: -db (Config.DatabaseURL): %v", ErrInvalid, err)
	}
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, connectError(err, "")
	}
	return db, nil
}

// connectError describes a failed connection, as ErrInvalid when only the
// operator can cure it.
func connectError(err error, what string) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return fmt.Errorf("pgsync: postgres: %sconnect: %w", what, err)
	}
	switch {
	case pe.Code == "3D000":
		return fmt.Errorf("%w: %s: create the database, or name an existing one in -db (Config.DatabaseURL)", ErrInvalid, pe.Message)
	case pe.Code == "42501" && what != "":
		return fmt.Errorf("%w: %s: the sync's user needs the REPLICATION attribute: ALTER ROLE <user> REPLICATION", ErrInvalid, pe.Message)
	case strings.HasPrefix(pe.Code, "28"):
		return fmt.Errorf("%w: %s: fix the user or password in -db (Config.DatabaseURL), or pg_hba.conf", ErrInvalid, pe.Message)
	}
	return fmt.Errorf("pgsync: postgres: %sconnect: %w", what, err)
}

// connectReplication opens a connection in logical replication mode and
// returns it with the cluster's system identifier.
func connectReplication(ctx context.Context, url string) (*pgconn.PgConn, string, error) {
	pc, err := pgconn.ParseConfig(url)
	if err != nil {
		return nil, "", fmt.Errorf("%w: -db (Config.DatabaseURL): %v", ErrInvalid, err)
	}
	pc.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, "", connectError(err, "replication ")
	}
	id, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		conn.Close(context.Background())
		return nil, "", fmt.Errorf("pgsync: postgres: identify system: %w", err)
	}
	return conn, id.SystemID, nil
}

// loadBatch is the number of keys the load reads and adds at a time.
const loadBatch = 5000

// load makes the filter equal to the table: it marks the state
// "loading", drops the slot (if dropSlot), creates the slot with an
// exported snapshot, rebuilds the filter from every key of that snapshot
// (loadInto: in place, readers never answering "absent" for a key that
// stays), and marks the state "loaded" at the slot's consistent point. A
// load that dies before that mark is started again from scratch by the
// next Run: its snapshot died with its connection.
func (s *Sync) load(ctx context.Context, db *pgx.Conn, repl *pgconn.PgConn, t target, f *rbloom.Counting, dropSlot bool) (state, *rbloom.Counting, error) {
	cfg := s.cfg
	s.update(func(x *Stats) { x.Phase = "loading"; x.Loaded = 0 })
	key := stateKey(cfg.KeyPrefix, cfg.Filter)
	st := state{Table: t.name, Column: t.column, Slot: cfg.Slot, Publication: cfg.Publication, OID: fmt.Sprint(t.oid), Attnum: fmt.Sprint(t.attnum), Phase: "loading", exists: true}
	// Mark the load first, so that a crash anywhere below leaves "loading"
	// and the next run starts over (dropping the slot this one made). The
	// filter's lease keeps every other sync out meanwhile.
	if err := cfg.Redis.HSet(ctx, key, "table", st.Table, "column", st.Column, "slot", st.Slot,
		"publication", st.Publication, "oid", st.OID, "attnum", st.Attnum, "phase", st.Phase).Err(); err != nil {
		return st, f, fmt.Errorf("pgsync: redis: %w", err)
	}
	if dropSlot {
		if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, cfg.Slot); err != nil {
			return st, f, fmt.Errorf("pgsync: postgres: drop slot %s: %w", cfg.Slot, err)
		}
	}
	// Creating the slot waits for the transactions open on the server.
	watched := s.watchSlotWait(ctx, db)
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	watched()
	if err != nil {
		return st, f, fmt.Errorf("pgsync: postgres: create slot %s: %w", cfg.Slot, err)
	}
	if st.CP, err = pglogrepl.ParseLSN(res.ConsistentPoint); err != nil {
		return st, f, fmt.Errorf("pgsync: postgres: slot %s: consistent point %q: %w", cfg.Slot, res.ConsistentPoint, err)
	}
	pipe := cfg.Redis.TxPipeline()
	pipe.HDel(ctx, key, "lsn", "at", "pending", "pending_at")
	pipe.HSet(ctx, key, "cp", st.CP.String())
	if _, err := pipe.Exec(ctx); err != nil {
		return st, f, fmt.Errorf("pgsync: redis: %w", err)
	}
	// The snapshot lives until the replication connection's next command:
	// read the whole table in it on another connection first.
	loadConn, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return st, f, fmt.Errorf("pgsync: postgres: %w", err)
	}
	defer loadConn.Close(context.Background())
	tx, err := loadConn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return st, f, fmt.Errorf("pgsync: postgres: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(res.SnapshotName)); err != nil {
		return st, f, fmt.Errorf("pgsync: postgres: set snapshot: %w", err)
	}
	// A reload may replace a filter of other sizing: load it as configured.
	if f, err = rbloom.NewCounting(cfg.Redis, cfg.Filter, cfg.filterOptions()); err != nil {
		return st, f, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := s.loadInto(ctx, tx, t, f); err != nil {
		return st, f, err
	}
	s.warnOverfull()
	if st.Inc, _, err = readIncarnation(ctx, cfg.Redis, filterKey(cfg.KeyPrefix, cfg.Filter)); err != nil {
		return st, f, err
	}
	st.Phase, st.LSN, st.At, st.Catalog = "loaded", st.CP, time.Now(), t.version()
	if err := cfg.Redis.HSet(ctx, key, "table", st.Table, "column", st.Column, "slot", st.Slot, "publication", st.Publication,
		"oid", st.OID, "attnum", st.Attnum, "cp", st.CP.String(), "phase", st.Phase, "lsn", st.LSN.String(), "at", unixMilli(st.At),
		"catalog", st.Catalog, "inc", st.Inc).Err(); err != nil {
		return st, f, fmt.Errorf("pgsync: redis: %w", err)
	}
	return st, f, nil
}

// loadInto fills f with every key of the table as tx sees it, by a
// Rebuild: in place when f exists with its sizing (readers go on with the
// old counters until the switch, never answering "absent" for a key that
// stays), else as a load (readers get rbloom.ErrLoading until it is
// done), after dropping a filter of other sizing or a key that holds
// something else. A rebuild a killed sync left holds the filter until its
// lease lapses: loadInto waits for it.
func (s *Sync) loadInto(ctx context.Context, tx pgx.Tx, t target, f *rbloom.Counting) error {
	read := false // the rows can be read once
	fill := func(add func([]string) error) error {
		read = true
		return s.readKeys(ctx, tx, t, add)
	}
	for {
		err := f.Rebuild(ctx, fill)
		switch {
		case err == nil:
			return nil
		case !read && (errors.Is(err, rbloom.ErrParamsMismatch) || errors.Is(err, rbloom.ErrNotFilter)):
			if err := dropStored(ctx, s.cfg, f); err != nil {
				return fmt.Errorf("pgsync: redis: %w", err)
			}
			continue
		case !read && errors.Is(err, rbloom.ErrRebuilding):
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		return fmt.Errorf("pgsync: redis: load: %w", err)
	}
}

// dropStored drops the filter stored under cfg.Filter, whatever its
// sizing (all of its partitions), and f's keys, which may hold something
// else.
func dropStored(ctx context.Context, cfg Config, f *rbloom.Counting) error {
	if stored, err := rbloom.Open(ctx, cfg.Redis, cfg.Filter, rbloom.Options{KeyPrefix: cfg.KeyPrefix}); err == nil {
		if err := stored.Drop(ctx); err != nil {
			return err
		}
	}
	return f.Drop(ctx)
}

// readKeys calls add with every key of the table as tx sees it, loadBatch
// at a time.
func (s *Sync) readKeys(ctx context.Context, tx pgx.Tx, t target, add func([]string) error) error {
	col := quoteIdent(t.column)
	rows, err := tx.Query(ctx, fmt.Sprintf("SELECT %s::text FROM %s WHERE %s IS NOT NULL", col, t.name, col))
	if err != nil {
		return fmt.Errorf("pgsync: postgres: load: %w", err)
	}
	defer rows.Close()
	keys := make([]string, 0, loadBatch)
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		if err := add(keys); err != nil {
			return err
		}
		n := int64(len(keys))
		s.update(func(x *Stats) { x.Loaded += n })
		keys = keys[:0]
		return s.at("load-batch")
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return fmt.Errorf("pgsync: postgres: load: %w", err)
		}
		if keys = append(keys, k); len(keys) == loadBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgsync: postgres: load: %w", err)
	}
	return flush()
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string { return `'` + strings.ReplaceAll(s, `'`, `''`) + `'` }

// watchSlotWait tells, in Stats.Waiting, what the slot's creation waits
// for: PostgreSQL creates a slot only once every transaction open at that
// moment has ended, so one left open (an idle session in a transaction)
// holds the first run at "loading, 0 loaded". The returned function stops
// the watch; db is not used by anything else until then.
func (s *Sync) watchSlotWait(ctx context.Context, db *pgx.Conn) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			// Not cancelled by stop: a query cut short closes db.
			qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			var pid int32
			var since time.Time
			var user, state string
			err := db.QueryRow(qctx, `SELECT pid, xact_start, coalesce(usename, ''), coalesce(state, '')
				FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid() ORDER BY xact_start LIMIT 1`).
				Scan(&pid, &since, &user, &state)
			cancel()
			msg := ""
			if err == nil {
				msg = fmt.Sprintf("creating slot %s waits for the transactions open on the server to end (the oldest: pid %d, user %s, %s, open since %s): commit or end them (SELECT pg_terminate_backend(%d))",
					s.cfg.Slot, pid, user, state, since.UTC().Format(time.RFC3339), pid)
			}
			s.update(func(st *Stats) { st.Waiting = msg })
		}
	}()
	return func() {
		close(quit)
		<-done
		s.update(func(st *Stats) { st.Waiting = "" })
	}
}

// warnOverfull tells, in Stats.Warning, that the load put more keys in the
// filter than it was sized for: its false-positive rate is then above the
// one asked for, and grows with every key.
func (s *Sync) warnOverfull() {
	s.update(func(st *Stats) {
		if st.Loaded > int64(s.cfg.Capacity) {
			st.Warning = fmt.Sprintf("filter %s holds %d keys, past its capacity %d (-capacity, Config.Capacity): its false-positive rate is above the one asked for; reload (-reload) with a larger -capacity",
				s.cfg.Filter, st.Loaded, s.cfg.Capacity)
		}
	})
}
