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
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/rbloom/rbloom"
	"github.com/redis/go-redis/v9"
)

// op is one change to the filter: add or remove one key. idx is its index
// among the ops of its transaction.
type op struct {
	remove bool
	key    string
	idx    int
}

// txn is a transaction of the table's changes, as the stream delivered it.
type txn struct {
	commit, end pglogrepl.LSN // its commit record's start and end
	at          time.Time     // its commit time
	received    time.Time     // when its begin arrived
	ops         []op
	truncated   bool // the table was truncated: ops are those after the (last) truncate
}

// stream applies the replication stream to the filter.
type stream struct {
	s    *Sync
	cfg  Config
	conn *pgconn.PgConn
	db   *pgx.Conn
	f    *rbloom.Counting
	t    target
	key  string

	inc       string        // the incarnation of the filter's root partition, as loaded
	cp        pglogrepl.LSN // the slot's consistent point: part of every id
	applied   pglogrepl.LSN // every commit before it is in the filter
	pending   pglogrepl.LSN // a group left pending by the last run ends here (0: none)
	pendingAt time.Time

	keyIdx     int  // the key's column in the table's relation message
	cur        *txn // the transaction being received
	group      []*txn
	groupOps   int
	serverEnd  pglogrepl.LSN
	nextStatus time.Time
	nextSlot   time.Time
}

const statusInterval = time.Second

