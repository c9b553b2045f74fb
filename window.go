package rbloom

import (
	"cmp"
	"context"
	"math"
	"sync/atomic"
	"time"
)

// A Window remembers events for a span of time and forgets them bucket by
// bucket, never all at once: the deduplicator of a stream delivered at
// least once. It holds one classic filter per time bucket, a generation,
// for the buckets of the span and the current one, each sized for
// EventsPerBucket. TestOrAdd answers whether an event was seen in any of
// them and, if not, adds it to the current one, atomically.
//
// The generations of a partition live in one Redis string, a ring, where
// each slot is a word with one bit per generation (docs/format.md): an
// event costs k word reads and at most k bit writes however long the
// span. A generation leaving the span is cleared, 32 KiB at a time in the
// calls that find the clearing behind schedule, while the bucket before
// the one that reuses it runs.
//
// The clock is Redis's (TIME, read inside every call): every process
// agrees on the bucket, whatever its own clock. An event is remembered
// for at least Span and at most Span plus one bucket. A Window is safe for
// concurrent use by multiple goroutines.
type Window struct {
	f        *filter // one generation: the partitions' keys and headers
	bucket   time.Duration
	r        ring
	settings []string // per partition, what the settings hash holds in 's'
	// clock, in tests only, replaces Redis's clock (Unix ms). Production
	// handles leave it nil: a process's own clock must not decide which
	// generations the others lose.
	clock func() int64
	// bucketSeen is the last bucket a call was told it is in: the one the
	// next call's offsets are written for (window.lua's ARGV[10]).
	bucketSeen atomic.Int64
	// root is the partition at the key of the window's name, which every
	// number of partitions shares: every call touches its ring, so that a
	// handle with another number is refused there, and a partition lost
	// while the root lives is told from one that expired.
	root int
	// touchedAll is when this handle last touched every partition's ring
	// (Unix ns, by its own clock): it does every half bucket it makes a
	// call in, so that none expires before the root's while the window is
	// used.
	touchedAll atomic.Int64
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

	// Bucket is the time of one generation: whole milliseconds, at least
	// 1ms and at most about 26.5 years (maxBucket).
	Bucket time.Duration

	// Span is how long an event is remembered, at least: a whole number of
	// buckets or not, at least one bucket and at most 10,000 (fewer for
	// buckets over 10 days: the window's keys live for a span and ten
	// buckets, which must fit a time.Duration). A word holds
	// one bit per bucket of the span plus two, read 32 bits per BITFIELD
	// field: spans of up to 30 buckets cost the least.
	Span time.Duration

	// Partitions, KeyPrefix, IDLifetime, UseFunctions, WaitReplicas and
	// WaitTimeout are as in Options. With Partitions 0 the window picks
	// enough partitions to keep each ring under 64 MiB.
	Partitions   int
	KeyPrefix    string
	IDLifetime   time.Duration
	UseFunctions bool
	WaitReplicas int
	WaitTimeout  time.Duration

	// Observer is as in Options: it sees each call of the window's
	// methods, with the Type "Window".
	Observer Observer
}

