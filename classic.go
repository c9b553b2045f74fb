package rbloom

import (
	"context"
)

// Classic is a classic Bloom filter in Redis: one bit per slot, no Remove.
// For the same capacity and error rate it takes a quarter of the memory of
// a Counting filter. It is safe for concurrent use by multiple goroutines.
type Classic struct{ f *filter }

var _ Filter = (*Classic)(nil)

// NewClassic returns the classic filter called name, sized by o, in the
// Redis that rdb reaches. Like NewCounting, it does not contact Redis.
func NewClassic(rdb Client, name string, o Options) (*Classic, error) {
	f, err := newFilter(rdb, name, ModeClassic, o)
	if err != nil {
		return nil, err
	}
	return &Classic{f}, nil
}

// Add adds item and reports whether it may already have been present (all
// its bits were set). The filter is created if it does not exist.
func (c *Classic) Add(ctx context.Context, item string) (bool, error) {
	return first(c.f.add(ctx, []string{item}))
}

// AddMany adds items in order, as if by Add, and reports for each whether it
// may already have been present. Each item is added atomically; on error,
// some items may have been added.
func (c *Classic) AddMany(ctx context.Context, items []string) ([]bool, error) {
	return c.f.add(ctx, items)
}

// AddOnce is Add, applied at most once per opID within Options.OnceWindow,
// as Counting.AddOnce.
func (c *Classic) AddOnce(ctx context.Context, item, opID string) (bool, error) {
	return first(c.f.writeOnce(ctx, c.f.addOp(), []string{item}, opID))
}

// AddManyOnce is AddMany, applied at most once per batchID, as
// Counting.AddManyOnce: a replayed batch gets the first answers, the
// dedup decisions of a stream consumer.
func (c *Classic) AddManyOnce(ctx context.Context, items []string, batchID string) ([]bool, error) {
	return c.f.writeOnce(ctx, c.f.addOp(), items, batchID)
}

// TestOrAdd reports whether item may be present, and adds it, atomically,
// only when it is definitely absent: unlike Add, an item already present
// does not count again (like RedisBloom's CF.ADDNX). A stream consumer
// drops the events it answers true for.
func (c *Classic) TestOrAdd(ctx context.Context, item string) (bool, error) {
	return first(c.f.testOrAdd(ctx, []string{item}))
}

// TestOrAddMany is TestOrAdd for each item in order, each seeing the items
// before it: of two equal items in one batch, the second answers true.
func (c *Classic) TestOrAddMany(ctx context.Context, items []string) ([]bool, error) {
	return c.f.testOrAdd(ctx, items)
}

// Test reports whether item may be present. False means it is definitely
// absent. Test never writes.
func (c *Classic) Test(ctx context.Context, item string) (bool, error) {
	return first(c.f.test(ctx, []string{item}))
}

// TestMany reports, for each item, whether it may be present.
func (c *Classic) TestMany(ctx context.Context, items []string) ([]bool, error) {
	return c.f.test(ctx, items)
}

// Create creates the filter, empty, if none of its partitions exists;
// otherwise it checks that the stored filter has the same parameters. It
// fails with ErrDamaged, writing nothing, when some partitions exist and
// others do not: recreating a lost one empty would make its items test
// absent. Adding creates the filter too: Create is for making it exist
// before the first item.
func (c *Classic) Create(ctx context.Context) error { return c.f.create(ctx) }

// Info reads the filter's parameters, fill and health from Redis. It
// scans every partition to count its slots (see Info.NonZero): that moves
// the whole filter to the client, in commands that each hold Redis for
// well under a millisecond. A partition that is missing or holds
// something else is reported in Info.Damaged and Info.Partitions, not as
// an error, unless nothing of the filter is sound.
func (c *Classic) Info(ctx context.Context) (*Info, error) { return c.f.info(ctx) }

// Drop deletes the filter from Redis. A later write creates it again.
func (c *Classic) Drop(ctx context.Context) error { return callError("drop", c.f.drop(ctx)) }

// Name returns the filter's name.
func (c *Classic) Name() string { return c.f.name }
