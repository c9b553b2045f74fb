package rbloom

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A window call is told what the client's reads found (Window.preRead,
// window.lua's ARGV[13]): these tests move the window between those reads
// and the call.

// scriptPipeline says whether cmds carry a script call (EVALSHA, EVAL,
// FCALL).
func scriptPipeline(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		// A script command without arguments is the server check of
		// Create and Open (support.go), which runs no script.
		if n := c.Name(); (n == "evalsha" || n == "eval" || n == "fcall") && len(c.Args()) > 1 {
			return true
		}
	}
	return false
}

// TestWindowAddedBetweenReadAndCall: an event another handle adds after
// this call's reads found it in no generation, and before the call, is
// answered seen by the call (the old values of its bits, which the call
// sets), never new twice.
func TestWindowAddedBetweenReadAndCall(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		other := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		t.Cleanup(func() { other.Close() })
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Hour, Span: 2 * time.Hour, Partitions: 2}
		w := created(t, must(NewWindow(rdb, "between", o)).on(t))
		w2 := created(t, must(NewWindow(other, "between", o)).on(t))
		must(w.TestOrAdd(ctx, "made")).on(t)
		evs := events("between-", 40)
		var theirs []bool
		rdb.AddHook(&beforePipeline{match: scriptPipeline, do: func() {
			theirs = must(w2.TestOrAddMany(ctx, evs[:20])).on(t)
		}})
		ours := must(w.TestOrAddMany(ctx, evs)).on(t)
		for i := range evs {
			switch {
			case i < 20 && (theirs[i] || !ours[i]):
				t.Fatalf("%s: the other handle answered seen=%v, this call seen=%v: want new, then seen", evs[i], theirs[i], ours[i])
			case i >= 20 && ours[i]:
				t.Fatalf("%s: answered seen, added by no one", evs[i])
			}
		}
	})
}

// bucketAfterReads makes w's clock turn to the next bucket at the first
// call it builds after its reads (ARGV[8]), and reports the script
// replies that start with prefix.
func bucketAfterReads(w *Window, clk *clock) {
	turned := atomic.Bool{}
	w.clock = func() int64 {
		pc, _, _, _ := runtime.Caller(1)
		if strings.HasSuffix(runtime.FuncForPC(pc).Name(), ".clockArg") && turned.CompareAndSwap(false, true) {
			clk.add(w.bucket)
		}
		return clk.now().UnixMilli()
	}
}

// replies is a go-redis hook that counts the script replies starting with
// prefix.
type replies struct {
	prefix string
	n      atomic.Int64
}

func (h *replies) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *replies) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *replies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c, ok := c.(*redis.Cmd); ok {
				if s, ok := c.Val().(string); ok && strings.HasPrefix(s, h.prefix) {
					h.n.Add(1)
				}
			}
		}
		return err
	}
}

// TestWindowBucketTurnsAfterRead: the bucket turns between a batch's reads
// and its calls. A call with events the reads found held, which come
// without their words, answers '^' and is read and sent again; one with
// none reads the words itself ('!'). Either way the held events answer
// seen, the others new, and these are held for the span after the bucket
// the call ran in.
func TestWindowBucketTurnsAfterRead(t *testing.T) {
	for _, c := range []struct {
		name, prefix string
		held         int // events of the batch added before it
	}{{"held", "^", 5}, {"none held", "!", 0}} {
		t.Run(c.name, func(t *testing.T) {
			onBoth(t, func(t *testing.T, rdb *redis.Client) {
				clk := newClock(time.UnixMilli(1_000_000_000_000))
				w := created(t, clocked(must(NewWindow(rdb, "turns", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute,
					Span: 2 * time.Minute, Partitions: 1})).on(t), clk))
				evs := events("turns-", 12)
				must(w.TestOrAddMany(ctx, append([]string{"made"}, evs[:c.held]...))).on(t)
				h := &replies{prefix: c.prefix}
				rdb.AddHook(h)
				bucketAfterReads(w, clk)
				got := must(w.TestOrAddManyOnce(ctx, evs, "turns")).on(t)
				for i, seen := range got {
					if seen != (i < c.held) {
						t.Fatalf("%s: answered seen=%v, want %v", evs[i], seen, i < c.held)
					}
				}
				if h.n.Load() == 0 {
					t.Errorf("no call answered %q: the bucket did not turn between the reads and the call", c.prefix)
				}
				if again := must(w.TestOrAddManyOnce(ctx, evs, "turns")).on(t); !slices.Equal(again, got) {
					t.Errorf("the batch sent again under its id answered %v, first %v", again, got)
				}
				// The new ones are in the bucket the call ran in: held
				// for the span after it, however the call was told.
				clk.add(2 * time.Minute)
				for i, seen := range must(w.TestMany(ctx, evs)).on(t) {
					if i >= c.held && !seen {
						t.Fatalf("%s, added after the bucket turned: not seen a span later", evs[i])
					}
				}
			})
		})
	}
}

