package rbloom

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Info describes a filter as it is stored in Redis.
type Info struct {
	Name string
	Mode Mode
	// Exists is false when no partition of the filter has been written yet
	// (or the filter was dropped); the parameters are then the caller's.
	Exists    bool
	Counters  uint64  // m, the number of slots over all partitions
	Hashes    int     // k, the number of slots per item
	Capacity  uint64  // n the filter was sized for; 0 when unknown
	ErrorRate float64 // the false-positive rate targeted at Capacity
	// Items is the number of items added minus the number removed. It is
	// approximate: an Add of an item already present counts again, and a
	// Remove of a false positive counts too.
	Items int64
	// Bytes is the memory the filter's keys take in Redis (MEMORY USAGE),
	// or their length when the server does not report memory.
	Bytes int64
	// TTL is the shortest time left before a partition expires; 0 when
	// none does.
	TTL time.Duration
	// FalsePositiveRate is the rate expected with Items items in the filter.
	FalsePositiveRate float64
	// Damaged is true when some partitions exist and others do not: see
	// ErrDamaged.
	Damaged bool
	// Partitions describes each partition, in order.
	Partitions []PartitionInfo
}

// PartitionInfo describes one partition of a filter.
type PartitionInfo struct {
	Key    string // the Redis key
	Exists bool
	Items  int64         // added minus removed in this partition
	Bytes  int64         // MEMORY USAGE, or the length
	TTL    time.Duration // 0 when it does not expire
}

func (f *filter) info(ctx context.Context) (*Info, error) {
	type cmds struct {
		head         *redis.StringCmd
		size, exists *redis.IntCmd
		ttl          *redis.DurationCmd
		mem          *redis.IntCmd
	}
	pipe := f.rdb.Pipeline()
	all := make([]cmds, len(f.parts))
	for p, part := range f.parts {
		all[p] = cmds{
			head: pipe.GetRange(ctx, part.key, 0, headerSize-1), size: pipe.StrLen(ctx, part.key),
			exists: pipe.Exists(ctx, part.key), ttl: pipe.PTTL(ctx, part.key), mem: pipe.MemoryUsage(ctx, part.key),
		}
	}
	// MEMORY USAGE may fail alone (nil for a missing key, or a server
	// without it); any other failure
	// is an error, including one that failed the whole pipeline (a wrong
	// password) and left the commands with no reply.
	if _, err := pipe.Exec(ctx); err != nil && !slices.ContainsFunc(all, func(c cmds) bool { return c.mem.Err() == err }) {
		return nil, readError("info", err)
	}
	in := &Info{
		Name: f.name, Mode: f.h.mode, Counters: f.h.m * uint64(len(f.parts)), Hashes: f.h.k,
		Capacity: f.h.capacity, ErrorRate: f.h.errorRate,
	}
	for p, c := range all {
		for _, cmd := range []redis.Cmder{c.head, c.size, c.exists, c.ttl} {
			if err := cmd.Err(); err != nil {
				return nil, readError("info", err)
			}
		}
		pi := PartitionInfo{Key: f.parts[p].key}
		if c.exists.Val() == 1 {
			if err := f.check(p, c.head.Val(), c.size.Val()); err != nil {
				return nil, err
			}
			h, err := parseHeader(c.head.Val())
			if err != nil {
				return nil, err
			}
			pi.Exists, pi.Items, pi.Bytes = true, h.items, c.size.Val()
			if c.mem.Err() == nil {
				pi.Bytes = c.mem.Val()
			}
			if c.ttl.Val() > 0 {
				pi.TTL = c.ttl.Val()
				if in.TTL == 0 || pi.TTL < in.TTL {
					in.TTL = pi.TTL
				}
			}
			in.Exists = true
			in.Capacity, in.ErrorRate = h.capacity, h.errorRate
			in.Items += pi.Items
			in.Bytes += pi.Bytes
		}
		in.Partitions = append(in.Partitions, pi)
	}
	for _, pi := range in.Partitions {
		in.Damaged = in.Damaged || (in.Exists && !pi.Exists)
	}
	// The partitions share the items: each holds about Items/P in m slots.
	perPart := uint64(max(0, in.Items)) / uint64(len(f.parts))
	in.FalsePositiveRate = FalsePositiveRate(perPart, f.h.m, f.h.k)
	return in, nil
}

// lostRoot tells, for a name whose key rbloom:{name} is missing, a filter
// that lost that partition (ErrDamaged) from one that does not exist
// (ErrNotFound), by the headers of its other partitions (witnessKeys).
func lostRoot(ctx context.Context, rdb redis.UniversalClient, name string) error {
	keys := witnessKeys(name)
	pipe := rdb.Pipeline()
	heads := make([]*redis.StringCmd, len(keys))
	for i, key := range keys {
		heads[i] = pipe.GetRange(ctx, key, 0, headerSize-1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return readError("open", err)
	}
	for i, head := range heads {
		h, err := parseHeader(head.Val())
		if err != nil || h.partitions < 2 {
			continue
		}
		if partitionKeys(name, int(h.partitions))[h.index] == keys[i] {
			return fmt.Errorf("%w: %s: %s is missing, but %s holds partition %d of %d",
				ErrDamaged, name, keyOf(name), keys[i], h.index, h.partitions)
		}
	}
	return fmt.Errorf("%w: %s", ErrNotFound, name)
}

// Open returns the filter called name as stored in Redis, taking its mode
// and parameters from its partition at key "rbloom:{name}", so that a process needs only the
// name. The result is a *Counting or a *Classic. It fails with ErrNotFound
// when no filter has that name, with ErrDamaged when that key is missing
// but other partitions of the filter exist, and with ErrNotFilter when the
// key holds something else. Open makes one round trip; a filter it returns has no
// TTL option (the stored keys keep theirs).
func Open(ctx context.Context, rdb redis.UniversalClient, name string) (Filter, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidOptions)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	key := keyOf(name)
	pipe := rdb.Pipeline()
	head := pipe.GetRange(ctx, key, 0, headerSize-1)
	exists := pipe.Exists(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, readError("open", err)
	}
	if exists.Val() == 0 {
		return nil, lostRoot(ctx, rdb, name)
	}
	h, err := parseHeader(head.Val())
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, key)
	}
	if want := shareOf(keySlot(name), int(h.partitions)); int(h.index) != want {
		return nil, fmt.Errorf("%w: %s holds partition %d, not %d", ErrNotFilter, key, h.index, want)
	}
	f := withHeader(rdb, name, h, 0)
	if h.mode == ModeClassic {
		return &Classic{f}, nil
	}
	return &Counting{f}, nil
}
