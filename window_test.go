package rbloom

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clock is a settable clock for windows.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time       { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration)  { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }
func newClock(start time.Time) *clock { return &clock{t: start} }

// clocked makes w read clk instead of Redis's clock: tests only.
func clocked(w *Window, clk *clock) *Window {
	w.clock = func() int64 { return clk.now().UnixMilli() }
	return w
}
func events(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}

// TestWindowRemembersForTheSpan: an event is seen for at least Span, a
// bucket boundary opens no gap, and once it is older than Span plus a
// bucket it is forgotten.
func TestWindowRemembersForTheSpan(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		clk := newClock(time.UnixMilli(1_000_000_000_000))
		w := created(t, clocked(must(NewWindow(rdb, "dedup", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 4 * time.Minute, Partitions: 2})).on(t), clk))
		evs := events("e", 300)
		if got := must(w.TestOrAddMany(ctx, evs)).on(t); slices.Contains(got, true) {
			t.Fatalf("first delivery: some events answered seen: %v", got)
		}
		// Every minute from just before the next boundary to the end of the
		// span, redelivered events are all seen, and new ones are new.
		clk.add(59 * time.Second)
		for step := range 4 { // up to 3m59s: within the span of 4 minutes
			for i, seen := range must(w.TestOrAddMany(ctx, evs)).on(t) {
				if !seen {
					t.Fatalf("%v after the first delivery: %q answered new", time.Duration(step)*time.Minute+59*time.Second, evs[i])
				}
			}
			if seen := must(w.TestOrAdd(ctx, fmt.Sprint("fresh-", step))).on(t); seen {
				t.Errorf("a new event answered seen")
			}
			clk.add(time.Minute)
		}
		// The events were redelivered, so never added again: past the span
		// plus a bucket since their first delivery (now 5m59s), they are
		// forgotten.
		clk.add(time.Minute)
		if seen := must(w.TestMany(ctx, evs[:10])).on(t); slices.Contains(seen, true) {
			t.Errorf("Test past the span: %v, want all forgotten", seen)
		}
		forgotten := 0
		for _, seen := range must(w.TestOrAddMany(ctx, evs)).on(t) {
			if !seen {
				forgotten++
			}
		}
		if forgotten < len(evs)*9/10 {
			t.Errorf("%d of %d events forgotten past the span, want nearly all", forgotten, len(evs))
		}
		in := must(w.Info(ctx)).on(t)
		if len(in.Generations) == 0 || in.Generations[len(in.Generations)-1].Items == 0 {
			t.Errorf("Info = %+v, want live generations with items", in)
		}
	})
}

