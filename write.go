package rbloom

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The write path: add.lua and remove.lua calls, per partition, pipelined,
// each with an operation record that makes a re-sent call apply once.

// writeOp describes a write: every add and remove, of one item or many,
// once or not, is one of these given to write.
type writeOp struct {
	name   string        // for errors: "add", "remove", "create"
	script *redis.Script // addScript or removeScript, or cuckooScript for both
	remove bool          // a remove, not an add
	create bool          // add.lua may create a missing partition
	keep   time.Duration // how long each call's record stays in Redis
	opID   string        // the caller's operation id; "" for a random record per call
	batch  string        // under opID, the digest of the whole batch, every call's tag
	absent bool          // add.lua adds only the items that test absent
	fill   bool          // a rebuild's fill: its partitions are copies, never created
	start  time.Time     // under opID, when the batch started: its calls' records are filed by it
}

// addOp is an add. With Options.CreateOnWrite, a filter of one key may be
// created by any add, the partitions of a larger one only together, by
// createAll; without, no add creates anything.
func (f *filter) addOp() writeOp {
	return writeOp{name: "add", script: f.addScript(), create: f.onWrite && len(f.parts) == 1, keep: f.retryKeep}
}

func (f *filter) removeOp() writeOp {
	script := removeScript
	if f.h.mode == ModeCuckoo {
		script = cuckooScript
	}
	return writeOp{name: "remove", script: script, remove: true, keep: f.retryKeep}
}

// addScript is the script that adds to f: add.lua, or cuckoo.lua.
func (f *filter) addScript() *redis.Script {
	if f.h.mode == ModeCuckoo {
		return cuckooScript
	}
	return addScript
}

func (f *filter) add(ctx context.Context, items []string) ([]bool, error) {
	return f.write(ctx, f.addOp(), items)
}

// testOrAdd adds the items that test absent, each seeing the ones before.
func (f *filter) testOrAdd(ctx context.Context, items []string) ([]bool, error) {
	op := f.addOp()
	op.absent = true
	return f.write(ctx, op, items)
}

func (f *filter) remove(ctx context.Context, items []string) ([]bool, error) {
	return f.write(ctx, f.removeOp(), items)
}

// writeOnce applies op to items at most once per opID within
// f.idLifetime: each script call's record is named after opID (and the
// call's place in the batch) instead of being random, so the same batch
// sent again with the same opID, from this process or another, gets the
// first answers and changes nothing. A record holds a digest of the whole
// batch, and each call also looks for the record of the batch's first
// call to its partition, so that the id used again for other items, or
// the same ones in another order, is refused with ErrOpIDReused rather
// than answered as a replay or applied in part. Adds and removes keep
// their ids apart.
func (f *filter) writeOnce(ctx context.Context, op writeOp, items []string, opID string) ([]bool, error) {
	if opID == "" || len(opID) > 256 {
		return nil, callError(op.name, failf(ErrInvalidOptions, "operation id %q: want 1 to 256 bytes", opID))
	}
	op.opID, op.keep, op.batch, op.start = opID, f.idLifetime, digest(items, f.perCall(), len(f.parts)), f.now()
	used, err := f.usedBefore(ctx, op, items)
	if err != nil {
		return nil, callError(op.name, err) // nothing was sent
	}
	if used {
		return nil, callError(op.name, failf(ErrOpIDReused, "operation id %q: its batch was applied before a resize changed "+
			"how batches are cut (partitions or k), and its answers are not kept across that; nothing was written", opID))
	}
	out, err := f.write(ctx, op, items)
	if err != nil {
		f.forgetLayouts() // the filter may have been switched under the batch
	}
	return out, err
}

// write applies op to items and returns its answer for each item. The
// items of each partition go in calls of at most maxCallSlots slots, all
// pipelined (on a cluster, go-redis sends one pipeline per node, in
// parallel).
func (f *filter) write(ctx context.Context, op writeOp, items []string) ([]bool, error) {
	out := make([]bool, len(items))
	done := make([]Outcome, len(items))
	if err := f.writeChunks(ctx, op, items, out, done); err != nil {
		return nil, callError(op.name, batchFailed(scriptError(err), done, out))
	}
	return out, nil
}

