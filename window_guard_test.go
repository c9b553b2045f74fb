package rbloom

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A window keeps a filter's guarantees: its settings are stored, its
// rings are created in every partition together, and a ring that vanished
// or changed is an error, never a held event answered new.

// TestWindowSettingsStored: a handle that disagrees with the stored window
// on any setting gets ErrParamsMismatch from every method, even once every
// generation it would read has expired (a handle with another IDLifetime
// would apply a batch id twice).
func TestWindowSettingsStored(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		clk := newClock(time.UnixMilli(1_000_000_000_000))
		base := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 2}
		w := created(t, clocked(must(NewWindow(rdb, "stored", base)).on(t), clk))
		must(w.TestOrAddManyOnce(ctx, events("e", 50), "batch")).on(t)
		clk.add(time.Hour) // every generation it wrote is out of the window
		for name, change := range map[string]func(*WindowOptions){
			"Partitions":      func(o *WindowOptions) { o.Partitions = 3 },
			"EventsPerBucket": func(o *WindowOptions) { o.EventsPerBucket = 2000 },
			"ErrorRate":       func(o *WindowOptions) { o.ErrorRate = 0.001 },
			"IDLifetime":      func(o *WindowOptions) { o.IDLifetime = 2 * time.Hour },
			"Bucket":          func(o *WindowOptions) { o.Bucket = 30 * time.Second },
			"Span":            func(o *WindowOptions) { o.Span = 10 * time.Minute },
		} {
			o := base
			change(&o)
			other := clocked(must(NewWindow(rdb, "stored", o)).on(t), clk)
			before := dump(t, rdb)
			for method, call := range map[string]func() error{
				"TestOrAdd":         func() error { _, err := other.TestOrAdd(ctx, "x"); return err },
				"TestOrAddManyOnce": func() error { _, err := other.TestOrAddManyOnce(ctx, events("e", 50), "batch"); return err },
				"TestMany":          func() error { _, err := other.TestMany(ctx, events("e", 50)); return err },
				"Create":            func() error { return other.Create(ctx) },
			} {
				if err := call(); !errors.Is(err, ErrParamsMismatch) {
					t.Errorf("another %s, %s: %v, want ErrParamsMismatch", name, method, err)
				}
			}
			if after := dump(t, rdb); len(after) != len(before) {
				t.Errorf("another %s: refused calls changed Redis", name)
			}
		}
		if _, err := w.TestOrAdd(ctx, "y"); err != nil {
			t.Errorf("the window's own handle: %v", err)
		}
	})
}

