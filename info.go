package rbloom

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Info describes a filter as it is stored in Redis.
type Info struct {
	Name string
	Mode Mode
	// Exists is false when no partition of the filter exists: it was never
	// made, was dropped, or Redis lost it. The parameters are then the
	// caller's.
	Exists bool
	// Loading is true while the filter, or some partition of it, is being
	// loaded from its source (Rebuild of a missing filter, or of one that
	// lost partitions): reads of it fail with ErrLoading. With Rebuilding
	// false, the load died: Rebuild loads it again (a handle with
	// Options.Source does so by itself on its next call).
	Loading bool
	// Rebuilding is true while a rebuild, resize or load holds the filter.
	Rebuilding bool
	Slots      uint64  // m, the number of slots over all partitions
	Hashes     int     // k, the number of slots per item
	Capacity   uint64  // n the filter was sized for; 0 when unknown
	ErrorRate  float64 // the false-positive rate targeted at Capacity
	// IDLifetime is how long operation ids are remembered (stored with
	// the filter: see Options.IDLifetime).
	IDLifetime time.Duration
	// Items is the number of items added minus the number removed. It is
	// approximate: an Add of an item already present counts again, and a
	// Remove of a false positive counts too.
	Items int64
	// Fill is Items / Capacity: past 1 the filter holds more than it was
	// sized for, and false positives grow fast. 0 when Capacity is unknown.
	Fill float64
	// NonZero is the number of slots that are not zero, and Saturated the
	// number of counters at 15 (never for a classic filter), counted by a
	// scan of every sound partition (see Info's cost on Counting.Info). In
	// a cuckoo filter NonZero counts the fingerprints stored.
	NonZero, Saturated uint64
	// Load is, in a cuckoo filter, the share of its slots (4 per bucket)
	// that hold a fingerprint, from Items: adds fail with ErrFull once
	// a partition's reaches CuckooMaxLoad. 0 for other modes.
	Load float64
	// Bytes is the memory the filter's keys take in Redis (MEMORY USAGE),
	// or their length when the server does not report memory.
	Bytes int64
	// TTL is the shortest time left before a partition expires; 0 when
	// none does.
	TTL time.Duration
	// FalsePositiveRate is the rate expected with Items items in the filter.
	FalsePositiveRate float64
	// MeasuredFalsePositiveRate is the rate given by the slots as they are:
	// the chance that an item never added finds all its k slots non-zero,
	// (NonZero/m)^k averaged over the partitions. Unlike FalsePositiveRate
	// it counts what Items misses (adds of items already present, ghosts
	// of removed rows, saturated counters).
	MeasuredFalsePositiveRate float64
	// Damaged is true when some partitions are missing or hold something
	// else while others are sound: see ErrDamaged, and each partition's Err.
	Damaged bool
	// EvictionPolicy is the maxmemory-policy of the servers that hold the
	// filter (INFO memory; on a cluster, the first master's that is not
	// noeviction), or "" when the server does not say (the Redis user may
	// not run INFO, or the server has no INFO memory). See Evicts.
	EvictionPolicy string
	// Partitions describes each partition, in order.
	Partitions []PartitionInfo
}

// Overfull reports whether the filter holds more than it was sized for, or
// its measured false-positive rate is more than twice its target, or a
// cuckoo filter's load is past 95% of CuckooMaxLoad (soon its adds fail
// with ErrFull): rebuild it into a bigger one.
func (in *Info) Overfull() bool {
	return in.Fill > 1 || (in.ErrorRate > 0 && in.MeasuredFalsePositiveRate > 2*in.ErrorRate) ||
		in.Load > 0.95*CuckooMaxLoad
}

