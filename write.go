package rbloom

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The write path: add.lua and remove.lua calls, per partition, pipelined,
// each with an operation key that makes a re-sent call apply once.

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
		create := "0"
		if mayCreate {
			create = "1"
		}
		args := make([]any, 0, 4+len(at)*f.h.k)
		args = append(args, p.head, strconv.FormatInt(f.ttl.Milliseconds(), 10), keep, create)
		return f.offsetArgs(args, items, at)
	}
}

func (f *filter) removeArgs(keep string) func(p part, items []string, at []int) []any {
	return func(p part, items []string, at []int) []any {
		args := make([]any, 0, 2+len(at)*f.h.k)
		args = append(args, p.head, keep)
		return f.offsetArgs(args, items, at)
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
