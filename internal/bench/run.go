package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// Names of what the benchmark writes in Redis. Run deletes them at the
// start and at the end.
const (
	countingName = "rbloom-bench-counting"
	classicName  = "rbloom-bench-classic"
	countingKey  = "rbloom:{" + countingName + "}" // its first partition
	keyLimitU4   = "rbloom-bench:limit-u4"
	keyLimitU1   = "rbloom-bench:limit-u1"
	keySeed      = "rbloom-bench:seed"
	keyNaive     = "rbloom-bench:naive"
	keyRelay     = "rbloom-bench:relay"
	// The window rows' names are in window.go, the records' in records.go.
)

// bench is one run: the client, the filters and the plain keys.
type bench struct {
	cfg     Config
	rdb     *redis.Client
	trips   *tripCounter
	version string // of the Redis server

	counting *rbloom.Counting
	classic  *rbloom.Classic
	k        int
	m        uint64

	// Keys laid out like filters, for the plain commands.
	u4    plain // limits of the counting filter's rows
	u1    plain // limits of the classic filter's rows
	seed  plain // the seed's SETBIT rows
	naive plain // the naive Lua rows
	relay plain // the relay.lua row

	srv  *serverWatch
	lat  *latencies
	load string // the machine's load average when the run started

	window  *windowBench     // rows 7c, 7d and 8f
	winMem  windowUse        // the window's memory after its row
	records *rbloom.Counting // the filter whose operation records are measured
	recs    recordUse

	cf     bool    // the server has CF.*: rows 16a-16d and line 16 (cuckoo.go)
	cfUses []cfUse // line 16

	ck       *rbloom.Cuckoo // rows 17a-17c (rcuckoo.go)
	ckUses   []cfUse        // line 17
	ckChurns []ckChurn      // line 17
}

// Run measures rbloom against the Redis that cfg names, as the package
// documentation describes, and writes the report to out: a markdown table
// and the lines that follow it. It needs a Redis on the loopback interface,
// and takes a few minutes with the defaults (a second or two with Quick).
// It returns the first error; on error, nothing is written to out.
func Run(ctx context.Context, cfg Config, out io.Writer) (err error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()

	rdb, trips, err := openClient(cfg)
	if err != nil {
		return err
	}
	defer rdb.Close()
	b := &bench{cfg: cfg, rdb: rdb, trips: trips, lat: newLatencies(), load: loadAverage(", load average at start ")}
	defer func() {
		// The run's context may be over: clean up on a short one of our own.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if cerr := b.cleanup(ctx); cerr != nil && err == nil {
			err = fmt.Errorf("bench: cleaning up: %w", cerr)
		}
	}()
	if err := b.setup(ctx); err != nil {
		return fmt.Errorf("bench: setting up: %w", err)
	}

	rows := b.rows()
	if err := b.runRounds(ctx, rows); err != nil {
		return err
	}
	mem, err := b.memory(ctx)
	if err != nil {
		return fmt.Errorf("bench: memory: %w", err)
	}
	if b.winMem, err = b.window.memory(ctx, b.rdb); err != nil {
		return fmt.Errorf("bench: memory of the window: %w", err)
	}
	if b.cf {
		if b.cfUses, err = b.measureCuckoo(ctx); err != nil {
			return fmt.Errorf("bench: cuckoo filter: %w", err)
		}
	}
	if b.ckUses, b.ckChurns, err = b.measureRcuckoo(ctx); err != nil {
		return fmt.Errorf("bench: rbloom's cuckoo filter: %w", err)
	}
	var points []point
	if cfg.Chart != "" {
		if points, err = b.sweep(ctx); err != nil {
			return err
		}
		if err := cfg.Draw(cfg.Chart, b.chart(points)); err != nil {
			return fmt.Errorf("bench: chart: %w", err)
		}
	}
	return b.report(out, rows, mem, points, time.Since(start))
}

