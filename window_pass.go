package rbloom

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// A TestOrAddMany is a pass over its events, a chunk of a round trip's
// worth at a time: plan cuts a chunk into script calls, one partition's
// events each; read finds, with plain commands, which events a live
// generation holds (preRead); send makes the calls; settle takes their
// answers and keeps the calls to make again. A call goes again when its
// ring is missing (windowMissing: the rings of every partition are made
// together, create, so that one lost later is told from one never
// written), while its bucket's generation is still being cleared
// (windowWait), and in another bucket than the reads that told it which
// events are held (windowReread). After a windowReread the calls read the
// events themselves (notRead): a pass that takes longer than a bucket
// would find a later one each time, until its events left the span.

// windowBatch is what the calls of one TestOrAddMany share.
type windowBatch struct {
	opID    string
	keep    time.Duration // of the calls' records
	perCall int           // events a call at most
	digest  string        // of the batch, under an operation id: every record's tag
	start   time.Time     // under an operation id: what every record is filed by
	seq     []int         // calls made so far to each partition
	touch   bool          // the first chunk touches every partition's ring (Window.touchedAll)
	created bool          // the batch made the window's rings
}

// windowPart is one call: its partition, its record, and its events, as
// their positions in the chunk.
type windowPart struct {
	p   int
	rec record
	at  []int
}

// windowChunk is the events of one round trip, placed, with the calls
// still to make and the answers.
type windowChunk struct {
	pl    placement
	parts []windowPart
	out   []bool
}

// preReads is what read found: per event of the chunk, foundHeld or
// foundNone (0 for an event not read), and the bucket of its read.
type preReads struct {
	found   []byte
	buckets []int64
}

func (w *Window) testOrAddDistinct(ctx context.Context, events []string, opID string) ([]bool, error) {
	b := w.newBatch(events, opID)
	touchedAt := time.Now()
	b.touch = touchedAt.Sub(time.Unix(0, w.touchedAll.Load())) > w.bucket/2
	out := make([]bool, len(events))
	for lo, hi := range spans(len(events), maxRoundTripSlots/w.f.h.k) {
		pl := w.place(events[lo:hi])
		ch := &windowChunk{pl: pl, parts: w.plan(b, pl, lo == 0), out: out[lo:hi]}
		if err := w.pass(ctx, b, ch); err != nil {
			return nil, callError("window", err)
		}
	}
	if b.touch {
		w.touchedAll.Store(touchedAt.UnixNano())
	}
	return out, nil
}

// newBatch returns the batch of events under opID ("" for none).
func (w *Window) newBatch(events []string, opID string) *windowBatch {
	f := w.f
	b := &windowBatch{opID: opID, keep: f.retryKeep, seq: make([]int, len(f.parts))}
	b.perCall = max(1, maxWindowWords/(f.h.k*len(w.r.fields())))
	if opID != "" {
		// Every call's record filed by the batch's start, as write.go's.
		b.keep, b.digest, b.start = f.idLifetime, digest(events, b.perCall, len(f.parts)), f.now()
	}
	return b
}

// plan cuts the events of a chunk placed by pl into calls of at most
// perCall events of one partition, cut evenly (evenSpans). The first
// chunk has a call of no event for each partition without events that
// must be touched: the root always, every partition when the batch
// touches them all (Window.root).
func (w *Window) plan(b *windowBatch, pl placement, first bool) []windowPart {
	f := w.f
	var parts []windowPart
	for p, group := range pl.groups {
		if len(group) == 0 && first && (p == w.root || b.touch) {
			parts = append(parts, windowPart{p: p, rec: f.record("window", "", p, 0, "", f.retryKeep, time.Time{})})
			continue
		}
		for a, z := range evenSpans(len(group), b.perCall) {
			parts = append(parts, windowPart{p: p, rec: f.record("window", b.opID, p, b.seq[p], b.digest, b.keep, b.start), at: group[a:z]})
			b.seq[p]++
		}
	}
	return parts
}

// pass makes the calls of a chunk until each has answered, reading the
// events first until a call says to stop (windowReread).
func (w *Window) pass(ctx context.Context, b *windowBatch, ch *windowChunk) error {
	readFirst := true
	for len(ch.parts) > 0 {
		var reads *preReads
		if readFirst {
			var err error
			if reads, err = w.read(ctx, ch); err != nil {
				return err
			}
		}
		replies, err := w.send(ctx, ch, reads)
		if err != nil {
			return err
		}
		again, reread, missing, err := w.settle(ch, replies)
		if err != nil {
			return err
		}
		readFirst = readFirst && !reread
		if missing {
			if b.created {
				return failf(ErrDamaged, "%s: a ring keeps vanishing", w.f.name)
			}
			if err := w.create(ctx, false); err != nil {
				return err
			}
			b.created = true
		}
		if err := ctx.Err(); err != nil && len(again) > 0 {
			return err
		}
		ch.parts = again
	}
	return nil
}

// read reads which events of the chunk's calls a live generation holds.
func (w *Window) read(ctx context.Context, ch *windowChunk) (*preReads, error) {
	want := make([]bool, len(ch.out))
	for _, c := range ch.parts {
		for _, e := range c.at {
			want[e] = true
		}
	}
	found, buckets, err := w.preRead(ctx, ch.pl, want)
	if err != nil {
		return nil, err
	}
	return &preReads{found: found, buckets: buckets}, nil
}

// send makes the chunk's calls, in one round: what reads found (nil when
// the calls read the events themselves) goes with them.
func (w *Window) send(ctx context.Context, ch *windowChunk, reads *preReads) ([]string, error) {
	k := w.f.h.k
	round := strconv.FormatUint(rand.Uint64(), 36)
	calls := make([]scriptCall, len(ch.parts))
	for i, c := range ch.parts {
		call := windowCall{part: c.p, head: w.f.parts[c.p].head, rec: c.rec, create: createNone,
			expect: w.expected(), round: round, found: make([]byte, len(c.at))}
		if reads != nil && len(c.at) > 0 {
			// The bucket of the call's reads: the first, should a bucket
			// have turned between them (the call then reads).
			call.expect = math.MaxInt64
			for _, e := range c.at {
				call.expect = min(call.expect, reads.buckets[e])
			}
		}
		for x, e := range c.at {
			call.found[x] = notRead
			if reads != nil {
				call.found[x] = reads.found[e]
			}
			if call.found[x] != foundHeld {
				call.offsets = append(call.offsets, ch.pl.offsets[e*k:(e+1)*k]...)
			}
		}
		calls[i] = w.encode(call)
	}
	return runScripts(ctx, w.f.rdb, windowScript, w.f.fcall, calls, w.f.repl)
}

// settle takes the answers of the chunk's calls from their replies and
// returns the calls to make again; reread says a call found itself in
// another bucket than the reads, missing that a ring is missing.
func (w *Window) settle(ch *windowChunk, replies []string) (again []windowPart, reread, missing bool, err error) {
	for i, r := range replies {
		c := ch.parts[i]
		reply, err := decodeWindowReply(r, len(c.at))
		if err != nil {
			return nil, false, false, err
		}
		if reply.kind == windowMoved || reply.kind == windowReread {
			w.saw(reply.bucket) // the next calls expect it
		}
		if reply.answered() {
			reply.seen(c.at, ch.out)
			continue
		}
		again = append(again, c)
		reread = reread || reply.kind == windowReread
		missing = missing || reply.kind == windowMissing
	}
	return again, reread, missing, nil
}