// NewWindow returns the window called name in the Redis that rdb reaches.
// Like NewCounting, it validates its arguments and does not contact Redis.
// Create makes the window; every other call on a window that does not
// exist fails with ErrNotFound.
// Its keys are those of a filter of the same name followed by ":ring" (the
// generations) and ":window" (its settings).
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
	case o.Bucket < time.Millisecond || o.Bucket%time.Millisecond != 0 || o.Bucket > maxBucket:
		return bad("Bucket = %v, want whole milliseconds from 1ms to %v", o.Bucket, maxBucket)
	case o.Span < o.Bucket || spanBuckets(o.Span, o.Bucket) > maxSpanBuckets(o.Bucket):
		return bad("Span = %v, want 1 to %d buckets of %v", o.Span, maxSpanBuckets(o.Bucket), o.Bucket)
	case math.IsNaN(o.ErrorRate) || o.ErrorRate < 0 || o.ErrorRate >= 1:
		return bad("ErrorRate = %v, want a value in (0, 1)", o.ErrorRate)
	case o.Partitions < 0 || o.Partitions > MaxPartitions:
		return bad("Partitions = %d, want 1 to %d", o.Partitions, MaxPartitions)
	}
	gens := int(spanBuckets(o.Span, o.Bucket))
	// An absent event is tested against up to gens+1 full generations: the
	// window meets p when each meets 1 - (1-p)^(1/(gens+1)).
	p := cmp.Or(o.ErrorRate, DefaultErrorRate)
	perGen := -math.Expm1(math.Log1p(-p) / float64(gens+1))
	need, k := windowSizing(o.EventsPerBucket, perGen)
	need = blockedSlots(o.EventsPerBucket, need, k, perGen)
	width := uint64(gens + 2)
	maxRingSlots := (uint64(maxStringBytes) - uint64(newRing(gens, 0).state)) * 8 / width
	if need > maxRingSlots*MaxPartitions {
		return bad("EventsPerBucket = %d needs %d slots a generation at this ErrorRate and Span, more than %d partitions hold",
			o.EventsPerBucket, need, MaxPartitions)
	}
	parts := o.Partitions
	if parts == 0 {
		parts = int(max(1, (need*width/8+defaultPartitionBytes-1)/defaultPartitionBytes))
	}
	if per := (need + uint64(parts) - 1) / uint64(parts); per > maxRingSlots {
		return bad("Partitions = %d: %d slots a partition of %d-bit words do not fit in a Redis string; want at least %d",
			parts, per, width, (need+maxRingSlots-1)/maxRingSlots)
	}
	fo := Options{Capacity: o.EventsPerBucket, ErrorRate: perGen, Slots: need, Hashes: k, Partitions: parts,
		KeyPrefix: o.KeyPrefix, IDLifetime: o.IDLifetime, UseFunctions: o.UseFunctions,
		WaitReplicas: o.WaitReplicas, WaitTimeout: o.WaitTimeout, Observer: o.Observer}
	h, err := fo.resolve(ModeClassic)
	if err != nil {
		return nil, err
	}
	h.errorRate = p // the header records the window's target
	f, err := fo.handle(rdb, name, h)
	if err != nil {
		return nil, err
	}
	f.blocked = true
	w := &Window{f: f, bucket: o.Bucket, r: newRing(gens, f.h.m), root: shareOf(keySlot(name), len(f.parts))}
	for _, part := range f.parts {
		w.settings = append(w.settings, windowSettings(part.head, o.Bucket.Milliseconds(), o.Span.Milliseconds()))
	}
	return w, nil
}

// maxGens is the most past generations window.lua reads (its ARGV[4]).
const maxGens = 10_000

// maxBucket is the longest bucket: Drop's mark lives W + 8 buckets and two
// minutes (dropMark), at least 11 buckets, and must fit a time.Duration.
// It is also under window.lua's 2^40 ms.
const maxBucket = (math.MaxInt64 - 2*time.Minute) / 11 / time.Millisecond * time.Millisecond

// spanBuckets is the number of buckets a span covers, rounded up, without
// overflowing as (span + bucket - 1) / bucket would.
func spanBuckets(span, bucket time.Duration) int64 {
	n := int64(span / bucket)
	if span%bucket != 0 {
		n++
	}
	return n
}

// maxSpanBuckets is the most buckets of this length a span can cover:
// maxGens, and fewer when W + 8 of them (dropMark) would not fit a
// time.Duration.
func maxSpanBuckets(bucket time.Duration) int64 {
	return min(maxGens, int64((math.MaxInt64-2*time.Minute)/bucket)-10)
}

// windowSlack is the memory a window gives a generation beyond the optimum,
// to spend on fewer hashes: an event costs k reads and writes of slots
// scattered over the ring, which at the seed's size (k = 35) are most of
// its cost. 10% more slots take k to about 0.6 of the optimum.
const windowSlack = 1.10

// windowSizing returns m and k of a generation of n events at p: the
// fewest hashes whose slots are at most windowSlack times the optimum.
// With k hashes, n events in m slots give p when
// m = -k n / ln(1 - p^(1/k)).
func windowSizing(n uint64, p float64) (uint64, int) {
	best := OptimalSlots(n, p)
	for k := 1; ; k++ {
		m := uint64(math.Ceil(-float64(k) * float64(n) / math.Log1p(-math.Pow(p, 1/float64(k)))))
		if float64(m) <= windowSlack*float64(best) || k >= MaxHashes {
			return m, k
		}
	}
}

