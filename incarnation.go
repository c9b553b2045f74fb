package rbloom

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// A filter's operation records carry its incarnation (header.go), so that
// records left by a filter that was dropped are never replayed on the one
// made after it. A filter Redis lost without a Drop (its partitions
// evicted, expired or deleted, a load given up) is the same filter when it
// is loaded again from its source, and its records must still answer: an
// operation id applied before the loss, replayed after the load, would
// otherwise be applied a second time (a remove then takes the count of a
// row the source still holds). So the incarnation is also kept in a key of
// its own, which Drop deletes, and a load of a filter none of whose
// partitions is left takes the incarnation kept there.

// incarnationKey is the key that keeps the incarnation of the filter
// called name, in its root partition's hash slot.
func incarnationKey(prefix, name string) string { return keyOf(prefix, name) + ":inc" }

// keptIncarnation returns the incarnation kept for f's name, or a fresh
// one when none is, kept from then on.
func (f *filter) keptIncarnation(ctx context.Context) (string, error) {
	pipe := f.rdb.Pipeline()
	kept := pipe.Get(ctx, incarnationKey(f.prefix, f.name))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return "", err
	}
	if inc := kept.Val(); len(inc) == incSize && inc != string(make([]byte, incSize)) {
		return inc, nil
	}
	// Kept for as long as the records of writes made during the load
	// live: a load given up leaves no key for good; one that finishes
	// keeps it (keepIncarnation).
	inc := randomIncarnation()
	return inc, f.keepIncarnationFor(ctx, inc, f.recordLife())
}

// keepIncarnation keeps inc as the incarnation of f's name: as long as the
// filter may live, and its records after it.
func (f *filter) keepIncarnation(ctx context.Context, inc string) error {
	var ttl time.Duration
	if f.ttl > 0 {
		ttl = f.ttl + f.recordLife()
	}
	return f.keepIncarnationFor(ctx, inc, ttl)
}

// keepIncarnationFor keeps inc for ttl, 0 for good.
func (f *filter) keepIncarnationFor(ctx context.Context, inc string, ttl time.Duration) error {
	pipe := f.rdb.Pipeline()
	pipe.Set(ctx, incarnationKey(f.prefix, f.name), inc, ttl)
	_, err := pipe.Exec(ctx)
	return err
}

// recordLife bounds how long a record of f's writes lives (records.go).
func (f *filter) recordLife() time.Duration {
	return max(f.idLifetime, f.retryKeep) + 2*recordSpan(max(f.idLifetime, f.retryKeep))
}

// keepMadeIncarnation keeps the incarnation of f's partitions, which a
// Create has just made (another process's Create may have made them).
func (f *filter) keepMadeIncarnation(ctx context.Context) error {
	pipe := f.rdb.Pipeline()
	inc := pipe.GetRange(ctx, f.parts[0].key, incByte, incByte+incSize-1)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	if len(inc.Val()) != incSize {
		return nil // dropped meanwhile
	}
	return f.keepIncarnation(ctx, inc.Val())
}
