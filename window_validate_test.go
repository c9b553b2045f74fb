package rbloom

import (
	"cmp"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// TestWindowValidators runs the same damaged rings and settings through
// the two validators of a window: Go's (Window.state, parseHeader and
// ring.parseState, which TestMany's reads run, no script) and window.lua's
// (its checks of the settings, header and state, filter.lua's parse,
// before every call's first write). Both must refuse each one with the
// same error, and the script must write nothing.
func TestWindowValidators(t *testing.T) {
	rdb := realRedis(t)
	o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 1}
	int64At := func(v int64) string {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(v))
		return string(b[:])
	}
	position := func(q int) int64 { return ringPositionsByte + ringPositionSize*int64(q) }
	type damage struct {
		ring, settings func(w *Window) // change the ring or its settings
		want           error
		goWant         error // when Go's refusal differs: see the case
	}
	setRange := func(at int64, v string) func(w *Window) {
		return func(w *Window) { rdb.SetRange(ctx, w.ringKey(0), at, v) }
	}
	cases := map[string]damage{
		// The header of the generations.
		"magic":           {ring: setRange(0, "xbloom"), want: ErrNotFilter},
		"version":         {ring: setRange(6, "\x09"), want: ErrNotFilter},
		"mode counting":   {ring: setRange(7, "c"), want: ErrParamsMismatch},
		"mode unknown":    {ring: setRange(7, "z"), want: ErrNotFilter},
		"k 0":             {ring: setRange(8, "\x00"), want: ErrNotFilter},
		"other k":         {ring: setRange(8, "\x05"), want: ErrParamsMismatch},
		"other m":         {ring: setRange(12, "\x00\x00\x00\x07"), want: ErrParamsMismatch},
		"m 0":             {ring: setRange(12, "\x00\x00\x00\x00"), want: ErrNotFilter},
		"index past P":    {ring: setRange(20, "\x00\x00\x00\x05"), want: ErrNotFilter},
		"reserved byte":   {ring: setRange(reservedByte+2, "\x01"), want: ErrNotFilter},
		"incarnation":     {ring: setRange(incByte, "\x01\x02\x03\x04\x05\x06\x07\x08"), want: ErrDamaged},
		"truncated":       {ring: func(w *Window) { v := rdb.Get(ctx, w.ringKey(0)).Val(); rdb.Set(ctx, w.ringKey(0), v[:len(v)-1], 0) }, want: ErrDamaged},
		"extended":        {ring: func(w *Window) { rdb.Append(ctx, w.ringKey(0), "\x00") }, want: ErrDamaged},
		"state cut short": {ring: func(w *Window) { v := rdb.Get(ctx, w.ringKey(0)).Val(); rdb.Set(ctx, w.ringKey(0), v[:w.r.state-1], 0) }, want: ErrDamaged},
		// Go's reads (GETRANGE, STRLEN) see an empty string as no ring,
		// one gone before its time; the script also asks EXISTS.
		"empty string": {ring: func(w *Window) { rdb.Set(ctx, w.ringKey(0), "", 0) }, want: ErrNotFilter, goWant: ErrDamaged},
		// The state block.
		"other bucket":      {ring: setRange(ringBucketByte, int64At(30_000)), want: ErrParamsMismatch},
		"other W":           {ring: setRange(ringWByte, int64At(9)), want: ErrParamsMismatch},
		"cursor negative":   {ring: setRange(ringCursorByte, int64At(-7)), want: ErrDamaged},
		"cursor misaligned": {ring: setRange(ringCursorByte, int64At(5)), want: ErrDamaged},
		"cursor past end":   {ring: setRange(ringCursorByte, int64At(7*1_000_000)), want: ErrDamaged},
		"position -3":       {ring: setRange(position(2), int64At(-3)), want: ErrDamaged},
		"position residue":  {ring: setRange(position(2), int64At(7*1000+3)), want: ErrDamaged},
		"position out of span": {ring: func(w *Window) {
			old := w.expected() - 8 // more than gens = 5 before the current bucket
			rdb.SetRange(ctx, w.ringKey(0), position(int(old%7)), int64At(old))
		}, want: ErrDamaged},
		"position ahead of the clock": {ring: func(w *Window) {
			c := w.expected() + 7*2
			rdb.SetRange(ctx, w.ringKey(0), position(int(c%7)), int64At(c))
		}, want: ErrDamaged},
		// The settings.
		"settings of another window": {settings: func(w *Window) { rdb.HSet(ctx, w.settingsKey(0), "s", w.settings[0]+"x") }, want: ErrParamsMismatch},
		"settings gone":              {settings: func(w *Window) { rdb.Del(ctx, w.settingsKey(0)) }, want: ErrDamaged},
		"settings' incarnation":      {settings: func(w *Window) { rdb.HSet(ctx, w.settingsKey(0), "inc", "\x01\x02\x03\x04\x05\x06\x07\x08") }, want: ErrDamaged},
		"ring gone before its time":  {ring: func(w *Window) { rdb.Del(ctx, w.ringKey(0)) }, want: ErrDamaged},
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			rdb.FlushAll(ctx)
			clk := newClock(time.UnixMilli(1_000_000_000_000))
			w := created(t, clocked(must(NewWindow(rdb, "validated", o)).on(t), clk))
			held := events("held", 20)
			must(w.TestOrAddMany(ctx, held)).on(t)
			if w.r.w != 7 {
				t.Fatalf("W = %d: the cases are written for 7", w.r.w)
			}
			if d.ring != nil {
				d.ring(w)
			}
			if d.settings != nil {
				d.settings(w)
			}
			before := dump(t, rdb)

			_, goErr := w.TestMany(ctx, held)
			rec := w.f.record("window", "", 0, 0, "", w.f.retryKeep, time.Time{})
			call := w.encode(windowCall{part: 0, head: w.f.parts[0].head, rec: rec, create: createNone, expect: w.expected(), round: "validate"})
			_, luaErr := runScripts(ctx, rdb, windowScript, false, []scriptCall{call}, replication{})
			luaErr = callError("window", luaErr)

			if want := cmp.Or(d.goWant, d.want); !errors.Is(goErr, want) {
				t.Errorf("Go: %v, want %v", goErr, want)
			}
			if !errors.Is(luaErr, d.want) {
				t.Errorf("Lua: %v, want %v", luaErr, d.want)
			}
			if after := dump(t, rdb); len(after) != len(before) || !equalDumps(before, after) {
				t.Errorf("the refused script call changed Redis")
			}
		})
	}
}

// equalDumps reports whether two dumps hold the same keys and values.
func equalDumps(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}
