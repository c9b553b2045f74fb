package rbloom

import (
	"context"
	"encoding/hex"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Handles follow a resize. A Resize, once every key is checked and before
// the first old partition goes, records in the hash <prefix>{name}:resized
// the new filter's header under the old one's identity. A handle of the
// old size whose call then fails as a switched filter makes it fail
// (ErrParamsMismatch from a new partition, ErrDamaged from a retired one
// that is gone) looks there for its own identity, waits until the root
// partition holds the header found, and carries on with that filter: the
// reads again, the writes for the items that were not applied. A handle
// that finds no record for its identity has parameters of its own, and
// gets the error: a real disagreement.

// resizeRecordTTL is how long the record of a resize lasts: a handle idle
// for longer than that, its filter resized meanwhile, gets
// ErrParamsMismatch and must be opened again.
const resizeRecordTTL = 7 * 24 * time.Hour

// maxFollows bounds the resizes one call follows.
const maxFollows = 3

// follower holds the filter that the handles made together follow: nil
// until a call found their filter resized.
type follower struct{ cur atomic.Pointer[filter] }

// current returns the filter the handle is at: f, or the one it followed.
func (f *filter) current() *filter {
	if f.follow != nil {
		if g := f.follow.cur.Load(); g != nil {
			return g
		}
	}
	return f
}

// resizedKey is the key of the records of the resizes of the filter called
// name, in its root partition's hash slot.
func resizedKey(prefix, name string) string { return keyOf(prefix, name) + ":resized" }

// identity is the field f's resizes are recorded under.
func (f *filter) identity() string { return hex.EncodeToString([]byte(f.parts[0].head[:identitySize])) }

// recordResize records that f is being resized into g: before any key of
// f is deleted or replaced.
func (f *filter) recordResize(ctx context.Context, g *filter) error {
	key := resizedKey(f.prefix, f.name)
	pipe := f.rdb.Pipeline()
	pipe.HSet(ctx, key, f.identity(), g.parts[0].head)
	f.recordEarlier(ctx, pipe, g)
	pipe.PExpire(ctx, key, max(resizeRecordTTL, f.idLifetime))
	_, err := pipe.Exec(ctx)
	return err
}

// followed returns the handle of the filter f was resized into, once its
// root partition holds it, when err, from a call of f, says that f's keys
// changed under it and a resize of f is recorded; else nil.
func (f *filter) followed(ctx context.Context, err error) *filter {
	if !errors.Is(err, ErrParamsMismatch) && !errors.Is(err, ErrDamaged) {
		return nil
	}
	pipe := f.rdb.Pipeline()
	rec := pipe.HGetAll(ctx, resizedKey(f.prefix, f.name))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil
	}
	g := f.lastResize(rec.Val())
	if g == nil {
		return nil
	}
	root := g.parts[shareOf(keySlot(f.name), len(g.parts))]
	// Retired partitions go before the copies are renamed in: wait, a
	// moment, for the switch.
	for try := 0; try < 50; try++ {
		pipe := f.rdb.Pipeline()
		head := pipe.GetRange(ctx, root.key, 0, identitySize-1)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil
		}
		if head.Val() == root.head[:identitySize] {
			f.follow.cur.Store(g)
			return g
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// lastResize returns the handle of the filter that f's was resized into,
// following resizes made one after the other, as records (the resize
// record hash, field by identity) say; nil when none of f is recorded.
func (f *filter) lastResize(records map[string]string) *filter {
	var g *filter
	for id := f.identity(); len(records) > 0; {
		h, err := parseHeader(records[id])
		if err != nil || h.mode != f.h.mode {
			break
		}
		delete(records, id) // a record never leads back: each is followed once
		g = f.withHeader(h)
		id = g.identity()
	}
	return g
}

// followRead runs read on the handle's filter, and again on the filter it
// was resized into when a resize switched it under the read.
func followRead[T any](ctx context.Context, b *base, read func(f *filter) (T, error)) (T, error) {
	f := b.f.current()
	v, err := read(f)
	for try := 0; err != nil && try < maxFollows; try++ {
		if f = f.followed(ctx, err); f == nil {
			break
		}
		v, err = read(f)
	}
	return v, err
}

// followWrite runs write on items on the handle's filter, and, when a
// resize switched it under the write, again on the resized filter for the
// items that were not applied. Items whose outcome is unknown end it with
// the error: applied twice, a remove could take counts of other items.
func followWrite(ctx context.Context, b *base, items []string, write func(f *filter, items []string) ([]bool, error)) ([]bool, error) {
	f := b.f.current()
	out, err := write(f, items)
	for try := 0; err != nil && try < maxFollows; try++ {
		var be *BatchError
		if errors.As(err, &be) && slices.Contains(be.Outcomes, Unknown) {
			break
		}
		if f = f.followed(ctx, err); f == nil {
			break
		}
		if be == nil { // nothing was applied
			out, err = write(f, items)
			continue
		}
		if err = be.retry(items, func(rest []string) ([]bool, error) { return write(f, rest) }); err == nil {
			out = be.Answers
		}
	}
	return out, err
}

// retry sends again, by write, the items of e's batch that were not
// applied, and sets e to what it did. It returns nil when all are
// applied, else the error of write, with e as its BatchError.
func (e *BatchError) retry(items []string, write func(rest []string) ([]bool, error)) error {
	var rest []string
	var at []int
	for i, o := range e.Outcomes {
		if o == NotApplied {
			rest, at = append(rest, items[i]), append(at, i)
		}
	}
	got, err := write(rest)
	var again *BatchError
	if errors.As(err, &again) {
		got = again.Answers
	}
	for j, i := range at {
		switch {
		case err == nil:
			e.Outcomes[i], e.Answers[i] = Applied, got[j]
		case again != nil:
			e.Outcomes[i], e.Answers[i] = again.Outcomes[j], got[j]
		}
	}
	if err == nil {
		return nil
	}
	if again != nil {
		again.Outcomes, again.Answers = e.Outcomes, e.Answers
		return err
	}
	if oe, ok := err.(*opError); ok { // "rbloom: <op>: <cause>", of the whole batch
		e.Err, oe.err = oe.err, e
		return oe
	}
	e.Err = err
	return e
}

// followOnce runs write, a Once write of the whole batch, on the handle's
// filter, and, when a resize switched the filter under it before any of
// its calls applied, sends it again under the same id to the resized
// filter, whose records answer what was applied before the resize (or
// refuse the id, ErrOpIDReused, where the resize cut its batches
// otherwise). A batch of which some calls applied is not sent again: the
// caller sends it again under its id, to the filter the handle now
// follows.
func followOnce(ctx context.Context, b *base, write func(f *filter) ([]bool, error)) ([]bool, error) {
	f := b.f.current()
	out, err := write(f)
	for try := 0; err != nil && try < maxFollows; try++ {
		if f = f.followed(ctx, err); f == nil {
			break
		}
		var be *BatchError
		if errors.As(err, &be) {
			break
		}
		out, err = write(f)
	}
	return out, err
}
