package rbloom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// stagedWindow stages the window dump b for the window name, as
// RestoreWindow does up to its install, and returns the restore and the
// restored window's handle.
func stagedWindow(t *testing.T, rdb redis.UniversalClient, name string, b []byte) (*restorer, *Window) {
	t.Helper()
	d := &dumpReader{r: bytes.NewReader(b), crc: crc32.New(castagnoli)}
	h := must(d.header()).on(t)
	g := must(windowOf(rdb, name, WindowOptions{}, h, must(d.windowBlock()).on(t))).on(t)
	rs := &restorer{f: g.f, w: g, token: newToken(), inc: randomIncarnation(), replace: g.drop}
	if err := rs.stage(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := d.trailer(len(g.f.parts)); err != nil {
		t.Fatal(err)
	}
	if err := rs.ringExpiries(ctx); err != nil {
		t.Fatal(err)
	}
	return rs, g
}

// TestWindowRestoreNeverHalf runs a window's restore step by step: from
// the root's install to the root's open, every read and every call of
// the window fails with ErrLoading, writing nothing; once open, every
// event held tests seen.
func TestWindowRestoreNeverHalf(t *testing.T) {
	rdb := realRedis(t)
	w, evs := dumpWindow(t, rdb, "src", "")
	rs, g := stagedWindow(t, rdb, "half", windowDumpOf(t, w))
	var others []int
	for p := range g.f.parts {
		if p != g.root {
			others = append(others, p)
		}
	}
	// Events of the other partitions only: a read of them reads the
	// root's ring too.
	var inOthers []string
	for _, e := range evs {
		if p, _ := g.f.locate(nil, e); p != g.root {
			inOthers = append(inOthers, e)
		}
	}
	refused := func(when string) {
		t.Helper()
		before := dump(t, rdb)
		for _, batch := range [][]string{evs, inOthers, {"never-added"}} {
			if _, err := g.TestMany(ctx, batch); !errors.Is(err, ErrLoading) {
				t.Fatalf("%s: TestMany = %v, want ErrLoading", when, err)
			}
			if _, err := g.TestOrAddMany(ctx, batch); !errors.Is(err, ErrLoading) {
				t.Fatalf("%s: TestOrAddMany = %v, want ErrLoading", when, err)
			}
		}
		if _, err := g.Info(ctx); !errors.Is(err, ErrLoading) {
			t.Fatalf("%s: Info = %v, want ErrLoading", when, err)
		}
		if after := dump(t, rdb); !mapsEqual(before, after) {
			t.Fatalf("%s: a refused call wrote", when)
		}
	}
	if err := rs.stepOn(ctx, "install", []int{g.root}); err != nil {
		t.Fatal(err)
	}
	refused("the root installed")
	if err := rs.stepOn(ctx, "install", others); err != nil {
		t.Fatal(err)
	}
	refused("every ring installed")
	// Sent again (a lost reply), install answers ok.
	if err := rs.step(ctx, "install"); err != nil {
		t.Fatalf("install sent again: %v", err)
	}
	if err := rs.stepOn(ctx, "open", others); err != nil {
		t.Fatal(err)
	}
	refused("every partition open but the root")
	if err := rs.stepOn(ctx, "open", []int{g.root}); err != nil {
		t.Fatal(err)
	}
	if err := rs.step(ctx, "open"); err != nil {
		t.Fatalf("open sent again: %v", err)
	}
	allSeen(t, g, evs)
	if ttl := rdb.PTTL(ctx, g.settingsKey(g.root)).Val(); ttl >= 0 {
		t.Errorf("the root's settings have a TTL of %v once open", ttl)
	}
}

// TestWindowRestoreConcurrentReader reads a window while it is restored,
// again and again: a read answers every event absent only before the
// first install (the window does not exist yet), then fails, until it
// answers every event seen; never some of them absent.
func TestWindowRestoreConcurrentReader(t *testing.T) {
	rdb := realRedis(t)
	w, evs := dumpWindow(t, rdb, "src", "")
	b := windowDumpOf(t, w)
	for round := range 5 {
		name := fmt.Sprint("read-", round)
		reader := must(NewWindow(rdb, name, dumpWindowOpts)).on(t)
		var stop atomic.Bool
		var errs, reads int
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			begun := false
			for !stop.Load() {
				seen, err := reader.TestMany(ctx, evs)
				reads++
				if err != nil {
					if !errors.Is(err, ErrLoading) && !errors.Is(err, ErrDamaged) {
						t.Errorf("TestMany during the restore: %v", err)
						return
					}
					begun, errs = true, errs+1
					continue
				}
				n := 0
				for _, ok := range seen {
					if ok {
						n++
					}
				}
				switch {
				case n == len(evs):
					begun = true
				case n > 0 || begun:
					t.Errorf("TestMany during the restore: %d of %d events seen, with no error", n, len(evs))
					return
				}
			}
		}()
		// The dump read slowly, so that the reader runs before and after.
		r, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := RestoreWindow(ctx, rdb, name, WindowOptions{}, r)
			done <- err
		}()
		for i := 0; i < len(b); i += len(b)/7 + 1 {
			must(pw.Write(b[i:min(len(b), i+len(b)/7+1)])).on(t)
			time.Sleep(5 * time.Millisecond)
		}
		pw.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		t.Logf("round %d: %d reads, %d refused", round, reads, errs)
		allSeen(t, reader, evs)
	}
}

