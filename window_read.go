package rbloom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

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

// pipelined runs the units in one pipeline.
func (w *Window) pipelined(ctx context.Context, units []txUnit) error {
	pipe := w.f.rdb.Pipeline()
	for _, u := range units {
		u.queue(pipe)
	}
	return execAll(ctx, pipe)
}

// readRings runs the units in pipelines of at most limit slots, as
// filter.transact runs them but without MULTI (ringRead), and again while
// a cluster refuses them for now or the settings of a ring moved while it
// was read (settled).
func (w *Window) readRings(ctx context.Context, units []txUnit, limit int, settled func() error) error {
	var groups [][]txUnit
	slots := 0
	for _, u := range units {
		if n := len(groups); n == 0 || slots+u.slots > limit {
			groups, slots = append(groups, nil), 0
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], u)
		slots += u.slots
	}
	run := func() error {
		if len(groups) == 1 { // the usual case: no goroutine
			if err := w.pipelined(ctx, groups[0]); err != nil {
				return err
			}
			return settled()
		}
		if err := w.inParallel(ctx, groups); err != nil {
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

// inParallel runs each group of units in its own pipeline, txWorkers at
// a time, and returns the first error.
func (w *Window) inParallel(ctx context.Context, groups [][]txUnit) error {
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	sem := make(chan struct{}, txWorkers)
	for i, group := range groups {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = w.pipelined(ctx, group)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
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
	if len(head) > markByte && head[markByte] == markLoad {
		// Installed by a restore and not yet open (window_dump.go): its
		// settings come at the open.
		return st, 0, false, failf(ErrLoading, "%s: %s is being restored: ask again once the restore is over", w.f.name, key)
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
	return observe(ctx, w.f.obs, w.callOf("TestMany", len(events)), func(ctx context.Context) ([]bool, error) {
		return w.testMany(ctx, events)
	})
}

// testMany is TestMany, unobserved.
func (w *Window) testMany(ctx context.Context, events []string) ([]bool, error) {
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
// (Window.root), and checks the states as every call does (check). An
// event not read gets the zero wordsRead.
func (w *Window) readWords(ctx context.Context, pl placement, want []bool, from, to int) ([]wordsRead, error) {
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
	per := (to - from) * len(w.r.fields()) // fields read of an event
	isRoot := func(p int) bool { return p == w.root }
	units, checks, err := w.readUnits(ctx, groups, isRoot, per, func(pipe redis.Pipeliner, u *ringUnit) {
		u.words = w.queueWords(ctx, pipe, pl, u, from, to)
	})
	if err != nil {
		return nil, err
	}
	reads := make([]wordsRead, len(pl.offsets)/w.f.h.k)
	for i, u := range units {
		ring := &ringWords{ok: checks[i].ok, bucket: checks[i].bucket}
		if ring.ok {
			ring.mask = checks[i].st.liveMask(w.r, ring.bucket)
		}
		for _, e := range u.events {
			reads[e].ring = ring
		}
		if !ring.ok || u.words == nil {
			continue // no ring: nothing held
		}
		vals := u.words.Val()
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

// ringUnit is one partition's ring read with the words of some events.
type ringUnit struct {
	p      int
	events []int
	head   ringRead
	words  *redis.IntSliceCmd // nil without events
}

// readUnits reads the rings of the partitions of groups' events (and of
// those always says, with none), a unit of at most maxWindowWords words
// of per fields an event each, what more queues after each ring's head,
// and checks them (check), reading again while a ring read missing
// appeared meanwhile.
func (w *Window) readUnits(ctx context.Context, groups [][]int, always func(p int) bool, per int, more func(redis.Pipeliner, *ringUnit)) ([]*ringUnit, []ringCheck, error) {
	var units []*ringUnit
	txs := unitsOf(groups, max(1, maxWindowWords/per), always, func(p int, events []int) txUnit {
		u := &ringUnit{p: p, events: events}
		units = append(units, u)
		return txUnit{p: p, slots: len(events) * per, queue: func(pipe redis.Pipeliner) {
			u.head = w.readRing(ctx, pipe, p, func() { more(pipe, u) })
		}}
	})
	var checks []ringCheck
	settled := func() error {
		for _, u := range units {
			if err := u.head.settled(); err != nil {
				return err
			}
		}
		var err error
		checks, err = w.check(ctx, units)
		return err
	}
	return units, checks, w.readRings(ctx, txs, maxWindowWords, settled)
}

// queueWords queues one BITFIELD_RO of the words from .. to-1 of u's
// events, nil when it has none.
func (w *Window) queueWords(ctx context.Context, pipe redis.Pipeliner, pl placement, u *ringUnit, from, to int) *redis.IntSliceCmd {
	if len(u.events) == 0 {
		return nil
	}
	fields := w.r.fields()
	k := w.f.h.k
	args := []any{"BITFIELD_RO", w.ringKey(u.p)}
	for _, e := range u.events {
		for _, o := range pl.offsets[e*k+from : e*k+to] {
			for j, width := range fields {
				args = append(args, argGet, fieldTypes[width], o+uint64(ringFieldBits*j))
			}
		}
	}
	cmd := redis.NewIntSliceCmd(ctx, args...)
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// fieldTypes are the BITFIELD types of fields of each width.
var fieldTypes = func() []any {
	out := make([]any, ringFieldBits+1)
	for width := range out {
		out[width] = "u" + strconv.Itoa(width)
	}
	return out
}()

// ringCheck is what check found of one unit's ring: whether it exists,
// its state, the time of the read and the bucket it is in.
type ringCheck struct {
	ok     bool
	st     ringState
	nowMS  int64
	bucket int64
}

// check checks the rings that units read as every call does: a ring
// damaged, missing before its time (state), or lost while the root lives
// (lost), or a root lost beside other rings (rootLost), fails, and a
// window without the root's settings is not found. A ring read missing
// that exists by the end of the reads (the units' pipelines are not one
// moment: one may have read before a window was made or restored,
// another after) gives errSettingsMoved, for the reads to go again: its
// events, read as absent, may be held.
func (w *Window) check(ctx context.Context, units []*ringUnit) ([]ringCheck, error) {
	checks := make([]ringCheck, len(units))
	var missing []int
	rootLives, rootMissing, rootSettings := false, false, false
	for i, u := range units {
		st, nowMS, ok, err := w.state(u.p, u.head)
		if err != nil {
			return nil, err
		}
		checks[i] = ringCheck{ok: ok, st: st, nowMS: nowMS, bucket: nowMS / w.bucket.Milliseconds()}
		if ok {
			if checks[i].bucket, err = st.current(w.ringKey(u.p), nowMS); err != nil {
				return nil, err
			}
		}
		switch {
		case u.p == w.root:
			rootLives, rootMissing = rootLives || ok, rootMissing || !ok
			rootSettings = rootSettings || u.head.hasSettings()
		case !ok && !slices.Contains(missing, u.p):
			missing = append(missing, u.p)
		}
	}
	if rootLives && rootMissing {
		return nil, errSettingsMoved
	}
	if err := w.lost(ctx, rootLives, missing); err != nil {
		return nil, ringAppeared(err)
	}
	if !rootSettings { // and no root ring: state refuses one without them
		if err := w.rootLost(ctx); err != nil && !errors.Is(err, errDropped) {
			return nil, ringAppeared(err)
		}
		return nil, w.notFound()
	}
	return checks, nil
}

// errRingAppeared is lost's and rootLost's answer when a ring read missing
// exists now: create goes on (another process made it), check reads
// again (ringAppeared).
var errRingAppeared = errors.New("rbloom: a window's ring read missing exists now")

// ringAppeared is err, or errSettingsMoved for errRingAppeared: the reads
// go again.
func ringAppeared(err error) error {
	if errors.Is(err, errRingAppeared) {
		return errSettingsMoved
	}
	return err
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
