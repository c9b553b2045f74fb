package rbloomtest_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rbloom/rbloom/rbloomtest"
)

func TestStartRedis(t *testing.T) {
	var addr string
	t.Run("start", func(t *testing.T) {
		addr = rbloomtest.StartRedis(t, "--maxmemory", "10mb")
		rdb := newClient(t, addr)
		got, err := rdb.ConfigGet(context.Background(), "maxmemory").Result()
		if err != nil || got["maxmemory"] != "10485760" {
			t.Errorf("CONFIG GET maxmemory = %v, %v; want 10485760 (extra args are passed)", got, err)
		}
	})
	t.Run("stopped after the test", func(t *testing.T) {
		if addr == "" {
			t.Skip("no server was started")
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("redis-server at %s still accepts connections after its test ended", addr)
		}
	})
}

func TestStartRedisFailureShowsLog(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("needs redis-server")
	}
	r := runRecorded(t, "--no-such-option", "1")
	t.Logf("StartRedis failed with: %s", r.fatal)
	if !strings.Contains(r.fatal, "Bad directive") {
		t.Errorf("StartRedis with a bad option failed with %q, want the server's log in the message", r.fatal)
	}
}

func TestStartRedisNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Run("skips", func(t *testing.T) {
		t.Setenv("CI", "")
		r := runRecorded(t)
		if !strings.Contains(r.skip, "redis-server not found on PATH") || r.fatal != "" {
			t.Errorf("StartRedis without redis-server: skip %q, fatal %q; want a skip", r.skip, r.fatal)
		}
	})
	t.Run("fails under CI", func(t *testing.T) {
		t.Setenv("CI", "true")
		r := runRecorded(t)
		if !strings.Contains(r.fatal, "redis-server not found on PATH") || r.skip != "" {
			t.Errorf("StartRedis without redis-server under CI: skip %q, fatal %q; want a failure", r.skip, r.fatal)
		}
	})
}

// recorder is a testing.TB whose Skip and Fatal are recorded instead of
// ending the test, so that StartRedis's own failures can be tested.
type recorder struct {
	testing.TB
	skip, fatal string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skip = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, a ...any) {
	r.fatal = fmt.Sprintf(format, a...)
	runtime.Goexit()
}

// runRecorded calls StartRedis with a recorder, on its own goroutine as
// Skip and Fatal end it with runtime.Goexit.
func runRecorded(t *testing.T, args ...string) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rbloomtest.StartRedis(r, args...)
	}()
	<-done
	return r
}
