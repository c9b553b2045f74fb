package rbloom

import (
	"math"
	"time"
)

// DefaultErrorRate is the false-positive rate used when Options.ErrorRate is 0.
const DefaultErrorRate = 0.01

// DefaultIDLifetime is how long AddOnce and RemoveOnce remember an
// operation id when Options.IDLifetime is 0.
const DefaultIDLifetime = time.Hour

// Options describe a filter and one handle of it. The zero value of each
// field means its default; invalid values are rejected with
// ErrInvalidOptions, never clamped.
//
// The first six fields are stored with the filter in Redis (in every
// partition's header): set Capacity (and optionally ErrorRate), and m and
// k are derived with OptimalSlots and OptimalHashes, or set Slots and
// Hashes explicitly. A handle whose stored fields differ from the stored
// filter's gets ErrParamsMismatch; OpenCounting and OpenClassic take them
// from Redis and refuse them in Options.
//
// The other fields belong to one handle: two processes may use the same
// filter with different ones, and none of them changes where data lives
// or what it means (KeyPrefix names the filter: another prefix is another
// filter).
type Options struct {
	// Capacity is n, the number of items the filter is sized for. Required
	// unless Slots and Hashes are both set.
	Capacity uint64

	// ErrorRate is p, the false-positive rate wanted at Capacity items. It
	// must be in (0, 1). Default DefaultErrorRate (0.01).
	ErrorRate float64

	// Slots is m, the number of slots (counters in a counting filter,
	// bits in a classic one, buckets of 4 fingerprints in a cuckoo one).
	// Default OptimalSlots(Capacity, ErrorRate), or CuckooParams.
	Slots uint64

	// Hashes is k, the number of slots each item sets, 1 to MaxHashes; in
	// a cuckoo filter, the fingerprint width in bits, MinFingerprintBits
	// to MaxFingerprintBits. Default OptimalHashes(Capacity, Slots), or
	// CuckooParams.
	Hashes int

	// Partitions is P, the number of Redis keys the slots are split over, 1
	// to MaxPartitions; each item lives in one of them. One key holds at
	// most 512 MiB (about 2^30 counters or 2^32 bits); on Redis Cluster the
	// partitions spread over the masters. Default: the smallest P that keeps
	// every partition within defaultPartitionBytes (64 MiB). Changing it
	// makes a new filter: the stored one then answers ErrParamsMismatch.
	Partitions int

	// IDLifetime is how long AddOnce, RemoveOnce and the other once calls
	// remember an operation id: a repeat within it is answered without
	// being applied again. It is a whole number of seconds, at most
	// 194 days. It is stored with the filter, because every process must
	// look for an id's record where the others wrote it and keep it as
	// long: a handle with another IDLifetime gets ErrParamsMismatch.
	// Default DefaultIDLifetime (1 hour).
	IDLifetime time.Duration

	// The fields below belong to the handle, not to the stored filter.

	// KeyPrefix starts the name of every Redis key of the filter, so that
	// applications sharing a Redis keep apart, and an ACL rule (~PREFIX*)
	// can give each its own keys. It may not hold braces or control
	// characters; at most 64 bytes. Every handle of a filter, Open's
	// included, must use the same. Default DefaultKeyPrefix ("rbloom:").
	KeyPrefix string

	// WaitReplicas, when positive, makes every write wait until that many
	// replicas have it (Redis WAIT), or fail with ErrNotReplicated after
	// WaitTimeout. Redis replicates asynchronously: without it, a failover
	// can lose writes the master had acknowledged. With a
	// *redis.ClusterClient the writes go through each master's own client,
	// so that WAIT follows them on their connection.
	WaitReplicas int

	// WaitTimeout bounds the wait of WaitReplicas: a write waits at most
	// that long for its replicas, then fails with ErrNotReplicated. WAIT
	// ends the pipeline of the write's scripts, whose replies go-redis reads
	// within the client's ReadTimeout (5 s by default); so WaitTimeout may
	// be at most half the ReadTimeout of a *redis.Client or
	// *redis.ClusterClient, or the handle is refused with ErrInvalidOptions
	// (a client with ReadTimeout -1 takes any). Default 1 second.
	WaitTimeout time.Duration

	// Source, when set, is the filter's source of truth, in the form of
	// Rebuild's fill: it calls add with every item the filter should hold,
	// following Rebuild's rule. A handle that finds the filter missing
	// (never made, or lost by Redis) loads it from Source in the
	// background, one process at a time (the rebuild's lease): meanwhile
	// reads fail with ErrLoading, and writes wait until the load has
	// begun and are then applied. A handle without it returns ErrNotFound
	// and leaves the load to whoever calls Rebuild. It belongs to this
	// handle; a load that fails is tried again by a later call, at most
	// once per second per handle.
	Source func(add func(items []string) error) error

	// CreateOnWrite lets the first write create the filter, empty, and
	// makes reads of a missing filter answer "absent", as for an empty
	// one. Use it only for a filter whose whole content comes through
	// writes made since it was made: a daily dedupe filter with a TTL,
	// say. Its cost: a filter Redis lost (a restart without persistence,
	// a flush, eviction) is made again, empty, by the next write, and
	// every item it held then tests absent, for every handle of the
	// filter, whatever their options. Without it (the default), a
	// filter exists only once Create or Rebuild made it, and every
	// method on a missing filter fails with ErrNotFound.
	CreateOnWrite bool

	// MaxItems, when positive, bounds the items the filter holds, like
	// RedisBloom's NONSCALING: an add that would take it past the bound
	// fails with ErrFull and adds nothing. The bound is checked by the
	// script that adds, atomically, per partition: each of the P partitions
	// may hold MaxItems/P (rounded up), its share of evenly spread items.
	// Items are counted as Info.Items counts them. It belongs to this
	// handle, not to the filter stored in Redis. Default 0: no bound.
	MaxItems uint64

	// TTL, when positive, is the time to live given to the filter's keys
	// when Create, a load (Rebuild of a missing filter) or, with
	// CreateOnWrite, the first write makes them; later writes do not
	// extend it. Redis keeps
	// TTLs in milliseconds. Default 0: no expiry.
	TTL time.Duration

	// UseFunctions makes writes call rbloom's Redis functions with FCALL
	// instead of sending its scripts with EVALSHA and EVAL. An admin installs
	// the functions first, once per version of rbloom and per server (every
	// master of a cluster), with InstallFunctions or `rbloom functions
	// install`; Redis 7.0 or later. The application's Redis user then needs
	// +fcall and neither +evalsha nor +eval, so it cannot run Lua of its
	// own, and no write depends on the script cache, which a restart or a
	// failover empties: functions are saved and replicated with the data. A
	// write where the functions are missing fails with ErrNoFunctions and
	// changes nothing; it never falls back to EVAL. Reads are the same
	// either way. Default false: scripts.
	UseFunctions bool

	// Observer, when set, sees each call of the handle's methods: its
	// method, filter, items, duration and error, with the context it runs
	// with (see Observer). It belongs to this handle (the handle a
	// Resize returns has the resized one's). Default nil: nothing is
	// observed, at no cost.
	Observer Observer
}

