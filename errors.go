package rbloom

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalidOptions is returned, wrapped with the name of the field, for
	// options or arguments that cannot describe a filter. Nothing is written.
	ErrInvalidOptions = newKind("invalid options")

	// ErrParamsMismatch is returned when the filter stored in Redis was
	// created with another mode, m, k, number of partitions or IDLifetime
	// than the caller's (or a window with other settings). Nothing is written:
	// use Open to take the parameters from Redis.
	ErrParamsMismatch = newKind("filter parameters differ from the stored ones")

	// ErrNotFilter is returned when the filter's key holds something that is
	// not an rbloom filter of this format version: another type, a string
	// written by someone else, a corrupted header. The key is left untouched.
	ErrNotFilter = newKind("key does not hold an rbloom filter")

	// ErrNotFound is returned by every method but Create, Rebuild, Drop
	// and Info (whose Exists is then false) when the filter does not exist: it was never made, or Redis
	// lost it (a restart without persistence, a flush, eviction). Nothing
	// was written. The filter may have held items: ask the source of
	// truth, and load the filter from it with Rebuild (or Options.Source).
	// A handle with Options.CreateOnWrite never gets it from a write.
	ErrNotFound = newKind("filter not found")

	// ErrLoading is returned by reads, and by TestOrAdd, while the filter
	// is being loaded from its source (the first fill of a Rebuild that
	// found it missing, or the restore of a lost one): its slots do not
	// hold every item yet, so it cannot answer "absent". Ask the source
	// of truth. Adds and removes made meanwhile are applied, as during a
	// rebuild. A load whose process died leaves the filter loading until
	// the next Rebuild; Info.Loading says so.
	ErrLoading = newKind("filter is being loaded")

	// ErrDamaged is returned when a filter's keys are not as rbloom left
	// them: a partition missing while others exist (evicted, deleted,
	// expired alone), or a string of the wrong length. Writes to it are
	// refused rather than recreate a partition that would then answer
	// "absent" for items it held; reads answer "may be present" for items
	// in a missing partition. Drop and rebuild the filter.
	ErrDamaged = newKind("filter damaged")

	// ErrNotReplicated is returned by a write, with Options.WaitReplicas
	// set, when fewer replicas than asked acknowledged it in time. The
	// write was applied on the master; a failover before the replicas catch
	// up could lose it.
	ErrNotReplicated = newKind("write not acknowledged by enough replicas")

	// ErrOpIDReused is returned by the Once methods when the operation id
	// was already used, within IDLifetime, for another batch (other items,
	// or the same in another order), or for this batch before a Resize
	// that changed how batches are cut (P or k), whose answers are not
	// kept across it. Nothing is written: an id names one batch, and a
	// second use for something else would otherwise be answered as a
	// replay and silently dropped.
	ErrOpIDReused = newKind("operation id already used for another batch")

	// ErrRebuilding is returned by Rebuild when another rebuild of the
	// filter is running (from any process). Nothing was changed: try
	// again once it has finished. A rebuild whose process died holds the
	// filter for at most rebuildLease (30 seconds).
	ErrRebuilding = newKind("another rebuild of the filter is running")

	// ErrRebuildLost is returned by Rebuild when what it had set up was
	// changed under it: the filter was dropped, expired or created anew,
	// another rebuild took over after this one stalled, or a failover lost
	// its start. The partitions it reports were not switched; the filter
	// keeps its old counters there, and nothing it held was lost.
	ErrRebuildLost = newKind("rebuild interrupted")

	// ErrNoFunctions is returned by writes with Options.UseFunctions when the
	// server has no function library of this version of rbloom (it was never
	// installed, or was deleted or flushed), or has no functions at all (Redis
	// before 7.0). A call refused so wrote nothing, and rbloom never falls back
	// to EVAL; on a cluster where only some masters have the library, the
	// calls of a batch that went to the others were applied. An admin installs
	// the library with InstallFunctions or `rbloom functions install`.
	ErrNoFunctions = newKind("Redis functions not installed")

	// ErrFull is returned by an add that would take the filter past
	// Options.MaxItems, or, in a cuckoo filter, past its planned load
	// (CuckooMaxLoad), or that could not place an item in its buckets.
	// That call added nothing and moved no stored fingerprint (a batch may
	// have added the items of its other calls).
	ErrFull = newKind("filter full")
)

// Scripts report their own failures with error replies starting with one of
// these codes. They are private on purpose: go-redis retries or redirects on
// NOSCRIPT, READONLY, LOADING, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, MOVED, ASK
// and BUSY, and an error of ours must never trigger that.
var scriptErrors = map[string]error{
	"RBLOOM_MISMATCH":   ErrParamsMismatch,
	"RBLOOM_NOTFILTER":  ErrNotFilter,
	"RBLOOM_DAMAGED":    ErrDamaged,
	"RBLOOM_OPID":       ErrOpIDReused,
	"RBLOOM_FULL":       ErrFull,
	"RBLOOM_LOADING":    ErrLoading,
	"RBLOOM_REBUILDING": ErrRebuilding,
	"RBLOOM_LOST":       ErrRebuildLost,
	"RBLOOM_ARGS":       newKind("script rejected its arguments"),
}

// kind is one of rbloom's sentinel errors. Standing alone it reads
// "rbloom: <text>"; inside an error of the API, only its text, so that the
// prefix comes once, from opError.
type kind struct{ text string }

func newKind(text string) *kind { return &kind{text} }

func (k *kind) Error() string { return "rbloom: " + k.text }

// detailed is a kind with what the caller needs to know: "<text>: <detail>".
type detailed struct {
	kind   *kind
	detail string
}

func (e *detailed) Error() string { return e.kind.text + ": " + e.detail }

func (e *detailed) Unwrap() error { return e.kind }

// failf returns the error of kind k with a detail formatted as by
// fmt.Sprintf. k is one of the Err variables.
func failf(k error, format string, args ...any) error {
	return &detailed{kind: k.(*kind), detail: fmt.Sprintf(format, args...)}
}

// opError is the error of one call of the API. Its message is
// "rbloom: <op>: <cause>"; causes are built without the prefix (failf), so
// that every error reads the same way whichever path found it:
//
//	rbloom: test: filter not found: users
//	rbloom: add: key does not hold an rbloom filter: rbloom:{users} holds another type
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string {
	return "rbloom: " + e.op + ": " + errText(e.err)
}

func (e *opError) Unwrap() error { return e.err }

// callError returns err, from a call of op, as an opError: the one place
// where errors are wrapped. An error reply of one of our scripts becomes
// its sentinel with the script's detail; an opError is returned as it is.
func callError(op string, err error) error {
	if _, ok := err.(*opError); ok || err == nil {
		return err
	}
	if _, ok := err.(*BatchError); ok {
		return &opError{op: op, err: err}
	}
	return &opError{op: op, err: scriptError(err)}
}

// scriptError returns err, or, when it is an error reply of one of our
// scripts, its sentinel with the script's detail.
func scriptError(err error) error {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		code, detail, _ := strings.Cut(rerr.Error(), " ")
		if sentinel, ok := scriptErrors[code]; ok {
			return failf(sentinel, "%s", detail)
		}
	}
	return err
}

// anotherType is the error for a key that holds another type than string.
func anotherType(key string) error {
	return failf(ErrNotFilter, "%s holds another type", key)
}
