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
// partition.
//
// A filter exists only on purpose: Create makes it empty, for a source of
// truth that is empty now, and Rebuild of a missing filter loads it from
// its source (readers get ErrLoading until the load is done). A filter
// that does not exist, because it was never made or because Redis lost
// it, fails every call with ErrNotFound, so that a lost filter never
// passes for an empty one; Options.Source makes a handle load it again by
// itself, and Options.CreateOnWrite lets writes create it (for filters
// whose content comes only through writes). Values of *Counting, *Classic
// and *Cuckoo hold no state of their own and are safe for concurrent use
// by multiple goroutines.
package rbloom

import (
	"context"
)

// Counting is a counting Bloom filter in Redis: 4-bit counters that support
// Remove. It has every method of Filter, and Remove, Count and Resize. It
// is safe for concurrent use by multiple goroutines.
type Counting struct{ base }

var _ Filter = (*Counting)(nil)

// NewCounting returns the counting filter called name, sized by o, in the
// Redis that rdb (a *redis.Client or *redis.ClusterClient) reaches. It
// validates its arguments and does not contact Redis: Create or Rebuild
// makes the filter, and a call on an existing filter of other parameters
// fails with ErrParamsMismatch. Names may not contain braces or control
// characters, nor end in "/" and a number: the filter's keys are
// "rbloom:{name}" and, with several partitions, "rbloom:{name/j}" (see
// partition.go).
func NewCounting(rdb Client, name string, o Options) (*Counting, error) {
	f, err := newFilter(rdb, name, ModeCounting, o)
	if err != nil {
		return nil, callError("new counting", err)
	}
	return &Counting{base{f}}, nil
}

// RemoveMany removes items in order, each if it may be present, and
// reports for each whether it did; it changes nothing for an item that is
// definitely absent. Each item sees the counters as the ones before it
// left them, and is removed atomically; an error after the first call
// was sent is a *BatchError, which says which items were removed. A
// saturated counter (15) is left as it is. Remove only
// items that were added: see the package documentation.
func (c *Counting) RemoveMany(ctx context.Context, items []string) ([]bool, error) {
	return observe(ctx, c.f.obs, c.callOf("RemoveMany", len(items)), func(ctx context.Context) ([]bool, error) {
		return followWrite(ctx, &c.base, items, func(f *filter, items []string) ([]bool, error) { return f.remove(ctx, items) })
	})
}

// Remove is RemoveMany of one item.
func (c *Counting) Remove(ctx context.Context, item string) (bool, error) {
	return first(c.RemoveMany(ctx, []string{item}))
}

// RemoveManyOnce is RemoveMany, applied at most once per opID, as
// AddManyOnce is AddMany: a delete event delivered twice, even to two
// consumers at once, removes its items once. The id is checked and
// recorded by the script that removes, atomically, and recorded even when
// nothing was removed. Used again for other items, it fails with
// ErrOpIDReused.
func (c *Counting) RemoveManyOnce(ctx context.Context, items []string, opID string) ([]bool, error) {
	return observe(ctx, c.f.obs, c.callOf("RemoveManyOnce", len(items)), func(ctx context.Context) ([]bool, error) {
		return followOnce(ctx, &c.base, func(f *filter) ([]bool, error) { return f.writeOnce(ctx, f.removeOp(), items, opID) })
	})
}

// RemoveOnce is RemoveManyOnce of one item.
func (c *Counting) RemoveOnce(ctx context.Context, item, opID string) (bool, error) {
	return first(c.RemoveManyOnce(ctx, []string{item}, opID))
}

// CountMany returns for each item the smallest of its counters, from 0 to
// 15: an upper bound on how many times it was added and not removed (15
// means 15 or more, or unknown).
func (c *Counting) CountMany(ctx context.Context, items []string) ([]int, error) {
	return observe(ctx, c.f.obs, c.callOf("CountMany", len(items)), func(ctx context.Context) ([]int, error) {
		return followRead(ctx, &c.base, func(f *filter) ([]int, error) { return f.count(ctx, items) })
	})
}

// Count is CountMany of one item.
func (c *Counting) Count(ctx context.Context, item string) (int, error) {
	return first(c.CountMany(ctx, []string{item}))
}
