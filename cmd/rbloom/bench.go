package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/internal/bench"
)

// runBench runs the benchmark of docs/benchmarks.md against the Redis of -u or
// REDIS_URL, which must be on loopback, or else a redis-server it starts on
// 127.0.0.1 (redis-server must be on PATH). Like demo, it parses its own
// flags (standard ones, from the bench package); global flags go before it.
func (c *cli) runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg bench.Config
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("bench: %w (run 'rbloom help bench')", err)
	}
	url := c.url
	if url == "" {
		url = c.getenv("REDIS_URL")
	}
	switch {
	case url != "":
		opt, err := redis.ParseURL(url)
		if err != nil {
			return errors.New("bench: the Redis URL is not a valid redis:// URL")
		}
		cfg.Client = redis.NewClient(opt)
		defer cfg.Client.Close()
	case cfg.Addr == "":
		srv, err := bench.StartServer(ctx)
		if err != nil {
			return fmt.Errorf("bench: start redis-server: %w", err)
		}
		defer srv.Close()
		cfg.Addr = srv.Addr
	}
	cfg.Progress = c.stderr
	if cfg.Seed {
		return bench.RunSeed(ctx, bench.SeedConfig{Addr: cfg.Addr, Client: cfg.Client, Duration: cfg.SeedDuration, Progress: c.stderr}, c.out)
	}
	return bench.Run(ctx, cfg, c.out)
}

// benchHelp is what 'rbloom help bench' prints.
func benchHelp(w io.Writer) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var cfg bench.Config
	cfg.RegisterFlags(fs)
	fmt.Fprint(w, "usage: rbloom [-u URL] bench [FLAGS]\n\n"+
		"Measures the library against plain pipelined BITFIELD commands on one Redis, in\n"+
		"one run, the rows taking turns (see docs/benchmarks.md); where the server has\n"+
		"Redis's cuckoo filter (CF.*), that too. Without -u or REDIS_URL it starts a\n"+
		"redis-server on 127.0.0.1. -quick runs a small version in seconds. A chart of\n"+
		"throughput against batch size comes from the same run in the repository's command:\n"+
		"go run ./internal/bench/chart -chart docs/throughput.png\n\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}