// TestWindowRedisClock runs a window on Redis's clock, buckets of 100ms:
// every event is seen for as long as the span since its add began, the
// generations that leave the span are cleared and their positions reused
// bucket after bucket, and events older than the span plus a bucket are
// forgotten. Two handles share the clock, whatever their processes' own.
func TestWindowRedisClock(t *testing.T) {
	rdb := realRedis(t)
	const bucket, span = 100 * time.Millisecond, 300 * time.Millisecond
	o := WindowOptions{EventsPerBucket: 2000, Bucket: bucket, Span: span, Partitions: 2}
	w1, w2 := created(t, must(NewWindow(rdb, "real", o)).on(t)), created(t, must(NewWindow(rdb, "real", o)).on(t))
	type batch struct {
		events []string
		start  time.Time
	}
	var held []batch
	forgotten, checked := 0, 0
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		w := []*Window{w1, w2}[i%2]
		b := batch{events: events(fmt.Sprint("r", i, "-"), 50), start: time.Now()}
		if slices.Contains(must(w.TestOrAddMany(ctx, b.events)).on(t), true) {
			t.Fatalf("batch %d: a new event answered seen", i)
		}
		held = append(held, b)
		for _, old := range held {
			got := must(w.TestMany(ctx, old.events)).on(t)
			// The add ran on Redis after old.start and the read before
			// now: an age under the span bounds the one Redis saw.
			switch age := time.Since(old.start); {
			case age < span:
				if slices.Contains(got, false) {
					t.Fatalf("an event added %v ago (span %v) is not seen", age, span)
				}
			case age > span+2*bucket:
				checked++
				if !slices.Contains(got, true) {
					forgotten++
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	in := must(w1.Info(ctx)).on(t)
	t.Logf("%d batches, %d of %d old ones forgotten; %d live generations, %d positions cleaning", len(held), forgotten, checked, len(in.Generations), in.Cleaning)
	if checked == 0 || forgotten < checked*9/10 {
		t.Errorf("%d of %d batches older than the span plus two buckets forgotten, want nearly all", forgotten, checked)
	}
}

// TestWindowFalsePositives: with every generation full, the rate of new
// events answered seen stays near the window's target.
func TestWindowFalsePositives(t *testing.T) {
	rdb := realRedis(t)
	clk := newClock(time.UnixMilli(1_000_000_040_000))
	const perBucket, p = 2000, 0.01
	w := created(t, clocked(must(NewWindow(rdb, "fpr", WindowOptions{EventsPerBucket: perBucket, ErrorRate: p, Bucket: time.Minute, Span: 3 * time.Minute})).on(t), clk))
	for g := range 4 { // the current generation and the 3 before it, all full
		must(w.TestOrAddMany(ctx, events(fmt.Sprint("g", g, "-"), perBucket))).on(t)
		clk.add(time.Minute)
	}
	clk.add(-time.Minute)
	fresh := events("never-", 20_000)
	seen := 0
	for _, s := range must(w.TestMany(ctx, fresh)).on(t) {
		if s {
			seen++
		}
	}
	rate := float64(seen) / float64(len(fresh))
	t.Logf("%d of %d new events answered seen: %.4f, target %v over the window", seen, len(fresh), rate, p)
	if rate > 1.3*p {
		t.Errorf("false-positive rate %.4f, want near %v", rate, p)
	}
}

// TestWindowOnce: a replayed batch gets its first decisions.
func TestWindowOnce(t *testing.T) {
	rdb := realRedis(t)
	w := created(t, must(NewWindow(rdb, "once", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: time.Hour, Partitions: 3})).on(t))
	batch := append(events("x", 100), "x1", "x2")
	first := must(w.TestOrAddManyOnce(ctx, batch, "topic/0/0-101")).on(t)
	before := dump(t, rdb)
	if again := must(w.TestOrAddManyOnce(ctx, batch, "topic/0/0-101")).on(t); !slices.Equal(again, first) {
		t.Errorf("a replayed batch got other answers")
	}
	if !maps.Equal(before, dump(t, rdb)) {
		t.Error("a replayed batch changed Redis")
	}
	if first[100] != true || first[0] != false {
		t.Errorf("answers %v: the repeated x1 should be seen, the first new", first)
	}
	// The same through the function library.
	must(0, InstallFunctions(ctx, rdb)).on(t)
	wf := created(t, must(NewWindow(rdb, "once", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: time.Hour, Partitions: 3, UseFunctions: true})).on(t))
	if got := must(wf.TestOrAddMany(ctx, []string{"x0", "by-fcall"})).on(t); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("TestOrAddMany by FCALL = %v, want [true false]", got)
	}
	for _, key := range rdb.Keys(ctx, "rbloom:*:ring").Val() {
		if d := rdb.PTTL(ctx, key).Val(); d <= 0 || d > 65*time.Minute {
			t.Errorf("%s: TTL %v, want at most Span plus 5 buckets (2 for the root's)", key, d)
		}
	}
}

// TestWindowCluster runs a window whose partitions are spread over the
// masters of a cluster.
func TestWindowCluster(t *testing.T) {
	_, rdb := clusterClient(t)
	w := created(t, must(NewWindow(rdb, "spread", WindowOptions{EventsPerBucket: 3000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 6})).on(t))
	evs := events("c", 1000)
	if slices.Contains(must(w.TestOrAddMany(ctx, evs)).on(t), true) {
		t.Error("first delivery: some events answered seen")
	}
	if slices.Contains(must(w.TestOrAddMany(ctx, evs)).on(t), false) {
		t.Error("redelivery: some events answered new")
	}
}