// writeChunks applies op to items, setting out to the answers and done to
// what was done to each item (Unknown while its call is in flight): one
// round trip's items at a time.
func (f *filter) writeChunks(ctx context.Context, op writeOp, items []string, out []bool, done []Outcome) error {
	seq := make([]int, len(f.parts)) // the calls made so far to each partition
	for lo, hi := range spans(len(items), f.perRoundTrip()) {
		w := &chunkWrite{f: f, op: op, chunk: items[lo:hi], whole: hi-lo == len(items), out: out[lo:], done: done[lo:]}
		pl := f.place(w.chunk)
		w.calls, w.at = pack(pl, f.perCall(), seq, func(p, seq int, at []int) writeCall {
			return f.call(op, p, seq, pl, at)
		})
		if err := w.run(ctx); err != nil {
			return err
		}
	}
	return nil
}

// chunkWrite is the write of one round trip's items: its calls, sent
// again until each is answered. A call answers replyMissing when its
// partition does not exist and it may not create it (settle decides,
// and the calls go again), and replyForward when a resize holds its
// partition (resizewrite.go).
type chunkWrite struct {
	f       *filter
	op      writeOp
	chunk   []string
	whole   bool // the chunk is the whole batch
	out     []bool
	done    []Outcome
	calls   []writeCall
	at      [][]int // the positions in chunk of each call's items
	forward forwardState
}

// run sends the calls until each is answered, or fails.
func (w *chunkWrite) run(ctx context.Context) error {
	for try := 0; len(w.calls) > 0; try++ {
		mark(w.done, w.at, Unknown)
		replies, err := runScripts(ctx, w.f.rdb, w.op.script, w.f.fcall, wires(w.calls), w.f.repl)
		if r := unwritten(err); r != nil {
			replies, err = r, nil // not replicated, but nothing was written
		}
		if err != nil {
			return w.failed(ctx, err)
		}
		next, err := w.take(replies)
		if err != nil {
			return err
		}
		if err := w.completeForward(ctx); err != nil {
			return err
		}
		if len(next.calls) == 0 {
			return nil
		}
		if err := w.sendForward(ctx, next, try); err != nil {
			return err
		}
		if next.missing {
			if err := w.settleMissing(ctx, next, try); err != nil {
				return err
			}
		}
		w.calls, w.at = next.calls, next.at
	}
	return nil
}

// failed settles what a round that failed with err did, and returns the
// error.
func (w *chunkWrite) failed(ctx context.Context, err error) error {
	if w.forward.calls != nil {
		if done, ferr := w.forwardFailed(ctx, err); done {
			return ferr
		}
	}
	settlePartial(err, w.at, w.out, w.done)
	return err
}

// round is the calls a round of replies leaves to send again.
type round struct {
	calls   []writeCall
	at      [][]int
	missing bool // some found their partition missing
}

// take sets the answers of a round's replies, and returns the calls to
// send again.
func (w *chunkWrite) take(replies []string) (*round, error) {
	next := &round{}
	w.forward.sent(w.at)
	for c, raw := range replies {
		r := decodeWriteReply(raw)
		switch {
		case r.missing:
			mark(w.done, w.at[c:c+1], NotApplied)
			next.calls, next.at, next.missing = append(next.calls, w.calls[c]), append(next.at, w.at[c]), true
		case r.target != "":
			w.forward.ask(r.target, len(next.calls))
			w.calls[c].create = alreadyForwarded // the items will be in the copies
			next.calls, next.at = append(next.calls, w.calls[c]), append(next.at, w.at[c])
		default:
			if err := w.answer(r, c); err != nil {
				return nil, err
			}
		}
	}
	return next, nil
}

