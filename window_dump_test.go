package rbloom

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// dumpWindowOpts is the window the dump tests make: three partitions,
// buckets of an hour over three, so that Redis's clock keeps every event
// of the test within the span.
var dumpWindowOpts = WindowOptions{EventsPerBucket: 2000, Bucket: time.Hour, Span: 3 * time.Hour, Partitions: 3}

// dumpWindow makes the window name on rdb with o's KeyPrefix, adds
// events to it and returns it with the events.
func dumpWindow(t *testing.T, rdb redis.UniversalClient, name, prefix string) (*Window, []string) {
	t.Helper()
	o := dumpWindowOpts
	o.KeyPrefix = prefix
	w := created(t, must(NewWindow(rdb, name, o)).on(t))
	evs := events("ev-", 1500)
	if seen := must(w.TestOrAddMany(ctx, evs)).on(t); slices.Contains(seen, true) {
		t.Fatal("a new event answered seen")
	}
	return w, evs
}

func windowDumpOf(t *testing.T, w *Window) []byte {
	t.Helper()
	var buf bytes.Buffer
	n := must(w.Dump(ctx, &buf)).on(t)
	if n != int64(buf.Len()) {
		t.Fatalf("Dump = %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

// allSeen fails the test unless every event tests seen in w, by TestMany
// and then by TestOrAddMany (which adds none of them again).
func allSeen(t *testing.T, w *Window, evs []string) {
	t.Helper()
	for i, ok := range must(w.TestMany(ctx, evs)).on(t) {
		if !ok {
			t.Fatalf("%s: TestMany(%q) = false after the restore", w.f.name, evs[i])
		}
	}
	for i, ok := range must(w.TestOrAddMany(ctx, evs)).on(t) {
		if !ok {
			t.Fatalf("%s: TestOrAdd(%q) answered new after the restore", w.f.name, evs[i])
		}
	}
}

// fewSeen fails the test when more than a few of events never added test
// seen in w (false positives at the window's 1%).
func fewSeen(t *testing.T, w *Window, evs []string) {
	t.Helper()
	n := 0
	for _, ok := range must(w.TestMany(ctx, evs)).on(t) {
		if ok {
			n++
		}
	}
	if n > len(evs)/20 {
		t.Fatalf("%s: %d of %d events never added test seen", w.f.name, n, len(evs))
	}
}

// TestWindowDumpRestore restores a window under another name and another
// KeyPrefix: every event it held tests seen, new ones do not, and the
// restored keys have the TTLs window.lua gives them, the root's settings
// none.
func TestWindowDumpRestore(t *testing.T) {
	rdb := realRedis(t)
	w, evs := dumpWindow(t, rdb, "wd", "")
	b := windowDumpOf(t, w)
	for _, prefix := range []string{"", "other:"} {
		g, err := RestoreWindow(ctx, rdb, "wd-copy", WindowOptions{KeyPrefix: prefix}, bytes.NewReader(b))
		if err != nil {
			t.Fatalf("RestoreWindow under %q: %v", prefix, err)
		}
		allSeen(t, g, evs)
		fewSeen(t, g, events("never-", 1000))
		// A handle made with the window's options uses it as its own.
		o := dumpWindowOpts
		o.KeyPrefix = prefix
		h := must(NewWindow(rdb, "wd-copy", o)).on(t)
		if must(h.TestOrAdd(ctx, "after")).on(t) || !must(g.TestOrAdd(ctx, "after")).on(t) {
			t.Fatal("an event added after the restore is not seen by both handles")
		}
		gi, wi := must(g.Info(ctx)).on(t), must(w.Info(ctx)).on(t)
		if len(gi.Generations) != 1 || len(wi.Generations) != 1 || gi.Generations[0].Items != wi.Generations[0].Items+1 {
			t.Fatalf("restored Info %+v, dumped %+v", gi.Generations, wi.Generations)
		}
		// Dumped again, it gives a dump as long.
		if b2 := windowDumpOf(t, g); len(b2) != len(b) {
			t.Fatalf("dump of the restored window: %d bytes, want %d", len(b2), len(b))
		}
		for p := range g.f.parts {
			ringTTL, settingsTTL := g.ringTTLs(p)
			got := rdb.PTTL(ctx, g.ringKey(p)).Val()
			if got > ringTTL || got < ringTTL-time.Minute {
				t.Errorf("%s: PTTL %v, want about %v", g.ringKey(p), got, ringTTL)
			}
			got = rdb.PTTL(ctx, g.settingsKey(p)).Val()
			switch {
			case p == g.root && got != -1*time.Millisecond && got != -1:
				t.Errorf("the root's settings %s: PTTL %v, want none", g.settingsKey(p), got)
			case p != g.root && (got > settingsTTL || got < settingsTTL-time.Minute):
				t.Errorf("%s: PTTL %v, want about %v", g.settingsKey(p), got, settingsTTL)
			}
		}
	}
	// Not into another number of partitions; not as a filter; a filter's
	// dump is not a window's.
	if _, err := RestoreWindow(ctx, rdb, "wd-p", WindowOptions{Partitions: 4}, bytes.NewReader(b)); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "restore with 3") {
		t.Errorf("RestoreWindow into 4 partitions = %v, want ErrInvalidOptions naming the fix", err)
	}
	if _, err := Restore(ctx, rdb, "wd-f", Options{}, bytes.NewReader(b)); !errors.Is(err, ErrBadDump) || !strings.Contains(err.Error(), "RestoreWindow") {
		t.Errorf("Restore of a window's dump = %v, want ErrBadDump naming RestoreWindow", err)
	}
	c := created(t, newCounting(t, rdb, "cf", Options{Capacity: 100}))
	var fb bytes.Buffer
	must(c.Dump(ctx, &fb)).on(t)
	if _, err := RestoreWindow(ctx, rdb, "wd-w", WindowOptions{}, &fb); !errors.Is(err, ErrBadDump) || !strings.Contains(err.Error(), "filter's dump") {
		t.Errorf("RestoreWindow of a filter's dump = %v, want ErrBadDump", err)
	}
	if _, err := RestoreWindow(ctx, rdb, "wd-o", WindowOptions{Span: time.Hour}, bytes.NewReader(b)); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("RestoreWindow with a Span = %v, want ErrInvalidOptions", err)
	}
	for _, k := range keysNow(t, rdb) {
		if strings.Contains(k, "wd-p") || strings.Contains(k, "wd-f") || strings.Contains(k, "wd-w") || strings.Contains(k, "wd-o") ||
			strings.Contains(k, ":restore:") || strings.Contains(k, ":dump:") || strings.HasSuffix(k, ":rebuild") || strings.HasSuffix(k, ":restoring") {
			t.Errorf("key %s left behind", k)
		}
	}
	// DumpWindow reads the window's settings from Redis: the same dump.
	var buf bytes.Buffer
	must(DumpWindow(ctx, rdb, "wd", WindowOptions{}, &buf)).on(t)
	if buf.Len() != len(b) {
		t.Errorf("DumpWindow wrote %d bytes, Window.Dump %d", buf.Len(), len(b))
	}
	if _, err := DumpWindow(ctx, rdb, "nothing", WindowOptions{}, io.Discard); !errors.Is(err, ErrNotFound) {
		t.Errorf("DumpWindow of a missing window = %v, want ErrNotFound", err)
	}
	nothing := must(NewWindow(rdb, "nothing", dumpWindowOpts)).on(t)
	if _, err := nothing.Dump(ctx, io.Discard); !errors.Is(err, ErrNotFound) {
		t.Errorf("Dump of a missing window = %v, want ErrNotFound", err)
	}
}

// TestWindowRestoredLater: generations keep their buckets. A dump taken
// two buckets before Redis's clock holds three generations: the oldest
// has left the span by the restore, the two others have not: only the
// first is forgotten.
func TestWindowRestoredLater(t *testing.T) {
	rdb := realRedis(t)
	now := time.Now()
	clk := newClock(now.Add(-5 * time.Hour))
	o := dumpWindowOpts
	w := created(t, clocked(must(NewWindow(rdb, "later", o)).on(t), clk))
	old, kept, newest := events("old-", 300), events("kept-", 300), events("newest-", 300)
	must(w.TestOrAddMany(ctx, old)).on(t) // bucket c-5 by the restore's clock
	clk.add(2 * time.Hour)
	must(w.TestOrAddMany(ctx, kept)).on(t) // c-3
	clk.add(time.Hour)
	must(w.TestOrAddMany(ctx, newest)).on(t) // c-2
	allSeen(t, w, old)                       // still within the span at the dump
	b := windowDumpOf(t, w)
	g := must(RestoreWindow(ctx, rdb, "later-copy", WindowOptions{}, bytes.NewReader(b))).on(t)
	allSeen(t, g, kept)
	allSeen(t, g, newest)
	fewSeen(t, g, old)
	// The generation of c-5 shares c's position: the calls clear it
	// first, and the others stay.
	for range 3 {
		must(g.TestOrAddMany(ctx, events("fresh-", 50))).on(t)
	}
	allSeen(t, g, kept)
}