// BenchmarkWindow measures TestOrAddMany of new events in batches of 1,000
// on a real redis-server, for windows of 4 to 144 past generations written
// at the density of full ones, 200,000 events an hour at
// 1e-6 or 1e-9 over the window, and reports events/s, Redis's CPU an
// event (INFO cpu: the reads before the script calls, and the calls) and
// the calls' time an event (INFO commandstats): how the cost grows with
// the span and the error rate.
func BenchmarkWindow(b *testing.B) {
	rdb := realRedis(b)
	for _, c := range []struct {
		gens int
		p    float64
	}{{4, 1e-6}, {24, 1e-6}, {24, 1e-9}, {100, 1e-9}, {144, 1e-9}} {
		b.Run(fmt.Sprintf("%dgens-p%g", c.gens, c.p), func(b *testing.B) {
			clk := newClock(time.UnixMilli(1_000_000_000_000))
			w, err := NewWindow(rdb, fmt.Sprint("bench-", c.gens, c.p), WindowOptions{EventsPerBucket: 200_000, ErrorRate: c.p,
				Bucket: time.Hour, Span: time.Duration(c.gens) * time.Hour, Partitions: 1})
			if err != nil {
				b.Fatal(err)
			}
			clocked(w, clk)
			if _, err := w.TestOrAdd(ctx, "first"); err != nil {
				b.Fatal(err)
			}
			fillPast(b, rdb, w, clk.now().UnixMilli()/time.Hour.Milliseconds(), 200_000)
			rdb.ConfigResetStat(ctx)
			cpu := redisCPU(b, rdb)
			n := 0
			for b.Loop() {
				if _, err := w.TestOrAddMany(ctx, events(fmt.Sprint("b", n, "-"), 1000)); err != nil {
					b.Fatal(err)
				}
				n++
			}
			cpu = redisCPU(b, rdb) - cpu
			calls, usec := commandStat(b, rdb, "evalsha")
			b.ReportMetric(float64(n*1000)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(cpu*1e6/float64(n*1000), "redis-cpu-µs/event")
			b.ReportMetric(usec*float64(calls)/float64(n*1000), "script-µs/event")
			b.ReportMetric(float64(w.f.h.k), "k")
		})
	}
}

// fillPast writes the past generations of every partition's ring, whose
// current bucket is c, as full ones of n events would be: each bit set
// with probability 1 - e^(-kn/m), to 1/256. The rings are written 1 MiB at
// a time from one random MiB, turned by a random number of periods each
// time: gigabytes take seconds.
func fillPast(t testing.TB, rdb *redis.Client, w *Window, c int64, n uint64) {
	t.Helper()
	r := w.r
	density := int(math.Round(256 * -math.Expm1(-float64(w.f.h.k)*float64(n)/float64(w.f.h.m))))
	keep := make([]byte, r.w) // the past positions, in a period of W bytes
	for b := range 8 * r.w {
		if q := b % r.w; q != int(c%int64(r.w)) && q != int((c+1)%int64(r.w)) {
			keep[b/8] |= 0x80 >> (b % 8)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	chunk := int64(r.w) * (1 << 20 / int64(r.w))
	random := make([]byte, 2*chunk) // twice, so that any turn of it is a slice
	for i := range chunk {
		var x byte // each bit set with probability density/256
		for b := range 8 {
			if density>>b&1 == 1 {
				x |= byte(rng.Uint32())
			} else {
				x &= byte(rng.Uint32())
			}
		}
		random[i] = x & keep[i%int64(r.w)]
		random[chunk+i] = random[i]
	}
	for p := range w.f.parts {
		key := w.ringKey(p)
		for from := int64(r.state); from < r.size; from += chunk {
			turn := int64(rng.IntN(int(chunk/int64(r.w)))) * int64(r.w)
			if err := rdb.SetRange(ctx, key, from, string(random[turn:turn+min(chunk, r.size-from)])).Err(); err != nil {
				t.Fatal(err)
			}
		}
		args := []any{"BITFIELD", key}
		for g := c - int64(r.gens); g < c; g++ {
			q := g % int64(r.w)
			args = append(args, "SET", "i64", 8*(ringPositionsByte+ringPositionSize*q), g)
		}
		if err := rdb.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWindowForgedArguments calls window.lua directly with arguments the
// library never sends: each call is refused and nothing changes.
func TestWindowForgedArguments(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		w := created(t, must(NewWindow(rdb, "forged", WindowOptions{EventsPerBucket: 100, Bucket: time.Minute, Span: 2 * time.Minute})).on(t))
		must(w.TestOrAdd(ctx, "a")).on(t)
		ring := w.ringKey(0)
		keys := []string{ring, w.settingsKey(0), ring + ":mask", ring + ":scratch", w.f.parts[0].key + ":r:forged"}
		counting := must(NewCounting(rdb, "forged", Options{Capacity: 100})).on(t)
		expect := w.expected()
		var ok []any
		for len(ok) < w.f.h.k {
			ok = append(ok, w.r.bit(w.r.word(uint64(len(ok))), expect))
		}
		head, settings := w.f.parts[0].head, w.settings[0]
		argv := func(change func(a []any) []any) []any {
			a := []any{head, settings, "60000", "2", "60000", forgedField, "", "", "0", strconv.FormatInt(expect, 10), "r", "round", "f"}
			return change(append(a, ok...))
		}
		set := func(i int, v any) func(a []any) []any {
			return func(a []any) []any { a[i] = v; return a }
		}
		before := dump(t, rdb)
		for name, args := range map[string][]any{
			"counting header": argv(set(0, counting.f.parts[0].head)),
			"other settings":  argv(set(1, counting.f.parts[0].head+";ring;")),
			"bucket 0":        argv(set(2, "0")),
			"gens 0":          argv(set(3, "0")),
			"bad keep":        argv(set(4, "x")),
			"short tag":       argv(set(6, "a:b")),
			"bad clock":       argv(set(7, "-5")),
			"bad create":      argv(set(8, "x")),
			"bad bucket":      argv(set(9, "x")),
			"bad root":        argv(set(10, "x")),
			"no round":        argv(set(11, "")),
			"no flag":         argv(set(12, "")),
			"two flags":       argv(set(12, "ff")),
			"bad flag":        argv(set(12, "x")),
			"held with words": argv(set(12, "h")),
			"offset past m":   argv(set(13+w.f.h.k-1, w.r.bit(w.r.word(w.f.h.m), expect))),
			"other bit":       argv(set(13, w.r.bit(w.r.word(1), expect+1))),
			"not a number":    argv(set(13, "x")),
			"half an event":   argv(func(a []any) []any { return a[:len(a)-1] }),
		} {
			if err := windowScript.Run(ctx, rdb, keys, args...).Err(); err == nil {
				t.Errorf("%s: no error", name)
			}
		}
		if err := windowScript.Run(ctx, rdb, keys[:4], argv(set(0, head))...).Err(); err == nil {
			t.Errorf("no record key: no error")
		}
		if after := dump(t, rdb); !maps.Equal(before, after) {
			t.Errorf("forged calls changed Redis")
		}
	})
}

// TestWindowMatchesModel checks every answer of TestOrAddMany against a
// model of the window in Go: one set of bits per partition and bucket, an
// event seen when its k bits were all set in a generation the call reads
// before the call began, or when the current generation's were by the
// call's adds before it (an equal event, or others); and TestMany's before
// it. The window is small and overfull, so that bits collide and
// batches repeat events, and the clock jumps over buckets, so that ring
// positions are cleared and reused. At k > 6 (the second window) most
// events are in doubt after their first words, so the script's reads in
// stages are checked too.
func TestWindowMatchesModel(t *testing.T) {
	for _, c := range []struct {
		name string
		p    float64
	}{{"k4", 0.05}, {"k9", 1e-4}} {
		t.Run(c.name, func(t *testing.T) {
			onBoth(t, func(t *testing.T, rdb *redis.Client) { windowMatchesModel(t, rdb, c.p) })
		})
	}
}

func windowMatchesModel(t *testing.T, rdb *redis.Client, p float64) {
	clk := newClock(time.UnixMilli(1_000_000_000_000))
	w := created(t, clocked(must(NewWindow(rdb, "model", WindowOptions{EventsPerBucket: 40, ErrorRate: p,
		Bucket: time.Minute, Span: 2 * time.Minute, Partitions: 2})).on(t), clk))
	f := w.f
	// Each batch is one call a partition, whose reads all come before its
	// writes: the model applies a batch's adds after answering it.
	perCall := maxWindowWords / (f.h.k * len(w.r.fields()))
	maxBatch := min(120, perCall)
	model := map[[2]int64]map[uint64]bool{} // (partition, bucket) -> bits set
	rng := rand.New(rand.NewPCG(1, 2))
	seenAnswers, doubted := 0, 0
	for step := range 60 {
		switch {
		case step%15 == 14: // buckets go by with no call: their positions are cleared in one go
			clk.add(3 * time.Minute)
		case step%6 == 5:
			clk.add(20 * time.Second)
		}
		b := clk.now().UnixMilli() / time.Minute.Milliseconds()
		batch := make([]string, 1+rng.IntN(maxBatch))
		for i := range batch {
			batch[i] = fmt.Sprint("e", rng.IntN(400))
		}
		tested := must(w.TestMany(ctx, batch)).on(t)
		got := must(w.TestOrAddMany(ctx, batch)).on(t)
		type add struct {
			p       int
			offsets []uint64
		}
		var adds []add
		addedNow := map[int]map[uint64]bool{} // partition -> bits this batch's adds set so far
		for i, e := range batch {
			p, offsets := f.locate(nil, e)
			seen, first := false, 0
			for g := b - int64(w.r.gens); g <= b && !seen; g++ {
				bits := model[[2]int64{int64(p), g}]
				all, n := bits != nil, 0
				for _, o := range offsets {
					if !bits[o] {
						all = false
						break
					}
					n++
				}
				first = max(first, n)
				seen = all
			}
			if first >= 4 {
				doubted++
			}
			if tested[i] != seen {
				t.Fatalf("step %d, event %d (%s): TestMany answered %v, the model %v", step, i, e, tested[i], seen)
			}
			if !seen {
				// Added, unless its k bits of the current generation were
				// all set by the batch's adds before it (an equal event,
				// or others: a false positive, as separate calls give).
				if addedNow[p] == nil {
					addedNow[p] = map[uint64]bool{}
				}
				cur, all := model[[2]int64{int64(p), b}], true
				for _, o := range offsets {
					all = all && (cur[o] || addedNow[p][o])
					addedNow[p][o] = true
				}
				seen = all
				if !seen {
					adds = append(adds, add{p, offsets})
				}
			}
			if seen {
				seenAnswers++
			}
			if got[i] != seen {
				t.Fatalf("step %d, event %d (%s): window answered seen=%v, the model %v", step, i, e, got[i], seen)
			}
		}
		for _, a := range adds {
			cur := [2]int64{int64(a.p), b}
			if model[cur] == nil {
				model[cur] = map[uint64]bool{}
			}
			for _, o := range a.offsets {
				model[cur][o] = true
			}
		}
	}
	t.Logf("k = %d: 60 batches, %d answers seen, %d events with a generation holding their first 4 bits", f.h.k, seenAnswers, doubted)
}

// TestWindowBatchCopies: of two equal events in one batch the second
// answers true, even when the batch's script calls see different buckets:
// here the generation holding the event ends between the call with its
// first copy and the call with its second.
func TestWindowBatchCopies(t *testing.T) {
	rdb := realRedis(t)
	clk := newClock(time.UnixMilli(1_000_000_020_000))
	w := created(t, clocked(must(NewWindow(rdb, "copies", WindowOptions{EventsPerBucket: 1000, ErrorRate: 0.01,
		Bucket: time.Minute, Span: 2 * time.Minute, Partitions: 1})).on(t), clk))
	must(w.TestOrAdd(ctx, "x")).on(t)
	clk.add(2 * time.Minute) // x's generation is the oldest live one
	perCall := maxWindowWords / (w.f.h.k * len(w.r.fields()))
	batch := append(append([]string{"x"}, events("filler-", 2*perCall)...), "x")
	calls := 0
	w.clock = func() int64 { // the reads' and the first call's clock, then the next bucket's
		pc, _, _, _ := runtime.Caller(1)
		if strings.HasSuffix(runtime.FuncForPC(pc).Name(), ".clockArg") {
			calls++ // a call's ARGV[8]
		}
		if calls <= 1 {
			return clk.now().UnixMilli()
		}
		return clk.now().Add(time.Minute).UnixMilli()
	}
	got := must(w.TestOrAddMany(ctx, batch)).on(t)
	if !got[0] || !got[len(got)-1] {
		t.Errorf("x answered %v first and %v second, want true twice (held, then its copy)", got[0], got[len(got)-1])
	}
}

// TestWindowSlowReplay: a window batch sent again under its id soon after
// the first send, whose own calls are slow (here a record bucket apart),
// gets the first send's decisions: its calls look for their records by
// the time the batch started, as the first send's filed them.
func TestWindowSlowReplay(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		clk := newClock(time.UnixMilli(1_700_000_000_000))
		w := created(t, clocked(must(NewWindow(rdb, "slow-replay", WindowOptions{EventsPerBucket: 10_000, Bucket: time.Hour,
			Span: 2 * time.Hour, IDLifetime: 4 * time.Second})).on(t), clk))
		w.f.now = clk.now
		perCall := max(1, maxWindowWords/(w.f.h.k*len(w.r.fields())))
		evs := events("e", 10*perCall)
		first := must(w.TestOrAddManyOnce(ctx, evs, "id")).on(t)
		look := clk.t.Add(500 * time.Millisecond)
		w.f.now = func() time.Time { // the send again: a second more at every look
			look = look.Add(time.Second)
			return look
		}
		again := must(w.TestOrAddManyOnce(ctx, evs, "id")).on(t)
		if !slices.Equal(first, again) {
			t.Errorf("the batch sent again answered %d events otherwise than the first send", len(evs)-countEqual(first, again))
		}
	})
}

func countEqual(a, b []bool) int {
	n := 0
	for i := range a {
		if a[i] == b[i] {
			n++
		}
	}
	return n
}

// BenchmarkScriptBits measures what Redis spends on one bit a script
// writes, the bulk of a window's new event (k bits, window.lua), against
// the client's own BITFIELD SET u1: calls of 315 random bits (a window
// call's words) in a 4 KiB string, so that no bit costs a cache miss, the
// variants taking turns. It reports, in ns of Redis time a bit:
// "args" the script call's 315 offset arguments (a script that only
// counts them), "table" building BITFIELD's arguments from them in Lua,
// "from-lua" one BITFIELD of them from the script (the same script with
// two calls, less one), and "plain" the client's BITFIELD with the same
// arguments (its execution, INFO commandstats).
func BenchmarkScriptBits(b *testing.B) {
	rdb := realRedis(b)
	const bits = 315
	build := `local t, n = {}, 0
for i = 1, #ARGV do
  t[n + 1] = 'SET'; t[n + 2] = 'u1'; t[n + 3] = ARGV[i]; t[n + 4] = '1'
  n = n + 4
end
`
	scripts := map[string]*redis.Script{
		"args":  redis.NewScript(`return #ARGV`),
		"table": redis.NewScript(build + `return n`),
		"once":  redis.NewScript(build + `redis.call('BITFIELD', KEYS[1], unpack(t)) return n`),
		"twice": redis.NewScript(build + `redis.call('BITFIELD', KEYS[1], unpack(t)) redis.call('BITFIELD', KEYS[1], unpack(t)) return n`),
	}
	for _, s := range scripts {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	rdb.SetRange(ctx, "bits", 4095, "\x00")
	rng := rand.New(rand.NewPCG(3, 4))
	offsets := func() []any {
		o := make([]any, bits)
		for i := range o {
			o[i] = strconv.Itoa(rng.IntN(4096 * 8))
		}
		return o
	}
	usec := map[string]float64{}
	measure := func(name, command string, call func()) {
		rdb.ConfigResetStat(ctx)
		for range 20 {
			call()
		}
		calls, perCall := commandStat(b, rdb, command)
		usec[name] += perCall * float64(calls)
	}
	n := 0
	for b.Loop() {
		for _, name := range []string{"args", "table", "once", "twice"} {
			measure(name, "evalsha", func() {
				if err := scripts[name].Run(ctx, rdb, []string{"bits"}, offsets()...).Err(); err != nil {
					b.Fatal(err)
				}
			})
		}
		measure("plain", "bitfield", func() {
			args := []any{"BITFIELD", "bits"}
			for _, o := range offsets() {
				args = append(args, "SET", "u1", o, "1")
			}
			if err := rdb.Do(ctx, args...).Err(); err != nil {
				b.Fatal(err)
			}
		})
		n += 20 * bits
	}
	per := func(name string) float64 { return usec[name] * 1000 / float64(n) }
	b.ReportMetric(per("args"), "args-ns/bit")
	b.ReportMetric(per("table")-per("args"), "table-ns/bit")
	b.ReportMetric(per("twice")-per("once"), "from-lua-ns/bit")
	b.ReportMetric(per("plain"), "plain-ns/bit")
}