// answer sets the answers of call c from its reply r.
func (w *chunkWrite) answer(r writeReply, c int) error {
	if err := answer(r.answers, w.at[c], w.out); err != nil {
		if w.op.opID == "" {
			return err
		}
		// A record of another cut answered: the id was applied before a
		// resize changed the filter's partitions or k. This call wrote
		// nothing.
		mark(w.done, w.at[c:c+1], NotApplied)
		return failf(ErrOpIDReused, "%s: operation id %q was recorded for other calls than this batch makes now (the filter was resized since): it cannot be replayed", w.f.name, w.op.opID)
	}
	mark(w.done, w.at[c:c+1], Applied)
	return nil
}

// settleMissing is called when calls of the round found their partition
// missing: the filter is being made, was dropped, or lost.
func (w *chunkWrite) settleMissing(ctx context.Context, next *round, try int) error {
	f, op := w.f, w.op
	if op.fill {
		return failf(ErrRebuildLost, "%s: the copy vanished (a Drop, or another rebuild took over)", f.name)
	}
	if try == 2 {
		return failf(ErrDamaged, "%s: partitions keep vanishing (or were replaced while a batch under an operation id was written)", f.name)
	}
	exists, err := f.settle(ctx)
	switch {
	case err != nil:
		return err
	case exists:
	case !f.onWrite:
		// Made only on purpose: a write must not make a lost filter
		// again, empty. A handle with a Source loads it, and the calls
		// go again once the load holds it.
		return f.awaitLoad(ctx)
	case !op.remove, op.opID != "":
		// A once remove records its answer, "absent", so that a replay
		// after the item is added removes nothing: the record needs the
		// filter.
		return f.createAll(ctx, true)
	default: // a remove from a filter that does not exist: all absent
		mark(w.done, next.at, Applied)
		next.calls, next.at = nil, nil
	}
	return nil
}

// unwritten returns the replies of a round of calls that failed only as
// not replicated (ErrNotReplicated) when none of them wrote anything (a
// partition missing: '?'; a resize's forward: '!'), so that the round is
// handled as the replies say rather than reported as a write the master
// made; else nil.
func unwritten(err error) []string {
	var pe *partialError
	if !errors.As(err, &pe) || !errors.Is(pe.err, ErrNotReplicated) {
		return nil
	}
	for _, r := range pe.replies {
		if decodeWriteReply(r).wrote() {
			return nil
		}
	}
	return pe.replies
}

// settlePartial sets, after err failed a round of calls whose items are at
// answers, what the calls that were answered did, and that the items of
// calls a script refused were not applied. The others stay Unknown.
func settlePartial(err error, answers [][]int, out []bool, done []Outcome) {
	var pe *partialError
	if !errors.As(err, &pe) {
		return
	}
	for c, raw := range pe.replies {
		r := decodeWriteReply(raw)
		switch {
		case pe.refused[c], !r.wrote():
			// Refused, no partition, or a resize's forward asked for:
			// the call wrote nothing.
			mark(done, answers[c:c+1], NotApplied)
		case len(r.answers) == len(answers[c]) && r.answers != "" && answer(r.answers, answers[c], out) == nil:
			mark(done, answers[c:c+1], Applied)
		}
	}
}

// positions returns the positions of the items of the calls cs, whose
// items are at answers[c], in order.
func positions(answers [][]int, cs []int) []int {
	var at []int
	for _, c := range cs {
		at = append(at, answers[c]...)
	}
	return at
}

// itemsAt returns the items of chunk at positions at.
func itemsAt(chunk []string, at []int) []string {
	out := make([]string, len(at))
	for i, pos := range at {
		out[i] = chunk[pos]
	}
	return out
}

