package rbloom

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Filter is every method of a filter, documented on Counting. *Counting,
// *Cuckoo and *Classic implement it, and Open returns one of them. A
// classic filter cannot remove: its Remove methods fail with an error
// wrapping errors.ErrUnsupported and write nothing; its Count is 1 for
// an item whose k bits are all set, else 0.
type Filter interface {
	Add(ctx context.Context, item string) (bool, error)
	AddMany(ctx context.Context, items []string) ([]bool, error)
	AddOnce(ctx context.Context, item, opID string) (bool, error)
	AddManyOnce(ctx context.Context, items []string, opID string) ([]bool, error)
	TestOrAdd(ctx context.Context, item string) (bool, error)
	TestOrAddMany(ctx context.Context, items []string) ([]bool, error)
	Test(ctx context.Context, item string) (bool, error)
	TestMany(ctx context.Context, items []string) ([]bool, error)
	Remove(ctx context.Context, item string) (bool, error)
	RemoveMany(ctx context.Context, items []string) ([]bool, error)
	RemoveOnce(ctx context.Context, item, opID string) (bool, error)
	RemoveManyOnce(ctx context.Context, items []string, opID string) ([]bool, error)
	Count(ctx context.Context, item string) (int, error)
	CountMany(ctx context.Context, items []string) ([]int, error)
	Create(ctx context.Context) error
	Rebuild(ctx context.Context, fill func(add func(items []string) error) error) error
	Info(ctx context.Context) (*Info, error)
	Drop(ctx context.Context) error
	Dump(ctx context.Context, w io.Writer) (int64, error)
	Name() string
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
)

// Client is what a filter needs of a Redis client: pipelines, which carry
// every command it sends. *redis.Client, *redis.ClusterClient (each
// pipeline then goes to the nodes of its keys, in parallel) and
// redis.UniversalClient are Clients.
type Client interface {
	Pipeline() redis.Pipeliner
	// TxPipeline carries reads that must see one state of a key (MULTI
	// and EXEC; on a cluster, one transaction per hash slot).
	TxPipeline() redis.Pipeliner
}

// filter holds what both kinds of filter share. It is immutable.
type filter struct {
	rdb        Client
	name       string
	prefix     string // Options.KeyPrefix, or the default
	maxItems   uint64 // Options.MaxItems
	h          header // index 0; m is the slots of one partition
	parts      []part
	ttl        time.Duration
	ttlMS      string           // ttl in ms, as add.lua takes it
	partLimit  string           // the most items add.lua lets a partition hold, "0" for no bound
	idLifetime time.Duration    // how long AddOnce and RemoveOnce remember an id
	repl       replication      // replicas every write waits for
	fcall      bool             // writes call the Redis functions (Options.UseFunctions)
	onWrite    bool             // writes may create a missing filter (Options.CreateOnWrite)
	loader     *loader          // loads a missing filter from Options.Source; nil without
	follow     *follower        // the filter a resize switched this one to (follow.go)
	layouts    *layoutCache     // the filter's layouts before a resize that cut batches otherwise (layouts.go)
	now        func() time.Time // the clock that picks record buckets (records.go)
	records    *records         // names this handle's random records
	retryKeep  time.Duration    // how long a call's random record is kept (retryKeep)
	bucketType any              // a cuckoo filter's "u<4f>", boxed once
	blocked    bool             // a window's slots in blocks (blocks.go)
	obs        Observer         // sees the handle's calls (Options.Observer); nil for none
}

// part is one partition: its key and the header the scripts expect there.
type part struct {
	key  string
	head string
}

func newFilter(rdb Client, name string, mode Mode, o Options) (*filter, error) {
	h, err := o.resolve(mode)
	if err != nil {
		return nil, err
	}
	return o.handle(rdb, name, h)
}

// checkHandleOf checks, before anything reaches Redis, what a handle of the
// filter called name through rdb needs besides its parameters.
func (o Options) checkHandleOf(rdb Client, name string) error {
	if rdb == nil {
		return failf(ErrInvalidOptions, "nil Redis client")
	}
	if err := checkName(name); err != nil {
		return err
	}
	if err := o.checkHandle(); err != nil {
		return err
	}
	return checkWaitTimeout(rdb, o.WaitReplicas, o.WaitTimeout)
}

