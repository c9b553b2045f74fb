// Command rbloom works with rbloom filters in Redis.
//
// Usage:
//
//	rbloom demo [-n items] [-p error-rate]
//
// It connects to the Redis at REDIS_URL (redis://[user:pass@]host:port/db,
// or rediss:// for TLS). Without REDIS_URL it starts an in-memory Redis of
// its own, which is enough for the demo.
//
// Exit status: 0 on success, 2 on error (the error is one line on stderr).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

func main() {
	// go-redis logs dial failures itself; the one-line error below says it.
	redis.SetLogger(quiet{})
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "rbloom: ") {
			msg = "rbloom: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(2)
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

const usage = "usage: rbloom demo [-n items] [-p error-rate]"

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "demo":
		rdb, where, stop, err := connect()
		if err != nil {
			return err
		}
		defer stop()
		return demo(ctx, rdb, where, args[1:], out)
	}
	return fmt.Errorf("unknown command %q; %s", args[0], usage)
}

// connect returns a client of REDIS_URL or, without it, of an in-memory
// Redis started here, with a description of where it points that never
// includes a password.
func connect() (redis.UniversalClient, string, func(), error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			// The URL may hold a password: do not repeat it.
			return nil, "", nil, errors.New("REDIS_URL is not a valid redis:// or rediss:// URL")
		}
		rdb := redis.NewClient(opt)
		return rdb, "Redis at " + opt.Addr, func() { rdb.Close() }, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, "", nil, fmt.Errorf("start in-memory Redis: %w", err)
	}
	if err := rbloomtest.Register(m); err != nil {
		m.Close()
		return nil, "", nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, "in-memory Redis (set REDIS_URL to use a real one)", func() { rdb.Close(); m.Close() }, nil
}
