// Package pgsync keeps an rbloom counting filter equal to the set of keys
// of a PostgreSQL table, following the table by logical replication
// (pgoutput, a replication slot and a publication).
//
// A Sync loads the table's keys once, in the snapshot that its slot
// exported when it was created, then applies every INSERT, UPDATE, DELETE
// and TRUNCATE of the table from the slot's consistent point on, each
// exactly once: the stream is delivered at least once, so each change is
// applied under an operation id derived from its position in the WAL
// (Counting.AddManyOnce and RemoveManyOnce), and the slot is told a
// position only after the filter holds every change before it. A sync
// that died while applying, and starts again later than the filter's once
// window allows, refuses with ErrWindowPassed rather than risk applying a
// change twice. Its
// progress is kept in one Redis hash next to the filter (see state.go).
// README.md describes the design and the crash points.
//
// The table must publish its changes: a publication that includes it, for
// insert, update, delete and truncate, made by the operator (CREATE
// PUBLICATION name FOR TABLE table), and a replica identity that gives the
// old key of a DELETE (the key column in the primary key, or REPLICA
// IDENTITY FULL). The slot is created by the Sync itself, at its first run.
package pgsync

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rbloom/rbloom"
	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalid is returned, wrapped with detail, when the configuration
	// or the database cannot give a correct sync: a table or key column
	// that does not exist, a key type that cannot be compared as text, a
	// replica identity without the key, a publication that is missing or
	// does not publish the table; a database that does not exist, a user
	// without SELECT on the key column or without REPLICATION; a key column
	// that is generated, not unique, or text in a database not in UTF8; a
	// Redis user refused a command the sync needs (an ACL).
	// Nothing was written. While streaming, a change of the table, the key
	// column or the publication that the sync cannot follow stops it with
	// ErrInvalid too, and so does any ALTER of the key column or of what
	// the publication sends of the table, even one undone (the stream was
	// decoded with the altered catalog).
	ErrInvalid = errors.New("pgsync: invalid sync")

	// ErrSlotActive is returned when another process streams from the
	// replication slot. Nothing was written.
	ErrSlotActive = errors.New("pgsync: replication slot in use")

	// ErrBusy is returned when another sync follows the filter (it holds
	// the filter's lease, whatever its flags): one sync at a time keeps a
	// filter. Nothing was written.
	ErrBusy = errors.New("pgsync: another sync follows the filter")

	// ErrSlotMissing is returned when the sync's state in Redis names a
	// replication slot that no longer exists: the changes since it was
	// dropped are lost to the filter. Reload (Config.Reload).
	ErrSlotMissing = errors.New("pgsync: replication slot missing")

	// ErrFilter is returned when the filter in Redis cannot be the one
	// this sync keeps: a classic filter, a filter that exists without the
	// sync's state (loaded by someone else), a filter missing while the
	// state says it was loaded or one deleted and made again since, a
	// state written by a sync of another table, column or slot, or of a
	// table since dropped and created again, or a group left pending by a
	// version of pgsync that applies groups otherwise. Nothing was
	// written. While streaming, a filter that vanishes or is made again
	// stops the sync with ErrFilter too.
	ErrFilter = errors.New("pgsync: filter not kept by this sync")

	// ErrWindowPassed is returned when the sync stopped while applying
	// changes it had not recorded as applied, longer ago than the filter's
	// once window: the operation ids that would make their replay a no-op
	// may be forgotten, so replaying could apply them twice (a repeated
	// remove takes counts of other keys: false negatives). Reload
	// (Config.Reload). Nothing was written.
	ErrWindowPassed = errors.New("pgsync: stopped mid-apply longer ago than the once window")
)

// Permanent reports whether err is one that running the sync again cannot
// cure (ErrInvalid, ErrSlotMissing, ErrFilter, ErrWindowPassed): the
// operator has to act. Connection failures, a PostgreSQL or Redis restart,
// ErrSlotActive and ErrBusy are not permanent.
func Permanent(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrSlotMissing) ||
		errors.Is(err, ErrFilter) || errors.Is(err, ErrWindowPassed)
}

