//go:build unix

package pgsync

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var errCrash = errors.New("crash (test)")

// crashAt returns a crash hook that stops Run at the n-th pass of point.
func crashAt(point string, n int) func(string) error {
	seen := 0
	return func(p string) error {
		if p == point {
			if seen++; seen == n {
				return errCrash
			}
		}
		return nil
	}
}

// streaming waits until s streams.
func streaming(t *testing.T, s *Sync) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.Stats().Phase != "streaming"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sync not streaming: %+v", s.Stats())
		}
	}
}

// runUntilCrash runs s until its crash hook stops it.
func runUntilCrash(t *testing.T, s *Sync, during func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Run(t.Context()) }()
	if during != nil {
		during()
	}
	select {
	case err := <-done:
		if !errors.Is(err, errCrash) {
			t.Fatalf("Run = %v, want the test's crash", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not reach the crash point")
	}
}

// mixed writes transactions whose groups need several calls: adds,
// removes and key changes interleaved.
func (e *env) mixed(t *testing.T, round int) {
	t.Helper()
	b := 100000 * (round + 1)
	e.pg.exec(t,
		fmt.Sprintf(`BEGIN; INSERT INTO items SELECT g, 'm' FROM generate_series(%d, %d) g; DELETE FROM items WHERE id IN (SELECT id FROM items WHERE id < 100000 ORDER BY id LIMIT 50); INSERT INTO items SELECT g, 'm' FROM generate_series(%d, %d) g; COMMIT`, b, b+99, b+100, b+199),
		fmt.Sprintf(`UPDATE items SET id = id + 1000000 WHERE id BETWEEN %d AND %d`, b, b+49),
		fmt.Sprintf(`DELETE FROM items WHERE id BETWEEN %d AND %d`, b+150, b+199),
	)
}

// TestCrashPoints stops a sync at each point where a process can die and
// starts another: the filter must end equal to the table, every change
// applied once (Info.Items exact), whatever was applied, recorded or
// confirmed when it died.
func TestCrashPoints(t *testing.T) {
	for _, c := range []struct {
		name  string
		point string
		n     int
	}{
		{"load half done", "load-batch", 2},
		{"group marked pending, nothing applied", "pending", 1},
		{"group half applied", "call", 1}, // after the adds, before the removes
		{"applied but not confirmed", "applied", 1},
		{"confirmed", "status", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 12000) g`)
			cfg := e.config()
			cfg.MaxDelay = 200 * time.Millisecond // groups of several transactions
			s, _ := New(cfg)
			s.crash = crashAt(c.point, c.n)
			runUntilCrash(t, s, func() {
				if c.point != "load-batch" {
					streaming(t, s)
					for round := range 3 {
						e.mixed(t, round)
					}
				}
			})
			if c.point == "load-batch" {
				if st, _ := readState(t.Context(), e.rdb, stateKey("", "items")); st.Phase != "loading" {
					t.Fatalf("after a crash in the load, phase = %q, want loading", st.Phase)
				}
			}
			e.mixed(t, 3)
			rows := len(e.rowKeys(t))
			s2, _ := New(cfg)
			stop := runSync(t, s2)
			e.caughtUp(t, "items")
			e.checkEqual(t, "items")
			if st := s2.Stats(); st.RemoveMisses != 0 {
				t.Errorf("RemoveMisses = %d", st.RemoveMisses)
			}
			if replay := c.point == "pending" || c.point == "call"; replay != (s2.Stats().Replayed == 1) {
				t.Errorf("Replayed = %d, want a replay %v", s2.Stats().Replayed, replay)
			}
			if c.point == "load-batch" && s2.Stats().Loaded != int64(rows) {
				t.Errorf("reload Loaded = %d, want %d", s2.Stats().Loaded, rows)
			}
			stop()
		})
	}
}

// snapshot returns every key of the Redis and its serialized value.
func snapshot(t testing.TB, rdb *redis.Client) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, k := range keys {
		m[k], _ = rdb.Dump(ctx, k).Result()
	}
	return m
}

// TestWindowPassed: a sync that died with a group pending longer ago than
// the once window refuses to replay it, writes nothing, and a reload
// recovers.
func TestWindowPassed(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 100) g`)
	cfg := e.config()
	s, _ := New(cfg)
	s.crash = crashAt("call", 1)
	runUntilCrash(t, s, func() { streaming(t, s); e.mixed(t, 0) })
	key := stateKey("", "items")

	// Left pending by a version that cuts groups otherwise: refused.
	if err := e.rdb.HSet(t.Context(), key, "pending_v", "0").Err(); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, e.rdb)
	s2, _ := New(cfg)
	if err := s2.Run(t.Context()); !errors.Is(err, ErrFilter) || !strings.Contains(err.Error(), "version") {
		t.Fatalf("Run on a group of another version = %v, want ErrFilter", err)
	}
	if after := snapshot(t, e.rdb); !reflect.DeepEqual(before, after) {
		t.Error("Run wrote to Redis")
	}
	if err := e.rdb.HSet(t.Context(), key, "pending_v", callsVersion, "pending_at", unixMilli(time.Now().Add(-onceWindow))).Err(); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, e.rdb)
	err := s2.Run(t.Context())
	if !errors.Is(err, ErrWindowPassed) {
		t.Fatalf("Run = %v, want ErrWindowPassed", err)
	}
	t.Log(err)
	if after := snapshot(t, e.rdb); !reflect.DeepEqual(before, after) {
		t.Error("Run wrote to Redis")
	}
	cfg.Reload = true
	s3, _ := New(cfg)
	runSync(t, s3)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
}

