// Command chart runs the benchmark of package bench and draws its chart of
// throughput against batch size as a PNG (docs/throughput.png), with
// gonum/plot. It is a command of its own so that the rbloom command, which
// runs the same benchmark without the chart, links no plotting library.
//
//	go run ./internal/bench/chart -chart docs/throughput.png            # starts a redis-server
//	REDIS_URL=redis://127.0.0.1:6379 go run ./internal/bench/chart -chart docs/throughput.png
//
// It takes the flags of 'rbloom bench' (-quick, -n, ...) and -chart-items.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/internal/bench"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(2)
	}
}

// run runs the benchmark with the flags in args, the report to out and its
// progress to progress.
func run(ctx context.Context, args []string, out, progress io.Writer) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	var cfg bench.Config
	cfg.RegisterFlags(fs)
	cfg.RegisterChartFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.Chart == "" {
		return errors.New("-chart names the PNG to write (docs/throughput.png)")
	}
	cfg.Draw = drawPNG
	switch url := os.Getenv("REDIS_URL"); {
	case url != "":
		opt, err := redis.ParseURL(url)
		if err != nil {
			return errors.New("REDIS_URL is not a valid redis:// URL")
		}
		cfg.Client = redis.NewClient(opt)
		defer cfg.Client.Close()
	case cfg.Addr == "":
		srv, err := bench.StartServer(ctx)
		if err != nil {
			return fmt.Errorf("start redis-server: %w", err)
		}
		defer srv.Close()
		cfg.Addr = srv.Addr
	}
	cfg.Progress = progress
	return bench.Run(ctx, cfg, out)
}
