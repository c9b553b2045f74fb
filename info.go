package rbloom

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Info describes a filter as it is stored in Redis.
type Info struct {
	Name string
	Key  string // the Redis key holding the filter
	Mode Mode
	// Exists is false when the filter has not been written yet (or was
	// dropped); the parameters are then the caller's and the figures zero.
	Exists    bool
	Counters  uint64  // m, the number of slots
	Hashes    int     // k, the number of slots per item
	Capacity  uint64  // n the filter was sized for; 0 when unknown
	ErrorRate float64 // the false-positive rate targeted at Capacity
	// Items is the number of items added minus the number removed. It is
	// approximate: an Add of an item already present counts again, and a
	// Remove of a false positive counts too.
	Items int64
	// Bytes is the memory the key takes in Redis (MEMORY USAGE), or its
	// length when the server does not report memory.
	Bytes int64
	// TTL is the time left before the filter expires; 0 when it does not.
	TTL time.Duration
	// FalsePositiveRate is the rate expected with Items items in the filter.
	FalsePositiveRate float64
}

func (f *filter) info(ctx context.Context) (*Info, error) {
	pipe := f.rdb.Pipeline()
	head := pipe.GetRange(ctx, f.key, 0, headerSize-1)
	size := pipe.StrLen(ctx, f.key)
	exists := pipe.Exists(ctx, f.key)
	ttl := pipe.PTTL(ctx, f.key)
	mem := pipe.MemoryUsage(ctx, f.key)
	_, _ = pipe.Exec(ctx) // MEMORY USAGE may fail alone; the rest is checked below
	for _, cmd := range []redis.Cmder{head, size, exists, ttl} {
		if err := cmd.Err(); err != nil {
			return nil, readError("info", err)
		}
	}
	in := &Info{
		Name: f.name, Key: f.key, Mode: f.h.mode, Counters: f.h.m, Hashes: f.h.k,
		Capacity: f.h.capacity, ErrorRate: f.h.errorRate,
	}
	if exists.Val() == 0 {
		return in, nil
	}
	if err := f.check(head.Val(), size.Val()); err != nil {
		return nil, err
	}
	h, err := parseHeader(head.Val())
	if err != nil {
		return nil, err
	}
	in.Exists = true
	in.Capacity, in.ErrorRate, in.Items = h.capacity, h.errorRate, h.items
	in.Bytes = size.Val()
	if mem.Err() == nil {
		in.Bytes = mem.Val()
	}
	if ttl.Val() > 0 {
		in.TTL = ttl.Val()
	}
	in.FalsePositiveRate = FalsePositiveRate(uint64(max(0, h.items)), h.m, h.k)
	return in, nil
}

// Open returns the filter called name as stored in Redis, taking its mode
// and parameters from Redis, so that a process needs only the name. The
// result is a *Counting or a *Classic. It fails with ErrNotFound when no
// filter has that name, and with ErrNotFilter when the key holds something
// else.
func Open(ctx context.Context, rdb redis.UniversalClient, name string) (Filter, error) {
	f, err := newFilter(rdb, name, ModeCounting, Options{Counters: 1, Hashes: 1})
	if err != nil {
		return nil, err
	}
	head, err := rdb.GetRange(ctx, f.key, 0, headerSize-1).Result()
	if err != nil {
		return nil, readError("open", err)
	}
	if head == "" {
		n, err := rdb.Exists(ctx, f.key).Result()
		if err != nil {
			return nil, fmt.Errorf("rbloom: open %s: %w", name, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
		}
	}
	h, err := parseHeader(head)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, f.key)
	}
	h.items = 0
	f.h, f.head = h, h.encode()
	if h.mode == ModeClassic {
		return &Classic{f}, nil
	}
	return &Counting{f}, nil
}
