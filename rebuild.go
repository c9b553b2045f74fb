package rbloom

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// A rebuild refills a filter from its source of truth without stopping it.
// Each partition gets a copy in its cluster slot (its key followed by
// ":next") and a lease (":rebuild") that names the rebuild holding it.
//
//  1. claim: on every partition, at once, a fresh empty copy, the
//     partition's header marked, the lease taken. From then on every add,
//     from any process, is applied to the partition and to its copy in the
//     same script. A partition another rebuild holds refuses the claim.
//  2. fill: the caller's fill adds the source's items to the copies; a
//     background renewal keeps the lease.
//  3. switch: each copy replaces its partition with one RENAME, keeping the
//     partition's TTL, if and only if the lease is still this rebuild's
//     and the partition is as the claim left it. An item's partition
//     switches at once from the old counters to the new ones.
//
// Removes are never applied to a copy. The copy holds what the fill read
// from the source and the adds made since the claim, and a remove's item
// may be in neither (its row was deleted before the fill read the table):
// decrementing it there, where it may test present as a false positive,
// would take counts of items that are held. Items removed while a rebuild
// runs may therefore remain in the new counters as ghosts, until the next
// rebuild: at most as many as such removes, never a false negative.
//
// What the fill must do for that to hold (stated on Counting.Rebuild):
// read the source after Rebuild has called it, in one consistent snapshot
// taken at a moment when no change of the application is half done: every
// item whose Add has returned is in the source (or its row was given up),
// and every item deleted from the source has had its Remove called (it
// may still be running; only a Remove that starts after the switch for a
// row the snapshot did not hold would take counts of others).

// rebuildLease is how long a rebuild holds a filter without renewing its
// lease; it renews every third of it.
const rebuildLease = 30 * time.Second

// rebuild fills fresh copies of f with the items fill adds, then puts them
// in its place.
func (f *filter) rebuild(ctx context.Context, fill func(add func(items []string) error) error) error {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand documents it)
	r := rebuilder{f: f, token: hex.EncodeToString(b[:])}
	// A filter that does not exist yet is created first, so that a writer
	// creating it meanwhile does not interrupt the rebuild. Partitions
	// missing from a damaged filter are claimed missing and switched in.
	if s, err := f.survey(ctx); err != nil {
		return err
	} else if !s.any {
		if err := f.createAll(ctx, true); err != nil {
			return err
		}
	}
	if err := r.step(ctx, "claim"); err != nil {
		return r.abort(ctx, err)
	}
	next := *f // the same filter, at the keys of the copies
	next.parts = nil
	for _, p := range f.parts {
		next.parts = append(next.parts, part{key: copyKey(p.key), head: p.head})
	}
	fillCtx, cancel := context.WithCancelCause(ctx)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		r.renew(fillCtx, cancel)
	}()
	op := next.addOp()
	op.create, op.fill = false, true
	err := fill(func(items []string) error {
		_, err := next.write(fillCtx, op, items)
		return err
	})
	if err != nil {
		err = fmt.Errorf("fill: %w", err)
	}
	if cause := context.Cause(fillCtx); errors.Is(cause, ErrRebuildLost) {
		err = cause // the fill's error, if any, followed from it
	}
	cancel(nil)
	<-renewed
	if err == nil {
		err = r.step(ctx, "switch")
	}
	if err != nil {
		// Partitions that switched are done: they no longer have this
		// rebuild's lease, and abort leaves them alone.
		return r.abort(ctx, err)
	}
	return nil
}

// rebuilder runs the steps of one rebuild of f.
type rebuilder struct {
	f     *filter
	token string // names this rebuild in the leases
}

// step runs rebuild.lua's step on every partition, in one round trip, and
// waits for the replicas as every write of f does.
func (r rebuilder) step(ctx context.Context, step string) error {
	f := r.f
	lease := strconv.FormatInt(rebuildLease.Milliseconds(), 10)
	calls := make([]scriptCall, len(f.parts))
	for p, part := range f.parts {
		head := part.head
		if step == "claim" {
			head = newIncarnation(head) // for a partition that is missing
		}
		calls[p] = scriptCall{
			keys: []string{part.key, copyKey(part.key), leaseKey(part.key)},
			args: []any{head, step, r.token, lease, f.ttlMS},
		}
	}
	if _, err := runScripts(ctx, f.rdb, rebuildScript, f.fcall, calls, f.repl); err != nil {
		return fmt.Errorf("%s: %w", step, scriptError(err))
	}
	return nil
}

// renew renews the leases until ctx is done, every third of the lease. A
// lease found lost ends the fill, through cancel; other failures are
// tried again at the next turn (the switch checks the leases anyway).
func (r rebuilder) renew(ctx context.Context, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(rebuildLease / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := r.step(ctx, "renew"); errors.Is(err, ErrRebuildLost) {
			cancel(err)
			return
		}
	}
}

// abort undoes the claim after err, where this rebuild still holds it,
// and returns err, with abort's own failure if any.
func (r rebuilder) abort(ctx context.Context, err error) error {
	if abortErr := r.step(context.WithoutCancel(ctx), "abort"); abortErr != nil {
		return fmt.Errorf("%w; and then %w", err, abortErr)
	}
	return err
}

// Rebuild refills the filter from its source of truth without stopping it:
// fill must call add with every item the filter should hold (all the keys
// of a table, say), in batches of any size, as many times as each is held.
// Meanwhile the filter keeps answering from its old counters, and every
// Add, from any process, also goes to the new ones. Then the new counters
// take the old ones' place, partition by partition, each at once. That
// clears the ghosts of items removed from the source but not from the
// filter, and counters stuck at 15. The filter keeps its TTL.
//
// The rule fill must follow, so that no item held tests absent: read the
// source after Rebuild calls fill, in one consistent snapshot (one
// REPEATABLE READ transaction, say), taken at a moment when no change of
// the application is half done: every item whose Add has returned is in
// the source, unless its change was given up, and every row deleted from
// it has had its Remove called (changes can share a lock that the fill
// takes alone while it opens its snapshot). Removes made while the
// rebuild runs are not
// applied to the new counters, where their items may be missing: those
// items may remain there as ghosts until the next rebuild. An item both
// added by fill and by a concurrent Add counts twice: a later Remove
// leaves it a ghost at worst.
//
// One rebuild runs at a time: while another holds the filter, Rebuild
// fails with ErrRebuilding and changes nothing (a rebuild whose process
// died holds it for 30 seconds at most). If fill returns an error, or the
// rebuild was interrupted (ErrRebuildLost: the filter dropped, expired or
// recreated, a failover, another rebuild taking over after this one
// stalled), the partitions not yet switched keep their old counters. With
// Options.WaitReplicas, every step waits for the replicas.
func (c *Counting) Rebuild(ctx context.Context, fill func(add func(items []string) error) error) error {
	return callError("rebuild", c.f.rebuild(ctx, fill))
}

// Rebuild refills the filter from its source of truth without stopping it,
// as Counting.Rebuild does; for a classic filter, that is the way to forget
// items.
func (c *Classic) Rebuild(ctx context.Context, fill func(add func(items []string) error) error) error {
	return callError("rebuild", c.f.rebuild(ctx, fill))
}
