package rbloom

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
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
	// opKeep is how long a write's operation key stays in Redis to make a
	// retry of that write a no-op. go-redis gives up retrying within
	// seconds; a minute leaves ample room.
	opKeep = time.Minute
)

var opKeepMS = strconv.FormatInt(opKeep.Milliseconds(), 10)

// filter holds what both kinds of filter share. It is immutable.
type filter struct {
	rdb        redis.UniversalClient
	name       string
	h          header // index 0; m is the slots of one partition
	parts      []part
	ttl        time.Duration
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
	f := &filter{rdb: rdb, name: name, h: h, ttl: ttl, onceWindow: DefaultOnceWindow}
	for i, key := range partitionKeys(name, int(h.partitions)) {
		ph := h
		ph.index = uint32(i)
		f.parts = append(f.parts, part{key: key, head: ph.encode()})
	}
	return f
}

// keyOf is the Redis key of a partition whose hash tag is tag. The braces
// keep the partition and its operation keys in one cluster slot.
func keyOf(tag string) string { return "rbloom:{" + tag + "}" }

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

// chunks calls fn(lo, hi) for consecutive ranges of at most size in [0, n).
func chunks(n, size int, fn func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += size {
		if err := fn(lo, min(lo+size, n)); err != nil {
			return err
		}
	}
	return nil
}

// Constant script arguments, boxed once rather than per slot.
var (
	argIncrby, argSet, argGet any = "INCRBY", "SET", "GET"
	argU4, argU1              any = "u4", "u1"
	argOne, argMinusOne       any = "1", "-1"
)

// slotArgs appends, for the items at positions at, k groups each of op,
// type, bit offset and, when value is not nil, value.
func (f *filter) slotArgs(args []any, items []string, at []int, op, value any) []any {
	typ := argU4
	if f.h.mode == ModeClassic {
		typ = argU1
	}
	var buf [MaxHashes]uint64
	width := f.h.mode.width()
	for _, i := range at {
		_, slots := f.locate(buf[:0], items[i])
		for _, slot := range slots {
			args = append(args, op, typ, headerBits+slot*width)
			if value != nil {
				args = append(args, value)
			}
		}
	}
	return args
}

// write runs script (add or remove) over items and returns its answer for
// each item. The items of each partition go in calls of at most
// maxCallSlots slots, all pipelined (on a cluster, go-redis sends one
// pipeline per node, in parallel). Each call carries a fresh operation key,
// so that a call go-redis re-sends after losing its reply applies once.
func (f *filter) write(ctx context.Context, script *redis.Script, items []string,
	args func(p part, items []string, at []int) []any, opKey func(p int) string) ([]bool, error) {
	out := make([]bool, len(items))
	perCall := maxCallSlots / f.h.k
	err := chunks(len(items), maxRoundTripSlots/f.h.k, func(lo, hi int) error {
		window := items[lo:hi]
		var calls []scriptCall
		var answers [][]int // the positions in window each call answers for
		for p, group := range f.byPartition(window) {
			_ = chunks(len(group), perCall, func(a, b int) error {
				calls = append(calls, scriptCall{
					keys: []string{f.parts[p].key, opKey(p), copyKey(f.parts[p].key)},
					args: args(f.parts[p], window, group[a:b]),
				})
				answers = append(answers, group[a:b])
				return nil
			})
		}
		// A call answers '?' when its partition does not exist and it may
		// not create it; settle decides, and the calls go again.
		for try := 0; len(calls) > 0; try++ {
			replies, err := runScripts(ctx, f.rdb, script, calls, f.repl)
			if err != nil {
				return err
			}
			var again []scriptCall
			var againAt [][]int
			for c, r := range replies {
				if r == "?" {
					again, againAt = append(again, calls[c]), append(againAt, answers[c])
					continue
				}
				r = strings.TrimPrefix(r, "+") // the call created its partition
				if len(r) != len(answers[c]) {
					return fmt.Errorf("rbloom: script answered for %d items, want %d", len(r), len(answers[c]))
				}
				for j, pos := range answers[c] {
					out[lo+pos] = r[j] == '1'
				}
			}
			if len(again) == 0 {
				return nil
			}
			if try == 2 {
				return fmt.Errorf("%w: %s: partitions keep vanishing", ErrDamaged, f.name)
			}
			exists, err := f.settle(ctx, script == addScript)
			if err != nil {
				return err
			}
			if !exists { // a remove from a filter that does not exist: all absent
				if f.mustExist {
					return fmt.Errorf("%w: %s", ErrNotFound, f.name)
				}
				return nil
			}
			calls, answers = again, againAt
		}
		return nil
	})
	return out, err
}