// handle makes the handle, with o's settings, of the filter called name
// whose partitions have header h.
func (o Options) handle(rdb Client, name string, h header) (*filter, error) {
	if err := o.checkHandleOf(rdb, name); err != nil {
		return nil, err
	}
	f := &filter{rdb: rdb, name: name, prefix: cmp.Or(o.KeyPrefix, DefaultKeyPrefix), maxItems: o.MaxItems,
		ttl: o.TTL, ttlMS: strconv.FormatInt(o.TTL.Milliseconds(), 10), onWrite: o.CreateOnWrite,
		fcall: o.UseFunctions, now: time.Now, retryKeep: retryKeep(rdb), obs: o.Observer}
	f.follow = &follower{}
	if o.Source != nil {
		f.loader = &loader{source: o.Source}
	}
	if o.WaitReplicas > 0 {
		f.repl = replication{replicas: o.WaitReplicas, timeout: cmp.Or(o.WaitTimeout, defaultWaitTimeout)}
	}
	return f.withHeader(h), nil
}

// withHeader returns a handle like f, with f's settings, of the filter of
// the same name whose partitions have header h (a resize's new size).
func (f *filter) withHeader(h header) *filter {
	g := *f
	h.index, h.items, h.inc = 0, 0, ""
	g.h, g.parts, g.partLimit, g.idLifetime = h, nil, "0", h.idLifetime()
	for i, key := range partitionKeys(f.prefix, f.name, int(h.partitions)) {
		g.parts = append(g.parts, part{key: key, head: h.withIndex(i).encode()})
	}
	g.records = newRecords(len(g.parts))
	g.layouts = &layoutCache{}
	g.bucketType = "u" + strconv.FormatUint(h.width(), 10)
	if f.maxItems > 0 {
		// Items spread evenly over the partitions; each gets its share.
		per := (f.maxItems + uint64(len(g.parts)) - 1) / uint64(len(g.parts))
		g.partLimit = strconv.FormatUint(per, 10)
	}
	return &g
}

// checkName rejects names that would break the key's hash tag, name
// another filter's partition, or that redis-cli users could not type.
func checkName(name string) error {
	if name == "" || len(name) > 256 {
		return failf(ErrInvalidOptions, "name %q: want 1 to 256 bytes", name)
	}
	if !printable(name) {
		return failf(ErrInvalidOptions, "name %q: braces and control characters are not allowed", name)
	}
	// The partitions of filter Y are Y and Y/j: a filter named Y/j would
	// share Y's key, and its Rebuild or Drop would replace or delete
	// Y's partition.
	if i := strings.LastIndexByte(name, '/'); i >= 0 && i+1 < len(name) && strings.Trim(name[i+1:], "0123456789") == "" {
		return failf(ErrInvalidOptions, "name %q ends in /<number>, as the partitions of filter %q are named", name, name[:i])
	}
	return nil
}

// locate returns item's partition and appends its slots to dst.
func (f *filter) locate(dst []uint64, item string) (int, []uint64) {
	if f.blocked {
		return locateBlocked(dst, item, f.h.k, f.h.m, len(f.parts))
	}
	return locate(dst, item, f.h.k, f.h.m, len(f.parts))
}

// placement is where the items of one chunk (a round trip's share of a
// batch) live, each hashed once: the positions of the items of each
// partition, and the bit offsets of every item's k slots, item i's at
// offsets[i*k : (i+1)*k]. Script arguments
// point into offsets: go-redis writes a *uint64 as its number, and a
// pointer goes into an interface without an allocation, where a uint64
// would take one per slot.
type placement struct {
	groups  [][]int
	offsets []uint64
}

