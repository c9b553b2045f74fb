package rbloom

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// An operation id's records are per script call, in the partitions its
// batch reached (records.go). A resize that changes how a batch is cut (P,
// which moves items between partitions, or k, which changes the items per
// call) leaves the records of a batch sent before it where a replay after
// it does not look: in a partition the new cut does not reach, or under
// another call. The replay would be applied again in the partitions that
// hold no record of it. So a resize that changes the cut records the
// layout it leaves, with the time of the switch, beside the resize record
// (follow.go), and a batch under an operation id, while records made
// before such a switch may live, first looks for its own first records in
// each earlier layout: found, it is refused before anything is written.

// earlierField is the field of the resize record that keeps the header a
// filter of identity id was resized from.
func earlierField(id string) string { return "from:" + id }

// layoutCache holds the earlier layouts a handle checks: loaded by its
// first batch under an operation id, and kept only when the root partition
// then had the handle's own parameters. A resize records the layout it
// leaves before it switches any partition, so a list read once the switch
// is done is complete; a handle whose parameters were not yet the
// filter's reads it again at each batch (and its batches fail as long as
// they are not). It is read again after a batch fails too.
type layoutCache struct{ v atomic.Pointer[[]earlier] }

// earlier is a layout the filter had before a resize: a handle of it, and
// when the switch away from it was recorded.
type earlier struct {
	f  *filter
	at time.Time
}

// recordEarlier records, in pipe, that f is being switched to g, when g
// cuts batches otherwise.
func (f *filter) recordEarlier(ctx context.Context, pipe redis.Pipeliner, g *filter) {
	if sameCut(f, g) {
		return
	}
	var at [8]byte
	binary.BigEndian.PutUint64(at[:], uint64(f.now().UnixMilli()))
	pipe.HSet(ctx, resizedKey(f.prefix, f.name), earlierField(g.identity()), f.parts[0].head+string(at[:]))
}

// sameCut reports whether f and g cut every batch into the same calls to
// the same partition keys.
func sameCut(f, g *filter) bool {
	return len(f.parts) == len(g.parts) && f.perCall() == g.perCall()
}

// earlierLayouts returns the layouts f's filter had before a resize whose
// switch is recent enough for records made before it to live: f's own
// resize, and those before it.
func (f *filter) earlierLayouts(ctx context.Context) ([]earlier, error) {
	if v := f.layouts.v.Load(); v != nil {
		return *v, nil
	}
	pipe := f.rdb.Pipeline()
	all := pipe.HGetAll(ctx, resizedKey(f.prefix, f.name))
	root := pipe.GetRange(ctx, f.parts[0].key, 0, headerSize-1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	stored, err := parseHeader(root.Val())
	ours := err == nil && root.Val()[:identitySize] == f.parts[0].head[:identitySize]
	if err == nil && !ours {
		// Another filter's parameters: the batch's calls would be
		// refused, and a resize to this handle's may be switching now,
		// after the list above was read.
		return nil, failf(ErrParamsMismatch, "%s is %s, this handle's %s", f.parts[0].key, stored.describe(), f.h.describe())
	}
	var out []earlier
	for field, v := range all.Val() {
		if !strings.HasPrefix(field, "from:") || len(v) != headerSize+8 {
			continue
		}
		h, err := parseHeader(v[:headerSize])
		if err != nil || h.mode != f.h.mode {
			continue
		}
		at := time.UnixMilli(int64(binary.BigEndian.Uint64([]byte(v[headerSize:]))))
		out = append(out, earlier{f: f.withHeader(h), at: at})
	}
	if ours {
		f.layouts.v.Store(&out)
	}
	return out, nil
}

// forgetLayouts makes f's next batch under an operation id load the
// earlier layouts again.
func (f *filter) forgetLayouts() { f.layouts.v.Store(nil) }

// usedBefore reports whether the batch of op, under op.opID, was sent to
// one of f's earlier layouts that cut it otherwise: whether the first call
// of the batch to any partition it reached there left its record.
func (f *filter) usedBefore(ctx context.Context, op writeOp, items []string) (bool, error) {
	layouts, err := f.earlierLayouts(ctx)
	if err != nil || len(layouts) == 0 {
		return false, err
	}
	pipe := f.rdb.Pipeline()
	root := f.parts[0].key
	inc := pipe.GetRange(ctx, root, incByte, incByte+incSize-1)
	var found []*redis.SliceCmd
	var tags []string
	for _, e := range layouts {
		g := e.f
		// A record lives at most its keep and two buckets, or the
		// client's retry horizon and one, after its batch started,
		// which was before the switch; one bucket more covers clocks
		// a bucket apart.
		life := max(op.keep+3*recordSpan(op.keep), f.retryKeep+2*recordSpan(op.keep))
		if sameCut(f, g) || op.start.Sub(e.at) > life {
			continue
		}
		tag := digest(items, g.perCall(), len(g.parts))
		pl := g.place(items)
		for p, group := range pl.groups {
			if len(group) == 0 {
				continue
			}
			rec := onceRecord(g.parts[p].key, op.name, 0, op.opID, tag, op.keep, f.retryKeep, op.start)
			own := rec.field[:onceFieldBytes]
			for _, key := range rec.keys {
				found = append(found, pipe.HMGet(ctx, key, own))
				tags = append(tags, tag)
			}
		}
	}
	if len(found) == 0 {
		return false, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	for i, cmd := range found {
		v, _ := cmd.Val()[0].(string)
		if recordOf(v, inc.Val(), tags[i]) {
			return true, nil
		}
	}
	return false, nil
}

// recordOf reports whether v, a record's value, is one the batch of tag
// left in a partition of incarnation inc: its answers, or the mark of a
// call refused as full (see full in filter.lua).
func recordOf(v, inc, tag string) bool {
	if inc == "" || !strings.HasPrefix(v, inc) {
		return false
	}
	v = v[len(inc):]
	return strings.HasPrefix(v, tag) || strings.HasPrefix(v, refusedMark+tag)
}

// refusedMark is filter.lua's REFUSED.
const refusedMark = "\x00refused\x00"

// recordSpan is the length of a record bucket for records kept keep.
func recordSpan(keep time.Duration) time.Duration {
	_, span := recordBucket(keep, time.Time{})
	return time.Duration(span) * time.Millisecond
}