// straddleHook holds back the pipelines of a window's read that read its
// root's ring (rootFirst false) or those that do not (rootFirst true)
// until one of the others has been read, then runs, once, between, the
// whole install and open of a restore.
type straddleHook struct {
	rootKey   string
	rootFirst bool
	between   func()
	read      chan struct{} // a pipeline let through was read
	once      sync.Once
}

func (h *straddleHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *straddleHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *straddleHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		root, ring := false, false
		for _, c := range cmds {
			root = root || slices.Contains(c.Args(), any(h.rootKey))
			ring = ring || c.Name() == "getrange"
		}
		if !ring { // a connection's HELLO, say
			return next(ctx, cmds)
		}
		if root == h.rootFirst {
			err := next(ctx, cmds)
			select {
			case h.read <- struct{}{}:
			default:
			}
			return err
		}
		h.once.Do(func() {
			select {
			case <-h.read:
			case <-time.After(2 * time.Second):
			}
			h.between()
		})
		return next(ctx, cmds)
	}
}

// TestWindowReadStraddlingRestore: a read whose pipelines run in parallel
// reads some rings before a restore's install and others after its open.
// The rings read missing exist by then: the read goes again, and answers
// every event seen, never some absent.
func TestWindowReadStraddlingRestore(t *testing.T) {
	rdb := realRedis(t)
	w, evs := dumpWindow(t, rdb, "src", "")
	b := windowDumpOf(t, w)
	for _, rootFirst := range []bool{true, false} {
		// A root read first when it is partition 0, last when 2: the
		// pipelines start in the order of the partitions. A pipeline let
		// through while the restore runs may find a ring installed and
		// not open (ErrLoading, as it should): then again.
		want := 2
		if rootFirst {
			want = 0
		}
		answered := false
		for i := 0; i < 400 && !answered; i++ {
			name := fmt.Sprint("straddle-", i)
			if shareOf(keySlot(name), 3) != want {
				continue
			}
			rs, g := stagedWindow(t, rdb, name, b)
			hook := &straddleHook{rootKey: g.ringKey(g.root), rootFirst: rootFirst, read: make(chan struct{}, 1), between: func() {
				if err := rs.step(ctx, "install"); err != nil {
					t.Error(err)
				}
				if err := rs.step(ctx, "open"); err != nil {
					t.Error(err)
				}
			}}
			c := redis.NewClient(rdb.Options())
			defer c.Close()
			c.AddHook(hook)
			reader := must(NewWindow(c, name, dumpWindowOpts)).on(t)
			seen, err := reader.TestMany(ctx, evs)
			if errors.Is(err, ErrLoading) {
				continue
			}
			if err != nil {
				t.Fatalf("root read first %v: TestMany = %v", rootFirst, err)
			}
			n := 0
			for _, ok := range seen {
				if ok {
					n++
				}
			}
			if n != len(evs) {
				t.Fatalf("root read first %v: %d of %d events seen", rootFirst, n, len(evs))
			}
			answered = true
		}
		if !answered {
			t.Errorf("root read first %v: every read found a ring installed and not open", rootFirst)
		}
	}
}