// Config describes one sync: a table's key column, followed into a
// counting filter. Zero values of the optional fields mean their default.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string (URL or key=value).
	// The user needs the REPLICATION attribute and may read the table.
	// Required.
	DatabaseURL string

	// Table is the table followed, as SQL would name it (items,
	// public.items, "Mixed Case"). Required.
	Table string

	// KeyColumn is the column whose values the filter holds, as text
	// (PostgreSQL's text output of the value: 42 for the integer 42).
	// Rows where it is NULL are not in the filter. It must be unique (a
	// one-column primary key, or the only column of a unique index without
	// WHERE), not generated, and, if text, in a UTF8 database. Required.
	KeyColumn string

	// Publication names the publication that carries the table's changes;
	// it must exist and publish insert, update, delete and truncate of the
	// table. Required.
	Publication string

	// Slot names the logical replication slot (lower-case letters, digits
	// and underscores), created by the sync at its first run. Required.
	Slot string

	// Redis is the Redis client of the filter. Required.
	Redis redis.UniversalClient

	// Filter is the filter's name. Required.
	Filter string

	// Filter sizing, used only when the sync creates the filter (at its
	// first run or a reload): Capacity defaults to 1,000,000 and
	// ErrorRate to rbloom.DefaultErrorRate.
	Capacity  uint64
	ErrorRate float64

	// KeyPrefix is the filter's rbloom.Options.KeyPrefix. Default "rbloom:".
	KeyPrefix string

	// Reload drops the slot and the sync's state, and loads the table
	// again into the filter: in place, by a rebuild, when the filter
	// exists with the configured sizing (readers keep answering from it
	// until the switch), else as a load of a new one. It is what
	// ErrSlotMissing, ErrWindowPassed and a filter lost from Redis ask
	// for. The slot must not be in use.
	Reload bool

	// SlotWait is how long Run waits for the slot to be released by a
	// process that held it (a sync that crashed is released when
	// PostgreSQL notices, usually within a second) before failing with
	// ErrSlotActive, and for the filter's lease held by another sync
	// before failing with ErrBusy. Default 0: fail at once.
	SlotWait time.Duration

	// MaxBatch bounds the changes applied in one group (one record of
	// progress in Redis). Default 5,000.
	MaxBatch int

	// MaxDelay bounds how long a received change waits for more to join
	// its group. Default 20ms.
	MaxDelay time.Duration
}

// Sync follows one table into one filter. Run it with Run; read its
// progress with Stats. A Sync is safe for concurrent use. One Run at a
// time follows a filter, of this Sync or any other: the filter's lease
// (lease.go) makes another wait, then fail with ErrBusy.
type Sync struct {
	cfg Config

	token string // names this Sync's leases: its next run may take one over

	mu     sync.Mutex
	stats  Stats
	rate   rateMeter
	oldest time.Time // commit time of the oldest change being applied
	// appliedLSN and serverLSN are Stats' AppliedLSN and ServerLSN, kept
	// as numbers and formatted by Stats: the stream notes the server's
	// position at every message it receives.
	appliedLSN, serverLSN pglogrepl.LSN

	// crash, when set (by tests), is called at each crash point; an
	// error stops Run there, as if the process died.
	crash func(point string) error
	// applied, when set (by tests), is called with the commit time of each
	// transaction of each group applied, after it is recorded.
	applied func(commits []time.Time)
}

// at passes a crash point.
func (s *Sync) at(point string) error {
	if s.crash == nil {
		return nil
	}
	return s.crash(point)
}

