package rbloom

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestWaitTimeoutOverReadTimeout: WAIT ends the pipeline of a write, and
// go-redis reads a pipeline's replies within the client's ReadTimeout (5 s
// by default), whatever WAIT's own timeout; past it, the read fails with
// "i/o timeout" and go-redis sends the whole pipeline again. A handle whose
// WaitTimeout does not fit in half of the read timeout is refused when it
// is made, naming both; with a read timeout long enough, the same
// WaitTimeout is waited in full and ends in ErrNotReplicated.
func TestWaitTimeoutOverReadTimeout(t *testing.T) {
	_, replica, rdb, _ := startReplicated(t)
	must(0, must(NewCounting(rdb, "wait-long", Options{Capacity: 1000})).on(t).Create(ctx)).on(t)
	replica.Stop()
	o := Options{Capacity: 1000, WaitReplicas: 1, WaitTimeout: 6 * time.Second}
	c, err := NewCounting(rdb, "wait-long", o)
	if err == nil {
		start := time.Now()
		_, err := c.Add(ctx, "a")
		t.Fatalf("NewCounting with WaitTimeout 6s through a client with ReadTimeout %v: no error; its Add returned after %v: %v",
			rdb.Options().ReadTimeout, time.Since(start).Round(100*time.Millisecond), err)
	}
	if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "WaitTimeout") || !strings.Contains(err.Error(), "ReadTimeout") {
		t.Errorf("NewCounting with WaitTimeout 6s over ReadTimeout %v: %v, want ErrInvalidOptions naming WaitTimeout and ReadTimeout", rdb.Options().ReadTimeout, err)
	}

	long := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, ReadTimeout: 15 * time.Second})
	t.Cleanup(func() { long.Close() })
	c = must(NewCounting(long, "wait-long", o)).on(t)
	start := time.Now()
	_, err = c.Add(ctx, "a")
	waited := time.Since(start)
	t.Logf("Add with WaitTimeout 6s and ReadTimeout 15s: %v after %v", err, waited.Round(10*time.Millisecond))
	if !errors.Is(err, ErrNotReplicated) {
		t.Errorf("Add with the replica down: %v, want ErrNotReplicated", err)
	}
	if waited < o.WaitTimeout || waited > 12*time.Second {
		t.Errorf("Add returned after %v, want about WaitTimeout (%v)", waited, o.WaitTimeout)
	}
}

// TestWaitTimeoutBound checks, without a server, which WaitTimeouts each
// kind of client takes: at most half its read timeout, any with the read
// timeout off.
func TestWaitTimeoutBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		rdb  Client
		wait time.Duration
		ok   bool
	}{
		{"default client, default WaitTimeout", redis.NewClient(&redis.Options{}), 0, true},
		{"default client, 2.5s", redis.NewClient(&redis.Options{}), 2500 * time.Millisecond, true},
		{"default client, 2.6s", redis.NewClient(&redis.Options{}), 2600 * time.Millisecond, false},
		{"ReadTimeout 1s, default WaitTimeout", redis.NewClient(&redis.Options{ReadTimeout: time.Second}), 0, false},
		{"ReadTimeout 1s, 500ms", redis.NewClient(&redis.Options{ReadTimeout: time.Second}), 500 * time.Millisecond, true},
		{"no read timeout, 1h", redis.NewClient(&redis.Options{ReadTimeout: -1}), time.Hour, true},
		{"cluster, 6s", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), 6 * time.Second, false},
		{"cluster, ReadTimeout 15s, 6s", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: 15 * time.Second}), 6 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCounting(tc.rdb, "bound", Options{Capacity: 1000, WaitReplicas: 1, WaitTimeout: tc.wait})
			if tc.ok && err != nil || !tc.ok && !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("NewCounting: %v, want ok %v", err, tc.ok)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}

// TestWaitAfterNoScript: a write's pipeline of EVALSHA and WAIT, sent
// after the script cache was emptied, gets NOSCRIPT (the script did not
// run) and WAIT's reply. The call is sent again with EVAL and applied, and
// only then does its ErrNotReplicated mean what it says: applied on the
// master, not acknowledged by the replicas.
func TestWaitAfterNoScript(t *testing.T) {
	_, replica, rdb, _ := startReplicated(t)
	o := Options{Capacity: 1000, WaitReplicas: 1, WaitTimeout: 2 * time.Second}
	c := must(NewCounting(rdb, "noscript-wait", o)).on(t)
	must(0, c.Create(ctx)).on(t)
	must(c.Add(ctx, "a")).on(t) // the script is cached
	replica.Stop()
	o.WaitTimeout = 200 * time.Millisecond
	c = must(NewCounting(rdb, "noscript-wait", o)).on(t)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctx, "b"); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("Add with the replica down after SCRIPT FLUSH: %v, want ErrNotReplicated", err)
	}
	if !must(c.Test(ctx, "b")).on(t) {
		t.Error("Add answered ErrNotReplicated, which says the write was applied on the master, but the master does not have it")
	}
}
