package rbloom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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
}

// NewWindow returns the window called name in the Redis that rdb reaches.
// Like NewCounting, it validates its arguments and does not contact Redis.
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
		WaitReplicas: o.WaitReplicas, WaitTimeout: o.WaitTimeout}
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

// clockArg is window.lua's ARGV[8].
func (w *Window) clockArg() string {
	if w.clock == nil {
		return ""
	}
	return strconv.FormatInt(w.clock(), 10)
}

// expected is the bucket the next call is expected to be in: the last one
// a call was told, or the clock's.
func (w *Window) expected() int64 {
	if b := w.bucketSeen.Load(); b != 0 {
		return b
	}
	now := time.Now().UnixMilli()
	if w.clock != nil {
		now = w.clock()
	}
	return now / w.bucket.Milliseconds()
}

// testOrAdd answers the copies of an event after the first itself, true
// (the first is held, or added by this call), and sends Redis the others
// only: the script calls of a batch can see different buckets, or run out
// of order (one answered '~' goes again after the rest), so they could not
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

func (w *Window) testOrAddDistinct(ctx context.Context, events []string, opID string) ([]bool, error) {
	f := w.f
	out := make([]bool, len(events))
	keep := f.retryKeep
	if opID != "" {
		keep = f.idLifetime
	}
	perCall := max(1, maxWindowWords/(f.h.k*len(w.r.fields())))
	batch, start := "", time.Time{}
	if opID != "" {
		// Every call's record filed by the batch's start, as write.go's.
		batch, start = digest(events, perCall), f.now()
	}
	seq := make([]int, len(f.parts))
	created := false
	touched := int64(0) // when this call touched every partition, if it did (Unix ns)
	type part struct {
		p   int
		rec record
		at  []int
	}
	for lo, hi := range spans(len(events), maxRoundTripSlots/f.h.k) {
		chunk := events[lo:hi]
		pl := w.place(chunk)
		var parts []part
		now := time.Now()
		all := now.Sub(time.Unix(0, w.touchedAll.Load())) > w.bucket/2
		for p, group := range pl.groups {
			if len(group) == 0 && (p == w.root || all) && lo == 0 {
				// No event here: a call with none touches the ring (and
				// checks the settings), as said on Window.root.
				parts = append(parts, part{p: p, rec: f.record("window", "", p, 0, "", f.retryKeep, time.Time{})})
				continue
			}
			for a, z := range evenSpans(len(group), perCall) {
				parts = append(parts, part{p: p, rec: f.record("window", opID, p, seq[p], batch, keep, start), at: group[a:z]})
				seq[p]++
			}
		}
		if all && lo == 0 {
			touched = now.UnixNano()
		}
		// A call answers '?' when the ring is missing: the rings of every
		// partition are created together, so that one lost later is told
		// from one never written; '~' while its bucket's generation is
		// still being cleared; and '^' in another bucket than the reads
		// that told it which events are held. All go again: after a '^'
		// without those reads, the calls reading the events themselves
		// ('d'), for a pass that takes longer than a bucket would find a
		// later one each time, until its events left the span.
		readFirst := true
		for len(parts) > 0 {
			var found []byte
			var buckets []int64
			if readFirst {
				want := make([]bool, len(chunk))
				for _, c := range parts {
					for _, e := range c.at {
						want[e] = true
					}
				}
				var err error
				if found, buckets, err = w.preRead(ctx, pl, want); err != nil {
					return nil, callError("window", err)
				}
			}
			round := strconv.FormatUint(rand.Uint64(), 36)
			calls := make([]scriptCall, len(parts))
			for i, c := range parts {
				// The bucket of the call's reads: the first, should a
				// bucket have turned between them (the call then reads).
				flags := make([]byte, len(c.at))
				expect := int64(math.MaxInt64)
				for x, e := range c.at {
					if readFirst {
						flags[x], expect = found[e], min(expect, buckets[e])
					} else {
						flags[x] = 'd'
					}
				}
				if !readFirst || len(c.at) == 0 {
					expect = w.expected()
				}
				args := w.args(f.parts[c.p].head, c.p, c.rec, "0", expect, round, string(flags))
				for _, e := range c.at {
					if readFirst && found[e] == 'h' {
						continue // answered seen: its words are not needed
					}
					for _, o := range pl.offsets[e*f.h.k : (e+1)*f.h.k] {
						args = append(args, w.r.bit(o, expect))
					}
				}
				calls[i] = w.call(c.p, c.rec, args)
			}
			replies, err := runScripts(ctx, f.rdb, windowScript, f.fcall, calls, f.repl)
			if err != nil {
				return nil, callError("window", err)
			}
			var again []part
			missing := false
			for i, r := range replies {
				if rest, ok := strings.CutPrefix(r, "!"); ok {
					// In another bucket than expected: the next calls expect it.
					b, answers, ok := strings.Cut(rest, ":")
					bucket, err := strconv.ParseInt(b, 10, 64)
					if !ok || err != nil {
						return nil, callError("window", fmt.Errorf("script answered %q", r))
					}
					w.bucketSeen.Store(bucket)
					r = answers
				}
				if b, ok := strings.CutPrefix(r, "^"); ok {
					bucket, err := strconv.ParseInt(b, 10, 64)
					if err != nil {
						return nil, callError("window", fmt.Errorf("script answered %q", r))
					}
					w.bucketSeen.Store(bucket)
					again, readFirst = append(again, parts[i]), false
					continue
				}
				switch {
				case r == "?" || r == "~":
					missing = missing || r == "?"
				default:
					if err := answer(r, parts[i].at, out[lo:]); err != nil {
						return nil, callError("window", err)
					}
					continue
				}
				again = append(again, parts[i])
			}
			if missing {
				if created {
					return nil, callError("window", failf(ErrDamaged, "%s: a ring keeps vanishing", f.name))
				}
				if err := w.create(ctx); err != nil {
					return nil, callError("window", err)
				}
				created = true
			}
			if err := ctx.Err(); err != nil && len(again) > 0 {
				return nil, callError("window", err)
			}
			parts = again
		}
	}
	if touched != 0 {
		w.touchedAll.Store(touched)
	}
	return out, nil
}