// forward adds items to the copies of the filter that f is being resized
// into, whose header add.lua answered with: before they are added to f's
// own partitions, so that the new filter holds every item the old one does
// when it takes its place (rebuild.go). Under an operation id, the forward
// is applied once too: a caller that sends the id again after a failure
// does not add the items to the copies a second time.
func (f *filter) forward(ctx context.Context, target string, op writeOp, items []string) ([]bool, error) {
	next, err := f.resizedTo(target)
	if err != nil {
		return nil, err
	}
	fwd := next.addOp()
	// A TestOrAdd adds to the new filter only what is absent there too:
	// another copy of an item the fill already put there would count it
	// twice (in a cuckoo filter, fill its buckets).
	fwd.create, fwd.fill, fwd.absent = false, true, op.absent
	out, err := next.write(ctx, next.partOf(op, fwd, "forward", items), items)
	if err != nil {
		return nil, fmt.Errorf("%s is being resized, and the new filter's copies refused the items (open it again once the resize is over): %w", f.name, err)
	}
	return out, nil
}

// forwardedAt is what a round of calls sent to the copies of the filter
// being resized into (target): the positions of the items, and the copies'
// answers for them.
type forwardedAt struct {
	target string
	at     []int
	out    []bool
}

// forwardAdded completes a TestOrAdd whose items were forwarded to the
// copies of a resize as a TestOrAdd too, so that an item the copies hold
// (from the fill) gets no second copy there: the items f's own partitions
// then added, but the copies answered present for, may be there only as
// false positives, and are added to the copies now. Where the resize has
// switched meanwhile, they go to the resized filter.
func (f *filter) forwardAdded(ctx context.Context, op writeOp, fw forwardedAt, chunk []string, out []bool, done []Outcome) error {
	var late []string
	for j, pos := range fw.at {
		if done[pos] == Applied && !out[pos] && j < len(fw.out) && fw.out[j] {
			late = append(late, chunk[pos])
		}
	}
	if len(late) == 0 {
		return nil
	}
	plain := op
	plain.absent = false
	_, err := f.forward(ctx, fw.target, plain, late)
	if errors.Is(err, ErrRebuildLost) {
		if g := f.followed(ctx, failf(ErrParamsMismatch, "switched")); g != nil {
			_, err = g.write(ctx, g.partOf(op, g.addOp(), "added", late), late)
		} else {
			err = nil // the resize gave up: f's partitions hold the items
		}
	}
	return err
}

// recordForwarded is called when the calls of op to f's own partitions
// failed after items, a whole batch, were forwarded to the copies of the
// filter being resized into (target), fwdOut their answers for the items
// at positions fwdAt. When that filter has switched in meanwhile (f's
// calls then fail with ErrParamsMismatch, or find their partition gone),
// the items are where they belong, and only the operation id is missing:
// recordForwarded records it in the resized filter, at the calls a replay
// there makes, with those answers, changing nothing (add.lua's 'r'), sets
// out and reports true: the operation is done, once. Otherwise, or for a
// batch the resized filter would cut into other round trips, it reports
// false, and the caller's error stands. (Found by an outside review:
// such an id, sent again on a reopened handle, was applied again.)
func (f *filter) recordForwarded(ctx context.Context, op writeOp, target string, items []string, fwdAt []int, fwdOut []bool, out []bool) (bool, error) {
	h, err := parseHeader(target)
	if err != nil || len(fwdOut) != len(fwdAt) {
		return false, nil
	}
	g := f.withHeader(h)
	if len(items) > g.perRoundTrip() {
		return false, nil
	}
	root := g.parts[0]
	pipe := g.rdb.Pipeline()
	head := pipe.GetRange(ctx, root.key, 0, identitySize-1)
	if _, err := pipe.Exec(ctx); err != nil || head.Val() != root.head[:identitySize] {
		return false, nil // not switched, or cannot tell
	}
	was := make([]bool, len(items))
	for j, pos := range fwdAt {
		was[pos] = fwdOut[j]
	}
	rec := op
	rec.script, rec.create, rec.batch = g.addScript(), false, digest(items, g.perCall(), len(g.parts))
	pl := g.place(items)
	calls, at := pack(pl, g.perCall(), make([]int, len(g.parts)), func(p, seq int, at []int) writeCall {
		c := g.call(rec, p, seq, pl, at)
		c.create = recordOnly
		for _, pos := range at {
			c.answers = append(c.answers, was[pos])
		}
		return c
	})
	replies, err := runScripts(ctx, g.rdb, rec.script, g.fcall, wires(calls), g.repl)
	if err != nil {
		return true, fmt.Errorf("%s was resized meanwhile; the items are in the resized filter, but their operation id could not be recorded there: %w", f.name, scriptError(err))
	}
	for c, r := range replies {
		if r == replyMissing {
			return true, failf(ErrDamaged, "%s was resized meanwhile, and a partition of the resized filter is missing", f.name)
		}
		if err := answer(r, at[c], out); err != nil {
			return true, err
		}
	}
	return true, nil
}

