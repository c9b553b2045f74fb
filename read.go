package rbloom

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Reads need no script and never write: they send, in one pipeline, the
// header (GETRANGE), the length (STRLEN), whether the key exists, and the
// slots of the items with BITFIELD_RO, which cannot create or grow a key.
// The header of a filter never changes once written, and each BITFIELD_RO
// reads all k slots of an item at once, so every item is answered from one
// consistent state of its slots.

// readSlots returns the values of the k slots of every item, k per item in
// order, or nil when the filter does not exist (an empty filter).
func (f *filter) readSlots(ctx context.Context, items []string) ([]int64, error) {
	if len(items) == 0 {
		return nil, nil
	}
	var vals []int64
	perCall := maxCallSlots / f.h.k
	err := chunks(items, maxRoundTripSlots/f.h.k, func(part []string) error {
		pipe := f.rdb.Pipeline()
		head := pipe.GetRange(ctx, f.key, 0, headerSize-1)
		size := pipe.StrLen(ctx, f.key)
		exists := pipe.Exists(ctx, f.key)
		var cmds []*redis.IntSliceCmd
		_ = chunks(part, perCall, func(items []string) error {
			args := make([]any, 0, 2+len(items)*f.h.k*3)
			args = f.slotArgs(append(args, "BITFIELD_RO", f.key), items, argGet, nil)
			cmd := redis.NewIntSliceCmd(ctx, args...)
			_ = pipe.Process(ctx, cmd)
			cmds = append(cmds, cmd)
			return nil
		})
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		if exists.Val() == 0 {
			vals = nil
			return errMissing
		}
		if err := f.check(head.Val(), size.Val()); err != nil {
			return err
		}
		for _, cmd := range cmds {
			vals = append(vals, cmd.Val()...)
		}
		return nil
	})
	if errors.Is(err, errMissing) {
		return nil, nil
	}
	return vals, err
}

// errMissing stops a read early: the filter does not exist.
var errMissing = errors.New("rbloom: missing")

// check compares a header and length read from Redis with f's own.
func (f *filter) check(head string, size int64) error {
	if len(head) < identitySize || head[:identitySize] != f.head[:identitySize] {
		h, err := parseHeader(head)
		if err != nil {
			return fmt.Errorf("%w (%s)", err, f.key)
		}
		return fmt.Errorf("%w: %s is %s m=%d k=%d, caller wants %s m=%d k=%d",
			ErrParamsMismatch, f.key, h.mode, h.m, h.k, f.h.mode, f.h.m, f.h.k)
	}
	if want := f.h.size(); size != want {
		return fmt.Errorf("%w: %s is damaged: %d bytes long, want %d", ErrNotFilter, f.key, size, want)
	}
	return nil
}

// test reports for each item whether all its slots are non-zero.
func (f *filter) test(ctx context.Context, items []string) ([]bool, error) {
	mins, err := f.minSlots(ctx, "test", items)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(items))
	for i, v := range mins {
		out[i] = v > 0
	}
	return out, nil
}

// count returns for each item the smallest of its slots.
func (f *filter) count(ctx context.Context, items []string) ([]int, error) {
	mins, err := f.minSlots(ctx, "count", items)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(items))
	for i, v := range mins {
		out[i] = int(v)
	}
	return out, nil
}

// minSlots returns for each item the smallest of its k slots: 0 means
// definitely absent.
func (f *filter) minSlots(ctx context.Context, op string, items []string) ([]int64, error) {
	vals, err := f.readSlots(ctx, items)
	if err != nil {
		return nil, readError(op, err)
	}
	mins := make([]int64, len(items))
	if vals != nil {
		for i := range mins {
			mins[i] = slices.Min(vals[i*f.h.k : (i+1)*f.h.k])
		}
	}
	return mins, nil
}

// readError wraps an error of a read, mapping WRONGTYPE to ErrNotFilter.
func readError(op string, err error) error {
	if errors.Is(err, ErrNotFilter) || errors.Is(err, ErrParamsMismatch) {
		return err
	}
	return scriptError(op, err)
}
