package rbloom

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
)

// A window partition is one Redis string, its ring (lua/window.lua and
// docs/format.md): the header of one generation's partition, a state
// block, then one word of W bits per slot, bit q of a word being that
// slot in the generation at ring position q. A generation of bucket b
// lives at position b mod W. W is gens+2: the live generations (the
// current bucket's and gens before it) and one whose bits are being
// cleared for the next bucket. One read of a word answers for every
// generation, so an event costs k reads and at most k writes whatever the
// span.
// The state block of a ring, int64 big-endian fields (window.lua reads
// them from the constants scripts.go writes).
const (
	ringBucketByte    = headerSize      // the bucket, in ms
	ringWByte         = headerSize + 8  // W
	ringCursorByte    = headerSize + 16 // the cleaning cursor: bytes of words cleared in this pass
	ringPositionsByte = headerSize + 24 // position q's bucket at + 16q, its events at + 16q + 8
	ringPositionSize  = 16
	// ringFieldBits is the widest BITFIELD field a word is read as: Lua's
	// bit library works on 32 bits.
	ringFieldBits = 32
)

type ring struct {
	w     int    // W, the bits of a word
	gens  int    // past generations read besides the current one
	m     uint64 // slots of one partition
	state int    // bytes of the header and the state: where the words start
	size  int64  // bytes of the whole string
}

func newRing(gens int, m uint64) ring {
	w := gens + 2
	state := ringPositionsByte + ringPositionSize*w
	return ring{w: w, gens: gens, m: m, state: state, size: int64(state) + int64((m*uint64(w)+7)/8)}
}

// word is the bit offset of slot s's word.
func (r ring) word(s uint64) uint64 { return uint64(r.state)*8 + s*uint64(r.w) }

// bit is the bit offset, in the word at offset word, of the generation of
// bucket b.
func (r ring) bit(word uint64, b int64) string {
	return strconv.FormatUint(word+uint64(b%int64(r.w)), 10)
}

// fields are the widths of the BITFIELD fields a word is read as: 32 bits
// each but the last, so that Lua's 32-bit bit library can AND them.
func (r ring) fields() []int {
	var out []int
	for left := r.w; left > 0; left -= ringFieldBits {
		out = append(out, min(ringFieldBits, left))
	}
	return out
}

// ringState is what the state block of a ring says.
type ringState struct {
	bucketMS int64
	w        int64
	cursor   int64
	held     []int64 // per position: the bucket held, 0 clean, -1 and -2 being cleaned
	items    []int64 // per position: the events added
}

// parseState reads the state block from the start of a ring, head (at
// least r.state bytes), and checks it as window.lua does.
func (r ring) parseState(key, head string, bucketMS int64) (ringState, error) {
	at := func(i int) int64 { return int64(binary.BigEndian.Uint64([]byte(head[i : i+8]))) }
	st := ringState{bucketMS: at(ringBucketByte), w: at(ringWByte), cursor: at(ringCursorByte)}
	if st.bucketMS != bucketMS || st.w != int64(r.w) {
		return st, failf(ErrParamsMismatch, "%s holds a window of other buckets or span", key)
	}
	if st.cursor < 0 || st.cursor > r.size-int64(r.state) || st.cursor%int64(r.w) != 0 {
		return st, failf(ErrDamaged, "%s: cleaning cursor %d", key, st.cursor)
	}
	for q := range r.w {
		h := at(ringPositionsByte + ringPositionSize*q)
		if h < -2 || (h > 0 && h%int64(r.w) != int64(q)) {
			return st, failf(ErrDamaged, "%s: position %d holds %d", key, q, h)
		}
		st.held = append(st.held, h)
		st.items = append(st.items, at(ringPositionsByte+ringPositionSize*q+8))
	}
	// No window leaves two generations more than gens buckets apart (each
	// call marks the older ones first): one moved out of the span by a
	// rewritten position would answer its events new.
	newest := slices.Max(st.held)
	for q, h := range st.held {
		if h > 0 && h < newest-int64(r.gens) {
			return st, failf(ErrDamaged, "%s: position %d holds bucket %d, more than %d before bucket %d", key, q, h, r.gens, newest)
		}
	}
	return st, nil
}

// current is the bucket a call at time nowMS (Unix ms) is in: Redis's
// clock, never before the newest generation held. A generation ahead of
// the clock by more than the span is damage, as window.lua says.
func (st ringState) current(key string, nowMS int64) (int64, error) {
	c := nowMS / st.bucketMS
	for q, h := range st.held {
		if h > c+st.w {
			return 0, failf(ErrDamaged, "%s: position %d holds bucket %d, ahead of the clock's %d", key, q, h, c)
		}
	}
	for _, h := range st.held {
		c = max(c, h)
	}
	return c, nil
}

// live reports whether position q holds a generation read in bucket c.
func (st ringState) live(q int, c int64, gens int) bool {
	h := st.held[q]
	return h > 0 && h >= c-int64(gens) && h <= c
}

// liveMask is the set of live positions of a W-bit word, as the word's
// fields read it: bit q of the word is the top bit of field
// q/ringFieldBits shifted right by q%ringFieldBits.
func (st ringState) liveMask(r ring, c int64) []uint32 {
	fields := r.fields()
	mask := make([]uint32, len(fields))
	for q := range r.w {
		if st.live(q, c, r.gens) {
			mask[q/ringFieldBits] |= 1 << (fields[q/ringFieldBits] - 1 - q%ringFieldBits)
		}
	}
	return mask
}

// windowSettings is what a window's settings hash holds in 's': the
// header, then the bucket and span and the size of its blocks (blocks.go)
// and of a group, which say where its events are.
func windowSettings(head string, bucketMS, spanMS int64) string {
	return fmt.Sprintf("%s;ring;bucket=%dms;span=%dms;blocks=%dx%d", head, bucketMS, spanMS, blockSlots, groupSlots)
}