// The keys of partition p: its ring, its settings, and the scratch keys of
// a cleaning step.
func (w *Window) ringKey(p int) string     { return w.f.parts[p].key + ":ring" }
func (w *Window) settingsKey(p int) string { return w.f.parts[p].key + ":window" }

// windowKeys are the keys of a window partition whose filter key is part:
// its ring, its settings, and the ring's scratch keys.
func windowKeys(part string) []string {
	ring := part + ":ring"
	return []string{ring, part + ":window", ring + ":mask", ring + ":scratch"}
}

// TestOrAdd reports whether event was seen within the window and, if not,
// adds it to the current generation, atomically.
func (w *Window) TestOrAdd(ctx context.Context, event string) (bool, error) {
	return first(w.TestOrAddMany(ctx, []string{event}))
}

// TestOrAddMany is TestOrAdd for each event in order, each seeing the equal
// ones before it: of two equal events in one batch the second answers true.
func (w *Window) TestOrAddMany(ctx context.Context, events []string) ([]bool, error) {
	return observe(ctx, w.f.obs, w.callOf("TestOrAddMany", len(events)), func(ctx context.Context) ([]bool, error) {
		return w.testOrAdd(ctx, events, "")
	})
}

// TestOrAddManyOnce is TestOrAddMany applied at most once per opID
// within IDLifetime, as Counting.AddManyOnce: a consumer that replays a
// batch gets its first decisions, and adds nothing.
func (w *Window) TestOrAddManyOnce(ctx context.Context, events []string, opID string) ([]bool, error) {
	return observe(ctx, w.f.obs, w.callOf("TestOrAddManyOnce", len(events)), func(ctx context.Context) ([]bool, error) {
		if opID == "" || len(opID) > 256 {
			return nil, callError("window", failf(ErrInvalidOptions, "operation id %q: want 1 to 256 bytes", opID))
		}
		return w.testOrAdd(ctx, events, opID)
	})
}

// maxWindowWords bounds the slot words one window call takes: 15 events at
// the seed's k = 21. A call costs about a microsecond a slot word plus tens
// of its own (settings, state, record), so fewer words cost more an event,
// but a call of many words holds the server longer: at this bound calls
// stay under a millisecond at the seed's size for about the same events a
// second as larger calls. window.lua refuses more than 1,500 words. A
// partition's events are cut evenly (evenSpans): the seed's batches of
// 1,000 events in 16 partitions give about 62 a partition, 5 calls of 12
// or 13 events rather than 4 of 15 and one of 2.
const maxWindowWords = 315

// place hashes events, with each slot's offset that of its word.
func (w *Window) place(events []string) placement {
	pl := w.f.place(events)
	for j, o := range pl.offsets {
		pl.offsets[j] = w.r.word(o - headerBits) // a classic slot's offset is its bit
	}
	return pl
}

// testOrAdd answers the copies of an event after the first itself, true
// (the first is held, or added by this call), and sends Redis the others
// only: the script calls of a batch can see different buckets, or run out
// of order (one answered windowWait goes again after the rest), so they could not
// tell a copy from a new event.
func (w *Window) testOrAdd(ctx context.Context, events []string, opID string) ([]bool, error) {
	distinct, first := withoutCopies(events)
	seen, err := w.testOrAddDistinct(ctx, distinct, opID)
	if err != nil || first == nil {
		return seen, err
	}
	out := make([]bool, len(events))
	for i, j := range first {
		out[i] = j < 0 || seen[j]
	}
	return out, nil
}

// withoutCopies returns events without the copies of an event after its
// first, and for each event the index of its first copy there, or -1 for
// a later copy; nil when there are no copies.
func withoutCopies(events []string) ([]string, []int) {
	index := make(map[string]bool, len(events))
	first := make([]int, len(events))
	var distinct []string
	for i, e := range events {
		if index[e] {
			first[i] = -1
			continue
		}
		index[e] = true
		first[i] = len(distinct)
		distinct = append(distinct, e)
	}
	if len(distinct) == len(events) {
		return events, nil
	}
	return distinct, first
}
