package rbloomtest_test

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestProxyDrop shows what go-redis does when the proxy drops a request
// (the server never sees it) or a reply (the server ran the command): with
// its default options a plain client retries both, silently, so a dropped
// INCR reply makes the server count twice and the caller get 2 for one
// call; with MaxRetries -1 the caller gets the error and the server's count
// is the truth.
func TestProxyDrop(t *testing.T) {
	ctx := context.Background()
	addr := rbloomtest.StartRedis(t)
	direct := newClient(t, addr)

	tests := []struct {
		name       string
		maxRetries int // 0: go-redis's default, 3 retries
		drop       func(*rbloomtest.Proxy)
		wantErr    bool
		wantRuns   int64 // how many times the server ran INCR
	}{
		{"request dropped, default client", 0, func(p *rbloomtest.Proxy) { p.DropRequests(1) }, false, 1},
		{"request dropped, no retries", -1, func(p *rbloomtest.Proxy) { p.DropRequests(1) }, true, 0},
		// The key case: the server ran INCR, the reply was lost, go-redis
		// saw a reset connection, which it retries, and sent INCR again on
		// a new connection. The caller made one call and got no error.
		{"reply dropped, default client", 0, func(p *rbloomtest.Proxy) { p.DropReplies(1) }, false, 2},
		{"reply dropped, no retries", -1, func(p *rbloomtest.Proxy) { p.DropReplies(1) }, true, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := rbloomtest.NewProxy(t, addr)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: tc.maxRetries})
			defer rdb.Close()
			// go-redis sends HELLO on a new connection: ping first, so
			// that the fault hits INCR and not the handshake.
			if err := rdb.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			key := "drop:" + tc.name
			before := incrCalls(t, direct)

			tc.drop(p)
			got, err := rdb.Incr(ctx, key).Result()

			runs := incrCalls(t, direct) - before
			value, _ := direct.Get(ctx, key).Int64()
			t.Logf("INCR through the proxy = %d, %v; the server ran INCR %d times, %s = %d; proxy %+v",
				got, err, runs, key, value, p.Stats())
			if (err != nil) != tc.wantErr {
				t.Errorf("INCR error = %v, want error: %v", err, tc.wantErr)
			}
			if runs != tc.wantRuns || value != tc.wantRuns {
				t.Errorf("server ran INCR %d times (value %d), want %d", runs, value, tc.wantRuns)
			}
			if err == nil && got != tc.wantRuns {
				t.Errorf("INCR returned %d, want %d (the value after the last run)", got, tc.wantRuns)
			}
			if s := p.Stats(); s.Faults() != 1 {
				t.Errorf("proxy injected %d faults, want 1: %+v", s.Faults(), s)
			}
		})
	}
}

// incrCalls returns how many times the server has run INCR.
func incrCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	return commandCalls(t, info, "incr")
}

// commandCalls returns how many times a command ran according to an INFO
// commandstats reply ("cmdstat_incr:calls=2,usec=..."), 0 if not listed.
func commandCalls(t *testing.T, info, name string) int64 {
	t.Helper()
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// TestProxyRandom injects random drops with a fixed seed into a bounded
// loop of INCRs made one at a time, then turns them off: the proxy keeps
// accepting connections, and the server's count is bounded by what the
// client saw: at least the calls that succeeded, at most those plus the
// dropped replies.
func TestProxyRandom(t *testing.T) {
	ctx := context.Background()
	addr := rbloomtest.StartRedis(t)
	direct := newClient(t, addr)

	run := func(key string) (ok, failed int, stats rbloomtest.ProxyStats) {
		p := rbloomtest.NewProxy(t, addr)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
		defer rdb.Close()
		p.Random(42, 0.05)
		for range 300 {
			if err := rdb.Incr(ctx, key).Err(); err != nil {
				failed++
			} else {
				ok++
			}
		}
		faults := p.Stats()
		p.Random(0, 0)
		for i := range 20 {
			if err := rdb.Incr(ctx, key).Err(); err != nil {
				t.Fatalf("INCR %d after random faults were turned off: %v", i, err)
			}
		}
		return ok, failed, faults
	}

	ok, failed, s := run("random:a")
	t.Logf("300 INCRs: %d ok, %d failed; proxy %+v", ok, failed, s)
	if s.Faults() == 0 || failed == 0 || ok == 0 {
		t.Fatalf("%d ok, %d failed, %d faults: want some of each", ok, failed, s.Faults())
	}
	if s.Conns < 2 {
		t.Errorf("%d connections: the client should have reconnected after faults", s.Conns)
	}
	value, err := direct.Get(ctx, "random:a").Int()
	if err != nil {
		t.Fatal(err)
	}
	value -= 20 // the calls made after faults were turned off
	if value < ok || value > ok+s.DroppedReplies {
		t.Errorf("server counted %d INCRs; the client saw %d succeed and the proxy dropped %d replies", value, ok, s.DroppedReplies)
	}

	// Same seed, same single client: the same faults.
	ok2, failed2, s2 := run("random:b")
	if ok2 != ok || failed2 != failed || s2 != s {
		t.Errorf("second run with the same seed: %d ok, %d failed, %+v; first: %d, %d, %+v", ok2, failed2, s2, ok, failed, s)
	}
}

func TestProxyDelay(t *testing.T) {
	ctx := context.Background()
	p := rbloomtest.NewProxy(t, rbloomtest.StartRedis(t))
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	p.DelayReplies(30 * time.Millisecond)
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("PING with replies delayed 30ms took %v", took)
	}

	p.DelayReplies(300 * time.Millisecond)
	if err := rdb.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("PING with replies delayed past ReadTimeout: %v, want a timeout", err)
	}

	p.DelayReplies(0)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after delays were turned off: %v", err)
	}
	if s := p.Stats(); s.DelayedReplies != 2 || s.Faults() != 0 {
		t.Errorf("stats %+v, want 2 delayed replies and no faults", s)
	}
}

func TestProxyReset(t *testing.T) {
	p := rbloomtest.NewProxy(t, rbloomtest.StartRedis(t))
	conn := pingConn(t, p.Addr())
	defer conn.Close()
	if n := p.Reset(); n != 1 {
		t.Errorf("Reset() = %d, want 1 open connection", n)
	}
	conn.SetDeadline(time.Now().Add(time.Second))
	_, err := conn.Read(make([]byte, 1))
	t.Logf("read after Reset: %v", err)
	if err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("read after Reset: %v, want the connection closed", err)
	}
	pingConn(t, p.Addr()).Close() // new connections work
	if s := p.Stats(); s.Resets != 1 || s.Conns != 2 {
		t.Errorf("stats %+v, want 1 reset and 2 connections", s)
	}
}

func TestProxyStops(t *testing.T) {
	var addr string
	var conn net.Conn
	t.Run("proxy", func(t *testing.T) {
		p := rbloomtest.NewProxy(t, rbloomtest.StartRedis(t))
		addr = p.Addr()
		if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
			t.Errorf("Addr() = %s, want 127.0.0.1", addr)
		}
		conn = pingConn(t, addr)
		p.DelayReplies(time.Hour) // stopping must not wait for it
		conn.Write([]byte("PING\r\n"))
	})
	if conn == nil {
		t.Skip("no proxy was started")
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("read from a connection after the proxy stopped: %v, want the connection closed", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("proxy at %s still accepts connections after its test ended", addr)
	}
}

// pingConn opens a raw connection through the proxy and checks that PING
// gets PONG. The caller closes it.
func pingConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(time.Second))
	conn.Write([]byte("PING\r\n"))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING through the proxy: %q, %v", line, err)
	}
	return conn
}
