package rbloom

import (
	"cmp"
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Opening a filter by its name alone: its parameters come from the header
// of the partition at rbloom:{name}.

// OpenCounting returns the counting filter called name as stored in Redis,
// its parameters read from there. o gives the handle's settings (TTL,
// KeyPrefix, WaitReplicas, WaitTimeout, MaxItems, UseFunctions, Source,
// CreateOnWrite); the
// fields stored with the filter (Capacity, ErrorRate, Slots, Hashes,
// Partitions, IDLifetime) must be zero (ErrInvalidOptions). It fails with
// ErrParamsMismatch when the filter is a classic one, and otherwise as Open
// does.
func OpenCounting(ctx context.Context, rdb Client, name string, o Options) (*Counting, error) {
	f, err := openMode(ctx, rdb, name, o, ModeCounting)
	if err != nil {
		return nil, err
	}
	return &Counting{base{f}}, nil
}

// OpenClassic returns the classic filter called name as stored in Redis,
// as OpenCounting does for a counting one.
func OpenClassic(ctx context.Context, rdb Client, name string, o Options) (*Classic, error) {
	f, err := openMode(ctx, rdb, name, o, ModeClassic)
	if err != nil {
		return nil, err
	}
	return &Classic{base{f}}, nil
}

// Open returns the filter called name as stored in Redis, taking its mode
// and parameters from its partition at key "<KeyPrefix>{name}", so that a
// process needs only the name: a *Counting, a *Cuckoo or a *Classic, as
// a Filter. o gives the handle's settings (KeyPrefix, WaitReplicas, Source
// ...); the fields stored with the filter must be zero. It fails with
// ErrNotFound, naming the key it read, when no filter has that name; with
// ErrDamaged when that key is missing but other partitions of the filter
// exist, or when a partition holds another filter's header; with
// ErrNotFilter when the key holds something else; and with ErrUnsupported
// when the server lacks a command rbloom needs. Open makes one round
// trip, two for a filter of several partitions. OpenCounting, OpenCuckoo
// and OpenClassic return the type, and refuse a filter of another mode.
func Open(ctx context.Context, rdb Client, name string, o Options) (Filter, error) {
	if o.sized() {
		return nil, callError("open", errSized)
	}
	f, err := open(ctx, rdb, name, o)
	if err != nil {
		return nil, callError("open", err)
	}
	switch f.h.mode {
	case ModeClassic:
		return &Classic{base{f}}, nil
	case ModeCuckoo:
		return &Cuckoo{base{f}}, nil
	}
	return &Counting{base{f}}, nil
}

// errSized refuses the stored fields in the options of Open.
var errSized = failf(ErrInvalidOptions, "Capacity, ErrorRate, Slots, Hashes, Partitions and IDLifetime come from Redis: leave them zero")

func openMode(ctx context.Context, rdb Client, name string, o Options, mode Mode) (*filter, error) {
	if o.sized() {
		return nil, callError("open", errSized)
	}
	f, err := open(ctx, rdb, name, o)
	if err == nil && f.h.mode != mode {
		err = failf(ErrParamsMismatch, "%s is a %s filter, not %s", f.parts[0].key, f.h.mode, mode)
	}
	if err != nil {
		return nil, callError("open", err)
	}
	return f, nil
}

func open(ctx context.Context, rdb Client, name string, o Options) (*filter, error) {
	if err := o.checkHandleOf(rdb, name); err != nil {
		return nil, err
	}
	prefix := cmp.Or(o.KeyPrefix, DefaultKeyPrefix)
	key := keyOf(prefix, name)
	pipe := rdb.Pipeline()
	head := pipe.GetRange(ctx, key, 0, headerSize-1)
	exists := pipe.Exists(ctx, key)
	server := queueServerCheck(ctx, pipe, o.UseFunctions)
	_, err := pipe.Exec(ctx) // read per command: the server check's replies are errors by design
	if err := server.err(err); err != nil {
		return nil, err
	}
	for _, err := range []error{head.Err(), exists.Err()} {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return nil, anotherType(key)
		}
		if err != nil {
			return nil, err
		}
	}
	if exists.Val() == 0 {
		return nil, lostRoot(ctx, rdb, prefix, name)
	}
	if head.Val() == "" {
		return nil, failf(ErrNotFilter, "%s holds an empty string", key)
	}
	h, err := parseHeader(head.Val())
	if err != nil {
		return nil, notFilter(key, err)
	}
	if want := shareOf(keySlot(name), int(h.partitions)); int(h.index) != want {
		return nil, failf(ErrNotFilter, "%s holds partition %d, not %d", key, h.index, want)
	}
	f, err := o.handle(rdb, name, h)
	if err != nil {
		return nil, err
	}
	if err := f.agree(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// lostRoot tells, for a name whose key rbloom:{name} is missing, a filter
// that lost that partition (ErrDamaged) from one that does not exist
// (ErrNotFound), by the headers of its other partitions (witnessKeys).
func lostRoot(ctx context.Context, rdb Client, prefix, name string) error {
	keys := witnessKeys(prefix, name)
	pipe := rdb.Pipeline()
	heads := make([]*redis.StringCmd, len(keys))
	for i, key := range keys {
		heads[i] = pipe.GetRange(ctx, key, 0, headerSize-1)
	}
	_, _ = pipe.Exec(ctx) // per command: a key of another type fails alone
	for i, head := range heads {
		if err := head.Err(); err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
			return err
		}
		h, err := parseHeader(head.Val())
		if err != nil || h.partitions < 2 {
			continue
		}
		if partitionKeys(prefix, name, int(h.partitions))[h.index] == keys[i] {
			return failf(ErrDamaged, "%s: %s is missing, but %s holds partition %d of %d", name, keyOf(prefix, name), keys[i], h.index, h.partitions)
		}
	}
	return failf(ErrNotFound, "%s: %s does not exist, nor any other partition of the filter (the name, or Options.KeyPrefix, may be wrong; or Redis lost it)", name, keyOf(prefix, name))
}

// agree checks that no partition of f holds the header of another filter
// or of another partition: the header at rbloom:{name}, from which open
// takes the parameters, could be the one that was replaced. Partitions
// that are missing or hold something else are left to reads and Info to
// report. One round trip, for a filter of several partitions.
func (f *filter) agree(ctx context.Context) error {
	if len(f.parts) == 1 {
		return nil
	}
	pipe := f.rdb.Pipeline()
	heads := make([]*redis.StringCmd, len(f.parts))
	for p, part := range f.parts {
		heads[p] = pipe.GetRange(ctx, part.key, 0, identitySize-1)
	}
	_, _ = pipe.Exec(ctx) // per command: a key of another type fails alone
	root := shareOf(keySlot(f.name), len(f.parts))
	for p, head := range heads {
		v, err := head.Result()
		switch {
		case err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE"):
			return err
		case strings.HasPrefix(v, magic) && v != f.parts[p].head[:identitySize]:
			return failf(ErrDamaged, "%s: %s holds another header than %s implies (another filter's or another partition's)", f.name, f.parts[p].key, f.parts[root].key)
		}
	}
	return nil
}