// TestWindowDamage is the damage matrix for windows: each key a call
// reads (the ring, which holds every generation, and the settings), each
// way it can vanish or change, each method, with events held in the
// current generation and in a past one. An event the window holds is
// never answered new (TestOrAdd*) or not seen (TestMany): the call answers
// seen, or fails.
func TestWindowDamage(t *testing.T) {
	rdb := realRedis(t)
	ways := map[string]func(key string){
		"deleted":    func(key string) { rdb.Del(ctx, key) },
		"expired":    func(key string) { rdb.PExpire(ctx, key, time.Millisecond); time.Sleep(5 * time.Millisecond) },
		"truncated":  func(key string) { v := rdb.Get(ctx, key).Val(); rdb.Set(ctx, key, v[:len(v)/2], 0) },
		"zeroed":     func(key string) { rdb.Set(ctx, key, strings.Repeat("\x00", len(rdb.Get(ctx, key).Val())), 0) },
		"other type": func(key string) { rdb.Del(ctx, key); rdb.RPush(ctx, key, "x") },
		"other filter": func(key string) {
			v := []byte(rdb.Get(ctx, key).Val())
			v[8]++ // another k
			rdb.Set(ctx, key, v, 0)
		},
		"state garbage": func(key string) { rdb.SetRange(ctx, key, ringPositionsByte, "\x7f\x01\x02\x03\x04\x05\x06\x07") },
		// A cursor that is no multiple of W would apply the mask out of
		// phase, clearing live generations.
		"cursor misaligned": func(key string) {
			rdb.SetRange(ctx, key, ringCursorByte, "\x00\x00\x00\x00\x00\x00\x00\x05")
			rdb.Do(ctx, "BITFIELD", key, "SET", "i64", 8*(ringPositionsByte+ringPositionSize*3), -2)
		},
		"other incarnation": func(key string) { rdb.SetRange(ctx, key, incByte, "\x01\x02\x03\x04\x05\x06\x07\x08") },
		"other bucket":      func(key string) { rdb.SetRange(ctx, key, ringBucketByte, "\x00\x00\x00\x00\x00\x00\x00\x01") },
	}
	for _, gen := range []int{0, -2} { // events held in the current generation, or a past one
		for _, target := range []string{"ring", "settings"} {
			for way, damage := range ways {
				if target == "settings" && way != "deleted" && way != "expired" && way != "other type" {
					continue
				}
				for _, method := range []string{"TestOrAdd", "TestOrAddMany", "TestOrAddManyOnce", "TestMany"} {
					rdb.FlushAll(ctx)
					clk := newClock(time.UnixMilli(1_000_000_000_000))
					w := created(t, clocked(must(NewWindow(rdb, "damaged", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 2})).on(t), clk))
					held := events("held", 40)
					must(w.TestOrAddMany(ctx, held)).on(t)
					clk.add(-time.Duration(gen) * time.Minute)
					must(w.TestOrAdd(ctx, "now")).on(t)
					for p := range w.f.parts {
						damage(map[string]string{"ring": w.ringKey(p), "settings": w.settingsKey(p)}[target])
					}
					var got []bool
					var err error
					switch method {
					case "TestOrAdd":
						var seen bool
						seen, err = w.TestOrAdd(ctx, held[0])
						got = []bool{seen}
					case "TestOrAddMany":
						got, err = w.TestOrAddMany(ctx, held)
					case "TestOrAddManyOnce":
						got, err = w.TestOrAddManyOnce(ctx, held, "batch")
					case "TestMany":
						got, err = w.TestMany(ctx, held)
					}
					if err != nil {
						continue // refused: an error, not an answer
					}
					for i, seen := range got {
						if !seen {
							t.Errorf("generation %+d, %s %s, %s: held %q answered new (not seen), no error", gen, target, way, method, held[i])
							break
						}
					}
				}
			}
		}
	}
}

// TestWindowRingsTogether: the first call creates the ring of every
// partition, so that one lost later is known lost.
func TestWindowRingsTogether(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		w := created(t, must(NewWindow(rdb, "together", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 4})).on(t))
		must(w.TestOrAdd(ctx, "one event")).on(t)
		for p := range w.f.parts {
			if rdb.Exists(ctx, w.ringKey(p)).Val() != 1 {
				t.Errorf("partition %d has no ring after the first event", p)
			}
		}
	})
}

// TestWindowOptionsRefused: every out-of-range WindowOptions value is
// ErrInvalidOptions at NewWindow, naming the field.
func TestWindowOptionsRefused(t *testing.T) {
	rdb := miniRedis(t)
	ok := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: time.Hour}
	for field, change := range map[string]func(*WindowOptions){
		"EventsPerBucket": func(o *WindowOptions) { o.EventsPerBucket = 0 },
		"Bucket":          func(o *WindowOptions) { o.Bucket = 1500 * time.Microsecond },
		"Span":            func(o *WindowOptions) { o.Span = 30 * time.Second },
		"ErrorRate":       func(o *WindowOptions) { o.ErrorRate = 1 },
		"Partitions":      func(o *WindowOptions) { o.Partitions = MaxPartitions + 1 },
		"KeyPrefix":       func(o *WindowOptions) { o.KeyPrefix = "{x}" },
		"IDLifetime":      func(o *WindowOptions) { o.IDLifetime = 1500 * time.Millisecond },
	} {
		o := ok
		change(&o)
		_, err := NewWindow(rdb, "w", o)
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s out of range: %v, want ErrInvalidOptions naming %s", field, err, field)
		}
	}
	o := ok
	o.EventsPerBucket = 1 << 40
	if _, err := NewWindow(rdb, "w", o); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "EventsPerBucket") {
		t.Errorf("EventsPerBucket too large: %v, want ErrInvalidOptions naming EventsPerBucket", err)
	}
}

