// Package redisserver starts redis-server processes on 127.0.0.1, without
// persistence, and waits until they answer: for tests, through rbloomtest,
// and for the benchmark (internal/bench, "rbloom bench"). It does not
// import package testing.
package redisserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// startTimeout bounds how long Start waits for an answer to PING.
const startTimeout = 10 * time.Second

// portTries is how many free ports Start tries when Options.Port is 0.
const portTries = 5

// ErrPortTaken is wrapped by Start's error when the port was in use.
var ErrPortTaken = errors.New("port already in use")

// Path returns the path of redis-server on $PATH, or an error that says how
// to install it.
func Path() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found on PATH (apt-get install -y redis-server): %w", err)
	}
	return bin, nil
}

// Options say how to start a redis-server.
type Options struct {
	// Bin is the redis-server to run; "" means the one on $PATH.
	Bin string
	// Dir is the server's working directory (--dir). Required.
	Dir string
	// Port is the port to listen on, on 127.0.0.1. 0 means a free port;
	// if another process takes it before the server binds it, Start tries
	// another, up to 5 in all.
	Port int
	// Log is the file that gets the server's output, truncated at each
	// start; "" means redis.log in Dir.
	Log string
	// TLS, if not nil, makes the port a TLS port (--port 0 --tls-port
	// Port), and Start checks that the server answers over TLS with this
	// configuration. The certificate options go in Args.
	TLS *tls.Config
	// Args are passed after Start's own options (--port, --bind 127.0.0.1,
	// --save "", --appendonly no, --dir), so they can add to them or
	// override them.
	Args []string
}

// Server is a redis-server started by Start.
type Server struct {
	addr string
	port int
	cmd  *exec.Cmd

	exited chan struct{} // closed when the process has exited
	stop   sync.Once
}

// Start starts redis-server as o says and returns once it answers PING
// with anything but -LOADING (-NOAUTH counts: a password in o.Args is
// fine), within 10 seconds. It speaks RESP itself, so that it needs no
// client library.
//
// On error no server is left running. The error holds the end of the
// server's log; it wraps ErrPortTaken when the port was in use (only ever
// with a fixed o.Port), and ctx.Err() when ctx ended first.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Dir == "" {
		return nil, errors.New("redisserver: Options.Dir is empty")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	if o.Bin == "" {
		bin, err := Path()
		if err != nil {
			return nil, fmt.Errorf("redisserver: %w", err)
		}
		o.Bin = bin
	}
	if o.Log == "" {
		o.Log = filepath.Join(o.Dir, "redis.log")
	}
	if o.Port != 0 {
		return start(ctx, o)
	}
	// The port is free when chosen, but another process can take it before
	// redis-server binds it.
	var err error
	for range portTries {
		if o.Port, err = freePort(); err != nil {
			return nil, fmt.Errorf("redisserver: %w", err)
		}
		var s *Server
		if s, err = start(ctx, o); !errors.Is(err, ErrPortTaken) {
			return s, err
		}
	}
	return nil, fmt.Errorf("redisserver: no free port after %d tries: %w", portTries, err)
}

// start makes one attempt, on o.Port.
func start(ctx context.Context, o Options) (*Server, error) {
	port := strconv.Itoa(o.Port)
	args := []string{"--port", port}
	if o.TLS != nil {
		args = []string{"--port", "0", "--tls-port", port}
	}
	args = append(args, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", o.Dir)
	args = append(args, o.Args...)

	logFile, err := os.Create(o.Log)
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	defer logFile.Close() // the child has its own copy
	cmd := exec.Command(o.Bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	s := &Server{addr: net.JoinHostPort("127.0.0.1", port), port: o.Port, cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(s.exited) }()

	deadline := time.Now().Add(startTimeout)
	for {
		if ping(s.addr, o.TLS) {
			return s, nil
		}
		select {
		case <-s.exited:
			tail := logTail(o.Log)
			if strings.Contains(tail, "Address already in use") {
				return nil, fmt.Errorf("redisserver: %s: %w", s.addr, ErrPortTaken)
			}
			return nil, fmt.Errorf("redisserver: redis-server exited before answering PING (%s); log %s ends with:\n%s", cmd.ProcessState, o.Log, tail)
		case <-ctx.Done():
			s.Stop()
			return nil, fmt.Errorf("redisserver: waiting for redis-server at %s: %w", s.addr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redisserver: redis-server at %s did not answer PING within %v; log %s ends with:\n%s", s.addr, startTimeout, o.Log, logTail(o.Log))
		}
	}
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// Port returns the server's port: to start it again on the same one.
func (s *Server) Port() int { return s.port }

// Stop kills the server (SIGKILL: nothing is saved that was not already on
// disk) and waits for it to exit. Calling it again does nothing.
func (s *Server) Stop() {
	s.stop.Do(func() {
		s.cmd.Process.Kill()
		<-s.exited
	})
}

// freePort asks the kernel for a port of 127.0.0.1 that is free right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping reports whether the server at addr is ready: it answers PING, over
// TLS when config is not nil, with anything but -LOADING.
func ping(addr string, config *tls.Config) bool {
	var conn net.Conn
	var err error
	dialer := &net.Dialer{Timeout: time.Second}
	if config != nil {
		conn, err = tls.DialWithDialer(dialer, "tcp", addr, config)
	} else {
		conn, err = dialer.Dial("tcp", addr)
	}
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

// logTail returns the last lines of the server's log, for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	lines = lines[max(0, len(lines)-20):]
	return string(bytes.Join(lines, []byte("\n")))
}
