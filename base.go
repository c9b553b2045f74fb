package rbloom

import (
	"context"
)

// base holds what counting and classic filters have in common: every
// method of Filter. Counting and Classic embed it and add their own.
type base struct{ f *filter }

// AddMany adds items in order and reports, for each, whether it may
// already have been present (all its slots were non-zero). Each item is
// added atomically, the batch pipelined in round trips of a few thousand
// items. An error after the first call was sent is a *BatchError, which
// says for each item whether it was applied (with its answer), not
// applied, or unknown. On a filter that does not exist it fails with
// ErrNotFound and adds nothing (see Options.Source and CreateOnWrite).
func (b *base) AddMany(ctx context.Context, items []string) ([]bool, error) {
	return observe(ctx, b.f.obs, b.callOf("AddMany", len(items)), func(ctx context.Context) ([]bool, error) {
		return followWrite(ctx, b, items, func(f *filter, items []string) ([]bool, error) { return f.add(ctx, items) })
	})
}

// Add is AddMany of one item.
func (b *base) Add(ctx context.Context, item string) (bool, error) {
	return first(b.AddMany(ctx, []string{item}))
}

// AddManyOnce is AddMany, applied at most once per opID: the same batch
// sent again with the same opID within the filter's IDLifetime, from this
// process or another, gets the first call's answers and adds nothing, so
// a consumer that replays a batch (a topic, partition and offset range,
// say) decides exactly what it decided the first time. Use an id the
// events carry. The batch is recorded once per script call (about 36
// items at k = 7), not per item, tagged with a digest of the whole
// batch. Sent again with other items, or the same in another order, it
// fails with ErrOpIDReused and is applied in no partition where the first
// batch applied a call; calls to partitions the first batch did not reach
// may have been applied. Ids of adds and removes are apart.
func (b *base) AddManyOnce(ctx context.Context, items []string, opID string) ([]bool, error) {
	return observe(ctx, b.f.obs, b.callOf("AddManyOnce", len(items)), func(ctx context.Context) ([]bool, error) {
		return followOnce(ctx, b, func(f *filter) ([]bool, error) { return f.writeOnce(ctx, f.addOp(), items, opID) })
	})
}

// AddOnce is AddManyOnce of one item: used again within IDLifetime for
// another item (in the same partition), the id fails with ErrOpIDReused
// and adds nothing.
func (b *base) AddOnce(ctx context.Context, item, opID string) (bool, error) {
	return first(b.AddManyOnce(ctx, []string{item}, opID))
}

// TestOrAddMany reports for each item, in order, whether it may be
// present, and adds it, atomically, only when it is definitely absent:
// unlike AddMany, an item already present does not count again (like
// RedisBloom's CF.ADDNX). Each item sees the ones before it: of two equal
// items in one batch, the second answers true. A stream consumer drops the
// events it answers true for. An item answered true was not added by this
// call, so it is not the caller's to Remove later on that call's account.
func (b *base) TestOrAddMany(ctx context.Context, items []string) ([]bool, error) {
	return observe(ctx, b.f.obs, b.callOf("TestOrAddMany", len(items)), func(ctx context.Context) ([]bool, error) {
		return followWrite(ctx, b, items, func(f *filter, items []string) ([]bool, error) { return f.testOrAdd(ctx, items) })
	})
}

// TestOrAdd is TestOrAddMany of one item.
func (b *base) TestOrAdd(ctx context.Context, item string) (bool, error) {
	return first(b.TestOrAddMany(ctx, []string{item}))
}

// TestMany reports, for each item, whether it may be present: false means
// definitely absent. It never writes.
func (b *base) TestMany(ctx context.Context, items []string) ([]bool, error) {
	return observe(ctx, b.f.obs, b.callOf("TestMany", len(items)), func(ctx context.Context) ([]bool, error) {
		return followRead(ctx, b, func(f *filter) ([]bool, error) { return f.test(ctx, items) })
	})
}