// args are window.lua's ARGV up to the offsets, head its header, for a
// call expected in bucket expect, sent in round, of events found so.
func (w *Window) args(head string, p int, rec record, create string, expect int64, round, found string) []any {
	root := "p"
	if p == w.root {
		root = "r"
	}
	return append(make([]any, 0, 13+maxWindowWords), head, w.settings[p],
		strconv.FormatInt(w.bucket.Milliseconds(), 10), strconv.Itoa(w.r.gens),
		strconv.FormatInt(rec.ttl, 10), rec.field, rec.tag, w.clockArg(), create, strconv.FormatInt(expect, 10), root, round, found)
}

// call is the script call of partition p with args.
func (w *Window) call(p int, rec record, args []any) scriptCall {
	return scriptCall{keys: append(windowKeys(w.f.parts[p].key), rec.keys...), args: args}
}

// create creates the ring of every partition that does not have it yet,
// the root's last: while the root's ring lives, every other partition's
// does (its TTL is longer, and every call touches the root), so one found
// missing then was lost, and create fails with ErrDamaged rather than
// make it again empty. The root's settings come first, before any other
// ring, so that a root whose ring and settings are both missing beside
// live rings was lost, not being made (rootLost).
func (w *Window) create(ctx context.Context) error {
	f := w.f
	pipe := f.rdb.Pipeline()
	rings := make([]*redis.IntCmd, len(f.parts))
	for p := range f.parts {
		rings[p] = pipe.Exists(ctx, w.ringKey(p))
	}
	rootSettings := pipe.HGet(ctx, w.settingsKey(w.root), "s")
	if err := execAll(ctx, pipe); err != nil {
		return err
	}
	var missing []int
	for p, e := range rings {
		if e.Val() == 0 && p != w.root {
			missing = append(missing, p)
		}
	}
	rootLives := rings[w.root].Val() > 0
	if err := w.lost(ctx, rootLives, missing); err != nil {
		return err
	}
	if !rootLives && rootSettings.Err() == redis.Nil {
		// Rings left by calls during a Drop become the new window's: to
		// delete them would race with another process making it, whose
		// rings they may be by then.
		if err := w.rootLost(ctx); err != nil && !errors.Is(err, errDropped) {
			return err
		}
	}
	// One incarnation for the rings of every partition, as a filter's
	// (each keeps the one its settings remember, if they do).
	inc := randomIncarnation()
	call := func(p int, create string) scriptCall {
		rec := f.record("window", "", p, 0, "", f.retryKeep, time.Time{})
		return w.call(p, rec, w.args(withIncarnation(f.parts[p].head, inc), p, rec, create, w.expected(), "create", ""))
	}
	if !rootLives {
		if _, err := runScripts(ctx, f.rdb, windowScript, f.fcall, []scriptCall{call(w.root, "s")}, f.repl); err != nil {
			return err
		}
	}
	var calls []scriptCall
	for p := range f.parts {
		if p != w.root {
			calls = append(calls, call(p, "1"))
		}
	}
	if _, err := runScripts(ctx, f.rdb, windowScript, f.fcall, calls, f.repl); err != nil {
		return err
	}
	_, err := runScripts(ctx, f.rdb, windowScript, f.fcall, []scriptCall{call(w.root, "1")}, f.repl)
	return err
}