// TestTwoFirstRuns: two syncs start on a table never loaded; the second
// passes its checks before the first writes anything, and writes only
// once the first is loading. PostgreSQL lets one create the slot: the
// other must fail before it drops or adds anything, and the filter end
// equal to the table.
func TestTwoFirstRuns(t *testing.T) {
	e := newEnv(t)
	e.pg.exec(t, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 30000) g`)
	cfg := e.config()
	cfg.SlotWait = 0
	bChecked, aLoading, bDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	a, _ := New(cfg)
	batches := 0
	a.crash = func(p string) error {
		if p == "load-batch" {
			if batches++; batches == 1 {
				close(aLoading)
				<-bDone
			}
		}
		return nil
	}
	b, _ := New(cfg)
	b.crash = func(p string) error {
		if p == "checked" {
			close(bChecked)
			<-aLoading
		}
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	bErr, aErr := make(chan error, 1), make(chan error, 1)
	go func() { bErr <- b.Run(ctx) }()
	<-bChecked
	go func() { aErr <- a.Run(ctx) }()
	err := <-bErr
	close(bDone)
	t.Logf("second sync: %v", err)
	if err == nil {
		t.Fatal("both syncs ran")
	}
	e.pg.exec(t, `DELETE FROM items WHERE id <= 1000`, `INSERT INTO items VALUES (100000, 'y')`)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
	cancel()
	if err := <-aErr; !errors.Is(err, context.Canceled) {
		t.Errorf("first sync: %v, want context.Canceled", err)
	}
}

// TestStopFinishesGroup: a sync whose context is cancelled in the middle
// of a group finishes the group before it returns, leaving nothing
// pending (so an upgrade after a clean stop finds no group to replay).
func TestStopFinishesGroup(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxDelay = 200 * time.Millisecond
	s, _ := New(cfg)
	ctx, cancel := context.WithCancel(t.Context())
	s.crash = func(p string) error {
		if p == "call" {
			cancel()
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	streaming(t, s)
	e.mixed(t, 0)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	st, err := readState(t.Context(), e.rdb, stateKey("", "items"))
	if err != nil || st.Pending != 0 || st.PendingV != "" {
		t.Fatalf("state after a stop mid-group: %+v, %v: want nothing pending", st, err)
	}
	s2, _ := New(e.config())
	runSync(t, s2)
	e.caughtUp(t, "items")
	e.checkEqual(t, "items")
	if n := s2.Stats().Replayed; n != 0 {
		t.Errorf("Replayed = %d, want 0", n)
	}
}