// place hashes items. In a cuckoo filter each item takes cuckooStride
// numbers instead of k offsets (see cuckooPlace).
func (f *filter) place(items []string) placement {
	if f.h.mode == ModeCuckoo {
		return f.cuckooPlace(items)
	}
	pl := placement{groups: make([][]int, len(f.parts)), offsets: make([]uint64, 0, len(items)*f.h.k)}
	width := f.h.width()
	for i, item := range items {
		var p int
		p, pl.offsets = f.locate(pl.offsets, item)
		pl.groups[p] = append(pl.groups[p], i)
		for j := i * f.h.k; j < len(pl.offsets); j++ {
			pl.offsets[j] = headerBits + pl.offsets[j]*width
		}
	}
	return pl
}

// perCall is the most items one script or BITFIELD call carries.
func (f *filter) perCall() int {
	if f.h.mode == ModeCuckoo {
		return cuckooItemsPerCall
	}
	return maxCallSlots / f.h.k
}

// perRoundTrip is the most items one pipeline carries.
func (f *filter) perRoundTrip() int {
	return f.perCall() * (maxRoundTripSlots / maxCallSlots)
}

// readsPerItem is the number of values a read of one item gets back: its
// k slots, or a cuckoo filter's two buckets.
func (f *filter) readsPerItem() int {
	if f.h.mode == ModeCuckoo {
		return 2
	}
	return f.h.k
}

// value is what a read says of the item at position pos of pl, from the
// values BITFIELD_RO read for it: the smallest of its slots, or the
// number of copies of its fingerprint in a cuckoo filter's buckets; 0
// means definitely absent.
func (f *filter) value(vals []int64, pl placement, pos int) int64 {
	if f.h.mode == ModeCuckoo {
		return f.cuckooCopies(vals, pl, pos)
	}
	return slices.Min(vals)
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

// evenSpans yields as few consecutive ranges [lo, hi) of at most size as
// cover [0, n), their lengths differing by one at most: 31 by 15 gives 11,
// 10 and 10, not 15, 15 and 1. A window's calls are cut so (window.go):
// the largest calls decide the slowest, and each call costs about as much
// of its own besides its events however few they are.
func evenSpans(n, size int) iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
		if n <= 0 {
			return
		}
		parts := (n + size - 1) / size
		lo := 0
		for i := range parts {
			hi := lo + n/parts
			if i < n%parts {
				hi++
			}
			if !yield(lo, hi) {
				return
			}
			lo = hi
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
func (f *filter) getArgs(args []any, pl placement, at []int) []any {
	typ := argU4
	switch f.h.mode {
	case ModeClassic:
		typ = argU1
	case ModeCuckoo:
		typ = f.bucketType
		for _, i := range at {
			o := pl.offsets[i*cuckooStride : i*cuckooStride+2]
			args = append(args, argGet, typ, &o[0], argGet, typ, &o[1])
		}
		return args
	}
	for _, i := range at {
		for j := i * f.h.k; j < (i+1)*f.h.k; j++ {
			args = append(args, argGet, typ, &pl.offsets[j])
		}
	}
	return args
}

// offsetArgs appends, for the items at positions at, the bit offsets of
// their k slots: the arguments add.lua and remove.lua take, one per slot.
func (f *filter) offsetArgs(args []any, pl placement, at []int) []any {
	if f.h.mode == ModeCuckoo {
		for _, i := range at { // its first bucket and fingerprint
			args = append(args, &pl.offsets[i*cuckooStride+2], &pl.offsets[i*cuckooStride+3])
		}
		return args
	}
	for _, i := range at {
		for j := i * f.h.k; j < (i+1)*f.h.k; j++ {
			args = append(args, &pl.offsets[j])
		}
	}
	return args
}

// drop deletes the filter's keys, a rebuild's copies and leases included,
// so that a rebuild running meanwhile cannot switch. A filter made again
// after it gets a new incarnation: the operation records left behind are
// never replayed on it.
func (f *filter) drop(ctx context.Context) error {
	pipe := f.rdb.Pipeline() // one DEL per slot: the partitions are in other cluster slots
	for _, p := range f.parts {
		pipe.Del(ctx, p.key, copyKey(p.key), leaseKey(p.key))
	}
	pipe.Del(ctx, resizedKey(f.prefix, f.name), incarnationKey(f.prefix, f.name))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	return nil
}