// Test is TestMany of one item.
func (b *base) Test(ctx context.Context, item string) (bool, error) {
	return first(b.TestMany(ctx, []string{item}))
}

// Create creates the filter, empty, if none of its partitions exists;
// otherwise it checks that the stored filter has the same parameters. It
// fails with ErrDamaged, writing nothing, when some partitions exist and
// others do not: recreating a lost one empty would make its items test
// absent. A Create that fails half-way (out of memory, say) deletes the
// partitions it made. It fails with ErrUnsupported, writing nothing, when
// the server lacks a command rbloom needs (one more round trip). Call it
// once, when the source is empty: called at every start, it would make a
// filter Redis lost again, empty, and its items would test absent. To make
// a filter from a source that holds items, and to restore a lost one, use
// Rebuild (or Options.Source).
func (b *base) Create(ctx context.Context) error {
	return observeErr(ctx, b.f.obs, b.callOf("Create", 0), func(ctx context.Context) error {
		f := b.f.current()
		if err := f.checkServer(ctx); err != nil {
			return callError("create", err)
		}
		return f.create(ctx)
	})
}

// Rebuild refills the filter from its source of truth without stopping it,
// or loads it when it does not exist (readers get ErrLoading until the
// fill is done; see Options.Source):
// fill must call add with every item the filter should hold (all the keys
// of a table, say), in batches of any size, as many times as each is held.
// Meanwhile the filter keeps answering from its old slots, and every add,
// from any process, also goes to the new ones. Then the new slots
// take the old ones' place, partition by partition, each at once. That
// clears the ghosts of items removed from the source but not from the
// filter, and counters stuck at 15; for a classic filter it is the way to
// forget items. The filter keeps its TTL.
//
// The rule fill must follow, so that no item held tests absent: read the
// source after Rebuild calls fill, in one consistent snapshot (one
// REPEATABLE READ transaction, say), taken at a moment when no change of
// the application is half done. A change is half done from the moment its
// first write (to the source, or to the filter) is sent until its last
// has returned successfully; a call that failed must be retried until it
// succeeds (its outcome is unknown, and a request still on the wire may
// land later). So at that moment every item whose Add was sent is in the
// source, unless its change was given up, and every row deleted has had
// its Remove return. Changes can share a lock that the fill takes alone
// while it opens its snapshot. Removes made while the
// rebuild runs are not applied to the new counters, where their items may
// be missing: those items may remain there as ghosts until the next
// rebuild. An item both
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
func (b *base) Rebuild(ctx context.Context, fill func(add func(items []string) error) error) error {
	return observeErr(ctx, b.f.obs, b.callOf("Rebuild", 0), func(ctx context.Context) error {
		return callError("rebuild", b.f.current().rebuild(ctx, fill))
	})
}

// Info reads the filter's parameters, fill and health from Redis. It
// scans every partition to count its slots (see Info.NonZero): that moves
// the whole filter to the client, in commands that each hold Redis for
// well under a millisecond. A partition that is missing or holds
// something else is reported in Info.Damaged and Info.Partitions, not as
// an error, unless nothing of the filter is sound.
func (b *base) Info(ctx context.Context) (*Info, error) {
	return observe(ctx, b.f.obs, b.callOf("Info", 0), func(ctx context.Context) (*Info, error) {
		return followRead(ctx, b, func(f *filter) (*Info, error) { return f.info(ctx) })
	})
}

// Drop deletes the filter from Redis, with a rebuild's copies and leases.
// Calls then fail with ErrNotFound until Create or Rebuild makes it
// again, as a new filter: the operation ids of the dropped one are not
// replayed on it.
func (b *base) Drop(ctx context.Context) error {
	return observeErr(ctx, b.f.obs, b.callOf("Drop", 0), func(ctx context.Context) error {
		return callError("drop", b.f.current().drop(ctx))
	})
}

// Name returns the filter's name.
func (b *base) Name() string { return b.f.name }

// first returns the only element of a one-item batch.
func first[T any](s []T, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	return s[0], nil
}
