package rbloomtest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rbloom/rbloom/internal/redisserver"
)

// Server is a redis-server started by StartServer. Unlike StartRedis, it
// can be killed and started again on the same port and directory, keeping
// its data files, as after a crash.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	args []string

	mu     sync.Mutex
	port   int // 0 until the first start has chosen one
	starts int
	srv    *redisserver.Server // nil while stopped
}

// StartServer starts a redis-server like StartRedis does (same options,
// same skip rule) and returns it; it is killed when the test ends.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	s := &Server{t: t, bin: lookRedisServer(t), dir: t.TempDir(), args: args}
	if err := s.start(); err != nil {
		t.Fatalf("rbloomtest: StartServer: %v", err)
	}
	t.Cleanup(s.kill)
	return s
}

// Addr returns the server's "127.0.0.1:port".
func (s *Server) Addr() string {
	return fmt.Sprintf("127.0.0.1:%d", s.port)
}

// Restart kills the server at once (SIGKILL: nothing is flushed that was
// not already on disk) and starts it again on the same port and directory.
// Clients reconnect by themselves. It fails the test if the server does not
// come back.
func (s *Server) Restart() {
	s.t.Helper()
	s.kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("rbloomtest: Restart: %v", err)
	}
}

// Stop kills the server. Restart starts it again.
func (s *Server) Stop() {
	s.kill()
}

// start starts the server on s.port, or on a free port the first time.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starts++
	srv, err := redisserver.Start(context.Background(), redisserver.Options{
		Bin:  s.bin,
		Dir:  s.dir,
		Port: s.port,
		Log:  filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.starts)),
		Args: s.args,
	})
	if err != nil {
		return err
	}
	s.srv, s.port = srv, srv.Port()
	return nil
}

func (s *Server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Stop()
		s.srv = nil
	}
}