// TestWindowGoneBetweenReadAndCall: the ring deleted between a batch's
// reads and its calls is ErrDamaged (its settings say it lives), never
// its held events answered new; the window dropped then is not found, and
// Create makes it again, holding nothing.
func TestWindowGoneBetweenReadAndCall(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		other := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
		t.Cleanup(func() { other.Close() })
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Hour, Span: 2 * time.Hour}
		w := created(t, must(NewWindow(rdb, "gone", o)).on(t))
		evs := events("gone-", 10)
		must(w.TestOrAddMany(ctx, evs[:5])).on(t)
		rdb.AddHook(&beforePipeline{match: scriptPipeline, do: func() {
			if err := other.Del(ctx, w.ringKey(0)).Err(); err != nil {
				t.Error(err)
			}
		}})
		if got, err := w.TestOrAddMany(ctx, evs); !errors.Is(err, ErrDamaged) {
			t.Fatalf("ring deleted between the reads and the call: %v, %v; want ErrDamaged", got, err)
		}

		w2 := created(t, must(NewWindow(rdb, "gone-dropped", o)).on(t))
		must(w2.TestOrAddMany(ctx, evs[:5])).on(t)
		dropper := must(NewWindow(other, "gone-dropped", o)).on(t)
		rdb.AddHook(&beforePipeline{match: scriptPipeline, do: func() {
			if err := dropper.Drop(ctx); err != nil {
				t.Error(err)
			}
		}})
		if got, err := w2.TestOrAddMany(ctx, evs); !errors.Is(err, ErrNotFound) {
			t.Fatalf("window dropped between the reads and the call: %v, %v; want ErrNotFound", got, err)
		}
		must(0, w2.Create(ctx)).on(t)
		got := must(w2.TestOrAddMany(ctx, evs)).on(t)
		if slices.Contains(got, true) {
			t.Errorf("window dropped between the reads and the call answered %v: want every event new", got)
		}
		for i, seen := range must(w2.TestMany(ctx, evs)).on(t) {
			if !seen {
				t.Fatalf("%s: answered new in the window made again, then not seen", evs[i])
			}
		}
	})
}

// TestWindowPassSlowerThanABucket: when every pass of a batch's reads and
// calls takes longer than a bucket, the calls still get through, and the
// events held answer seen, rather than be read and refused ('^') until
// their events leave the span, then answered new. Here the clock turns a
// bucket between every pass's reads and its first call.
func TestWindowPassSlowerThanABucket(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		clk := newClock(time.UnixMilli(1_000_000_000_000))
		w := created(t, clocked(must(NewWindow(rdb, "slow-pass", WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute,
			Span: 3 * time.Minute, Partitions: 2})).on(t), clk))
		evs := events("slow-pass-", 40)
		must(w.TestOrAddMany(ctx, evs)).on(t)
		var read atomic.Bool
		w.clock = func() int64 {
			pc, _, _, _ := runtime.Caller(1)
			switch name := runtime.FuncForPC(pc).Name(); {
			case strings.HasSuffix(name, ".state"):
				read.Store(true)
			case strings.HasSuffix(name, ".clockArg") && read.Swap(false):
				clk.add(time.Minute) // the pass's first call, after its reads
			}
			return clk.now().UnixMilli()
		}
		bounded, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		got, err := w.TestOrAddMany(bounded, evs)
		if err != nil {
			t.Fatal(err)
		}
		for i, seen := range got {
			if !seen {
				t.Fatalf("%s: added %v before, answered new", evs[i], clk.now().Sub(time.UnixMilli(1_000_000_000_000)))
			}
		}
	})
}