// ringRead is one partition's ring as read by plain commands, not a
// transaction: the ring and its settings are two keys, and while their
// slot migrates a transaction over both is refused (TRYAGAIN) for as long
// as one has moved and the other not, where each command alone goes on.
// The settings are read before the ring and again after it, and the
// clock last, so that a ring found missing is judged by settings that
// held all along and by a time after it was found missing (settled).
type ringRead struct {
	settings *redis.SliceCmd
	head     *redis.StringCmd
	size     *redis.IntCmd
	time     *redis.TimeCmd // nil with a test clock
	again    *redis.SliceCmd
}

// hasSettings says whether the partition's settings were found.
func (rr ringRead) hasSettings() bool {
	_, ok := rr.settings.Val()[0].(string)
	return ok
}

// readRing queues the reads of partition p's ring head and settings, with
// what more queues (the words of some events) after the ring's head.
func (w *Window) readRing(ctx context.Context, pipe redis.Pipeliner, p int, more func()) ringRead {
	var rr ringRead
	key := w.ringKey(p)
	rr.settings = pipe.HMGet(ctx, w.settingsKey(p), "s", "ring", "inc")
	rr.head = pipe.GetRange(ctx, key, 0, int64(w.r.state)-1)
	rr.size = pipe.StrLen(ctx, key)
	if more != nil {
		more()
	}
	if w.clock == nil {
		rr.time = pipe.Time(ctx)
	}
	rr.again = pipe.HMGet(ctx, w.settingsKey(p), "s", "ring", "inc")
	return rr
}

// errSettingsMoved is a read's error when a partition's settings changed
// while its ring was read (written by a call, or dropped): the read goes
// again.
var errSettingsMoved = errors.New("rbloom: a window's settings changed while its ring was read")

// settled returns errSettingsMoved when the two reads of the settings
// differ.
func (rr ringRead) settled() error {
	if !slices.Equal(rr.settings.Val(), rr.again.Val()) {
		return errSettingsMoved
	}
	return nil
}

