package rbloom

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Window remembers events for a span of time and forgets them bucket by
// bucket, never all at once: the deduplicator of a stream delivered at
// least once. It is made of generations, one classic filter per time
// bucket (10 minutes, say), each with the window's partitions and a TTL.
// TestOrAdd answers whether an event was seen in any live generation and,
// if not, adds it to the current one, atomically: the generations of a
// partition share its cluster hash slot, so one script reads them all.
//
// The clock is the caller's (WindowOptions.Now, default time.Now). Every
// call also reads the next bucket's generation, so that processes whose
// clocks differ by up to one bucket see each other's events, and a bucket
// boundary opens no gap: an event is remembered for at least Span and at
// most Span plus one bucket. A Window is safe for concurrent use by
// multiple goroutines.
type Window struct {
	f      *filter // one generation: the partitions' keys and headers
	bucket time.Duration
	gens   int // past generations read besides the current one: ceil(Span/Bucket)
	// ttl is a generation's: it is read until gens+1 buckets after its
	// own, and a clock a bucket ahead may create it a bucket early.
	ttl time.Duration
	now func() time.Time
	// settings are what window.lua compares with the settings stored in
	// each partition's slot: the header of partition p's generations, then
	// the bucket and span, for partition p at settings[p].
	settings []string
}

// WindowOptions size a Window. EventsPerBucket, Bucket and Span are
// required.
type WindowOptions struct {
	// EventsPerBucket is the number of events of one bucket: each
	// generation is sized for it.
	EventsPerBucket uint64

	// ErrorRate is the false-positive rate wanted over the whole window,
	// the union of its generations. Default DefaultErrorRate.
	ErrorRate float64

	// Bucket is the time of one generation: at least 1ms.
	Bucket time.Duration

	// Span is how long an event is remembered, at least: a whole number of
	// buckets or not, at least one bucket and at most 10,000.
	Span time.Duration

	// Partitions, KeyPrefix, IDLifetime and UseFunctions are as in Options.
	Partitions   int
	KeyPrefix    string
	IDLifetime   time.Duration
	UseFunctions bool

	// Now is the clock that picks the current bucket. Default time.Now.
	Now func() time.Time
}

// NewWindow returns the window called name in the Redis that rdb reaches.
// Like NewCounting, it validates its arguments and does not contact Redis.
// Its keys are those of a filter of the same name followed by ":g:" and
// the bucket's number (Unix time over Bucket).
func NewWindow(rdb Client, name string, o WindowOptions) (*Window, error) {
	w, err := newWindow(rdb, name, o)
	if err != nil {
		return nil, callError("new window", err)
	}
	return w, nil
}

func newWindow(rdb Client, name string, o WindowOptions) (*Window, error) {
	bad := func(format string, args ...any) (*Window, error) {
		return nil, failf(ErrInvalidOptions, format, args...)
	}
	switch {
	case o.EventsPerBucket == 0:
		return bad("EventsPerBucket is 0")
	case o.Bucket < time.Millisecond || o.Bucket%time.Millisecond != 0:
		return bad("Bucket = %v, want whole milliseconds, at least 1ms", o.Bucket)
	case o.Span < o.Bucket || o.Span/o.Bucket > 10_000:
		return bad("Span = %v, want 1 to 10,000 buckets of %v", o.Span, o.Bucket)
	case math.IsNaN(o.ErrorRate) || o.ErrorRate < 0 || o.ErrorRate >= 1:
		return bad("ErrorRate = %v, want a value in (0, 1)", o.ErrorRate)
	}
	gens := int((o.Span + o.Bucket - 1) / o.Bucket)
	// An absent event is tested against up to gens+1 full generations: the
	// window meets p when each meets 1 - (1-p)^(1/(gens+1)).
	p := cmp.Or(o.ErrorRate, DefaultErrorRate)
	perGen := -math.Expm1(math.Log1p(-p) / float64(gens+1))
	fo := Options{Capacity: o.EventsPerBucket, ErrorRate: perGen, Partitions: o.Partitions,
		KeyPrefix: o.KeyPrefix, IDLifetime: o.IDLifetime, UseFunctions: o.UseFunctions}
	if need := OptimalSlots(o.EventsPerBucket, perGen); need > ModeClassic.maxSlots()*MaxPartitions {
		return bad("EventsPerBucket = %d needs %d bits a generation at this ErrorRate and Span, more than %d partitions hold",
			o.EventsPerBucket, need, MaxPartitions)
	}
	h, err := fo.resolve(ModeClassic)
	if err != nil {
		return nil, err
	}
	h.errorRate = p // the header records the window's target
	f, err := fo.handle(rdb, name, h)
	if err != nil {
		return nil, err
	}
	w := &Window{f: f, bucket: o.Bucket, gens: gens, ttl: time.Duration(gens+3) * o.Bucket, now: o.Now}
	if w.now == nil {
		w.now = time.Now
	}
	for _, part := range f.parts {
		w.settings = append(w.settings, fmt.Sprintf("%sbucket=%dms;span=%dms", part.head, o.Bucket.Milliseconds(), o.Span.Milliseconds()))
	}
	return w, nil
}

