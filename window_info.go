package rbloom

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// WindowInfo describes a window's live generations as stored in Redis.
type WindowInfo struct {
	Name   string
	Bucket time.Duration
	// Slots and Hashes are m and k of one generation, over its partitions.
	Slots  uint64
	Hashes int
	// ErrorRate is the false-positive rate the window was sized for.
	ErrorRate float64
	// Generations are the live generations, oldest first: those of the
	// buckets of the span that exist, and the current one.
	Generations []GenerationInfo
	// Bytes is the length of the rings, which hold every generation.
	Bytes int64
	// Cleaning is the number of ring positions whose bits are being
	// cleared or wait to be: the generations that left the span.
	Cleaning int
}

// GenerationInfo describes one generation of a window.
type GenerationInfo struct {
	Start time.Time     // the start of its bucket
	Items int64         // the events added to it
	Bytes int64         // its share of the rings: their length over W, the bits of a word
	TTL   time.Duration // the time left before it leaves the span
}

// Info reads the window's state: each partition's ring with plain reads
// (ringRead), checked as every call checks them: a ring lost is an
// error, not a generation's events gone.
func (w *Window) Info(ctx context.Context) (*WindowInfo, error) {
	return observe(ctx, w.f.obs, w.callOf("Info", 0), w.info)
}

// info is Info, unobserved.
func (w *Window) info(ctx context.Context) (*WindowInfo, error) {
	f := w.f
	in := &WindowInfo{Name: f.name, Bucket: w.bucket, Slots: f.h.m * uint64(len(f.parts)), Hashes: f.h.k, ErrorRate: f.h.errorRate}
	every := func(int) bool { return true }
	units, checks, err := w.readUnits(ctx, make([][]int, len(f.parts)), every, 1, func(redis.Pipeliner, *ringUnit) {})
	if err != nil {
		return nil, callError("window info", err)
	}
	gens := map[int64]*GenerationInfo{}
	var current int64
	for i, u := range units {
		if !checks[i].ok {
			continue
		}
		in.Bytes += u.head.size.Val()
		current = max(current, checks[i].bucket)
		in.Cleaning = max(in.Cleaning, w.generations(checks[i], gens))
	}
	for b := current - int64(w.r.gens); b <= current; b++ {
		if g := gens[b]; g != nil {
			in.Generations = append(in.Generations, *g)
		}
	}
	return in, nil
}

// generations adds the live generations of one partition's ring to gens,
// by bucket, and returns the number of its positions being cleaned.
func (w *Window) generations(rc ringCheck, gens map[int64]*GenerationInfo) (cleaning int) {
	st, c := rc.st, rc.bucket
	for q, h := range st.held {
		if h < 0 {
			cleaning++
		}
		if !st.live(q, c, w.r.gens) {
			continue
		}
		g := gens[h]
		if g == nil {
			end := time.UnixMilli((h + int64(w.r.gens) + 1) * w.bucket.Milliseconds())
			g = &GenerationInfo{Start: time.UnixMilli(h * w.bucket.Milliseconds()), TTL: end.Sub(time.UnixMilli(rc.nowMS))}
			gens[h] = g
		}
		g.Items += st.items[q]
		g.Bytes += w.r.size / int64(w.r.w)
	}
	return cleaning
}
