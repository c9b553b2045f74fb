package rbloom

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Filter is what counting and classic filters have in common. *Counting and
// *Classic implement it; Open returns one of them.
type Filter interface {
	// Add adds item and reports whether it may already have been present.
	Add(ctx context.Context, item string) (bool, error)
	// AddMany adds items in order and reports, for each, whether it may
	// already have been present.
	AddMany(ctx context.Context, items []string) ([]bool, error)
	// Test reports whether item may be present; false means definitely absent.
	Test(ctx context.Context, item string) (bool, error)
	// TestMany reports, for each item, whether it may be present.
	TestMany(ctx context.Context, items []string) ([]bool, error)
	// Create creates the filter, empty, unless it exists with the same
	// parameters.
	Create(ctx context.Context) error
	// Rebuild refills the filter from its source of truth without
	// stopping it (see Counting.Rebuild).
	Rebuild(ctx context.Context, fill func(add func(items []string) error) error) error
	// Info reads the filter's parameters and fill from Redis.
	Info(ctx context.Context) (*Info, error)
	// Drop deletes the filter from Redis.
	Drop(ctx context.Context) error
}

const (
	// maxCallSlots bounds the slots one script or BITFIELD call touches, so
	// that a call stays well under a millisecond of server time. Measured
	// on Redis 7.0: 252 slots cost about 140us a call; at 1,022 a call
	// averaged 700us and Lua's garbage collection pushed some past 5ms.
	maxCallSlots = 256
	// maxRoundTripSlots bounds the slots sent in one pipeline, so that a
	// batch of any size is sent with bounded client memory.
	maxRoundTripSlots = 256 * maxCallSlots
	// opKeep is how long a write's operation record stays in Redis to make a
	// retry of that write a no-op. go-redis gives up retrying within
	// seconds; a minute leaves ample room.
	opKeep = time.Minute
)

// filter holds what both kinds of filter share. It is immutable.
type filter struct {
	rdb        redis.UniversalClient
	name       string
	h          header // index 0; m is the slots of one partition
	parts      []part
	ttl        time.Duration
	ttlMS      string        // ttl in ms, as add.lua takes it
	partLimit  string        // the most items add.lua lets a partition hold, "0" for no bound
	onceWindow time.Duration // how long AddOnce and RemoveOnce remember an id
	repl       replication   // replicas every write waits for
	mustExist  bool          // a missing filter is an error, not empty
}

// part is one partition: its key and the header the scripts expect there.
type part struct {
	key  string
	head string
}

func newFilter(rdb redis.UniversalClient, name string, mode Mode, o Options) (*filter, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidOptions)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	h, err := o.resolve(mode)
	if err != nil {
		return nil, err
	}
	f := withHeader(rdb, name, h, o.TTL)
	f.mustExist = o.MustExist
	if o.MaxItems > 0 {
		// Items spread evenly over the partitions; each gets its share.
		per := (o.MaxItems + uint64(len(f.parts)) - 1) / uint64(len(f.parts))
		f.partLimit = strconv.FormatUint(per, 10)
	}
	if o.OnceWindow > 0 {
		f.onceWindow = o.OnceWindow
	}
	if o.WaitReplicas > 0 {
		if _, cluster := rdb.(*redis.ClusterClient); cluster {
			return nil, fmt.Errorf("%w: WaitReplicas with a *redis.ClusterClient: its pipelines send WAIT to any node", ErrInvalidOptions)
		}
		f.repl = replication{replicas: o.WaitReplicas, timeout: cmp.Or(o.WaitTimeout, time.Second)}
	}
	return f, nil
}

// withHeader makes the filter whose partitions have header h.
func withHeader(rdb redis.UniversalClient, name string, h header, ttl time.Duration) *filter {
	h.index, h.items = 0, 0
	f := &filter{rdb: rdb, name: name, h: h, ttl: ttl, ttlMS: strconv.FormatInt(ttl.Milliseconds(), 10),
		partLimit: "0", onceWindow: DefaultOnceWindow}
	for i, key := range partitionKeys(name, int(h.partitions)) {
		ph := h
		ph.index = uint32(i)
		f.parts = append(f.parts, part{key: key, head: ph.encode()})
	}
	return f
}

// checkName rejects names that would break the key's hash tag or that
// redis-cli users could not type.
func checkName(name string) error {
	if name == "" || len(name) > 256 {
		return fmt.Errorf("%w: name %q: want 1 to 256 bytes", ErrInvalidOptions, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '{' || c == '}' || c < ' ' || c == 0x7f {
			return fmt.Errorf("%w: name %q: braces and control characters are not allowed", ErrInvalidOptions, name)
		}
	}
	return nil
}

// locate returns item's partition and appends its slots to dst.
func (f *filter) locate(dst []uint64, item string) (int, []uint64) {
	return locate(dst, item, f.h.k, f.h.m, len(f.parts))
}

// byPartition returns the positions of items, grouped by partition.
func (f *filter) byPartition(items []string) [][]int {
	groups := make([][]int, len(f.parts))
	var buf [MaxHashes]uint64
	for i, item := range items {
		p := 0
		if len(f.parts) > 1 {
			p, _ = f.locate(buf[:0], item)
		}
		groups[p] = append(groups[p], i)
	}
	return groups
}

// spans yields consecutive ranges [lo, hi) of at most size that cover
// [0, n).
func spans(n, size int) iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
		for lo := 0; lo < n; lo += size {
			if !yield(lo, min(lo+size, n)) {
				return
			}
		}
	}
}

// Constant BITFIELD_RO arguments, boxed once rather than per slot.
var (
	argGet       any = "GET"
	argU4, argU1 any = "u4", "u1"
)

// getArgs appends, for the items at positions at, a BITFIELD_RO GET of each
// of their k slots.
func (f *filter) getArgs(args []any, items []string, at []int) []any {
	typ := argU4
	if f.h.mode == ModeClassic {
		typ = argU1
	}
	offsets := f.offsets(items, at)
	for i := range offsets {
		args = append(args, argGet, typ, &offsets[i])
	}
	return args
}

// offsetArgs appends, for the items at positions at, the bit offsets of
// their k slots: the arguments add.lua and remove.lua take, one per slot.
func (f *filter) offsetArgs(args []any, items []string, at []int) []any {
	offsets := f.offsets(items, at)
	for i := range offsets {
		args = append(args, &offsets[i])
	}
	return args
}

// offsets returns the bit offsets of the k slots of each item at positions
// at, in one array that the script arguments point into: go-redis writes a
// *uint64 as its number, and a pointer goes into an interface without an
// allocation, where a uint64 would take one per slot.
func (f *filter) offsets(items []string, at []int) []uint64 {
	offsets := make([]uint64, 0, len(at)*f.h.k)
	for _, i := range at {
		_, offsets = f.locate(offsets, items[i])
	}
	width := f.h.mode.width()
	for i := range offsets {
		offsets[i] = headerBits + offsets[i]*width
	}
	return offsets
}

// drop deletes the filter's keys. A dropped filter reads as empty and is
// created again by the next write.
func (f *filter) drop(ctx context.Context) error {
	pipe := f.rdb.Pipeline() // one DEL per key: they are in other cluster slots
	for _, p := range f.parts {
		pipe.Del(ctx, p.key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	return nil
}
