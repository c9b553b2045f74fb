package rbloom

import (
	"context"
	"errors"
	"slices"
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

// Info reads the window's state, in one pipeline of plain reads per partition (ringRead).
func (w *Window) Info(ctx context.Context) (*WindowInfo, error) {
	f := w.f
	in := &WindowInfo{Name: f.name, Bucket: w.bucket, Slots: f.h.m * uint64(len(f.parts)), Hashes: f.h.k, ErrorRate: f.h.errorRate}
	reads := make([]ringRead, len(f.parts))
	all := make([]txUnit, len(f.parts))
	for p := range all {
		all[p] = txUnit{p: p, queue: func(pipe redis.Pipeliner) { reads[p] = w.readRing(ctx, pipe, p, nil) }}
	}
	err := w.readRings(ctx, all, 0, func() error {
		for _, rr := range reads {
			if err := rr.settled(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, callError("window info", err)
	}
	states := make([]ringState, len(f.parts))
	times := make([]int64, len(f.parts))
	var missing []int
	for p := range f.parts {
		st, nowMS, ok, err := w.state(p, reads[p])
		if err != nil {
			return nil, callError("window info", err)
		}
		if !ok {
			missing = append(missing, p)
			continue
		}
		states[p], times[p] = st, nowMS
	}
	// As TestMany: a ring lost is an error, not a generation's events gone.
	rootLives := !slices.Contains(missing, w.root)
	err = w.lost(ctx, rootLives, missing)
	if err == nil && !rootLives && !reads[w.root].hasSettings() {
		if err = w.rootLost(ctx); errors.Is(err, errDropped) {
			err = nil
		}
	}
	if err != nil {
		return nil, callError("window info", err)
	}
	gens := map[int64]*GenerationInfo{}
	var current int64
	for p := range f.parts {
		if slices.Contains(missing, p) {
			continue
		}
		st, nowMS := states[p], times[p]
		in.Bytes += reads[p].size.Val()
		c, err := st.current(w.ringKey(p), nowMS)
		if err != nil {
			return nil, callError("window info", err)
		}
		current = max(current, c)
		cleaning := 0
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
				g = &GenerationInfo{Start: time.UnixMilli(h * w.bucket.Milliseconds()), TTL: end.Sub(time.UnixMilli(nowMS))}
				gens[h] = g
			}
			g.Items += st.items[q]
			g.Bytes += w.r.size / int64(w.r.w)
		}
		in.Cleaning = max(in.Cleaning, cleaning)
	}
	for b := current - int64(w.r.gens); b <= current; b++ {
		if g := gens[b]; g != nil {
			in.Generations = append(in.Generations, *g)
		}
	}
	return in, nil
}
