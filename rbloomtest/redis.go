package rbloomtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startTimeout bounds how long StartRedis waits for PONG.
const startTimeout = 10 * time.Second

// StartRedis starts a redis-server for this test on 127.0.0.1 and a free
// port, without persistence (--save "" --appendonly no) and with its
// directory in t.TempDir(); args are passed after those, so they can add or
// override options. It returns the address ("127.0.0.1:port") once the
// server answers PING, and kills the server when the test ends.
//
// Without redis-server on $PATH the test is skipped, unless the environment
// variable CI is set: there a skip would hide a broken setup, so it fails.
// If the server does not start, the test fails with the tail of its log.
func StartRedis(t testing.TB, args ...string) string {
	t.Helper()
	return StartServer(t, args...).Addr()
}

var errPortTaken = errors.New("port already in use")

// lookRedisServer returns the path of redis-server, or skips the test
// (fails it when $CI is set) if there is none.
func lookRedisServer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		const msg = "redis-server not found on PATH: install it (apt-get install -y redis-server) to run this test"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " ($CI is set, so this is a failure, not a skip)")
		}
		t.Skip(msg)
	}
	return bin
}

// launchRedis starts redis-server on port and waits until it answers PING.
// On success the caller must call stop, which kills the server and waits
// for it to exit; on failure the server is already gone.
func launchRedis(bin, dir string, port int, logPath string, extra []string) (addr string, stop func(), err error) {
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	defer logFile.Close() // the child has its own copy

	args := append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop = func() {
		cmd.Process.Kill()
		<-exited
	}

	deadline := time.Now().Add(startTimeout)
	for {
		if ping(addr) {
			return addr, stop, nil
		}
		select {
		case <-exited:
			tail := logTail(logPath)
			if strings.Contains(tail, "Address already in use") {
				return "", nil, fmt.Errorf("%w: %s", errPortTaken, addr)
			}
			return "", nil, fmt.Errorf("redis-server exited before answering PING (%s); log %s ends with:\n%s", cmd.ProcessState, logPath, tail)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server at %s did not answer PING within %v; log %s ends with:\n%s", addr, startTimeout, logPath, logTail(logPath))
		}
	}
}

// freePort asks the kernel for a port that is free right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping reports whether the server at addr is ready: it answers PING with
// anything but -LOADING (-NOAUTH counts: --requirepass in args is fine). It
// speaks RESP itself so that the harness needs no client library.
func ping(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && !strings.HasPrefix(line, "-LOADING")
}

// logTail returns the last lines of the server's log, for failure messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	lines = lines[max(0, len(lines)-20):]
	return string(bytes.Join(lines, []byte("\n")))
}