// Stats describes a sync's progress.
type Stats struct {
	// Phase is "starting", "loading" or "streaming".
	Phase string
	// Loaded is the number of keys the initial load (or a reload) added.
	Loaded int64
	// Applied is the number of changes (adds and removes of keys) applied
	// since New; Transactions the transactions they came in.
	Applied, Transactions int64
	// RemoveMisses counts removes that found their key definitely absent
	// (nothing changed). Non-zero means the filter lost keys it should
	// hold (removed or reset behind the sync's back): the sync stops with
	// ErrFilter. Reload.
	RemoveMisses int64
	// Replayed counts the groups a stopped run had left pending and this
	// one applied again under the same ids.
	Replayed int64
	// PerSecond is the changes applied per second over the last 10 s.
	PerSecond float64
	// AppliedLSN is the position the filter holds every change before;
	// ServerLSN the end of the server's WAL as last reported.
	AppliedLSN, ServerLSN string
	// LagBytes is ServerLSN minus AppliedLSN: WAL the filter is behind.
	LagBytes int64
	// Lag is how long ago the oldest change received and not yet applied
	// was committed; 0 when every change received is applied.
	Lag time.Duration
	// LastApplyLag is the time from commit to filter of the oldest
	// transaction of the last group applied.
	LastApplyLag time.Duration
	// Waiting says what the sync waits for, when it waits for something
	// the operator can end (a transaction left open delays the slot's
	// creation); "" otherwise.
	Waiting string
	// Warning says what the operator should fix though the sync goes on
	// (a load past the filter's capacity); "" when nothing.
	Warning string
	// RetainedWALBytes is the WAL PostgreSQL keeps for the slot
	// (pg_current_wal_lsn() - restart_lsn), read every few seconds.
	RetainedWALBytes int64
}

// slotName matches the names PostgreSQL accepts for replication slots.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// New checks cfg and returns a Sync. It does not contact PostgreSQL or
// Redis: Run does, and checks the table, slot, publication and filter
// before it writes anything.
func New(cfg Config) (*Sync, error) {
	bad := func(format string, args ...any) (*Sync, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	switch {
	case cfg.DatabaseURL == "":
		return bad("Config.DatabaseURL is empty")
	case cfg.Table == "":
		return bad("Config.Table is empty")
	case cfg.KeyColumn == "":
		return bad("Config.KeyColumn is empty")
	case cfg.Publication == "":
		return bad("Config.Publication is empty")
	case !slotName.MatchString(cfg.Slot):
		return bad("Config.Slot = %q: want 1 to 63 lower-case letters, digits and underscores", cfg.Slot)
	case cfg.Redis == nil:
		return bad("Config.Redis is nil")
	case cfg.Filter == "":
		return bad("Config.Filter is empty")
	case cfg.MaxBatch < 0 || cfg.MaxDelay < 0 || cfg.SlotWait < 0:
		return bad("Config.MaxBatch, MaxDelay and SlotWait must not be negative")
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 1_000_000
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 5000
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = 20 * time.Millisecond
	}
	// The sizing is checked here, without Redis, as the filter would be.
	if _, err := rbloom.NewCounting(cfg.Redis, cfg.Filter, cfg.filterOptions()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Sync{cfg: cfg, token: newToken(), stats: Stats{Phase: "starting"}}, nil
}

// filterOptions are the options the sync creates its filter with.
func (c Config) filterOptions() rbloom.Options {
	return rbloom.Options{Capacity: c.Capacity, ErrorRate: c.ErrorRate, KeyPrefix: c.KeyPrefix}
}

// Stats returns the sync's progress.
func (s *Sync) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	st := s.stats
	st.PerSecond = s.rate.perSecond(now)
	if !s.oldest.IsZero() {
		st.Lag = now.Sub(s.oldest)
	}
	if s.appliedLSN != 0 {
		st.AppliedLSN = s.appliedLSN.String()
	}
	if s.serverLSN != 0 {
		st.ServerLSN = s.serverLSN.String()
		st.LagBytes = max(0, int64(s.serverLSN)-int64(s.appliedLSN))
	}
	return st
}

// update changes the stats under the lock.
func (s *Sync) update(f func(*Stats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

// rateMeter counts events in one-second buckets over the last 10 s.
type rateMeter struct {
	sec    [10]int64
	counts [10]int64
}

func (r *rateMeter) add(now time.Time, n int64) {
	t := now.Unix()
	i := t % 10
	if r.sec[i] != t {
		r.sec[i], r.counts[i] = t, 0
	}
	r.counts[i] += n
}

func (r *rateMeter) perSecond(now time.Time) float64 {
	t := now.Unix()
	var n int64
	for i := range r.sec {
		if r.sec[i] > t-10 && r.sec[i] < t { // the last 10 full seconds but this one
			n += r.counts[i]
		}
	}
	return float64(n) / 9
}