// checkHandle validates the fields of o that belong to one handle.
func (o Options) checkHandle() error {
	bad := func(format string, args ...any) error {
		return failf(ErrInvalidOptions, format, args...)
	}
	switch {
	case o.TTL < 0 || (o.TTL > 0 && o.TTL < time.Millisecond):
		return bad("TTL = %v, want 0 (no expiry) or at least 1ms", o.TTL)
	case o.WaitReplicas < 0 || o.WaitTimeout < 0:
		return bad("WaitReplicas = %d, WaitTimeout = %v: want 0 or more", o.WaitReplicas, o.WaitTimeout)
	}
	return checkKeyPrefix(o.KeyPrefix)
}

// onceSeconds validates IDLifetime and returns it as the header keeps it:
// whole seconds, 0 for the default.
func (o Options) onceSeconds() (uint32, error) {
	w := o.IDLifetime
	if w < 0 || w%time.Second != 0 || w > maxOnceSeconds*time.Second {
		return 0, failf(ErrInvalidOptions, "IDLifetime = %v, want 0 (the default, %v) or whole seconds up to %v", w, DefaultIDLifetime, maxOnceSeconds*time.Second)
	}
	if w == DefaultIDLifetime {
		return 0, nil // so that filters made before it was stored agree
	}
	return uint32(w / time.Second), nil
}