// unforward is called when a call of op that sent its items to the copies
// of the filter f is being resized into (target) was then refused by f's
// own partition with ErrFull (err): another writer filled it meanwhile.
// The refused calls recorded their refusal (full in filter.lua), so that
// sent again they are refused again; unforward finds them by sending
// every forwarded call again alone, and removes their items from the
// copies (a classic filter cannot: they stay there, as false positives),
// so that the new filter does not hold items the caller was told were not
// added. fwd are the forwarded calls; calls[c] is for the items of chunk
// at positions answers[c].
func (f *filter) unforward(ctx context.Context, op writeOp, target string, chunk []string, calls []writeCall, answers [][]int, fwd []int, err error) error {
	// The caller's deadline may be what ended the calls: the undo gets
	// its own, so that a refusal is not left in the new filter for that.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unforwardTimeout)
	defer cancel()
	err = scriptError(err) // now, as callError would drop what is added to a Redis error
	var undo []string
	var unsure error // why a call's refusal could not be confirmed
	for _, c := range fwd {
		_, again := runScripts(ctx, f.rdb, op.script, f.fcall, wires(calls[c:c+1]), f.repl)
		switch again = scriptError(again); {
		case errors.Is(again, ErrFull):
			undo = append(undo, itemsAt(chunk, answers[c])...)
		case again != nil:
			unsure = again
		}
	}
	if unsure != nil {
		// The resize switched meanwhile (the old partition is gone), or
		// the server failed: a refused call cannot be told from one that
		// applied, whose items must stay. Not a quiet ErrFull.
		err = fmt.Errorf("%w; and then, the items sent to the filter being resized into may stay there, as false positives (the refused call could not be told apart: %w)", err, unsure)
	}
	if len(undo) == 0 || f.h.mode == ModeClassic {
		return err
	}
	next, herr := f.resizedTo(target)
	if herr != nil {
		return fmt.Errorf("%w; and then: %w", err, herr)
	}
	rm := next.removeOp()
	rm.fill = true
	if _, uerr := next.write(ctx, next.partOf(op, rm, "unforward", undo), undo); uerr != nil {
		return fmt.Errorf("%w; and then, taking its items out of the filter being resized into (they stay there, as false positives): %w", err, uerr)
	}
	return err
}

// partOf returns sub, a write of items to f made for op, applied once
// when op is: a batch of its own, under an id that names op's id, what and
// the items (so that op sent again makes the same sub with the same id).
func (f *filter) partOf(op, sub writeOp, what string, items []string) writeOp {
	if op.opID != "" {
		sub.batch = digest(items, f.perCall(), len(f.parts))
		sub.opID, sub.keep = op.opID+"\x00"+what+"\x00"+hex.EncodeToString([]byte(sub.batch)), op.keep
		sub.start = op.start // its records filed as op's are (record)
	}
	return sub
}

// resizedTo returns a handle of the copies of the filter that f is being
// resized into, whose header add.lua answered with.
func (f *filter) resizedTo(target string) (*filter, error) {
	h, err := parseHeader(target)
	if err != nil {
		return nil, fmt.Errorf("the header of the filter %s is resized into: %w", f.name, err)
	}
	next := f.withHeader(h)
	for p := range next.parts {
		next.parts[p].key = copyKey(next.parts[p].key)
	}
	return next, nil
}

