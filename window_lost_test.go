package rbloom

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestWindowLostWhole: a window Redis lost whole (a restart without
// persistence, FLUSHALL, the eviction of every key) fails every call
// with ErrNotFound, from its handle and a fresh one, and answers no held
// event new and no replayed batch with other answers; no call makes it
// again. Create does, empty.
func TestWindowLostWhole(t *testing.T) {
	srv := rbloomtest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 3}
	for _, lose := range srv.Losses(rdb) {
		w := created(t, must(NewWindow(rdb, "clicks", o)).on(t))
		held := events("held", 90)
		first := must(w.TestOrAddManyOnce(ctx, held, "batch")).on(t)
		lose.Do()
		for _, h := range []*Window{w, must(NewWindow(rdb, "clicks", o)).on(t)} {
			for name, call := range map[string]func() ([]bool, error){
				"TestMany":          func() ([]bool, error) { return h.TestMany(ctx, held) },
				"TestOrAddMany":     func() ([]bool, error) { return h.TestOrAddMany(ctx, held) },
				"TestOrAddManyOnce": func() ([]bool, error) { return h.TestOrAddManyOnce(ctx, held, "batch") },
				"TestOrAdd":         func() ([]bool, error) { seen, err := h.TestOrAdd(ctx, held[0]); return []bool{seen}, err },
				"Info":              func() ([]bool, error) { _, err := h.Info(ctx); return nil, err },
			} {
				seen, err := call()
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("after %s, %s: %v, %v; want ErrNotFound", lose.What, name, seen, err)
				}
				if err == nil && name == "TestOrAddManyOnce" && !slices.Equal(seen, first) {
					t.Errorf("after %s, the replayed batch answered %v, first %v", lose.What, seen, first)
				}
			}
		}
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) > 0 {
			t.Errorf("after %s, refused calls made %v", lose.What, keys)
		}
		must(0, w.Create(ctx)).on(t)
		if seen := must(w.TestOrAddMany(ctx, held)).on(t); slices.Contains(seen, true) {
			t.Errorf("after %s, Create made a window that holds events", lose.What)
		}
		must(0, w.Drop(ctx)).on(t)
	}
}

// TestWindowCreateAgain: Create on a window that exists changes nothing
// of it, from this handle or another: its events stay seen, and a batch
// replayed gets its first answers.
func TestWindowCreateAgain(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 3}
		w := created(t, must(NewWindow(rdb, "again", o)).on(t))
		held := events("held", 60)
		first := must(w.TestOrAddManyOnce(ctx, held, "batch")).on(t)
		created(t, w)
		created(t, must(NewWindow(rdb, "again", o)).on(t))
		if seen := must(w.TestMany(ctx, held)).on(t); slices.Contains(seen, false) {
			t.Error("an event held before Create again answered not seen")
		}
		if again := must(w.TestOrAddManyOnce(ctx, held, "batch")).on(t); !slices.Equal(again, first) {
			t.Errorf("the replay answered %v, first %v", again, first)
		}
	})
}

// TestWindowCreateCut: a Create whose process dies after it wrote the
// root's settings, before it made the rings, leaves a window that calls
// make the rings of, holding nothing; Create again succeeds.
func TestWindowCreateCut(t *testing.T) {
	rdb := realRedis(t)
	o := WindowOptions{EventsPerBucket: 1000, Bucket: time.Minute, Span: 5 * time.Minute, Partitions: 3}
	cut := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	defer cut.Close()
	dying := must(NewWindow(cut, "cut", o)).on(t)
	cut.AddHook(&failPipelines{fail: func(cmds []redis.Cmder) bool { return ringCreation(cmds, "") }}) // the root's settings go; the rings do not
	if err := dying.Create(ctx); err == nil {
		t.Fatal("the cut Create succeeded")
	}
	if n := rdb.Exists(ctx, dying.ringKey(0), dying.ringKey(1), dying.ringKey(2)).Val(); n != 0 {
		t.Fatalf("%d rings made: the cut came too late", n)
	}
	w := must(NewWindow(rdb, "cut", o)).on(t)
	if seen := must(w.TestOrAddMany(ctx, events("e", 60))).on(t); slices.Contains(seen, true) {
		t.Error("a new window answered an event seen")
	}
	created(t, w)
	if seen := must(w.TestMany(ctx, events("e", 60))).on(t); slices.Contains(seen, false) {
		t.Error("an event added after the cut Create not seen")
	}
}

// ringCreation says whether cmds carry a window.lua call that may make
// ring (ARGV[9] createRing), or any ring for ring "".
func ringCreation(cmds []redis.Cmder, ring string) bool {
	for _, c := range cmds {
		args := c.Args()
		if n := c.Name(); (n != "evalsha" && n != "eval") || len(args) < 4 {
			continue
		}
		keys, _ := args[2].(int)
		if a := args[3+keys:]; len(a) > 8 && a[8] == createRing && (ring == "" || args[3] == ring) {
			return true
		}
	}
	return false
}

// failPipelines is a go-redis hook that fails, unsent, every pipeline
// for which fail is true, as a process that died before sending it.
type failPipelines struct{ fail func(cmds []redis.Cmder) bool }

func (h *failPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *failPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *failPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.fail(cmds) {
			return errors.New("the process died")
		}
		return next(ctx, cmds)
	}
}