// sized reports whether o sets a field that is stored with the filter.
func (o Options) sized() bool {
	return o.Capacity != 0 || o.ErrorRate != 0 || o.Slots != 0 || o.Hashes != 0 || o.Partitions != 0 || o.IDLifetime != 0
}

// resolve validates o and returns the header of the filter it describes.
// Error messages name the field at fault.
func (o Options) resolve(mode Mode) (header, error) {
	bad := func(format string, args ...any) (header, error) {
		return header{}, failf(ErrInvalidOptions, format, args...)
	}
	if err := o.checkHandle(); err != nil {
		return header{}, err
	}
	once, err := o.onceSeconds()
	if err != nil {
		return header{}, err
	}
	p := o.ErrorRate
	switch {
	case math.IsNaN(p) || p < 0 || p >= 1:
		return bad("ErrorRate = %v, want a value in (0, 1)", p)
	case o.Hashes < 0 || o.Hashes > MaxHashes:
		return bad("Hashes = %d, want 1 to %d", o.Hashes, MaxHashes)
	case o.Partitions < 0 || o.Partitions > MaxPartitions:
		return bad("Partitions = %d, want 1 to %d", o.Partitions, MaxPartitions)
	case o.Capacity == 0 && o.Slots == 0:
		return bad("Capacity is 0 and Slots is 0: set Capacity, or Slots and Hashes")
	case o.Capacity == 0 && o.Hashes == 0:
		return bad("Hashes is 0 and Capacity is 0: set Hashes, or Capacity to derive it")
	}
	h := header{mode: mode, k: o.Hashes, m: o.Slots, partitions: 1, capacity: o.Capacity, errorRate: p, once: once}
	field := "Slots"
	if mode == ModeCuckoo {
		if field, err = h.sizeCuckoo(); err != nil {
			return header{}, err
		}
	} else {
		if h.m == 0 {
			if p == 0 {
				h.errorRate = DefaultErrorRate
			}
			h.m, field = OptimalSlots(h.capacity, h.errorRate), "Capacity"
		}
		if h.k == 0 {
			h.k = OptimalHashes(h.capacity, h.m)
			if h.k > MaxHashes {
				return bad("Capacity = %d in %d Slots needs %d Hashes, more than %d", h.capacity, h.m, h.k, MaxHashes)
			}
		}
		if h.errorRate == 0 {
			// m or k was given: record the rate they give at Capacity.
			h.errorRate = FalsePositiveRate(h.capacity, h.m, h.k)
		}
	}
	if h.m > maxSlotsOf(mode, h.k)*MaxPartitions {
		return bad("%s: the filter needs %d slots, more than %d partitions of one Redis string each hold in %s mode",
			field, h.m, MaxPartitions, mode)
	}
	parts := uint64(o.Partitions)
	if parts == 0 {
		bytes := (h.m*h.width() + 7) / 8
		parts = max(1, (bytes+defaultPartitionBytes-1)/defaultPartitionBytes)
		field = "Capacity"
		if o.Capacity == 0 {
			field = "Slots"
		}
	} else {
		field = "Partitions"
	}
	// m is now the slots of one partition.
	h.m = (h.m + parts - 1) / parts
	if mode == ModeCuckoo && o.Slots == 0 && parts > 1 {
		h.m = cuckooPartitionBuckets(h.capacity, parts)
	}
	if parts > MaxPartitions || h.m > maxSlotsOf(mode, h.k) {
		return bad("%s: %d slots in %d partitions of at most %d (one Redis string in %s mode) do not fit",
			field, h.m*parts, min(parts, MaxPartitions), maxSlotsOf(mode, h.k), mode)
	}
	h.partitions = uint32(parts)
	return h, nil
}
