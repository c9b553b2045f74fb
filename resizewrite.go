package rbloom

import (
	"context"
	"errors"
)

// The write path during a resize. A partition a resize holds answers
// replyForward with the header of the filter being resized into: the
// client adds the call's items to that filter's copies first, then sends
// the call again marked alreadyForwarded, so that the old counters never
// hold an item the new ones miss (rebuild.go). forwardState follows those
// calls across the rounds of a chunkWrite.
type forwardState struct {
	target string      // the header of the filter being resized into
	calls  []int       // the calls of the round being sent whose items went to target's copies
	out    []bool      // the copies' answers for those items
	last   forwardedAt // what the round just answered had sent to the copies
}

// sent starts taking the replies of the round whose calls' items are at
// positions at.
func (s *forwardState) sent(at [][]int) {
	s.last = forwardedAt{target: s.target, at: positions(at, s.calls), out: s.out}
	s.target, s.calls = "", nil
}

// ask notes that call c of the next round is to be forwarded to target.
func (s *forwardState) ask(target string, c int) {
	s.target = target
	s.calls = append(s.calls, c)
}

// sendForward adds the items of the next round's forwarded calls to the
// copies of the filter being resized into.
func (w *chunkWrite) sendForward(ctx context.Context, next *round, try int) error {
	s := &w.forward
	if s.calls == nil {
		return nil
	}
	var err error
	s.out, err = w.f.forward(ctx, s.target, w.op, itemsAt(w.chunk, positions(next.at, s.calls)))
	if errors.Is(err, ErrRebuildLost) && try < 5 {
		// The resize switched or gave up meanwhile: the calls go again
		// as they were, to find out which.
		for _, c := range s.calls {
			next.calls[c].create = createModeOf(w.op.create)
		}
		s.calls = nil
		return nil
	}
	return err
}

// completeForward completes a TestOrAdd whose items the round just
// answered had forwarded (forwardAdded).
func (w *chunkWrite) completeForward(ctx context.Context) error {
	if !w.op.absent || w.forward.last.at == nil {
		return nil
	}
	return w.f.forwardAdded(ctx, w.op, w.forward.last, w.chunk, w.out, w.done)
}

// forwardFailed handles a round of forwarded calls that failed with err:
// refused as full after their items reached the copies (unforward), or
// a whole batch under an operation id refused because the resize switched
// meanwhile (recordForwarded). It reports whether it did, and the error
// the write then returns.
func (w *chunkWrite) forwardFailed(ctx context.Context, err error) (bool, error) {
	s := &w.forward
	if errors.Is(scriptError(err), ErrFull) {
		return true, w.f.unforward(ctx, w.op, s.target, w.chunk, w.calls, w.at, s.calls, err)
	}
	at := positions(w.at, s.calls)
	if w.op.opID == "" || !w.whole || len(at) != len(w.chunk) {
		return false, nil
	}
	recorded, rerr := w.f.recordForwarded(ctx, w.op, s.target, w.chunk, at, s.out, w.out)
	if recorded && rerr == nil {
		mark(w.done, [][]int{at}, Applied)
	}
	return recorded, rerr
}
