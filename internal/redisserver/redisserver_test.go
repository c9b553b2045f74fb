package redisserver

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// needRedis skips the test without redis-server, or fails it under CI.
func needRedis(t *testing.T) {
	t.Helper()
	if _, err := Path(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v ($CI is set, so this is a failure, not a skip)", err)
		}
		t.Skip(err)
	}
}

func TestStartStop(t *testing.T) {
	needRedis(t)
	// A password makes PING answer -NOAUTH, which counts as ready.
	s, err := Start(context.Background(), Options{Dir: t.TempDir(), Args: []string{"--requirepass", "pw"}})
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(s.Addr()); host != "127.0.0.1" {
		t.Errorf("Addr() = %q, want 127.0.0.1:port", s.Addr())
	}
	if got := send(t, s.Addr(), "AUTH pw\r\nPING\r\n", 2); got != "+OK\r\n+PONG\r\n" {
		t.Errorf("AUTH, PING: %q, want +OK, +PONG", got)
	}
	s.Stop()
	s.Stop() // does nothing
	if conn, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		conn.Close()
		t.Errorf("the server still accepts connections after Stop")
	}
}

func TestStartPortTaken(t *testing.T) {
	needRedis(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Start(context.Background(), Options{Dir: t.TempDir(), Port: l.Addr().(*net.TCPAddr).Port})
	if !errors.Is(err, ErrPortTaken) {
		t.Errorf("Start on a port in use: %v, want ErrPortTaken", err)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	needRedis(t)
	_, err := Start(context.Background(), Options{Dir: t.TempDir(), Args: []string{"--no-such-option", "1"}})
	if err == nil || !strings.Contains(err.Error(), "Bad directive") {
		t.Errorf("Start with a bad option: %v, want the server's log in the error", err)
	}
}

func TestStartCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Start(ctx, Options{Dir: t.TempDir()}); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a canceled context: %v, want context.Canceled", err)
	}
}

// send writes raw RESP to addr and returns the first lines lines of the
// reply.
func send(t *testing.T, addr, request string, lines int) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	var b strings.Builder
	for range lines {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(line)
	}
	return b.String()
}
