package rbloom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Create makes the window, empty, if it does not exist; otherwise it
// checks that the stored window has this handle's settings. No other call
// makes a window: one that Redis lost (a restart without persistence, a
// flush, eviction) fails every call with ErrNotFound rather than answer
// the events it held new. So call Create once, where the stream the
// window deduplicates starts (a consumer group with no committed offset,
// say): called at every start, it would make a lost window again, empty,
// and its events would be answered new once more. Create fails with
// ErrDamaged, writing nothing, when rings of the window live while its
// root partition's settings are gone.
func (w *Window) Create(ctx context.Context) error {
	return observeErr(ctx, w.f.obs, w.callOf("Create", 0), func(ctx context.Context) error {
		if err := w.f.checkServer(ctx); err != nil {
			return callError("window create", err)
		}
		if err := w.create(ctx, true); err != nil {
			return callError("window create", err)
		}
		return nil
	})
}

// notFound is the error of a call on a window whose root partition has
// no settings.
func (w *Window) notFound() error {
	return failf(ErrNotFound, "%s: no window: never made, dropped, or lost by Redis (whose events would now answer new); Window.Create makes it, empty", w.f.name)
}

// create creates the ring of every partition that does not have it yet,
// the root's last: while the root's ring lives, every other partition's
// does (its TTL is longer, and every call touches the root), so one found
// missing then was lost, and create fails with ErrDamaged rather than
// make it again empty. Only Create (makeWindow) writes the root's
// settings, before any ring, so that a root whose ring and settings are
// both missing beside live rings was lost, not being made (rootLost); a
// call's create finding them missing fails with ErrNotFound.
func (w *Window) create(ctx context.Context, makeWindow bool) error {
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
	if s, err := rootSettings.Result(); err == nil && s != w.settings[w.root] {
		return failf(ErrParamsMismatch, "%s holds other settings than this handle's", w.settingsKey(w.root))
	}
	rootLives := rings[w.root].Val() > 0
	if err := w.lost(ctx, rootLives, missing); err != nil && !errors.Is(err, errRingAppeared) {
		return err
	}
	if !rootLives && rootSettings.Err() == redis.Nil {
		// Rings left by calls during a Drop become the new window's: to
		// delete them would race with another process making it, whose
		// rings they may be by then.
		if err := w.rootLost(ctx); err != nil && !errors.Is(err, errDropped) && !errors.Is(err, errRingAppeared) {
			return err
		}
		if !makeWindow {
			return w.notFound()
		}
	}
	// One incarnation for the rings of every partition, as a filter's
	// (each keeps the one its settings remember, if they do).
	inc := randomIncarnation()
	call := func(p int, create string) scriptCall {
		return w.encode(windowCall{part: p, head: withIncarnation(f.parts[p].head, inc), create: create, expect: w.expected(), round: "create",
			rec: f.record("window", "", p, 0, "", f.retryKeep, time.Time{})})
	}
	if makeWindow && !rootLives {
		if _, err := runScripts(ctx, f.rdb, windowScript, f.fcall, []scriptCall{call(w.root, createSettings)}, f.repl); err != nil {
			return err
		}
	}
	var calls []scriptCall
	for p := range f.parts {
		if p != w.root {
			calls = append(calls, call(p, createRing))
		}
	}
	if _, err := runScripts(ctx, f.rdb, windowScript, f.fcall, calls, f.repl); err != nil {
		return err
	}
	replies, err := runScripts(ctx, f.rdb, windowScript, f.fcall, []scriptCall{call(w.root, createRing)}, f.repl)
	if err != nil {
		return err
	}
	if replies[0] == replyMissing { // its settings went meanwhile: dropped
		return w.notFound()
	}
	return nil
}

// lost returns ErrDamaged when a ring of the partitions missing is still
// missing while the root's lives (rootLives, read before), unless its
// settings say it expired: as said on create, it was lost; and
// errRingAppeared when one of them exists now. They are looked
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
	appeared := false
	for i, e := range exists {
		if e.Val() > 0 {
			appeared = true
			continue
		}
		if t, err := strconv.ParseInt(until[i].Val(), 10, 64); err == nil && t <= nowMS {
			continue // expired with nothing of the span in it
		}
		return failf(ErrDamaged, "%s: %s is gone while the root partition's ring lives: its events cannot be told from new ones", w.f.name, w.ringKey(missing[i]))
	}
	if appeared {
		return errRingAppeared
	}
	return nil
}

// rootLost returns errRingAppeared when the root's ring, read missing,
// exists now, and ErrDamaged when the root's ring and settings are both
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
	if ring.Val() > 0 {
		return errRingAppeared
	}
	if settings.Val()[0] != nil {
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

// Drop deletes the window from Redis: its rings and settings, the root
// partition's last (Window.root): while the root lives, a call finding
// another partition gone fails with ErrDamaged rather than make it again;
// once the root is gone, calls fail with ErrNotFound until Create makes
// a new window, whose rings have another incarnation: the operation ids
// of the dropped one are not replayed. It deletes the partitions of every
// number of partitions the window may have: this handle's, and the one
// the stored headers state (storedPartitions), so that a handle with
// another Partitions drops it whole. (Rings it left would outlive the
// root's settings and make the window made again ErrDamaged, rootLost.)
func (w *Window) Drop(ctx context.Context) error {
	return observeErr(ctx, w.f.obs, w.callOf("Drop", 0), w.drop)
}

// drop is Drop, unobserved.
func (w *Window) drop(ctx context.Context) error {
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
