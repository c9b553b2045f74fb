package rbloom

import (
	"fmt"
)

// Outcome is what a batch method that failed did to one of its items.
type Outcome uint8

const (
	// NotApplied: the item was not sent, or its call was refused before it
	// wrote anything. Sending it again applies it for the first time.
	NotApplied Outcome = iota
	// Applied: the item's call was applied, and BatchError.Answers holds
	// its answer.
	Applied
	// Unknown: the item's call was sent and no answer came back (a
	// deadline, a lost connection, a refusal of another call of the same
	// round trip): it may have been applied, or may be applied later by a
	// request still on the wire.
	Unknown
)

// String returns "not applied", "applied" or "unknown".
func (o Outcome) String() string {
	switch o {
	case NotApplied:
		return "not applied"
	case Applied:
		return "applied"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// BatchError is the error of a write (AddMany, TestOrAddMany, RemoveMany,
// their Once forms and their one-item forms) that failed after its first
// call was sent: what it did, item by item, in the order of the batch.
// Find it with errors.As; errors.Is sees its cause (ErrFull,
// ErrNotFound, context.DeadlineExceeded ...; a deadline that go-redis
// hits on a socket read is its i/o timeout).
//
// To reconcile: send the items that are not Applied again. Under an
// operation id (the Once forms), send the whole batch again under the same
// id: the calls that were applied answer from their records, and the
// others are applied once. Without one, an Unknown add sent again may
// count twice (a ghost at worst, never a false negative), but an Unknown
// remove must not be sent again: removed twice, it would take counts of
// other items. Use RemoveManyOnce where a remove may have to be retried.
type BatchError struct {
	// Outcomes says, for each item of the batch, what was done.
	Outcomes []Outcome
	// Answers holds the answer of each Applied item, as the method would
	// have returned it; false for the others.
	Answers []bool
	// Err is why the batch stopped.
	Err error
}

func (e *BatchError) Error() string {
	var n [3]int
	for _, o := range e.Outcomes {
		n[min(int(o), 2)]++
	}
	return fmt.Sprintf("%s (of %d items: %d applied, %d unknown, %d not applied)",
		errText(e.Err), len(e.Outcomes), n[Applied], n[Unknown], n[NotApplied])
}

func (e *BatchError) Unwrap() error { return e.Err }

// batchFailed returns err, which stopped a write, as a BatchError with
// what done and out say of each item; err alone when nothing was sent.
func batchFailed(err error, done []Outcome, out []bool) error {
	for _, o := range done {
		if o != NotApplied {
			return &BatchError{Outcomes: done, Answers: out, Err: err}
		}
	}
	return err
}

// mark sets done to o at each position of groups.
func mark(done []Outcome, groups [][]int, o Outcome) {
	for _, group := range groups {
		for _, pos := range group {
			done[pos] = o
		}
	}
}

// errText is err's message without the "rbloom: " of a bare sentinel, so
// that the prefix comes once, from opError.
func errText(err error) string {
	if k, ok := err.(*kind); ok {
		return k.text
	}
	return err.Error()
}
