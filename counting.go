// Package rbloom keeps Bloom filters in Redis, above all a counting Bloom
// filter that supports deletion.
//
// A counting filter (NewCounting) keeps a 4-bit counter per slot: Add
// increments an item's k counters, Remove decrements them, Test checks that
// all k are non-zero. A classic filter (NewClassic) keeps one bit per slot
// and cannot remove. Every Add and Remove changes all k slots of an item
// atomically, in a Lua script, so any number of writers on any number of
// machines keep the filter consistent.
//
// The promise: an item that was added and not removed always tests true. It
// holds as long as callers keep one rule: remove only what was added.
// Removing an item that was never added but happens to test true (a false
// positive) decrements counters that belong to other items, and can make
// them test false.
//
// A counter that reaches 15 is saturated: its true count is unknown, so it
// is never decremented again. That keeps the promise at the cost of items
// that can no longer be removed from it; rebuild the filter to clear them.
//
// A filter is one or more Redis strings, its partitions, each a 64-byte
// header holding the parameters, then the slots; an item lives in one
// partition. The first write creates the filter; reading a filter that does
// not exist reads an empty filter (unless Options.MustExist is set). Values of *Counting and *Classic hold no
// state of their own and are safe for concurrent use by multiple goroutines.
package rbloom

import (
	"context"
)

// Counting is a counting Bloom filter in Redis: 4-bit counters that support
// Remove. It is safe for concurrent use by multiple goroutines.
type Counting struct{ f *filter }

var _ Filter = (*Counting)(nil)

// NewCounting returns the counting filter called name, sized by o, in the
// Redis that rdb (a *redis.Client or *redis.ClusterClient) reaches. It
// validates its arguments and does not contact Redis: the first write
// creates the filter, and a write to an existing filter of other parameters
// fails with ErrParamsMismatch. Names may not contain braces or control
// characters, nor end in "/" and a number: the filter's keys are
// "rbloom:{name}" and, with several partitions, "rbloom:{name/j}" (see
// partition.go).
func NewCounting(rdb Client, name string, o Options) (*Counting, error) {
	f, err := newFilter(rdb, name, ModeCounting, o)
	if err != nil {
		return nil, err
	}
	return &Counting{f}, nil
}

// Add adds item and reports whether it may already have been present (all
// its counters were non-zero). The filter is created if it does not exist.
func (c *Counting) Add(ctx context.Context, item string) (bool, error) {
	return first(c.f.add(ctx, []string{item}))
}

// AddMany adds items in order, as if by Add, in one round trip per 9,000 or
// so items, and reports for each whether it may already have been present.
// Each item is added atomically; on error, some items may have been added.
func (c *Counting) AddMany(ctx context.Context, items []string) ([]bool, error) {
	return c.f.add(ctx, items)
}

// Remove removes item if it may be present and reports whether it did. It
// returns false, changing nothing, when the item is definitely absent. A
// saturated counter (15) is left as it is. Remove only items that were
// added: see the package documentation.
func (c *Counting) Remove(ctx context.Context, item string) (bool, error) {
	return first(c.f.remove(ctx, []string{item}))
}

// RemoveMany removes items in order, as if by Remove, and reports for each
// whether it was removed. Each item is removed atomically; on error, some
// items may have been removed.
func (c *Counting) RemoveMany(ctx context.Context, items []string) ([]bool, error) {
	return c.f.remove(ctx, items)
}

// AddOnce is Add, applied at most once per opID: a second call with the
// same opID, from this process or another, within Options.OnceWindow
// returns the first call's answer and adds nothing. Use it where the same
// event can arrive twice, as from a stream delivered at least once, with an
// id the event carries (a Kafka topic, partition and offset, say). The id
// names one add of one item: used again within the window for another item
// (in the same partition), it fails with ErrOpIDReused and adds nothing.
// Ids of AddOnce and RemoveOnce are apart.
func (c *Counting) AddOnce(ctx context.Context, item, opID string) (bool, error) {
	return first(c.f.writeOnce(ctx, c.f.addOp(), []string{item}, opID))
}