// settingsKey is the key of the window's settings in partition p's slot:
// what the window is (window.lua), and which generations were created.
func (w *Window) settingsKey(p int) string {
	return w.f.parts[p].key + ":window"
}

// TestOrAdd reports whether event was seen within the window and, if not,
// adds it to the current generation, atomically.
func (w *Window) TestOrAdd(ctx context.Context, event string) (bool, error) {
	return first(w.testOrAdd(ctx, []string{event}, ""))
}

// TestOrAddMany is TestOrAdd for each event in order, each seeing the ones
// before it: of two equal events in one batch the second answers true.
func (w *Window) TestOrAddMany(ctx context.Context, events []string) ([]bool, error) {
	return w.testOrAdd(ctx, events, "")
}

// TestOrAddManyOnce is TestOrAddMany applied at most once per opID
// within IDLifetime, as Counting.AddManyOnce: a consumer that replays a
// batch gets its first decisions, and adds nothing.
func (w *Window) TestOrAddManyOnce(ctx context.Context, events []string, opID string) ([]bool, error) {
	if opID == "" || len(opID) > 256 {
		return nil, callError("window", failf(ErrInvalidOptions, "operation id %q: want 1 to 256 bytes", opID))
	}
	return w.testOrAdd(ctx, events, opID)
}

// TestMany reports for each event whether it was seen within the window,
// and adds nothing. It runs no script: one pipeline of BITFIELD_RO per round
// trip, one per live generation of each partition it touches.
func (w *Window) TestMany(ctx context.Context, events []string) ([]bool, error) {
	f := w.f
	out := make([]bool, len(events))
	b := w.current()
	perCall := maxCallSlots / f.h.k
	for lo, hi := range spans(len(events), maxRoundTripSlots/f.h.k) {
		chunk := events[lo:hi]
		pl := f.place(chunk)
		type read struct {
			at   []int
			gens []*redis.IntSliceCmd // one per live generation
		}
		type check struct {
			p        int
			settings *redis.SliceCmd    // 's', then whether each generation was created
			heads    []*redis.StringCmd // each generation's header
			sizes    []*redis.IntCmd
		}
		var touched []int
		for p, group := range pl.groups {
			if len(group) > 0 {
				touched = append(touched, p)
			}
		}
		checks := make([]check, len(touched))
		perPart := make([][]read, len(touched))
		// One state of each partition's generations, as read.go's reads.
		err := f.transact(ctx, touched, func(pipe redis.Pipeliner, i int) {
			p := touched[i]
			group := pl.groups[p]
			// Each generation read is checked as window.lua checks it: a
			// missing one that was created is damage, not "not seen".
			c := check{p: p}
			fields := []string{"s"}
			for g := b - int64(w.gens); g <= b+1; g++ {
				fields = append(fields, strconv.FormatInt(g, 10))
				key := w.generation(p, g)
				c.heads = append(c.heads, pipe.GetRange(ctx, key, 0, headerSize-1))
				c.sizes = append(c.sizes, pipe.StrLen(ctx, key))
			}
			c.settings = pipe.HMGet(ctx, w.settingsKey(p), fields...)
			checks[i] = c
			for a, z := range spans(len(group), perCall) {
				r := read{at: group[a:z]}
				for g := b - int64(w.gens); g <= b+1; g++ {
					args := f.getArgs(append(make([]any, 0, 2+3*len(r.at)*f.h.k), "BITFIELD_RO", w.generation(p, g)), pl, r.at)
					cmd := redis.NewIntSliceCmd(ctx, args...)
					_ = pipe.Process(ctx, cmd)
					r.gens = append(r.gens, cmd)
				}
				perPart[i] = append(perPart[i], r)
			}
		})
		if err != nil {
			return nil, callError("window test", err)
		}
		var reads []read
		for _, rs := range perPart {
			reads = append(reads, rs...)
		}
		for _, c := range checks {
			vals := c.settings.Val()
			if s, ok := vals[0].(string); ok && s != w.settings[c.p] {
				return nil, callError("window test", failf(ErrParamsMismatch, "%s holds other settings than this handle's", w.settingsKey(c.p)))
			}
			for g, head := range c.heads {
				key := w.generation(c.p, b-int64(w.gens)+int64(g))
				switch {
				case head.Val() != "":
					if err := f.check(c.p, head.Val(), c.sizes[g].Val()); err != nil {
						return nil, callError("window test", fmt.Errorf("%s: %w", key, err))
					}
				case vals[g+1] != nil:
					return nil, callError("window test", failf(ErrDamaged, "%s was created and is gone: its events cannot be told from new ones", key))
				}
			}
		}
		for _, r := range reads {
			for _, cmd := range r.gens {
				bits := cmd.Val() // a generation that does not exist reads as zeros
				for j, pos := range r.at {
					if !slices.Contains(bits[j*f.h.k:(j+1)*f.h.k], 0) {
						out[lo+pos] = true
					}
				}
			}
		}
	}
	return out, nil
}

