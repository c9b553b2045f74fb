package rbloom

import (
	"strconv"
	"time"
)

// The window's clock is Redis's, read inside every call: every process
// agrees on the bucket, whatever its own clock. The client only guesses
// the bucket a call will be in, to write each slot's bit for it
// (windowCall.expect); a call in another bucket works the bits out
// itself and says which bucket it was in, the next calls' guess.

// clockArg is window.lua's ARGV[8]: "" for Redis's clock, or the test
// clock's time in ms.
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

// saw records that a call found itself in bucket b.
func (w *Window) saw(b int64) { w.bucketSeen.Store(b) }