// AddManyOnce is AddMany, applied at most once per batchID: the same batch
// sent again with the same batchID within Options.OnceWindow, from this
// process or another, gets the first call's answers and adds nothing, so a
// consumer that replays a batch (a topic, partition and offset range, say)
// decides exactly what it decided the first time. The batch is recorded
// once per script call (about 36 items at k = 7), not per item. Sent again
// with other items, it fails with ErrOpIDReused; then the calls whose items
// did not change were not applied again, and calls to partitions the first
// batch did not touch may have been applied.
func (c *Counting) AddManyOnce(ctx context.Context, items []string, batchID string) ([]bool, error) {
	return c.f.writeOnce(ctx, c.f.addOp(), items, batchID)
}

// RemoveOnce is Remove, applied at most once per opID, like AddOnce: a
// delete event delivered twice, even to two consumers at once, removes the
// item once. The id is checked and recorded by the same script that
// removes, atomically, and recorded even when nothing was removed. Used
// again for another item, it fails with ErrOpIDReused.
func (c *Counting) RemoveOnce(ctx context.Context, item, opID string) (bool, error) {
	return first(c.f.writeOnce(ctx, c.f.removeOp(), []string{item}, opID))
}

// RemoveManyOnce is RemoveMany, applied at most once per batchID, as
// AddManyOnce is AddMany.
func (c *Counting) RemoveManyOnce(ctx context.Context, items []string, batchID string) ([]bool, error) {
	return c.f.writeOnce(ctx, c.f.removeOp(), items, batchID)
}

// TestOrAdd reports whether item may be present, and adds it, atomically,
// only when it is definitely absent: unlike Add, an item already present
// does not count again (like RedisBloom's CF.ADDNX). A stream consumer
// drops the events it answers true for.
//
// An item answered true was not added by this call, so it is not the
// caller's to Remove later on that call's account (it may be a false
// positive: see the package documentation).
func (c *Counting) TestOrAdd(ctx context.Context, item string) (bool, error) {
	return first(c.f.testOrAdd(ctx, []string{item}))
}

// TestOrAddMany is TestOrAdd for each item in order, each seeing the items
// before it: of two equal items in one batch, the second answers true.
func (c *Counting) TestOrAddMany(ctx context.Context, items []string) ([]bool, error) {
	return c.f.testOrAdd(ctx, items)
}

// Test reports whether item may be present. False means it is definitely
// absent. Test never writes.
func (c *Counting) Test(ctx context.Context, item string) (bool, error) {
	return first(c.f.test(ctx, []string{item}))
}

// TestMany reports, for each item, whether it may be present.
func (c *Counting) TestMany(ctx context.Context, items []string) ([]bool, error) {
	return c.f.test(ctx, items)
}

// Count returns the smallest of item's counters, from 0 to 15: an upper
// bound on how many times item was added and not removed (15 means 15 or
// more, or unknown).
func (c *Counting) Count(ctx context.Context, item string) (int, error) {
	return first(c.f.count(ctx, []string{item}))
}

// Create creates the filter, empty, if none of its partitions exists;
// otherwise it checks that the stored filter has the same parameters. It
// fails with ErrDamaged, writing nothing, when some partitions exist and
// others do not: recreating a lost one empty would make its items test
// absent. Adding creates the filter too: Create is for making it exist
// before the first item.
func (c *Counting) Create(ctx context.Context) error { return c.f.create(ctx) }

// Info reads the filter's parameters, fill and health from Redis. It
// scans every partition to count its slots (see Info.NonZero): that moves
// the whole filter to the client, in commands that each hold Redis for
// well under a millisecond. A partition that is missing or holds
// something else is reported in Info.Damaged and Info.Partitions, not as
// an error, unless nothing of the filter is sound.
func (c *Counting) Info(ctx context.Context) (*Info, error) { return c.f.info(ctx) }

// Drop deletes the filter from Redis. A later write creates it again.
func (c *Counting) Drop(ctx context.Context) error { return callError("drop", c.f.drop(ctx)) }

// Name returns the filter's name.
func (c *Counting) Name() string { return c.f.name }

// first returns the only element of a one-item batch.
func first[T any](s []T, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	return s[0], nil
}