// Evicts reports whether the server may evict keys of the filter when it
// runs out of memory: under any policy but noeviction. Under a volatile-*
// policy only keys with a TTL go, but the operation records that make
// AddOnce and the other once calls (and go-redis's retries) apply once
// always have one: an evicted record lets a replay apply a second time,
// and a Remove applied twice can make a held item test absent. Under an
// allkeys-* policy a partition can go too (reads then answer "may be
// present" for its items, and writes fail with ErrDamaged). Run the
// filter's Redis with maxmemory-policy noeviction.
func (in *Info) Evicts() bool {
	return in.EvictionPolicy != "" && in.EvictionPolicy != "noeviction"
}

// evictionPolicy reads the maxmemory-policy of the servers of f, from
// INFO memory (every master of a cluster): the first that is not
// noeviction, or "" when INFO is refused.
func (f *filter) evictionPolicy(ctx context.Context) (string, error) {
	var texts []string
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		s, err := c.Info(ctx, "memory").Result()
		mu.Lock()
		texts = append(texts, s)
		mu.Unlock()
		return err
	}
	var err error
	switch c := f.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	default:
		pipe := f.rdb.Pipeline()
		cmd := pipe.Info(ctx, "memory")
		_, err = pipe.Exec(ctx)
		texts = append(texts, cmd.Val())
	}
	var refused redis.Error // NOPERM, or a server without INFO memory (miniredis)
	if errors.As(err, &refused) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	policy := ""
	for _, text := range texts {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, "maxmemory_policy:"); ok {
				v = strings.TrimSpace(v)
				if policy == "" || policy == "noeviction" {
					policy = v
				}
			}
		}
	}
	return policy, nil
}

// PartitionInfo describes one partition of a filter.
type PartitionInfo struct {
	Key     string // the Redis key
	Exists  bool
	Loading bool          // being loaded: see Info.Loading
	Items   int64         // added minus removed in this partition
	Bytes   int64         // MEMORY USAGE, or the length
	TTL     time.Duration // 0 when it does not expire
	// NonZero and Saturated count this partition's slots, as Info's do.
	NonZero, Saturated uint64
	// Err says why the key is not a sound partition of the filter, when it
	// exists: ErrNotFilter, ErrParamsMismatch or ErrDamaged, with detail.
	Err error
}

// scanBytes is how much of a counting partition one GETRANGE of Info's
// scan reads: copying 64 KiB takes Redis tens of microseconds, far from
// blocking it for a millisecond.
const scanBytes = 64 << 10

func (f *filter) info(ctx context.Context) (*Info, error) {
	in, err := f.readInfo(ctx)
	if err != nil {
		return nil, callError("info", err)
	}
	return in, nil
}

