package rbloom

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The values of window.lua's protocol, written into the script from these
// constants (windowLuaConstants) so that Go and Lua use the same.
const (
	// What the client's read of an event found (windowCall.found).
	foundHeld = 'h' // held by a live generation: answered seen
	foundNone = 'f' // in none of the past generations
	notRead   = 'd' // not read: the call reads its words itself

	// What a call may make of a missing ring (windowCall.create).
	createNone     = "0" // nothing: the call answers windowMissing
	createRing     = "1" // the ring and its settings
	createSettings = "s" // the settings alone (the root's, made first)

	// Which partition the call is in: the root, whose ring every call
	// touches and expires first (Window.root), or another.
	partRoot  = "r"
	partOther = "p"

	// The kinds of reply, by their first character; any other reply is
	// one answer an event, answerSeen or answerNew.
	windowMissing = '?' // the ring does not exist and the call may not make it: REPLY_MISSING, as a filter's (writecall.go)
	windowWait    = '~' // the current bucket's generation was being cleared: call again
	windowReread  = '^' // in another bucket than the read's, with events found held: read again
	windowMoved   = '!' // the answers, in another bucket than expected
	answerSeen    = '1'
	answerNew     = '0'
)

// How long a ring lives after a write: the span's generations, at least
// minRingTTL (a ring of tiny buckets outlives a slow round trip), and the
// rings of the other partitions than the root otherRingBuckets buckets
// more, so that the root's, which every call touches, expires first.
// window.lua gives the TTLs, and a restore the same (Window.ringTTLs).
const (
	minRingTTL       = time.Minute
	otherRingBuckets = 3
)

// windowLuaConstants are the constants above as window.lua reads them
// (scripts.go appends them to luaConstants).
var windowLuaConstants = fmt.Sprintf(`local FOUND_HELD, FOUND_NONE, NOT_READ = %q, %q, %q
local CREATE_NONE, CREATE_RING, CREATE_SETTINGS = %q, %q, %q
local PART_ROOT, PART_OTHER = %q, %q
local REPLY_WAIT, REPLY_REREAD, REPLY_MOVED = %q, %q, %q
local ANSWER_SEEN, ANSWER_NEW = %q, %q
local MIN_RING_TTL, OTHER_RING_BUCKETS = %d, %d
`, string(rune(foundHeld)), string(rune(foundNone)), string(rune(notRead)),
	createNone, createRing, createSettings, partRoot, partOther,
	string(rune(windowWait)), string(rune(windowReread)), string(rune(windowMoved)),
	string(rune(answerSeen)), string(rune(answerNew)), minRingTTL.Milliseconds(), otherRingBuckets)

// windowCall is one call of window.lua, its keys and arguments by name
// (the script's header comment says what each means). The window's own
// values (settings, bucket, span, clock) come from the Window that
// encodes it.
type windowCall struct {
	part    int
	head    string // ARGV[1]: the partition's header, with the incarnation of new rings
	rec     record // KEYS[5..], ARGV[5..7]
	create  string // ARGV[9]: createNone, createRing or createSettings
	expect  int64  // ARGV[10]: the bucket the offsets are written for
	round   string // ARGV[12]
	found   []byte // ARGV[13]: foundHeld, foundNone or notRead an event
	offsets []uint64
	// offsets are the words (bit offsets) of the events not found held,
	// k each in order: ARGV[14..] are their bits in bucket expect.
}

// encode returns c's keys and arguments, in window.lua's order.
func (w *Window) encode(c windowCall) scriptCall {
	root := partOther
	if c.part == w.root {
		root = partRoot
	}
	args := make([]any, 0, 13+len(c.offsets))
	args = append(args, c.head, w.settings[c.part],
		strconv.FormatInt(w.bucket.Milliseconds(), 10), strconv.Itoa(w.r.gens),
		strconv.FormatInt(c.rec.ttl, 10), c.rec.field, c.rec.tag, w.clockArg(),
		c.create, strconv.FormatInt(c.expect, 10), root, c.round, string(c.found))
	for _, o := range c.offsets {
		args = append(args, w.r.bit(o, c.expect))
	}
	return scriptCall{keys: append(windowKeys(w.f.parts[c.part].key), c.rec.keys...), args: args}
}

// windowReply is a decoded reply of window.lua.
type windowReply struct {
	kind    byte   // windowMissing, windowWait, windowReread, or windowMoved and 0 for answers
	bucket  int64  // the call's bucket, for windowReread and windowMoved
	answers string // answerSeen or answerNew an event
}

// decodeWindowReply decodes r, the reply of a call of n events.
func decodeWindowReply(r string, n int) (windowReply, error) {
	bad := fmt.Errorf("script answered %q to a call of %d events", r, n)
	out := windowReply{answers: r}
	if r != "" {
		switch r[0] {
		case windowMissing, windowWait:
			if len(r) != 1 {
				return windowReply{}, bad
			}
			return windowReply{kind: r[0]}, nil
		case windowReread:
			b, err := strconv.ParseInt(r[1:], 10, 64)
			if err != nil {
				return windowReply{}, bad
			}
			return windowReply{kind: windowReread, bucket: b}, nil
		case windowMoved:
			b, answers, ok := strings.Cut(r[1:], ":")
			bucket, err := strconv.ParseInt(b, 10, 64)
			if !ok || err != nil {
				return windowReply{}, bad
			}
			out = windowReply{kind: windowMoved, bucket: bucket, answers: answers}
		}
	}
	if len(out.answers) != n || strings.Trim(out.answers, string([]byte{answerSeen, answerNew})) != "" {
		return windowReply{}, bad
	}
	return out, nil
}

// answered reports whether the reply holds the call's answers.
func (r windowReply) answered() bool { return r.kind == 0 || r.kind == windowMoved }

// seen writes the answers to out at the events' positions at.
func (r windowReply) seen(at []int, out []bool) {
	for j, pos := range at {
		out[pos] = r.answers[j] == answerSeen
	}
}
