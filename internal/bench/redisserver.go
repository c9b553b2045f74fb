package bench

import (
	"context"
	"fmt"
	"os"

	"github.com/rbloom/rbloom/internal/redisserver"
)

// Server is a redis-server started by StartServer for a benchmark.
type Server struct {
	// Addr is the server's address, 127.0.0.1:port.
	Addr string

	srv *redisserver.Server
	dir string
}

// StartServer starts the redis-server found on $PATH on 127.0.0.1 and a
// free port, without persistence, and returns once it answers PING (within
// 10 seconds). Close stops it. Its working directory and log are in a
// temporary directory that Close removes.
func StartServer(ctx context.Context) (*Server, error) {
	dir, err := os.MkdirTemp("", "rbloom-bench-redis-")
	if err != nil {
		return nil, err
	}
	srv, err := redisserver.Start(ctx, redisserver.Options{Dir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: %w", err)
	}
	return &Server{Addr: srv.Addr(), srv: srv, dir: dir}, nil
}

// Close stops the server and removes its directory.
func (s *Server) Close() error {
	s.srv.Stop()
	return os.RemoveAll(s.dir)
}