func (f *filter) readInfo(ctx context.Context) (*Info, error) {
	type cmds struct {
		head                *redis.StringCmd
		size, exists, lease *redis.IntCmd
		ttl                 *redis.DurationCmd
		mem                 *redis.IntCmd
	}
	pipe := f.rdb.Pipeline()
	all := make([]cmds, len(f.parts))
	for p, part := range f.parts {
		all[p] = cmds{
			head: pipe.GetRange(ctx, part.key, 0, headerSize-1), size: pipe.StrLen(ctx, part.key),
			exists: pipe.Exists(ctx, part.key), ttl: pipe.PTTL(ctx, part.key), mem: pipe.MemoryUsage(ctx, part.key),
			lease: pipe.Exists(ctx, leaseKey(part.key)),
		}
	}
	// Commands may fail alone: MEMORY USAGE (nil for a missing key, or a
	// server without it), and GETRANGE and STRLEN on a key of another type;
	// those are looked at below. Any other failure is an error, including
	// one that failed the whole pipeline (a wrong password) and left the
	// commands with no reply.
	if _, err := pipe.Exec(ctx); err != nil && !slices.ContainsFunc(all, func(c cmds) bool {
		return c.mem.Err() == err || c.head.Err() == err || c.size.Err() == err
	}) {
		return nil, err
	}
	in := &Info{
		Name: f.name, Mode: f.h.mode, Slots: f.h.m * uint64(len(f.parts)), Hashes: f.h.k,
		Capacity: f.h.capacity, ErrorRate: f.h.errorRate, IDLifetime: f.idLifetime,
	}
	var firstErr error
	sound := 0
	for p, c := range all {
		for _, cmd := range []redis.Cmder{c.exists, c.ttl, c.lease} {
			if err := cmd.Err(); err != nil {
				return nil, err
			}
		}
		pi := PartitionInfo{Key: f.parts[p].key, Exists: c.exists.Val() == 1}
		in.Rebuilding = in.Rebuilding || c.lease.Val() == 1
		if pi.Exists {
			in.Exists = true
			if c.mem.Err() == nil {
				pi.Bytes = c.mem.Val()
			}
			if c.ttl.Val() > 0 {
				pi.TTL = c.ttl.Val()
				if in.TTL == 0 || pi.TTL < in.TTL {
					in.TTL = pi.TTL
				}
			}
			pi.Err = f.partitionErr(p, c.head, c.size)
			if pi.Err != nil && !isContentError(pi.Err) {
				return nil, pi.Err // the server refused (an ACL, say): nothing is known
			}
			if pi.Err == nil {
				h, _ := parseHeader(c.head.Val()) // check has parsed it
				sound++
				pi.Items = h.items
				pi.Loading = c.head.Val()[markByte] == markLoad
				in.Loading = in.Loading || pi.Loading
				if c.mem.Err() != nil {
					pi.Bytes = c.size.Val()
				}
				in.Capacity, in.ErrorRate = h.capacity, h.errorRate
				in.Items += pi.Items
			} else if firstErr == nil {
				firstErr = pi.Err
			}
			in.Bytes += pi.Bytes
		}
		in.Partitions = append(in.Partitions, pi)
	}
	if sound == 0 && firstErr != nil {
		// Nothing of this filter is there, but its keys hold something
		// else: most often the caller's parameters are not the stored ones.
		return nil, firstErr
	}
	for _, pi := range in.Partitions {
		in.Damaged = in.Damaged || (in.Exists && (!pi.Exists || pi.Err != nil))
	}
	if err := f.scan(ctx, in); err != nil {
		return nil, err
	}
	policy, err := f.evictionPolicy(ctx)
	if err != nil {
		return nil, err
	}
	in.EvictionPolicy = policy
	// The partitions share the items: each holds about Items/P in m slots.
	perPart := uint64(max(0, in.Items)) / uint64(len(f.parts))
	in.FalsePositiveRate = FalsePositiveRate(perPart, f.h.m, f.h.k)
	if f.h.mode == ModeCuckoo {
		in.Load = float64(perPart) / float64(f.h.m*cuckooBucketSize)
		in.FalsePositiveRate = CuckooFalsePositiveRate(in.Load, f.h.k)
	}
	if in.Capacity > 0 {
		in.Fill = float64(in.Items) / float64(in.Capacity)
	}
	return in, nil
}

// isContentError reports whether err says what a key holds, rather than
// that Redis could not be asked.
func isContentError(err error) bool {
	return errors.Is(err, ErrNotFilter) || errors.Is(err, ErrParamsMismatch) || errors.Is(err, ErrDamaged)
}

// partitionErr returns why the key of partition p, which exists, is not a
// sound partition of f, from its header and length, or nil.
func (f *filter) partitionErr(p int, head *redis.StringCmd, size *redis.IntCmd) error {
	for _, cmd := range []redis.Cmder{head, size} {
		if err := cmd.Err(); err != nil {
			if redis.HasErrorPrefix(err, "WRONGTYPE") {
				return anotherType(f.parts[p].key)
			}
			return err
		}
	}
	return f.check(p, head.Val(), size.Val())
}