// unforwardTimeout bounds the undo of a refused forward (unforward).
const unforwardTimeout = 10 * time.Second

// pack makes the script calls for the items placed by pl: one per perCall
// items of each partition, made by call, and the positions each answers
// for. seq counts the calls made to each partition so far, across the
// chunks of a batch (see call).
func pack(pl placement, perCall int, seq []int, call func(p, seq int, at []int) writeCall) ([]writeCall, [][]int) {
	var calls []writeCall
	var answers [][]int
	for p, group := range pl.groups {
		for a, z := range spans(len(group), perCall) {
			calls = append(calls, call(p, seq[p], group[a:z]))
			answers = append(answers, group[a:z])
			seq[p]++
		}
	}
	return calls, answers
}

// answer sets out at positions at from a script's reply r, a '1' or '0'
// per item.
func answer(r string, at []int, out []bool) error {
	if len(r) != len(at) {
		return fmt.Errorf("script answered for %d items, want %d", len(r), len(at))
	}
	for j, pos := range at {
		out[pos] = r[j] == '1'
	}
	return nil
}

// call is the script call that applies op, in partition p, to the items of
// chunk, placed by pl, at positions at. It is the seq-th call of op to
// partition p: a batch under one operation id makes one record per call,
// and the same batch sent again makes the same calls.
func (f *filter) call(op writeOp, p, seq int, pl placement, at []int) writeCall {
	rec := f.record(op.name, op.opID, p, seq, op.batch, op.keep, op.start)
	c := writeCall{key: f.parts[p].key, head: f.parts[p].head, ttl: f.ttlMS, rec: rec,
		keep: strconv.FormatInt(rec.ttl, 10), create: createModeOf(op.create), limit: f.partLimit,
		absent: op.absent}
	switch {
	case f.h.mode == ModeCuckoo && op.remove:
		c.script = cuckooRemoveCall
	case f.h.mode == ModeCuckoo:
		c.script = cuckooAddCall
	case op.remove:
		c.script = removeCall
	}
	head := c.script.headArgs()
	c.args = f.offsetArgs(make([]any, head, head+len(at)*f.readsPerItem()), pl, at)
	if op.create {
		c.head = newIncarnation(c.head)
	}
	return c
}

// newIncarnation returns head, a partition's header, with a fresh random
// incarnation: the one a partition gets when the call creates it.
func newIncarnation(head string) string {
	return withIncarnation(head, randomIncarnation())
}

// randomIncarnation returns incSize random bytes, never all zero (the
// incarnation of partitions of earlier versions).
func randomIncarnation() string {
	var inc [incSize]byte
	binary.BigEndian.PutUint64(inc[:], rand.Uint64()|1)
	return string(inc[:])
}

// withIncarnation returns head with the incarnation inc.
func withIncarnation(head, inc string) string {
	return head[:incByte] + inc + head[incByte+incSize:]
}

// record is the record of a call of op to partition p: a random one, or,
// under the caller's operation id opID, the seq-th of the batch's calls
// to that partition, tagged with batch, the digest of the whole batch,
// filed by first, when the batch started (writeOnce and partOf set it;
// zero, for an op built otherwise, as a test does: now; see onceRecord).
func (f *filter) record(op, opID string, p, seq int, batch string, keep time.Duration, first time.Time) record {
	if opID == "" {
		return f.records.random(p, f.parts[p].key, keep, f.now())
	}
	if first.IsZero() {
		first = f.now()
	}
	return onceRecord(f.parts[p].key, op, seq, opID, batch, keep, f.retryKeep, first)
}