func (x *stream) run(ctx context.Context) error {
	args := []string{"proto_version '1'", "publication_names " + quoteLiteral(quoteIdent(x.cfg.Publication))}
	err := pglogrepl.StartReplication(ctx, x.conn, x.cfg.Slot, x.applied, pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args})
	if err != nil {
		if pe, ok := err.(*pgconn.PgError); ok && pe.Code == "55006" { // object_in_use
			return fmt.Errorf("%w: slot %s: %v", ErrSlotActive, x.cfg.Slot, err)
		}
		return fmt.Errorf("pgsync: postgres: start replication: %w", err)
	}
	// A read waits on a deadline set on the socket, which ctx's end moves
	// to now, not on a context of its own: pgconn registers and removes a
	// callback on a read's context at every message, and that with a
	// context made per read was two fifths of the stream's CPU time in
	// one-change transactions (README.md, Figures). A timeout leaves the
	// connection usable.
	nc := x.conn.Conn()
	defer nc.SetReadDeadline(time.Time{})
	stopWatch := context.AfterFunc(ctx, func() { nc.SetReadDeadline(time.Now()) })
	defer stopWatch()
	var set time.Time // the deadline on the socket
	for {
		now := time.Now()
		if !now.Before(x.nextStatus) {
			if err := x.status(ctx, len(x.group) == 0 && x.cur == nil); err != nil {
				return err
			}
		}
		if !now.Before(x.nextSlot) {
			x.nextSlot = now.Add(5 * time.Second)
			var retained int64
			if err := x.db.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - restart_lsn)::int8 FROM pg_replication_slots WHERE slot_name = $1`, x.cfg.Slot).Scan(&retained); err != nil {
				return fmt.Errorf("pgsync: postgres: slot %s: %w", x.cfg.Slot, err)
			}
			x.s.update(func(st *Stats) { st.RetainedWALBytes = retained })
		}
		deadline := x.nextStatus
		if len(x.group) > 0 && x.pending == 0 {
			if d := x.group[0].received.Add(x.cfg.MaxDelay); d.Before(deadline) {
				deadline = d
			}
		}
		if !deadline.After(now) {
			if err := x.flush(ctx); err != nil {
				return err
			}
			continue
		}
		if !deadline.Equal(set) {
			if err := nc.SetReadDeadline(deadline); err != nil {
				return fmt.Errorf("pgsync: postgres: replication stream: %w", err)
			}
			set = deadline
		}
		if err := ctx.Err(); err != nil {
			return err // ended before the deadline was set, which it would have moved
		}
		raw, err := x.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() == nil && pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("pgsync: postgres: replication stream: %w", err)
		}
		switch msg := raw.(type) {
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("pgsync: postgres: replication stream: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyData:
			if err := x.copyData(ctx, msg.Data); err != nil {
				return err
			}
		}
	}
}

// copyData handles one message of the stream.
func (x *stream) copyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("pgsync: postgres: keepalive: %w", err)
		}
		x.serverAt(k.ServerWALEnd)
		if x.cur == nil && x.pending != 0 && k.ServerWALEnd >= x.pending {
			// Every transaction of the pending group was sent again.
			if err := x.flush(ctx); err != nil {
				return err
			}
		}
		if x.cur == nil && len(x.group) == 0 && x.pending == 0 && k.ServerWALEnd > x.applied {
			// Nothing is open or waiting: every transaction committed before
			// the server's position was sent and is applied.
			if err := x.record(ctx, k.ServerWALEnd); err != nil {
				return err
			}
		}
		if k.ReplyRequested {
			return x.status(ctx, false)
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("pgsync: postgres: xlogdata: %w", err)
		}
		x.serverAt(xld.ServerWALEnd)
		m, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			return fmt.Errorf("pgsync: postgres: pgoutput: %w", err)
		}
		return x.message(ctx, m)
	}
	return nil
}

// message handles one pgoutput message.
func (x *stream) message(ctx context.Context, m pglogrepl.Message) error {
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		if m.RelationID != x.t.oid {
			if !x.t.published[m.RelationID] {
				return fmt.Errorf("%w: changes of %s.%s reach publication %s, which did not hold it when the sync started: a table that now inherits from %s (its rows are in the table's SELECT, its changes not the sync's), or one added to the publication; the sync stops rather than miss rows",
					ErrInvalid, m.Namespace, m.RelationName, x.cfg.Publication, x.t.name)
			}
			return nil
		}
		if err := x.recheck(ctx); err != nil {
			return err
		}
		x.keyIdx = -1
		for i, c := range m.Columns {
			if c.Name == x.t.column {
				if c.DataType != x.t.typ {
					return fmt.Errorf("%w: key column %s.%s changed type (oid %d, was %d): its keys' text may no longer be the loaded one's; reload (-reload)", ErrInvalid, x.t.name, x.t.column, c.DataType, x.t.typ)
				}
				if c.Flags&1 == 0 {
					return fmt.Errorf("%w: the replica identity of %s no longer includes %s (REPLICA IDENTITY %c): a DELETE would not tell which key to remove; set it back (REPLICA IDENTITY DEFAULT with the key as primary key, or FULL), then reload (-reload)",
						ErrInvalid, x.t.name, x.t.column, m.ReplicaIdentity)
				}
				x.keyIdx = i
			}
		}
		if x.keyIdx < 0 {
			return fmt.Errorf("%w: table %s no longer has column %s: put it back and reload (-reload), or follow another -key", ErrInvalid, x.t.name, x.t.column)
		}
	case *pglogrepl.BeginMessage:
		x.cur = &txn{commit: m.FinalLSN, at: m.CommitTime, received: time.Now()}
	case *pglogrepl.InsertMessage:
		if m.RelationID != x.t.oid {
			return nil
		}
		k, ok, _, err := x.keyOf(m.Tuple)
		if err != nil || !ok {
			return err
		}
		x.add(op{key: k})
	case *pglogrepl.UpdateMessage:
		if m.RelationID != x.t.oid || m.OldTuple == nil {
			return nil // no old key: the key did not change
		}
		oldKey, oldOK, _, err := x.keyOf(m.OldTuple)
		if err != nil {
			return err
		}
		newKey, newOK, unchanged, err := x.keyOf(m.NewTuple)
		if err != nil {
			return err
		}
		if unchanged || (oldOK == newOK && oldKey == newKey) {
			return nil
		}
		if oldOK {
			x.add(op{remove: true, key: oldKey})
		}
		if newOK {
			x.add(op{key: newKey})
		}
	case *pglogrepl.DeleteMessage:
		if m.RelationID != x.t.oid {
			return nil
		}
		k, ok, _, err := x.keyOf(m.OldTuple)
		if err != nil || !ok {
			return err
		}
		x.add(op{remove: true, key: k})
	case *pglogrepl.TruncateMessage:
		for _, id := range m.RelationIDs {
			if id == x.t.oid && x.cur != nil {
				x.cur.truncated, x.cur.ops = true, nil
			}
		}
	case *pglogrepl.CommitMessage:
		t := x.cur
		x.cur = nil
		if t == nil {
			return fmt.Errorf("pgsync: postgres: pgoutput: commit %s without begin", m.CommitLSN)
		}
		t.commit, t.end = m.CommitLSN, m.TransactionEndLSN
		return x.commit(ctx, t)
	}
	return nil
}

// keyOf reads the key column of a tuple: ok is false for NULL, unchanged
// true for a TOASTed value the tuple does not carry.
func (x *stream) keyOf(td *pglogrepl.TupleData) (key string, ok, unchanged bool, err error) {
	if x.keyIdx < 0 {
		return "", false, false, fmt.Errorf("pgsync: postgres: pgoutput: a change of %s before its relation message", x.t.name)
	}
	if td == nil || x.keyIdx >= len(td.Columns) {
		return "", false, false, fmt.Errorf("pgsync: postgres: pgoutput: a tuple of %s without column %s", x.t.name, x.t.column)
	}
	c := td.Columns[x.keyIdx]
	switch c.DataType {
	case pglogrepl.TupleDataTypeText:
		return string(c.Data), true, false, nil
	case pglogrepl.TupleDataTypeNull:
		return "", false, false, nil
	case pglogrepl.TupleDataTypeToast:
		return "", false, true, nil
	}
	return "", false, false, fmt.Errorf("pgsync: postgres: pgoutput: column %s in format %c, want text", x.t.column, c.DataType)
}

// add appends an op to the transaction being received.
func (x *stream) add(o op) {
	if x.cur == nil {
		return
	}
	o.idx = len(x.cur.ops)
	if x.cur.truncated {
		o.idx = -1 // applied without ids: see applyTruncate
	}
	x.cur.ops = append(x.cur.ops, o)
}

// commit takes a committed transaction into the group to apply.
func (x *stream) commit(ctx context.Context, t *txn) error {
	if t.commit < x.applied {
		return nil // in the filter already: applied (and recorded) before a crash
	}
	if x.pending != 0 && t.end > x.pending {
		// Past the group a crashed run left pending: apply that first, as it was.
		if err := x.flush(ctx); err != nil {
			return err
		}
	}
	if t.truncated {
		if err := x.flush(ctx); err != nil {
			return err
		}
		return x.applyTruncate(ctx, t)
	}
	x.group = append(x.group, t)
	x.groupOps += len(t.ops)
	if len(x.group) == 1 {
		x.s.mu.Lock()
		x.s.oldest = t.at
		x.s.mu.Unlock()
	}
	if x.pending != 0 {
		if t.end >= x.pending {
			return x.flush(ctx)
		}
		return nil
	}
	if x.groupOps >= x.cfg.MaxBatch {
		return x.flush(ctx)
	}
	return nil
}

// applyTimeout bounds the time a group may take once begun.
const applyTimeout = time.Minute

// callsVersion names the way calls cuts a group into calls. It is stored
// with a pending group: a run of another version must not replay it
// under ids its calls would not match.
const callsVersion = "3"

// chunk is the most keys one call of a run sends. It is a constant, not a
// setting: a group applied again after a crash must make the same calls
// under the same ids.
const chunk = 5000

// call is one AddManyOnce or RemoveManyOnce of a group.
type call struct {
	remove bool
	keys   []string
	id     string
}

// opID is the operation id of the call that starts with the idx-th op of
// the transaction committed at commit, on the slot created at cp. Each op
// of the stream has one position (commit, idx), the same every time the
// stream delivers it; cp keeps a reloaded sync's ids apart from the last.
func opID(cp, commit pglogrepl.LSN, idx int) string {
	return fmt.Sprintf("pgsync:%s:%s:%d", cp, commit, idx)
}

// calls splits a group's ops into the calls that apply them. The ops are
// netted per key first: a key's adds minus its removes in the group, in
// the order of its first op, added or removed that many times. Applying
// the ops themselves in any order that is not commit order per key goes
// wrong: all adds before all removes drives a key inserted and deleted 15
// times to 15, where its counters stick (a ghost for ever); all removes
// first makes a re-inserted key test absent between two calls. Netted, a
// key deleted and inserted again in the group is not touched at all, so it
// never tests absent, nor while a sync killed between two calls is down.
// The netted adds go first, then the removes, at most chunk keys a call;
// each call is named by the first op of its first key. The same group
// gives the same calls.
func calls(cp pglogrepl.LSN, group []*txn) []call {
	type net struct {
		n      int
		commit pglogrepl.LSN // the key's first op, which names its call
		idx    int
	}
	nets := map[string]*net{}
	var order []string
	for _, t := range group {
		for _, o := range t.ops {
			k := nets[o.key]
			if k == nil {
				k = &net{commit: t.commit, idx: o.idx}
				nets[o.key] = k
				order = append(order, o.key)
			}
			if o.remove {
				k.n--
			} else {
				k.n++
			}
		}
	}
	var adds, removes []call
	for _, key := range order {
		k := nets[key]
		cs, n := &adds, k.n
		if n < 0 {
			cs, n = &removes, -n
		}
		for r := range n {
			if l := len(*cs); l == 0 || len((*cs)[l-1].keys) == chunk {
				// Formatted for a call's first key only, which names it: an
				// id per key was a twentieth of the stream's CPU time in
				// one-change transactions.
				id := opID(cp, k.commit, k.idx)
				if r > 0 { // a key netted more than once, cut across calls
					id += fmt.Sprintf("+%d", r)
				}
				*cs = append(*cs, call{remove: k.n < 0, id: id})
			}
			c := &(*cs)[len(*cs)-1]
			c.keys = append(c.keys, key)
		}
	}
	return append(adds, removes...)
}

// flush applies the group: it marks the group pending in Redis, applies
// its calls in order under their ids, then records the group's end as
// applied and clears the mark. A crash in between leaves the mark, and
// the next run applies the same group again under the same ids (within
// the once window: see replayAllowed), so each change lands once.
func (x *stream) flush(ctx context.Context) error {
	// A group started is finished even when ctx is done, so that a sync
	// stopped by its context leaves nothing pending.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	if len(x.group) == 0 {
		x.pending = 0
		return nil
	}
	group := x.group
	end := group[len(group)-1].end
	now := time.Now()
	if x.pending != 0 {
		if err := replayAllowed(x.pendingAt, now); err != nil {
			return err
		}
		x.s.update(func(st *Stats) { st.Replayed++ })
	} else if err := x.fence(ctx, "pending", end, now); err != nil {
		return err
	}
	if err := x.s.at("pending"); err != nil {
		return err
	}
	var missed []string
	for _, c := range calls(x.cp, group) {
		if c.remove {
			removed, err := x.f.RemoveManyOnce(ctx, c.keys, c.id)
			if err != nil {
				return x.filterError(err)
			}
			for i, r := range removed {
				if !r {
					missed = append(missed, c.keys[i])
				}
			}
		} else if _, err := x.f.AddManyOnce(ctx, c.keys, c.id); err != nil {
			return x.filterError(err)
		}
		if err := x.s.at("call"); err != nil {
			return err
		}
	}
	if err := x.lostKeys(missed); err != nil {
		return err
	}
	if err := x.record(ctx, end); err != nil {
		return err
	}
	x.counted(group)
	if err := x.s.at("applied"); err != nil {
		return err
	}
	return nil
}

// record writes end as applied and clears the pending mark.
func (x *stream) record(ctx context.Context, end pglogrepl.LSN) error {
	if err := x.fence(ctx, "record", end, time.Now()); err != nil {
		return err
	}
	x.applied, x.pending = end, 0
	x.s.mu.Lock()
	x.s.appliedLSN = end
	x.s.mu.Unlock()
	return nil
}

// fenceScript changes the sync state only for the sync whose view of it is
// current: the lsn it last recorded is still there, and no other group is
// pending. A sync that stalled (a pause, a long GC) while another took
// over its slot would otherwise move lsn back, or delete the other's
// pending mark, and the group it marked would be regrouped otherwise and
// named by other ids on replay.
//
// It also checks that the filter is the one the sync loaded: its root
// partition, which shares the state's hash tag, still has the incarnation
// it had then. A filter deleted and made again (Create, a load) has
// another, and every key the sync put in it is gone.
//
// KEYS[1] the state, KEYS[2] the filter's root partition; ARGV[1]
// 'pending' (mark the group ending at ARGV[3] pending) or 'record' (record
// it applied); ARGV[2] the lsn this sync last recorded; ARGV[3] the
// group's end; ARGV[4] the time in ms; ARGV[5] the version of calls;
// ARGV[6] the incarnation ("": not checked).
var fenceScript = redis.NewScript(`
if ARGV[1] ~= 'pending' and ARGV[1] ~= 'record' then
  return redis.error_reply('PGSYNC_ARGS ARGV[1] is not pending or record')
end
local lsn = redis.call('HGET', KEYS[1], 'lsn')
local pending = redis.call('HGET', KEYS[1], 'pending')
if not lsn then
  return redis.error_reply('PGSYNC_GONE')
end
if ARGV[6] ~= '' then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    return redis.error_reply('PGSYNC_FILTER_GONE')
  end
  if redis.call('GETRANGE', KEYS[2], 49, 56) ~= ARGV[6] then
    return redis.error_reply('PGSYNC_FILTER_REPLACED')
  end
end
if lsn ~= ARGV[2] or (pending and pending ~= ARGV[3]) then
  return redis.error_reply('PGSYNC_STALE ' .. lsn .. ' ' .. (pending or 'none'))
end
if ARGV[1] == 'pending' then
  redis.call('HSET', KEYS[1], 'pending', ARGV[3], 'pending_at', ARGV[4], 'pending_v', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'lsn', ARGV[3], 'at', ARGV[4])
  redis.call('HDEL', KEYS[1], 'pending', 'pending_at', 'pending_v')
end
return 'ok'
`)

// fence runs fenceScript; a stale sync gets ErrFilter and stops.
func (x *stream) fence(ctx context.Context, step string, end pglogrepl.LSN, now time.Time) error {
	err := fenceScript.Run(ctx, x.cfg.Redis, []string{x.key, filterKey(x.cfg.KeyPrefix, x.cfg.Filter)},
		step, x.applied.String(), end.String(), unixMilli(now), callsVersion, rawIncarnation(x.inc)).Err()
	if redis.HasErrorPrefix(err, "PGSYNC_FILTER_GONE") {
		return x.filterError(rbloom.ErrNotFound)
	}
	if redis.HasErrorPrefix(err, "PGSYNC_FILTER_REPLACED") {
		return x.filterReplaced()
	}
	if redis.HasErrorPrefix(err, "PGSYNC_GONE") {
		return x.stateGone()
	}
	if redis.HasErrorPrefix(err, "PGSYNC_STALE") {
		var lsn, pending string
		fmt.Sscanf(strings.TrimPrefix(err.Error(), "PGSYNC_STALE "), "%s %s", &lsn, &pending)
		return fmt.Errorf("%w: the sync state %s of filter %s moved under this sync (it holds changes up to %s, pending %s; this sync last wrote %s): another sync took the filter over while this one stalled, or Redis went back to an older copy; this one stops",
			ErrFilter, x.key, x.cfg.Filter, lsn, pending, x.applied)
	}
	if err != nil {
		return fmt.Errorf("pgsync: redis: %w", err)
	}
	return nil
}

// filterError is err, from a write of the filter, in the sync's words: a
// filter gone from Redis stops the sync (it never makes the filter again,
// empty: its keys would test absent).
func (x *stream) filterError(err error) error {
	if errors.Is(err, rbloom.ErrNotFound) {
		return fmt.Errorf("%w: filter %s vanished from Redis while the sync streamed (deleted, evicted, flushed, or a restart without persistence): its keys are lost; reload (-reload), which loads it again while readers get ErrNotFound, then ErrLoading, never \"absent\"",
			ErrFilter, x.cfg.Filter)
	}
	return fmt.Errorf("pgsync: redis: %w", err)
}

// stateGone is the error of a sync state gone from Redis.
func (x *stream) stateGone() error {
	return fmt.Errorf("%w: the sync state %s of filter %s is gone from Redis (FLUSHALL, eviction, or a restart without persistence), and the filter's writes may be gone with it: reload (-reload)",
		ErrFilter, x.key, x.cfg.Filter)
}

// lostKeys stops the sync when removes found keys of the table absent
// from the filter: it lost keys it should hold (written by something else
// than the sync, or reset), so other keys of the table may test absent
// too. The group is left pending: a run again replays it, answered from
// its records, and stops the same way until a reload.
func (x *stream) lostKeys(missed []string) error {
	if len(missed) == 0 {
		return nil
	}
	x.s.update(func(st *Stats) { st.RemoveMisses += int64(len(missed)) })
	return fmt.Errorf("%w: %d keys the table held (%q...) were absent from filter %s when their rows went: the filter lost keys it should hold (removed or reset by something else than the sync), and others may test absent; reload (-reload)",
		ErrFilter, len(missed), missed[:min(len(missed), 3)], x.cfg.Filter)
}

// filterReplaced is the error of a filter made again since the sync
// loaded it.
func (x *stream) filterReplaced() error {
	return fmt.Errorf("%w: filter %s was deleted and made again (Create, or a load by something else) while the sync followed it: the keys the sync put in it are gone; reload (-reload)",
		ErrFilter, x.cfg.Filter)
}

// checkFilter checks that the filter is still the one the sync loaded:
// there, with the incarnation it had.
func (x *stream) checkFilter(ctx context.Context) error {
	if x.inc == "" {
		return nil
	}
	inc, exists, err := readIncarnation(ctx, x.cfg.Redis, filterKey(x.cfg.KeyPrefix, x.cfg.Filter))
	if err != nil {
		return err
	}
	if !exists {
		if n, err := x.cfg.Redis.Exists(ctx, x.key).Result(); err == nil && n == 0 {
			return x.stateGone() // the state went with it: a flush, a restart
		}
	}
	switch {
	case !exists:
		return x.filterError(rbloom.ErrNotFound)
	case inc != x.inc:
		return x.filterReplaced()
	}
	return nil
}

// counted adds an applied group to the stats.
func (x *stream) counted(group []*txn) {
	var n int64
	for _, t := range group {
		n += int64(len(t.ops))
	}
	now := time.Now()
	x.s.mu.Lock()
	defer x.s.mu.Unlock()
	x.s.oldest = time.Time{}
	x.s.rate.add(now, n)
	st := &x.s.stats
	st.Applied += n
	st.Transactions += int64(len(group))
	st.LastApplyLag = now.Sub(group[0].at)
	x.group, x.groupOps = nil, 0
	if x.s.applied != nil {
		at := make([]time.Time, len(group))
		for i, t := range group {
			at[i] = t.at
		}
		x.s.applied(at)
	}
}

// applyTruncate applies a transaction that truncated the table: the
// filter is emptied by a rebuild from nothing, and the transaction's
// changes after the truncate are applied without ids. Applied again after
// a crash, it does the same from scratch, so it needs no ids and no
// window. A rebuild, not Drop and Create: the filter never goes missing,
// so a sync killed between the two cannot leave it gone (and readers an
// empty filter) until someone reloads it.
func (x *stream) applyTruncate(ctx context.Context, t *txn) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	if err := x.fence(ctx, "pending", t.end, time.Now()); err != nil {
		return err
	}
	// The adds after the truncate are the rebuild's fill, so that a key
	// truncated and inserted again in the transaction is in the counters
	// that replace the old ones; the removes come after the switch.
	var adds, removes [][]string
	for _, c := range calls(x.cp, []*txn{t}) {
		if c.remove {
			removes = append(removes, c.keys)
		} else {
			adds = append(adds, c.keys)
		}
	}
	if err := rebuildFrom(ctx, x.f, adds); err != nil {
		return fmt.Errorf("pgsync: redis: truncate: %w", err)
	}
	var missed []string
	for _, keys := range removes {
		removed, err := x.f.RemoveMany(ctx, keys)
		if err != nil {
			return x.filterError(err)
		}
		for i, r := range removed {
			if !r {
				missed = append(missed, keys[i])
			}
		}
	}
	if err := x.lostKeys(missed); err != nil {
		return err
	}
	if err := x.record(ctx, t.end); err != nil {
		return err
	}
	x.group = []*txn{t}
	x.counted(x.group)
	return nil
}

// rebuildFrom rebuilds f from the batches. A rebuild a killed sync left
// holds the filter until its lease lapses (30 s): wait for it.
func rebuildFrom(ctx context.Context, f *rbloom.Counting, batches [][]string) error {
	for {
		err := f.Rebuild(ctx, func(add func([]string) error) error {
			for _, b := range batches {
				if err := add(b); err != nil {
					return err
				}
			}
			return nil
		})
		if !errors.Is(err, rbloom.ErrRebuilding) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// status tells the server the position the filter holds every change
// before; idle asks it to answer with its own position at once.
func (x *stream) status(ctx context.Context, idle bool) error {
	x.nextStatus = time.Now().Add(statusInterval)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, x.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: x.applied, ReplyRequested: idle})
	if err != nil {
		return fmt.Errorf("pgsync: postgres: status update: %w", err)
	}
	if err := x.recheck(ctx); err != nil {
		return err
	}
	return x.s.at("status")
}

// recheck checks again, against the catalog, what the start checked: the
// table and the key column are still the ones followed, by identity (oid
// and attribute number, not names), and the publication still sends every
// change of the table. A rename or swap of either, a drop and create or
// add, a child table, a publication that stops sending some changes: the
// stream would then be another table's, or miss rows, so the sync stops.
// It runs every status interval and at each relation message of the table
// (which PostgreSQL sends before the first change after a schema change).
func (x *stream) recheck(ctx context.Context) error {
	stop := func(err error) error {
		if !errors.Is(err, ErrInvalid) {
			return err // a failed query (a lost connection) says nothing of the table
		}
		return fmt.Errorf("%w; the sync of filter %s stopped, since the table, its key column or the publication changed while it followed %s.%s (table oid %d, column %d): put them back, or reload (-reload)",
			err, x.cfg.Filter, x.t.name, x.t.column, x.t.oid, x.t.attnum)
	}
	t, err := checkTarget(ctx, x.db, x.cfg)
	if err != nil {
		return stop(err)
	}
	switch {
	case t.oid != x.t.oid:
		return stop(fmt.Errorf("%w: table %s is now another table (oid %d): it was renamed, or dropped and created again", ErrInvalid, x.cfg.Table, t.oid))
	case t.attnum != x.t.attnum:
		return stop(fmt.Errorf("%w: column %s of %s is now another column (attribute %d): it was renamed, or dropped and added again", ErrInvalid, t.column, t.name, t.attnum))
	case t.typ != x.t.typ:
		return stop(fmt.Errorf("%w: key column %s.%s changed type (oid %d, was %d): its keys' text may no longer be the loaded one's", ErrInvalid, t.name, t.column, t.typ, x.t.typ))
	}
	if err := checkPublication(ctx, x.db, x.cfg, &t); err != nil {
		return stop(err)
	}
	if t.version() != x.t.version() {
		return fmt.Errorf("%w: key column %s or publication %s of %s was altered while the sync of filter %s followed it (catalog rows now %s, were %s): even if it looks as before now, changes sent meanwhile may have been left out or read from another column; reload (-reload)",
			ErrInvalid, t.column, x.cfg.Publication, t.name, x.cfg.Filter, t.version(), x.t.version())
	}
	return x.checkFilter(ctx)
}

// serverAt notes the end of the server's WAL.
func (x *stream) serverAt(end pglogrepl.LSN) {
	if end <= x.serverEnd {
		return
	}
	x.serverEnd = end
	x.s.mu.Lock()
	x.s.serverLSN = end
	x.s.mu.Unlock()
}
