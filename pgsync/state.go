package pgsync

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rbloom/rbloom"
	"github.com/redis/go-redis/v9"
)

// A sync's progress is one Redis hash, "<prefix>{<filter>}:pgsync", with
// the fields:
//
//	table, column, slot, publication   whom it follows (checked at each start)
//	oid         the table's oid: a table dropped and created again under
//	            the same name is another table
//	attnum      the key column's attribute number: a column dropped and
//	            added again, or another renamed to its name, is another
//	            column (absent in states written before it was kept)
//	cp          the slot's consistent point: the load's snapshot, and
//	            part of every operation id
//	phase       "loading" from before the slot is created until every key
//	            of the snapshot is in the filter, then "loaded"
//	lsn         every transaction committed before it is in the filter
//	            (a WAL position; at first cp)
//	at          when lsn was written (Unix ms)
//	pending     the end of the group of transactions being applied, set
//	            before its first write to the filter and removed with the
//	            write of lsn after its last (absent when none is)
//	pending_at  when pending was written (Unix ms)
//	pending_v   the version of the cutting of groups into calls that
//	            applied it (callsVersion)
//	catalog     the versions of the catalog rows of the key column and
//	            the publication (target.version): a change, even undone,
//	            stops the sync (absent in states written before it was kept)
//	inc         the incarnation of the filter's root partition (bytes
//	            49-56 of its header), hex: a filter deleted and made again
//	            has another (absent in states written before it was kept)
type state struct {
	Table, Column, Slot, Publication string
	OID, Attnum                      string
	Catalog, Inc                     string
	CP                               pglogrepl.LSN
	Phase                            string
	LSN                              pglogrepl.LSN
	At                               time.Time
	Pending                          pglogrepl.LSN
	PendingAt                        time.Time
	PendingV                         string
	exists                           bool
}

// filterKey is the key of the filter's root partition, which shares the
// state's hash tag.
func filterKey(prefix, filter string) string {
	if prefix == "" {
		prefix = rbloom.DefaultKeyPrefix
	}
	return prefix + "{" + filter + "}"
}

// readIncarnation reads the incarnation of the filter's root partition,
// hex encoded; exists is false when the partition is missing.
func readIncarnation(ctx context.Context, rdb redis.UniversalClient, key string) (inc string, exists bool, err error) {
	pipe := rdb.Pipeline()
	n := pipe.Exists(ctx, key)
	b := pipe.GetRange(ctx, key, 49, 56)
	if _, err := pipe.Exec(ctx); err != nil {
		return "", false, fmt.Errorf("pgsync: redis: read %s: %w", key, err)
	}
	return hex.EncodeToString([]byte(b.Val())), n.Val() == 1, nil
}

// rawIncarnation is the header's bytes of an incarnation readIncarnation
// returned ("" for "").
func rawIncarnation(inc string) string {
	b, _ := hex.DecodeString(inc)
	return string(b)
}

// stateKey is the key of the sync's state for a filter.
func stateKey(prefix, filter string) string {
	if prefix == "" {
		prefix = rbloom.DefaultKeyPrefix
	}
	return prefix + "{" + filter + "}:pgsync"
}

// readState reads the state; st.exists is false when there is none.
func readState(ctx context.Context, rdb redis.UniversalClient, key string) (state, error) {
	m, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return state{}, fmt.Errorf("pgsync: redis: read %s: %w", key, err)
	}
	if len(m) == 0 {
		return state{}, nil
	}
	st := state{Table: m["table"], Column: m["column"], Slot: m["slot"], Publication: m["publication"],
		OID: m["oid"], Attnum: m["attnum"], Catalog: m["catalog"], Inc: m["inc"], Phase: m["phase"], PendingV: m["pending_v"], exists: true}
	lsn := func(f string) (pglogrepl.LSN, error) {
		if m[f] == "" {
			return 0, nil
		}
		v, err := pglogrepl.ParseLSN(m[f])
		if err != nil {
			return 0, fmt.Errorf("%w: %s field %s = %q: %v", ErrFilter, key, f, m[f], err)
		}
		return v, nil
	}
	ms := func(f string) (time.Time, error) {
		if m[f] == "" {
			return time.Time{}, nil
		}
		v, err := strconv.ParseInt(m[f], 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: %s field %s = %q: %v", ErrFilter, key, f, m[f], err)
		}
		return time.UnixMilli(v), nil
	}
	if st.CP, err = lsn("cp"); err != nil {
		return st, err
	}
	if st.LSN, err = lsn("lsn"); err != nil {
		return st, err
	}
	if st.Pending, err = lsn("pending"); err != nil {
		return st, err
	}
	if st.At, err = ms("at"); err != nil {
		return st, err
	}
	if st.PendingAt, err = ms("pending_at"); err != nil {
		return st, err
	}
	return st, nil
}

func unixMilli(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// onceWindow is how long the filter remembers operation ids: the library's
// default IDLifetime, which the filters the sync creates are made with.
const onceWindow = rbloom.DefaultIDLifetime

// windowMargin is kept off the once window: a replay must finish its
// writes this long before the first writes' ids may be forgotten. The
// library finds an id for at least the window, across clocks that differ
// by up to a quarter of it; the margin covers the time the replay takes.
const windowMargin = onceWindow / 6

// replayAllowed returns nil when a group that was pending since at may be
// applied again at now under the same operation ids, and ErrWindowPassed
// otherwise.
func replayAllowed(at, now time.Time) error {
	if age := now.Sub(at); age > onceWindow-windowMargin {
		return fmt.Errorf("%w: a group of transactions was being applied %v ago (its operation ids are remembered for %v, kept %v of margin), and it is not recorded whether it was applied whole: replaying it could apply changes twice; reload the filter (Config.Reload, rbloom-sync -reload)",
			ErrWindowPassed, age.Round(time.Second), onceWindow, windowMargin)
	}
	return nil
}