// scan counts the non-zero and saturated slots of every sound partition
// (scanPartition) and sets the measured false-positive rate. Writes may run
// meanwhile: the counts are then of no single instant.
func (f *filter) scan(ctx context.Context, in *Info) error {
	var sumRate float64
	for p := range in.Partitions {
		pi := &in.Partitions[p]
		if !pi.Exists || pi.Err != nil {
			continue
		}
		if err := f.scanPartition(ctx, pi); err != nil {
			return err
		}
		in.NonZero += pi.NonZero
		in.Saturated += pi.Saturated
		if f.h.mode == ModeCuckoo {
			sumRate += CuckooFalsePositiveRate(float64(pi.NonZero)/float64(f.h.m*cuckooBucketSize), f.h.k)
		} else {
			sumRate += math.Pow(float64(pi.NonZero)/float64(f.h.m), float64(f.h.k))
		}
	}
	// A missing partition's slots are unknown: count it as full, as
	// reads do.
	for _, pi := range in.Partitions {
		if in.Exists && (!pi.Exists || pi.Err != nil) {
			sumRate++
		}
	}
	in.MeasuredFalsePositiveRate = sumRate / float64(len(in.Partitions))
	return nil
}

// scanPartition counts the slots of one partition, in round trips of 16
// commands: GETRANGE of scanBytes each for counters, BITCOUNT of 1 MiB
// each for bits (popcount takes Redis about 0.1 ms a MiB).
func (f *filter) scanPartition(ctx context.Context, pi *PartitionInfo) error {
	step := int64(scanBytes)
	switch f.h.mode {
	case ModeClassic:
		step = 16 * scanBytes
	case ModeCuckoo:
		// Whole groups of 8 buckets (4f bytes), about scanBytes.
		group := int64(f.h.width()) // 8 buckets are 8*4f bits, 4f bytes
		step = scanBytes / group * group
	}
	end := f.h.size()
	for lo := int64(headerSize); lo < end; lo += 16 * step {
		pipe := f.rdb.Pipeline()
		var reads []*redis.StringCmd
		var counts []*redis.IntCmd
		for at := lo; at < min(lo+16*step, end); at += step {
			last := min(at+step, end) - 1
			if f.h.mode == ModeClassic {
				counts = append(counts, pipe.BitCount(ctx, pi.Key, &redis.BitCount{Start: at, End: last}))
			} else {
				reads = append(reads, pipe.GetRange(ctx, pi.Key, at, last))
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for _, c := range counts {
			pi.NonZero += uint64(c.Val())
		}
		for _, r := range reads {
			if f.h.mode == ModeCuckoo {
				pi.NonZero += countFingerprints(r.Val(), f.h.k)
				continue
			}
			nonZero, saturated := countNibbles(r.Val())
			pi.NonZero += nonZero
			pi.Saturated += saturated
		}
	}
	return nil
}

// nibbles[b] is the number of non-zero 4-bit halves of byte b, and
// fifteens[b] the number equal to 15.
var nibbles, fifteens = func() (n, s [256]uint8) {
	for b := range 256 {
		for _, v := range []int{b >> 4, b & 15} {
			if v != 0 {
				n[b]++
			}
			if v == 15 {
				s[b]++
			}
		}
	}
	return n, s
}()

func countNibbles(s string) (nonZero, saturated uint64) {
	for i := 0; i < len(s); i++ {
		nonZero += uint64(nibbles[s[i]])
		saturated += uint64(fifteens[s[i]])
	}
	return nonZero, saturated
}

// countFingerprints counts the non-zero fields of f bits in s, read from
// its first bit on (a whole number of fields: the scan reads groups of 8
// buckets; the last group may be cut short by the end of the string).
func countFingerprints(s string, f int) uint64 {
	var n uint64
	var acc uint64 // bits read and not yet counted, the oldest highest
	bits := 0
	for i := 0; i < len(s); i++ {
		acc, bits = acc<<8|uint64(s[i]), bits+8
		for bits >= f {
			bits -= f
			if acc>>bits&(1<<f-1) != 0 {
				n++
			}
		}
		acc &= 1<<bits - 1
	}
	return n
}
