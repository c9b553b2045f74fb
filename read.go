package rbloom

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"
)

// Reads need no script and never write: for each partition they touch they
// send, in one pipeline, the header (GETRANGE), the length (STRLEN), whether
// the key exists, and the slots of its items with BITFIELD_RO, which cannot
// create or grow a key. A partition's header never changes once written,
// and each BITFIELD_RO reads all k slots of an item at once, so every item
// is answered from one consistent state of its slots.

// partRead is what one pipeline asks of one partition.
type partRead struct {
	p            int
	head         *redis.StringCmd
	size, exists *redis.IntCmd
	slots        []*redis.IntSliceCmd
	answers      [][]int // the positions each BITFIELD_RO answers for
}

// minSlots returns for each item the smallest of its k slots: 0 means
// definitely absent. A missing partition reads as empty.
func (f *filter) minSlots(ctx context.Context, op string, items []string) ([]int64, error) {
	mins := make([]int64, len(items))
	err := chunks(len(items), maxRoundTripSlots/f.h.k, func(lo, hi int) error {
		window := items[lo:hi]
		groups := f.byPartition(window)
		reads, root, err := f.sendReads(ctx, window, groups)
		for wait := (backoff{}); unapplied(err); { // reads are safe to send again
			if err2 := wait.next(ctx); err2 != nil {
				return fmt.Errorf("%w (the cluster kept refusing the read: %v)", err2, err)
			}
			reads, root, err = f.sendReads(ctx, window, groups)
		}
		if err != nil {
			return err
		}
		// The partitions of a filter are created together. One missing
		// while the filter exists has vanished (evicted, deleted, expired
		// alone): its items may be present, and 15 says their count is
		// unknown. A filter whose every partition is missing is empty.
		exists := root != nil && root.Val() == 1
		for _, r := range reads {
			exists = exists || r.exists.Val() == 1
		}
		if !exists && f.mustExist && len(reads) > 0 {
			return fmt.Errorf("%w: %s", ErrNotFound, f.name)
		}
		for _, r := range reads {
			if r.exists.Val() == 0 {
				if exists {
					for _, group := range r.answers {
						for _, pos := range group {
							mins[lo+pos] = 15
						}
					}
				}
				continue
			}
			if err := f.check(r.p, r.head.Val(), r.size.Val()); err != nil {
				return err
			}
			for c, cmd := range r.slots {
				vals := cmd.Val()
				if len(vals) != len(r.answers[c])*f.h.k {
					return fmt.Errorf("rbloom: BITFIELD_RO answered %d values, want %d", len(vals), len(r.answers[c])*f.h.k)
				}
				for j, pos := range r.answers[c] {
					mins[lo+pos] = slices.Min(vals[j*f.h.k : (j+1)*f.h.k])
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, readError(op, err)
	}
	return mins, nil
}

// sendReads sends, in one pipeline, the reads of the items of window at
// the positions of each partition's group, and, for a filter of several
// partitions, whether the partition named like the filter exists.
func (f *filter) sendReads(ctx context.Context, window []string, groups [][]int) ([]*partRead, *redis.IntCmd, error) {
	perCall := maxCallSlots / f.h.k
	pipe := f.rdb.Pipeline()
	var reads []*partRead
	var root *redis.IntCmd
	if len(f.parts) > 1 {
		root = pipe.Exists(ctx, keyOf(f.name))
	}
	for p, group := range groups {
		if len(group) == 0 {
			continue
		}
		key := f.parts[p].key
		r := &partRead{p: p, head: pipe.GetRange(ctx, key, 0, headerSize-1),
			size: pipe.StrLen(ctx, key), exists: pipe.Exists(ctx, key)}
		_ = chunks(len(group), perCall, func(a, b int) error {
			args := make([]any, 0, 2+(b-a)*f.h.k*3)
			args = f.getArgs(append(args, "BITFIELD_RO", key), window, group[a:b])
			cmd := redis.NewIntSliceCmd(ctx, args...)
			_ = pipe.Process(ctx, cmd)
			r.slots, r.answers = append(r.slots, cmd), append(r.answers, group[a:b])
			return nil
		})
		reads = append(reads, r)
	}
	_, err := pipe.Exec(ctx)
	return reads, root, err
}

// check compares a header and length read from partition p with f's own.
func (f *filter) check(p int, head string, size int64) error {
	want := f.parts[p]
	if len(head) < identitySize || head[:identitySize] != want.head[:identitySize] {
		h, err := parseHeader(head)
		if err != nil {
			return fmt.Errorf("%w (%s)", err, want.key)
		}
		return fmt.Errorf("%w: %s is %s m=%d k=%d partition %d of %d, caller wants %s m=%d k=%d partition %d of %d",
			ErrParamsMismatch, want.key, h.mode, h.m, h.k, h.index, h.partitions,
			f.h.mode, f.h.m, f.h.k, p, len(f.parts))
	}
	if wantSize := f.h.size(); len(head) < headerSize || size != wantSize {
		return fmt.Errorf("%w: %s is %d bytes long, want %d", ErrDamaged, want.key, size, wantSize)
	}
	if head[49:] != reservedTail {
		return fmt.Errorf("%w: %s: reserved header bytes are not zero", ErrNotFilter, want.key)
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

// readError wraps an error of a read, mapping WRONGTYPE to ErrNotFilter.
func readError(op string, err error) error {
	if errors.Is(err, ErrNotFilter) || errors.Is(err, ErrParamsMismatch) {
		return err
	}
	return scriptError(op, err)
}