// openClient returns a client of its own for the Redis cfg names, with the
// round-trip counter hooked in.
func openClient(cfg Config) (*redis.Client, *tripCounter, error) {
	var opt redis.Options
	if cfg.Client != nil {
		opt = *cfg.Client.Options()
	} else {
		opt = redis.Options{Addr: cfg.Addr}
	}
	if err := checkLoopback(opt.Network, opt.Addr); err != nil {
		return nil, nil, err
	}
	if opt.PoolSize != 0 && opt.PoolSize < cfg.Goroutines {
		opt.PoolSize = cfg.Goroutines
	}
	rdb := redis.NewClient(&opt)
	trips := new(tripCounter)
	rdb.AddHook(trips)
	return rdb, trips, nil
}

// setup creates the filters and the plain keys, all empty and at full
// size, loads the scripts and opens the connections, so that nothing but
// the work itself is measured.
func (b *bench) setup(ctx context.Context) error {
	var err error
	if b.version, err = serverVersion(ctx, b.rdb); err != nil {
		return err
	}
	// A server that refuses COMMAND (some managed ones rename it) is
	// measured without the cuckoo filter, as one without CF.* is.
	if b.cf, err = hasCuckoo(ctx, b.rdb); err != nil {
		b.progress(fmt.Sprintf("cuckoo filter not measured: %v", err))
	}
	opts := rbloom.Options{Capacity: uint64(b.cfg.N), ErrorRate: b.cfg.P}
	if b.counting, err = rbloom.NewCounting(b.rdb, countingName, opts); err != nil {
		return err
	}
	if b.classic, err = rbloom.NewClassic(b.rdb, classicName, opts); err != nil {
		return err
	}
	if b.ck, err = rbloom.NewCuckoo(b.rdb, ckName, opts); err != nil {
		return err
	}
	if b.records, err = newRecordsFilter(b.rdb, b.cfg); err != nil {
		return err
	}
	if b.window, err = newWindowBench(b.rdb, b.cfg); err != nil {
		return err
	}
	if err := b.deleteKeys(ctx); err != nil {
		return err
	}
	// Creating a filter runs the add script, which loads it.
	if err := b.counting.Create(ctx); err != nil {
		return err
	}
	if err := b.classic.Create(ctx); err != nil {
		return err
	}
	if err := b.ck.Create(ctx); err != nil {
		return err
	}
	if b.cf {
		if err := b.setupCuckoo(ctx); err != nil {
			return err
		}
	}
	// The plain keys take m and k from the header of the library's own
	// filter (README.md, "On Redis"), which must be in one partition.
	if b.k, b.m, err = readHeader(ctx, b.rdb, countingKey); err != nil {
		return err
	}
	b.u4 = plain{key: keyLimitU4, k: b.k, m: b.m, width: 4}
	b.u1 = plain{key: keyLimitU1, k: b.k, m: b.m, width: 1}
	b.seed = plain{key: keySeed, k: b.k, m: b.m, width: 1}
	b.naive = plain{key: keyNaive, k: b.k, m: b.m, width: 4}
	b.relay = plain{key: keyRelay, k: b.k, m: b.m, width: 4}
	for _, p := range []plain{b.u4, b.u1, b.seed, b.naive, b.relay} {
		if err := b.rdb.SetRange(ctx, p.key, p.size()-1, "\x00").Err(); err != nil {
			return err
		}
	}
	for _, s := range []*redis.Script{naiveAddScript, naiveBatchScript, relayScript} {
		if err := s.Load(ctx, b.rdb).Err(); err != nil {
			return err
		}
	}
	// Removing an item that is absent changes nothing but loads the
	// remove script.
	if removed, err := b.counting.Remove(ctx, "rbloom-bench-warm-up"); err != nil || removed {
		return errors.Join(err, errors.New("removing an absent item reported it removed"))
	}
	// The records first, while nothing else the benchmark wrote can
	// expire (records.go), then the window's past generations.
	if b.recs, err = b.measureRecords(ctx); err != nil {
		return fmt.Errorf("operation records: %w", err)
	}
	if err := b.window.fill(ctx, b.rdb, b.progress); err != nil {
		return fmt.Errorf("window: %w", err)
	}
	if err := b.openConns(ctx, b.cfg.Goroutines); err != nil {
		return err
	}
	b.srv, err = newServerWatch(ctx, b.rdb)
	return err
}