// generation is the key of partition p's generation of bucket b.
func (w *Window) generation(p int, b int64) string {
	return w.f.parts[p].key + ":g:" + strconv.FormatInt(b, 10)
}

// current is the number of the bucket the clock is in.
func (w *Window) current() int64 {
	return w.now().UnixMilli() / w.bucket.Milliseconds()
}

func (w *Window) testOrAdd(ctx context.Context, events []string, opID string) ([]bool, error) {
	f := w.f
	out := make([]bool, len(events))
	b := w.current()
	keep := f.retryKeep
	if opID != "" {
		keep = f.idLifetime
	}
	ttl := strconv.FormatInt(w.ttl.Milliseconds(), 10)
	// A call reads about two bits of a new event in each of gens+2
	// generations, and at worst all k (an event seen in the last one it
	// asks): as many events as an add, unless that worst case would pass
	// 16 calls' worth of slots.
	perCall := max(1, min(maxCallSlots/f.h.k, 16*maxCallSlots/(f.h.k*(w.gens+2))))
	seq := make([]int, len(f.parts))
	for lo, hi := range spans(len(events), maxRoundTripSlots/f.h.k) {
		chunk := events[lo:hi]
		pl := f.place(chunk)
		calls, answers := pack(pl, perCall, seq, func(p, seq int, at []int) scriptCall {
			// The current generation, the next, the past ones, then the
			// record's hashes.
			keys := []string{w.generation(p, b), w.generation(p, b+1)}
			for g := b - 1; g >= b-int64(w.gens); g-- {
				keys = append(keys, w.generation(p, g))
			}
			rec := f.record("window", opID, p, seq, chunk, at, keep)
			keys = append(keys, w.settingsKey(p))
			keys = append(keys, rec.keys...)
			args := make([]any, 0, 7+len(at)*f.h.k)
			args = append(args, f.parts[p].head, ttl, strconv.FormatInt(rec.ttl, 10), rec.field, rec.tag, w.settings[p], "0")
			return scriptCall{keys: keys, args: f.offsetArgs(args, pl, at)}
		})
		// A call answers '?' when the current generation is missing: the
		// generations of a bucket are created in every partition together,
		// so that one lost later is told from one never written, and the
		// calls go again.
		for try := 0; len(calls) > 0; try++ {
			replies, err := runScripts(ctx, f.rdb, windowScript, f.fcall, calls, f.repl)
			if err != nil {
				return nil, callError("window", err)
			}
			var again []scriptCall
			var againAt [][]int
			for c, r := range replies {
				if r == "?" {
					again, againAt = append(again, calls[c]), append(againAt, answers[c])
					continue
				}
				if err := answer(r, answers[c], out[lo:]); err != nil {
					return nil, callError("window", err)
				}
			}
			if len(again) > 0 {
				if try == 2 {
					return nil, callError("window", failf(ErrDamaged, "%s: the generation of bucket %d keeps vanishing", f.name, b))
				}
				if err := w.createGeneration(ctx, b, ttl); err != nil {
					return nil, callError("window", err)
				}
			}
			calls, answers = again, againAt
		}
	}
	return out, nil
}

