package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server started by StartServer for a benchmark.
type Server struct {
	// Addr is the server's address, 127.0.0.1:port.
	Addr string

	cmd    *exec.Cmd
	exited chan struct{}
	dir    string
}

// StartServer starts the redis-server found on $PATH on 127.0.0.1 and a
// free port, without persistence, and returns once it answers PING (within
// 10 seconds). Close stops it. Its working directory and log are in a
// temporary directory that Close removes.
func StartServer(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("bench: redis-server not found on PATH (apt-get install -y redis-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "rbloom-bench-redis-")
	if err != nil {
		return nil, err
	}
	// A port found free can be taken before redis-server binds it: try a
	// few.
	for range 5 {
		s, err := startServer(ctx, bin, dir)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	os.RemoveAll(dir)
	return nil, errors.New("bench: redis-server: no free port after 5 tries")
}

var errPortTaken = errors.New("port taken")

func startServer(ctx context.Context, bin, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	log := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", log)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start redis-server: %w", err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, exited: make(chan struct{}), dir: dir}
	go func() { cmd.Wait(); close(s.exited) }()

	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := rdb.Ping(ctx).Err(); err == nil {
			return s, nil
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(log)
			if strings.Contains(string(b), "Address already in use") {
				return nil, errPortTaken
			}
			return nil, fmt.Errorf("bench: redis-server exited: %s", lastLines(string(b), 5))
		case <-ctx.Done():
			s.kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("bench: redis-server at %s did not answer PING within 10s", s.Addr)
		}
	}
}

// Close stops the server and removes its directory.
func (s *Server) Close() error {
	s.kill()
	return os.RemoveAll(s.dir)
}

func (s *Server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
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

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