// openConns has n goroutines send commands, alone and in pipelines (which
// go-redis sends on connections of their own), so that most connections
// the concurrent row needs are open before it is timed. It is a warm-up,
// not a guarantee: the round-trip counter does not count connection setup
// anyway.
func (b *bench) openConns(ctx context.Context, n int) error {
	return concurrently(make([]string, 20*n), n, func(string) error {
		if err := b.rdb.Ping(ctx).Err(); err != nil {
			return err
		}
		pipe := b.rdb.Pipeline()
		pipe.Ping(ctx)
		_, err := pipe.Exec(ctx)
		return err
	})
}

// deleteKeys deletes everything the benchmark writes: the filters, the
// window, the plain keys and the library's operation records (most of
// which would expire within a few minutes anyway).
func (b *bench) deleteKeys(ctx context.Context) error {
	if err := b.counting.Drop(ctx); err != nil {
		return err
	}
	if err := b.classic.Drop(ctx); err != nil {
		return err
	}
	keys := append([]string{keyLimitU4, keyLimitU1, keySeed, keyNaive, keyRelay, keyCFAdd, keyCFInsert}, plainWindowKeys(b.cfg.WindowGens)...)
	for _, bucket := range cfBucketSizes {
		keys = append(keys, keyCFFull+strconv.Itoa(bucket))
	}
	if err := b.rdb.Del(ctx, keys...).Err(); err != nil {
		return err
	}
	// What else the library wrote (operation records, the window's
	// generations), whatever its keys are called: each has the name in
	// braces, for the hash slot.
	for _, name := range []string{countingName, classicName, windowName, recordsName, cfCountingName} {
		if err := b.deleteMatching(ctx, "*{"+name+"}*"); err != nil {
			return err
		}
	}
	// rbloom's cuckoo filters of rows 17a-17c and line 17 (rcuckoo.go).
	if err := b.deleteMatching(ctx, "*{"+ckName+"*}*"); err != nil {
		return err
	}
	return nil
}

// progress writes a line to cfg.Progress, if set.
func (b *bench) progress(line string) {
	if b.cfg.Progress != nil {
		fmt.Fprintln(b.cfg.Progress, line)
	}
}

// deleteMatching deletes the keys matching pattern, with a bounded number
// of SCAN calls.
func (b *bench) deleteMatching(ctx context.Context, pattern string) error {
	var cursor uint64
	for range 100_000 {
		keys, next, err := b.rdb.Scan(ctx, cursor, pattern, 10_000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := b.rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
	return fmt.Errorf("SCAN %s did not end", pattern)
}

// cleanup deletes what the benchmark wrote and restores the server's
// settings.
func (b *bench) cleanup(ctx context.Context) error {
	var errs []error
	if b.counting != nil && b.classic != nil {
		errs = append(errs, b.deleteKeys(ctx))
	}
	if b.srv != nil {
		errs = append(errs, b.srv.restore(ctx))
	}
	return errors.Join(errs...)
}

// memoryUse is the size of the counting filter's key.
type memoryUse struct {
	key    string
	strlen int64 // STRLEN
	usage  int64 // MEMORY USAGE
	want   int64 // ceil(m/2) + 64
}

func (b *bench) memory(ctx context.Context) (memoryUse, error) {
	mem := memoryUse{key: countingKey, want: int64((b.m+1)/2 + 64)}
	var err error
	if mem.strlen, err = b.rdb.StrLen(ctx, countingKey).Result(); err != nil {
		return mem, err
	}
	mem.usage, err = b.rdb.MemoryUsage(ctx, countingKey).Result()
	return mem, err
}

// readHeader reads k and m from the header of the filter at key, and
// checks that the filter is in one partition, since the limits' offsets
// are those of a single key.
func readHeader(ctx context.Context, rdb *redis.Client, key string) (int, uint64, error) {
	h, err := rdb.GetRange(ctx, key, 0, 63).Result()
	if err != nil {
		return 0, 0, err
	}
	if len(h) < 24 || h[:6] != "rbloom" {
		return 0, 0, fmt.Errorf("%s holds no rbloom header", key)
	}
	k, m := int(h[8]), uint64(binary.BigEndian.Uint32([]byte(h[12:16])))
	if p := binary.BigEndian.Uint32([]byte(h[16:20])); p != 1 {
		return 0, 0, fmt.Errorf("%s is a filter of %d partitions: the benchmark measures filters of one", key, p)
	}
	return k, m, nil
}
