package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// clicks are the flags of the producer's stream: the same flags give the
// same events, so that report can tell the truth.
type clicks struct {
	events  int
	dupRate float64
	seed    uint64
}

func (c *clicks) register(fs *flag.FlagSet) {
	fs.IntVar(&c.events, "events", 20_000, "distinct clicks to write")
	fs.Float64Var(&c.dupRate, "dup-rate", 0.15, "share of clicks written twice, as retried produces")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the clicks")
}

func (c clicks) generate(name string) []event { return generate(name, c.events, c.dupRate, c.seed) }

// newConsumer returns a consumer of the stream s names, whose group
// exists (ensureGroup).
func newConsumer(ctx context.Context, rdb redis.UniversalClient, s settings, name string, size int, minIdle time.Duration) (*consumer, error) {
	w, err := openWindow(ctx, rdb, s)
	if err != nil {
		return nil, err
	}
	return &consumer{rdb: rdb, keys: s.keys(), window: w, name: name, size: size,
		minIdle: minIdle, ttl: s.ttl, block: 200 * time.Millisecond, log: log.Default()}, nil
}

// produceCommand writes the clicks to the stream.
func produceCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("produce", flag.ExitOnError)
	addr := fs.String("redis", "127.0.0.1:6379", "address of Redis")
	name := fs.String("name", "clicks", "name of the stream")
	rate := fs.Int("rate", 0, "entries per second (0: as fast as possible)")
	var c clicks
	c.register(fs)
	_ = fs.Parse(args)
	rdb, closeRedis, err := connectReal(ctx, *addr)
	if err != nil {
		return err
	}
	defer closeRedis()
	k := newKeys(*name)
	if err := ensureGroup(ctx, rdb, k); err != nil {
		return err
	}
	written := c.generate(*name)
	if err := produce(ctx, rdb, k, written, *rate); err != nil {
		return err
	}
	log.Printf("wrote %d entries, %d distinct clicks, to %s", len(written), c.events, k.stream())
	return nil
}

// consumeCommand runs one consumer until SIGINT or SIGTERM.
func consumeCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	addr := fs.String("redis", "127.0.0.1:6379", "address of Redis")
	var s settings
	s.register(fs, "clicks")
	host, _ := os.Hostname()
	name := fs.String("consumer", fmt.Sprintf("%s-%d", host, os.Getpid()), "name in the consumer group: never reuse one")
	size := fs.Int("batch", 100, "entries read or claimed at a time")
	minIdle := fs.Duration("min-idle", 30*time.Second, "claim entries pending this long with another consumer")
	crashAt := fs.String("crash-at", "", "for tests: SIGKILL itself at STEP the Nth time it gets there, as STEP:N (steps: "+strings.Join(steps, ", ")+")")
	_ = fs.Parse(args)
	rdb, closeRedis, err := connectReal(ctx, *addr)
	if err != nil {
		return err
	}
	defer closeRedis()
	if err := ensureGroup(ctx, rdb, s.keys()); err != nil {
		return err
	}
	c, err := newConsumer(ctx, rdb, s, *name, *size, *minIdle)
	if err != nil {
		return err
	}
	if c.crash, err = killAt(*name, *crashAt); err != nil {
		return err
	}
	log.Printf("%s: consuming %s", c.name, c.keys.stream())
	c.run(ctx)
	log.Printf("%s: stopped: %s", c.name, &c.stats)
	return nil
}

// killAt returns a crash hook that kills the process, as SIGKILL from
// outside would, the nth time it reaches step (spec "step:n"); nil for "".
func killAt(consumer, spec string) (func(string), error) {
	if spec == "" {
		return nil, nil
	}
	step, nth, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(nth)
	if err != nil || n < 1 || !slices.Contains(steps, step) {
		return nil, fmt.Errorf("-crash-at %q: want STEP:N, N >= 1, STEP one of %v", spec, steps)
	}
	return func(s string) {
		if s != step {
			return
		}
		if n--; n > 0 {
			return
		}
		log.Printf("%s: crash at step %s: SIGKILL", consumer, s)
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill()
		select {} // the signal is on its way
	}, nil
}

// reportCommand audits the counts of a stream written by produce.
func reportCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	addr := fs.String("redis", "127.0.0.1:6379", "address of Redis")
	var s settings
	s.register(fs, "clicks")
	var c clicks
	c.register(fs)
	_ = fs.Parse(args)
	rdb, closeRedis, err := connectReal(ctx, *addr)
	if err != nil {
		return err
	}
	defer closeRedis()
	w, err := s.window(rdb)
	if err != nil {
		return err
	}
	a, err := runAudit(ctx, rdb, s.keys(), w, c.generate(s.name))
	if err != nil {
		return err
	}
	a.print(os.Stdout)
	if len(a.problems()) > 0 {
		return errors.New("not exactly once")
	}
	return nil
}

// connectReal is connect for the commands that share a Redis between
// processes, where an in-memory one would make no sense.
func connectReal(ctx context.Context, addr string) (*redis.Client, func(), error) {
	if addr == "" {
		return nil, nil, errors.New("-redis is empty: the processes must share a Redis")
	}
	return connect(ctx, addr)
}