// createGeneration creates the generation of bucket b in every partition
// that does not have it yet: window.lua calls with no event that may
// create.
func (w *Window) createGeneration(ctx context.Context, b int64, ttl string) error {
	f := w.f
	calls := make([]scriptCall, len(f.parts))
	for p := range f.parts {
		keys := []string{w.generation(p, b), w.generation(p, b+1)}
		for g := b - 1; g >= b-int64(w.gens); g-- {
			keys = append(keys, w.generation(p, g))
		}
		rec := f.record("window", "", p, 0, nil, nil, f.retryKeep)
		keys = append(keys, w.settingsKey(p))
		keys = append(keys, rec.keys...)
		calls[p] = scriptCall{keys: keys, args: []any{f.parts[p].head, ttl, strconv.FormatInt(rec.ttl, 10), rec.field, rec.tag, w.settings[p], "1"}}
	}
	_, err := runScripts(ctx, f.rdb, windowScript, f.fcall, calls, f.repl)
	return err
}

// WindowInfo describes a window's live generations as stored in Redis.
type WindowInfo struct {
	Name   string
	Bucket time.Duration
	// Slots and Hashes are m and k of one generation, over its partitions.
	Slots  uint64
	Hashes int
	// ErrorRate is the false-positive rate the window was sized for.
	ErrorRate float64
	// Generations are the live generations that exist, oldest first.
	Generations []GenerationInfo
	// Bytes is the length of all of them.
	Bytes int64
}

// GenerationInfo describes one generation of a window.
type GenerationInfo struct {
	Start time.Time     // the start of its bucket
	Items int64         // the events added to it
	Bytes int64         // the length of its partitions
	TTL   time.Duration // the shortest time left before a partition expires
}

// Info reads the window's live generations, in one round trip.
func (w *Window) Info(ctx context.Context) (*WindowInfo, error) {
	f := w.f
	b := w.current()
	in := &WindowInfo{Name: f.name, Bucket: w.bucket, Slots: f.h.m * uint64(len(f.parts)), Hashes: f.h.k, ErrorRate: f.h.errorRate}
	pipe := f.rdb.Pipeline()
	type gen struct {
		b     int64
		heads []func() (string, int64, time.Duration, error)
	}
	var gens []gen
	for g := b - int64(w.gens); g <= b+1; g++ {
		gn := gen{b: g}
		for p := range f.parts {
			key := w.generation(p, g)
			head, size, ttl := pipe.GetRange(ctx, key, 0, headerSize-1), pipe.StrLen(ctx, key), pipe.PTTL(ctx, key)
			gn.heads = append(gn.heads, func() (string, int64, time.Duration, error) {
				for _, err := range []error{head.Err(), size.Err(), ttl.Err()} {
					if err != nil {
						return "", 0, 0, err
					}
				}
				return head.Val(), size.Val(), ttl.Val(), nil
			})
		}
		gens = append(gens, gn)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, callError("window info", err)
	}
	for _, gn := range gens {
		gi := GenerationInfo{Start: time.UnixMilli(gn.b * w.bucket.Milliseconds())}
		exists := false
		for p, read := range gn.heads {
			head, size, ttl, err := read()
			if err != nil {
				return nil, callError("window info", err)
			}
			if head == "" {
				continue
			}
			if err := f.check(p, head, size); err != nil {
				return nil, callError("window info", err)
			}
			h, _ := parseHeader(head)
			exists = true
			gi.Items += h.items
			gi.Bytes += size
			if ttl > 0 && (gi.TTL == 0 || ttl < gi.TTL) {
				gi.TTL = ttl
			}
		}
		if exists {
			in.Generations = append(in.Generations, gi)
			in.Bytes += gi.Bytes
		}
	}
	return in, nil
}