// readRings runs the units in pipelines of at most limit slots, as
// filter.transact runs them but without MULTI (ringRead), and again while
// a cluster refuses them for now or the settings of a ring moved while it
// was read (settled).
func (w *Window) readRings(ctx context.Context, units []txUnit, limit int, settled func() error) error {
	run := func() error {
		var groups [][]txUnit
		slots := 0
		for _, u := range units {
			if n := len(groups); n == 0 || slots+u.slots > limit {
				groups, slots = append(groups, nil), 0
			}
			groups[len(groups)-1] = append(groups[len(groups)-1], u)
			slots += u.slots
		}
		errs := make([]error, len(groups))
		var wg sync.WaitGroup
		sem := make(chan struct{}, txWorkers)
		for i, group := range groups {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				pipe := w.f.rdb.Pipeline()
				for _, u := range group {
					u.queue(pipe)
				}
				errs[i] = execAll(ctx, pipe)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return settled()
	}
	err := run()
	for wait := (backoff{}); unapplied(err) || errors.Is(err, errSettingsMoved); {
		if err2 := wait.next(ctx); err2 != nil {
			return fmt.Errorf("%w (the cluster kept refusing the read: %v)", err2, err)
		}
		err = run()
	}
	return err
}

// state checks what readRing read of partition p and returns its state
// and the time of the read; ok is false when the ring does not exist (and
// was not lost: that is ErrDamaged).
func (w *Window) state(p int, rr ringRead) (st ringState, nowMS int64, ok bool, err error) {
	key := w.ringKey(p)
	if w.clock != nil {
		nowMS = w.clock()
	} else {
		nowMS = rr.time.Val().UnixMilli()
	}
	vals := rr.settings.Val()
	if s, isStr := vals[0].(string); isStr && s != w.settings[p] {
		return st, 0, false, failf(ErrParamsMismatch, "%s holds other settings than this handle's", w.settingsKey(p))
	}
	head := rr.head.Val()
	if head == "" {
		if rr.size.Val() > 0 {
			return st, 0, false, failf(ErrNotFilter, "%s holds an empty string", key)
		}
		if s, isStr := vals[1].(string); isStr {
			if until, _ := strconv.ParseInt(s, 10, 64); nowMS < until {
				return st, 0, false, failf(ErrDamaged, "%s was written until %d and is gone: its events cannot be told from new ones", key, until)
			}
		}
		return st, nowMS, false, nil
	}
	if _, isStr := vals[0].(string); !isStr {
		// As window.lua: the settings outlive the ring.
		return st, 0, false, failf(ErrDamaged, "%s lives and %s is gone: which window it holds is not known", key, w.settingsKey(p))
	}
	want := w.f.parts[p].head
	if len(head) < identitySize || head[:identitySize] != want[:identitySize] {
		h, err := parseHeader(head[:min(len(head), headerSize)])
		if err != nil {
			return st, 0, false, notFilter(key, err)
		}
		return st, 0, false, failf(ErrParamsMismatch, "%s is %s, caller wants %s", key, h.describe(), w.f.h.withIndex(p).describe())
	}
	if rr.size.Val() != w.r.size || len(head) != w.r.state {
		return st, 0, false, failf(ErrDamaged, "%s is %d bytes long, want %d", key, rr.size.Val(), w.r.size)
	}
	if head[reservedByte:headerSize] != reservedTail {
		return st, 0, false, failf(ErrNotFilter, "%s: reserved header bytes are not zero", key)
	}
	if inc, isStr := vals[2].(string); isStr && inc != head[incByte:incByte+incSize] {
		return st, 0, false, failf(ErrDamaged, "%s has another incarnation than %s says: another ring was put in its place", key, w.settingsKey(p))
	}
	st, err = w.r.parseState(key, head, w.bucket.Milliseconds())
	return st, nowMS, err == nil, err
}

// TestMany reports for each event whether it was seen within the window,
// and adds nothing. It runs no script: pipelines read the ring's state
// and the events' words, each at most a script call's words (about 300 us
// of Redis at the seed's size), with the root's state (Window.root); the
// first preReadWords words of every event, then the others only of the
// events those leave in doubt (preRead, the reads before TestOrAdd's calls).
func (w *Window) TestMany(ctx context.Context, events []string) ([]bool, error) {
	out := make([]bool, len(events))
	for lo, hi := range spans(len(events), maxRoundTripSlots/w.f.h.k) {
		found, _, err := w.preRead(ctx, w.place(events[lo:hi]), nil)
		if err != nil {
			return nil, callError("window test", err)
		}
		for e, h := range found {
			out[lo+e] = h == 'h'
		}
	}
	return out, nil
}

// ringWords is what one pipeline read of a partition's ring: whether it
// exists, the bucket it is in, and its live generations, as a word's
// fields read them.
type ringWords struct {
	ok     bool
	bucket int64
	mask   []uint32
}

// wordsRead is what readWords read of one event: its ring's, and the
// fields of the words it read, word after word.
type wordsRead struct {
	ring   *ringWords
	fields []uint32
}

// seen reports whether the event's words read hold one generation of mask
// in all of them (the words read first, if not all k were).
func (r wordsRead) seen(mask []uint32) bool {
	f := len(mask)
	for j, m := range mask {
		acc := m
		for i := j; i < len(r.fields) && acc != 0; i += f {
			acc &= r.fields[i]
		}
		if acc != 0 {
			return true
		}
	}
	return false
}

// readWords reads the words from .. to-1 of the events of pl that want
// says (every event when want is nil), in pipelines of at most
// maxWindowWords words, each with the ring's state and the root's
// (Window.root), and checks the states as every call does: a ring lost,
// missing before its time or damaged fails. An event not read gets the
// zero wordsRead.
func (w *Window) readWords(ctx context.Context, pl placement, want []bool, from, to int) ([]wordsRead, error) {
	f := w.f
	fields := w.r.fields()
	types := make([]any, len(fields))
	for j, width := range fields {
		types[j] = "u" + strconv.Itoa(width)
	}
	groups := pl.groups
	if want != nil {
		groups = make([][]int, len(pl.groups))
		for p, group := range pl.groups {
			for _, e := range group {
				if want[e] {
					groups[p] = append(groups[p], e)
				}
			}
		}
	}
	type unit struct {
		p      int
		events []int
		head   ringRead
		words  *redis.IntSliceCmd
	}
	var touched []*unit
	words := to - from
	perTx := max(1, maxWindowWords/(words*len(fields)))
	txs := unitsOf(groups, perTx, func(p int) bool { return p == w.root }, func(p int, events []int) txUnit {
		u := &unit{p: p, events: events}
		touched = append(touched, u)
		return txUnit{p: p, slots: len(events) * words * len(fields), queue: func(pipe redis.Pipeliner) {
			u.head = w.readRing(ctx, pipe, p, func() {
				if len(events) == 0 {
					return
				}
				args := []any{"BITFIELD_RO", w.ringKey(p)}
				for _, e := range events {
					for _, o := range pl.offsets[e*f.h.k+from : e*f.h.k+to] {
						for j := range fields {
							args = append(args, argGet, types[j], o+uint64(ringFieldBits*j))
						}
					}
				}
				u.words = redis.NewIntSliceCmd(ctx, args...)
				_ = pipe.Process(ctx, u.words)
			})
		}}
	})
	settled := func() error {
		for _, u := range touched {
			if err := u.head.settled(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := w.readRings(ctx, txs, maxWindowWords, settled); err != nil {
		return nil, err
	}
	rings := make([]ringWords, len(touched))
	var missing []int
	rootLives, rootSettings := false, false
	for i, u := range touched {
		st, nowMS, ok, err := w.state(u.p, u.head)
		if err != nil {
			return nil, err
		}
		rings[i] = ringWords{ok: ok, bucket: nowMS / w.bucket.Milliseconds()}
		if ok {
			if rings[i].bucket, err = st.current(w.ringKey(u.p), nowMS); err != nil {
				return nil, err
			}
			rings[i].mask = st.liveMask(w.r, rings[i].bucket)
		}
		switch {
		case u.p == w.root:
			rootLives = rootLives || ok
			rootSettings = rootSettings || u.head.hasSettings()
		case !ok && !slices.Contains(missing, u.p):
			missing = append(missing, u.p)
		}
	}
	if err := w.lost(ctx, rootLives, missing); err != nil {
		return nil, err
	}
	if !rootLives && !rootSettings {
		if err := w.rootLost(ctx); err != nil && !errors.Is(err, errDropped) {
			return nil, err
		}
	}
	reads := make([]wordsRead, len(pl.offsets)/f.h.k)
	for i, u := range touched {
		for _, e := range u.events {
			reads[e].ring = &rings[i]
		}
		if !rings[i].ok || u.words == nil {
			continue // no ring: nothing held
		}
		vals := u.words.Val()
		per := words * len(fields)
		if len(vals) != len(u.events)*per {
			return nil, fmt.Errorf("BITFIELD_RO answered %d values, want %d", len(vals), len(u.events)*per)
		}
		for x, e := range u.events {
			reads[e].fields = make([]uint32, per)
			for y, v := range vals[x*per : (x+1)*per] {
				reads[e].fields[y] = uint32(v)
			}
		}
	}
	return reads, nil
}

// preReadWords is how many of an event's words preRead reads of every
// event. By the arithmetic, not a count: a full generation has a third of
// its bits set at the seed's settings, so 1 - (1 - 0.32^5)^24, about 1 in
// 13 new events, has a past generation with all 5 set, and gets its other
// words read.
const preReadWords = 5

// preRead reads, with plain commands, which events of pl (those want
// says, or all) a live generation holds, for window.lua's ARGV[13]: 'h'
// held, 'f' in none of the past ones, and the bucket of each event's read. Its first reads are
// of every event's first preReadWords words, then the other words only of
// the events those leave in doubt. A script call uses what it found only
// in the bucket of the read (the past generations, read then, only lose
// bits while it runs: window.lua), so the second reads, which may run in
// a later bucket, are judged by the first's live generations.
func (w *Window) preRead(ctx context.Context, pl placement, want []bool) (found []byte, bucket []int64, err error) {
	k := w.f.h.k
	first := min(preReadWords, k)
	reads, err := w.readWords(ctx, pl, want, 0, first)
	if err != nil {
		return nil, nil, err
	}
	n := len(reads)
	found, bucket = make([]byte, n), make([]int64, n)
	doubt := make([]bool, n)
	anyDoubt := false
	for e, r := range reads {
		if r.ring == nil {
			continue // not wanted
		}
		found[e], bucket[e] = 'f', r.ring.bucket
		if r.ring.ok && r.seen(r.ring.mask) {
			doubt[e], anyDoubt = true, true
		}
	}
	if !anyDoubt || first == k {
		for e := range doubt {
			if doubt[e] {
				found[e] = 'h'
			}
		}
		return found, bucket, nil
	}
	rest, err := w.readWords(ctx, pl, doubt, first, k)
	if err != nil {
		return nil, nil, err
	}
	for e, r := range rest {
		if !doubt[e] || r.fields == nil {
			continue // a ring gone since: nothing of it held (a call in the same bucket finds the same)
		}
		all := wordsRead{fields: append(reads[e].fields, r.fields...)}
		if all.seen(reads[e].ring.mask) {
			found[e] = 'h'
		}
	}
	return found, bucket, nil
}

// lost returns ErrDamaged when a ring of the partitions missing is still
// missing while the root's lives (rootLives, read before), unless its
// settings say it expired: as said on create, it was lost. They are looked
// at again after the root, since the root is made last and the reads of
// both were not ordered.
func (w *Window) lost(ctx context.Context, rootLives bool, missing []int) error {
	if !rootLives || len(missing) == 0 {
		return nil
	}
	pipe := w.f.rdb.Pipeline()
	clock := pipe.Time(ctx)
	exists := make([]*redis.IntCmd, len(missing))
	until := make([]*redis.StringCmd, len(missing))
	for i, p := range missing {
		exists[i] = pipe.Exists(ctx, w.ringKey(p))
		until[i] = pipe.HGet(ctx, w.settingsKey(p), "ring")
	}
	if err := execAll(ctx, pipe); err != nil {
		return err
	}
	nowMS := clock.Val().UnixMilli()
	if w.clock != nil {
		nowMS = w.clock()
	}
	for i, e := range exists {
		if e.Val() > 0 {
			continue
		}
		if t, err := strconv.ParseInt(until[i].Val(), 10, 64); err == nil && t <= nowMS {
			continue // expired with nothing of the span in it
		}
		return failf(ErrDamaged, "%s: %s is gone while the root partition's ring lives: its events cannot be told from new ones", w.f.name, w.ringKey(missing[i]))
	}
	return nil
}

// rootLost returns ErrDamaged when the root's ring and settings are both
// missing while another partition's ring lives: they were lost (evicted,
// deleted, a master's data), not expired, and a new root would answer its
// share of the held events new. The root's settings outlive every ring of
// the window (window.lua), so any other ring living tells.
//
// create writes the root's settings before any other ring, so the rings
// are read first, then the root's keys: a window being made is not taken
// for one lost.
func (w *Window) rootLost(ctx context.Context) error {
	pipe := w.f.rdb.Pipeline()
	var others []*redis.IntCmd
	for p := range w.f.parts {
		if p != w.root {
			others = append(others, pipe.Exists(ctx, w.ringKey(p)))
		}
	}
	if err := execAll(ctx, pipe); err != nil {
		return err
	}
	held := slices.ContainsFunc(others, func(e *redis.IntCmd) bool { return e.Val() > 0 })
	if !held {
		return nil
	}
	pipe = w.f.rdb.Pipeline()
	ring := pipe.Exists(ctx, w.ringKey(w.root))
	settings := pipe.HMGet(ctx, w.settingsKey(w.root), "s", "dropped")
	if err := execAll(ctx, pipe); err != nil {
		return err
	}
	if ring.Val() > 0 || settings.Val()[0] != nil {
		return nil
	}
	if settings.Val()[1] != nil {
		return errDropped
	}
	return failf(ErrDamaged, "%s: the root partition's ring and settings are gone while another partition's ring lives: they were lost, and their events cannot be told from new ones", w.f.name)
}

// errDropped is rootLost's answer when the rings that live beside a
// missing root were left by calls that made the window while Drop ran
// (its mark, dropMark): not a window that lost its root. Its callers go
// on: the next window made keeps those rings, which hold only what calls
// made during the Drop wrote.
var errDropped = errors.New("rbloom: rings left by calls during a Drop")

// execAll runs pipe and returns the first error of its commands but
// redis.Nil (a field or key not found), which Exec would return first.
func execAll(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, _ := pipe.Exec(ctx)
	for _, c := range cmds {
		if err := c.Err(); err != nil && err != redis.Nil {
			return err
		}
	}
	return nil
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

// Drop deletes the window from Redis: its rings and settings, the root
// partition's last (Window.root): while the root lives, a call finding
// another partition gone fails with ErrDamaged rather than make it again;
// once the root is gone, the next call makes a new window, whose rings
// have another incarnation: the operation ids of the dropped one are not
// replayed. It deletes the partitions of every number of partitions the
// window may have: this handle's, and the one the stored headers state
// (storedPartitions), so that a handle with another Partitions drops it
// whole. (Rings it left would outlive the
// root's settings and make the window made again ErrDamaged, rootLost.)
func (w *Window) Drop(ctx context.Context) error {
	del := func(parts ...string) error {
		pipe := w.f.rdb.Pipeline()
		for _, part := range parts {
			pipe.Del(ctx, windowKeys(part)...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return callError("window drop", fmt.Errorf("%s: %w", w.f.name, err))
		}
		return nil
	}
	counts, err := w.storedPartitions(ctx)
	if err != nil {
		return callError("window drop", fmt.Errorf("%s: %w", w.f.name, err))
	}
	counts = append(counts, len(w.f.parts))
	root := w.f.parts[w.root].key
	var others []string
	for _, p := range counts {
		for _, key := range partitionKeys(w.f.prefix, w.f.name, p) {
			if key != root && !slices.Contains(others, key) {
				others = append(others, key)
			}
		}
	}
	if err := del(others...); err != nil {
		return err
	}
	// The root's keys go in one transaction that leaves the mark in their
	// place (dropMark).
	pipe := w.f.rdb.TxPipeline()
	pipe.Del(ctx, windowKeys(root)...)
	pipe.HSet(ctx, root+":window", "dropped", "1")
	pipe.PExpire(ctx, root+":window", w.dropMark())
	if _, err := pipe.Exec(ctx); err != nil {
		return callError("window drop", fmt.Errorf("%s: %w", w.f.name, err))
	}
	return nil
}

// dropMark is how long Drop's mark lives in the root's settings, the
// field 'dropped' alone: longer than any ring of the window lives after
// its last write (W buckets, at least a minute, and three more). While it
// does, rings beside a missing root were made by calls during the Drop
// (rootLost): the next window made keeps them (what they hold was
// written while the Drop ran), and a call that began making the window
// before the Drop does not make its root (window.lua). Making the window
// deletes the mark.
func (w *Window) dropMark() time.Duration {
	return time.Duration(w.r.w+8)*w.bucket + 2*time.Minute
}

// storedPartitions returns the numbers of partitions that the headers of
// the window's root and of its witness partitions (witnessKeys) state, in
// their rings and settings: those a window of this name was made with.
func (w *Window) storedPartitions(ctx context.Context) ([]int, error) {
	pipe := w.f.rdb.Pipeline()
	var heads []*redis.StringCmd
	for _, key := range append([]string{w.f.parts[w.root].key}, witnessKeys(w.f.prefix, w.f.name)...) {
		heads = append(heads, pipe.GetRange(ctx, key+":ring", 0, headerSize-1), pipe.HGet(ctx, key+":window", "s"))
	}
	_, _ = pipe.Exec(ctx) // per command: a key of another type fails alone
	var counts []int
	for _, head := range heads {
		if err := head.Err(); err != nil && err != redis.Nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
			return nil, err
		}
		if h, err := parseHeader(head.Val()[:min(len(head.Val()), headerSize)]); err == nil && !slices.Contains(counts, int(h.partitions)) {
			counts = append(counts, int(h.partitions))
		}
	}
	return counts, nil
}