// TestWindowLongSpan: a window of 9,000 buckets (words of 9,002 bits, read
// as 282 fields) works: no Lua limit is hit.
func TestWindowLongSpan(t *testing.T) {
	rdb := realRedis(t)
	w := created(t, must(NewWindow(rdb, "long", WindowOptions{EventsPerBucket: 100, Bucket: time.Second, Span: 9000 * time.Second})).on(t))
	if seen := must(w.TestOrAddMany(ctx, []string{"a", "b", "a"})).on(t); seen[0] || seen[1] || !seen[2] {
		t.Errorf("TestOrAddMany = %v, want [false false true]", seen)
	}
	if seen := must(w.TestMany(ctx, []string{"a", "c"})).on(t); !seen[0] || seen[1] {
		t.Errorf("TestMany = %v, want [true false]", seen)
	}
}

// TestWindowBucketAndSpanLimits: NewWindow takes every Bucket and Span a
// window can serve, and each such window answers; every other one is
// ErrInvalidOptions naming the field. The limits are window.lua's (at
// most 10,000 past generations) and the Go durations a window works out
// (its Drop mark lives W + 8 buckets and two minutes: a time.Duration).
func TestWindowBucketAndSpanLimits(t *testing.T) {
	rdb := realRedis(t)
	const (
		year = 8766 * time.Hour
		day  = 24 * time.Hour
		// The longest bucket: 11 of them and two minutes in a Duration.
		longest = (math.MaxInt64 - 2*time.Minute) / 11 / time.Millisecond * time.Millisecond
	)
	for _, c := range []struct {
		name         string
		bucket, span time.Duration
		refused      string // the field named, or "" when the window serves it
	}{
		{"1ms", time.Millisecond, time.Millisecond, ""},
		{"10,000 buckets", time.Second, 10_000 * time.Second, ""},
		{"10,000 buckets and a nanosecond", time.Second, 10_000*time.Second + 1, "Span"},
		{"10,001 buckets", time.Second, 10_001 * time.Second, "Span"},
		{"the longest bucket", longest, longest, ""},
		{"a millisecond more", longest + time.Millisecond, longest + time.Millisecond, "Bucket"},
		{"73 years", 73 * year, 73 * year, "Bucket"},
		{"147 years: Span + Bucket overflows", 147 * year, 147 * year, "Bucket"},
		{"30 days, 3,548 buckets", 30 * day, 3548 * 30 * day, ""},
		{"30 days, 3,549 buckets", 30 * day, 3549 * 30 * day, "Span"},
		{"the longest Span", time.Hour, math.MaxInt64, "Span"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := WindowOptions{EventsPerBucket: 10, ErrorRate: 0.01, Bucket: c.bucket, Span: c.span, Partitions: 1}
			w, err := NewWindow(rdb, "limits", o)
			if c.refused != "" {
				if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("NewWindow: %v, want ErrInvalidOptions naming %s", err, c.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewWindow: %v", err)
			}
			if err := w.Create(ctx); err != nil {
				t.Fatalf("Create: %v", err)
			}
			defer func() { _ = w.Drop(ctx) }()
			seen, err := w.TestOrAddMany(ctx, []string{"a", "b", "a"})
			if err != nil {
				t.Fatalf("TestOrAddMany: %v", err)
			}
			// A window of a millisecond forgets within two: its calls'
			// answers and generations depend on the calls' timing.
			if c.bucket < time.Second {
				if _, err := w.TestMany(ctx, []string{"a"}); err != nil {
					t.Errorf("TestMany: %v", err)
				}
				if _, err := w.Info(ctx); err != nil {
					t.Errorf("Info: %v", err)
				}
			} else {
				if seen[0] || seen[1] || !seen[2] {
					t.Fatalf("TestOrAddMany = %v, want [false false true]", seen)
				}
				if seen, err := w.TestMany(ctx, []string{"a", "c"}); err != nil || !seen[0] || seen[1] {
					t.Errorf("TestMany = %v, %v, want [true false]", seen, err)
				}
				// One generation, or two when a bucket turned between
				// the calls.
				if in, err := w.Info(ctx); err != nil || len(in.Generations) < 1 || len(in.Generations) > 2 || in.Generations[0].TTL <= 0 {
					t.Errorf("Info = %+v, %v, want one generation with time left", in, err)
				}
			}
			if err := w.Drop(ctx); err != nil {
				t.Errorf("Drop: %v", err)
			}
		})
	}
}