// settle is called when a write found one of the filter's partitions
// missing. If none exists, the filter is new: when create is set, it creates
// them all and reports true; otherwise it reports false. If all exist now,
// another writer has just created them. If only some exist after a moment
// (long enough for a creation in flight to finish), the filter is damaged:
// recreating the missing partition empty would make it answer "absent" for
// items it held.
func (f *filter) settle(ctx context.Context, create bool) (bool, error) {
	for try := 0; ; try++ {
		pipe := f.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(f.parts))
		for p, part := range f.parts {
			cmds[p] = pipe.Exists(ctx, part.key)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return false, err
		}
		var missing []string
		for p, cmd := range cmds {
			if cmd.Val() == 0 {
				missing = append(missing, f.parts[p].key)
			}
		}
		switch {
		case len(missing) == 0:
			return true, nil
		case len(missing) == len(f.parts) && !create:
			return false, nil
		case len(missing) == len(f.parts):
			return true, f.createAll(ctx)
		case try == 1:
			return false, fmt.Errorf("%w: %s: %d of %d partitions are missing (%s)",
				ErrDamaged, f.name, len(missing), len(f.parts), strings.Join(missing, " "))
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (f *filter) opKey(p int) string {
	var id [16]byte
	rand.Read(id[:]) // never fails (crypto/rand documents it)
	return f.parts[p].key + ":op:" + hex.EncodeToString(id[:])
}

func (f *filter) add(ctx context.Context, items []string) ([]bool, error) {
	if len(items) == 0 {
		return []bool{}, nil
	}
	res, err := f.write(ctx, addScript, items, f.addArgs(opKeepMS), f.opKey)
	if err != nil {
		return nil, scriptError("add", err)
	}
	return res, nil
}

// addArgs returns the arguments of add.lua for the items at positions at,
// with the operation key kept for keep milliseconds. A filter of one key
// may be created by any add; the partitions of a larger one are created
// together, by createAll, which passes create.
func (f *filter) addArgs(keep string) func(p part, items []string, at []int) []any {
	return f.addArgsCreating(keep, len(f.parts) == 1)
}

func (f *filter) addArgsCreating(keep string, mayCreate bool) func(p part, items []string, at []int) []any {
	return func(p part, items []string, at []int) []any {
		op := argIncrby
		if f.h.mode == ModeClassic {
			op = argSet
		}
		create := "0"
		if mayCreate {
			create = "1"
		}
		args := make([]any, 0, 4+len(at)*f.h.k*4)
		args = append(args, p.head, strconv.FormatInt(f.ttl.Milliseconds(), 10), keep, create)
		return f.slotArgs(args, items, at, op, argOne)
	}
}

func (f *filter) removeArgs(keep string) func(p part, items []string, at []int) []any {
	return func(p part, items []string, at []int) []any {
		args := make([]any, 0, 2+len(at)*f.h.k*4)
		args = append(args, p.head, keep)
		return f.slotArgs(args, items, at, argIncrby, argMinusOne)
	}
}

// writeOnce applies script to item at most once per opID within
// f.onceWindow: the
// operation key is named after opID instead of being random, so a second
// call with the same opID, from this process or another, returns the first
// call's answer and changes nothing.
func (f *filter) writeOnce(ctx context.Context, op string, script *redis.Script, item, opID string,
	args func(keep string) func(p part, items []string, at []int) []any) (bool, error) {
	if opID == "" || len(opID) > 256 {
		return false, fmt.Errorf("%w: operation id %q: want 1 to 256 bytes", ErrInvalidOptions, opID)
	}
	keep := strconv.FormatInt(f.onceWindow.Milliseconds(), 10)
	res, err := f.write(ctx, script, []string{item}, args(keep), func(p int) string {
		return f.parts[p].key + ":once:" + opID
	})
	if err != nil {
		return false, scriptError(op, err)
	}
	return res[0], nil
}

// create creates every partition that does not exist yet.
func (f *filter) create(ctx context.Context) error {
	if err := f.createAll(ctx); err != nil {
		return scriptError("create", err)
	}
	return nil
}

// createAll adds no items to every partition, which creates the missing
// ones, so that the partitions of a filter exist (and expire) together and
// Open finds the one named like the filter.
func (f *filter) createAll(ctx context.Context) error {
	calls := make([]scriptCall, len(f.parts))
	for p := range f.parts {
		calls[p] = scriptCall{
			keys: []string{f.parts[p].key, f.opKey(p), copyKey(f.parts[p].key)},
			args: f.addArgsCreating(opKeepMS, true)(f.parts[p], nil, nil),
		}
	}
	_, err := runScripts(ctx, f.rdb, addScript, calls, f.repl)
	return err
}

func (f *filter) remove(ctx context.Context, items []string) ([]bool, error) {
	if len(items) == 0 {
		return []bool{}, nil
	}
	res, err := f.write(ctx, removeScript, items, f.removeArgs(opKeepMS), f.opKey)
	if err != nil {
		return nil, scriptError("remove", err)
	}
	return res, nil
}

// drop deletes the filter's keys. A dropped filter reads as empty and is
// created again by the next write.
func (f *filter) drop(ctx context.Context) error {
	pipe := f.rdb.Pipeline() // one DEL per key: they are in other cluster slots
	for _, p := range f.parts {
		pipe.Del(ctx, p.key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("rbloom: drop %s: %w", f.name, err)
	}
	return nil
}