// settle is called when a write found one of the filter's partitions
// missing, and by Create. It reports whether the filter exists: all of its
// partitions do (another writer may just have created them), or none does
// (the filter is new, or was dropped). If only some exist after a moment
// (long enough for a creation in flight to finish), the filter is damaged:
// recreating a missing partition empty would make it answer "absent" for
// items it held.
func (f *filter) settle(ctx context.Context) (bool, error) {
	for try := 0; ; try++ {
		s, err := f.survey(ctx)
		if err != nil {
			return false, err
		}
		var missing []string
		for p, ok := range s.exists {
			if !ok {
				missing = append(missing, f.parts[p].key)
			}
		}
		switch {
		case len(missing) == 0:
			return true, nil
		case len(missing) == len(f.parts):
			return false, nil
		case try == 1:
			return false, failf(ErrDamaged, "%s: %d of %d partitions are missing (%s)", f.name, len(missing), len(f.parts), strings.Join(missing, " "))
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// create creates the filter when none of its partitions exists, and
// checks the parameters of the stored one when all do. When only some
// exist, the filter is damaged, and create writes nothing.
func (f *filter) create(ctx context.Context) error {
	for try := 0; ; try++ {
		exists, err := f.settle(ctx)
		if err == nil {
			err = f.createAll(ctx, !exists)
		}
		// A Drop between settle and createAll: look again.
		if errors.Is(err, errVanished) && try < 2 {
			continue
		}
		if err != nil {
			return callError("create", err)
		}
		return nil
	}
}

// errVanished is createAll's error when a partition it checks does not
// exist any more.
var errVanished = failf(ErrDamaged, "a partition vanished")

// createAll adds no items to every partition. With mayCreate, that creates
// them, so that the partitions of a filter exist (and expire) together and
// Open finds the one named like the filter; without, it checks that each
// exists with the caller's parameters.
func (f *filter) createAll(ctx context.Context, mayCreate bool) error {
	op := writeOp{name: "create", script: f.addScript(), create: mayCreate, keep: f.retryKeep}
	calls := make([]writeCall, len(f.parts))
	inc := randomIncarnation() // one for all: a rebuild repairing a lost one reuses it
	for p := range f.parts {
		calls[p] = f.call(op, p, 0, placement{}, nil)
		calls[p].head = withIncarnation(f.parts[p].head, inc)
	}
	replies, err := runScripts(ctx, f.rdb, op.script, f.fcall, wires(calls), f.repl)
	if err != nil {
		if mayCreate {
			// Out of memory, a lost connection, the context: the
			// partitions made so far would be a damaged filter that
			// nothing but a Drop of these parameters could see.
			return f.unmake(ctx, inc, err)
		}
		return err
	}
	for p, r := range replies {
		if r == replyMissing {
			return fmt.Errorf("%w: %s: %s", errVanished, f.name, f.parts[p].key)
		}
	}
	if mayCreate {
		return f.keepMadeIncarnation(ctx)
	}
	return nil
}

// unmake deletes the partitions of incarnation inc, which a createAll that
// failed with err made, and returns err (with unmake's own failure). A
// partition of another incarnation, made by another process, stays.
func (f *filter) unmake(ctx context.Context, inc string, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unforwardTimeout)
	defer cancel()
	pipe := f.rdb.Pipeline()
	incs := make([]*redis.StringCmd, len(f.parts))
	for p, part := range f.parts {
		incs[p] = pipe.GetRange(ctx, part.key, incByte, incByte+incSize-1)
	}
	if _, gerr := pipe.Exec(ctx); gerr != nil && !redis.HasErrorPrefix(gerr, "WRONGTYPE") {
		return fmt.Errorf("%w; and then, deleting the partitions it made: %w", err, gerr)
	}
	var made []string
	for p, cmd := range incs {
		if cmd.Val() == inc {
			made = append(made, f.parts[p].key)
		}
	}
	pipe = f.rdb.Pipeline() // one DEL a key: they are in other cluster slots
	for _, key := range made {
		pipe.Del(ctx, key)
	}
	if _, derr := pipe.Exec(ctx); derr != nil {
		return fmt.Errorf("%w; and then, deleting the partitions it made: %w", err, derr)
	}
	return err
}
