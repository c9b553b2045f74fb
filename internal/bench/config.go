package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config says what to measure and where. The zero value of each field means
// its default; Quick changes the defaults, never a field that is set.
type Config struct {
	// Addr is the Redis to measure, host:port on the loopback interface.
	// Ignored when Client is set.
	Addr string

	// Client, when set, is used instead of Addr. Run does not use it
	// directly: it opens a client of its own with a copy of its options (so
	// that the hook counting round trips is not added to the caller's
	// client) and closes it at the end.
	Client *redis.Client

	// N is the number of items of each bulk row (limits, library batches,
	// naive Lua batch), over all rounds. Default 1,000,000 (quick: 5,000).
	N int

	// P is the target false-positive rate the filters are sized for, with
	// N: m and k follow from both as in rbloom.Options. Default 0.01.
	P float64

	// Batch is the number of items per library call (AddMany, TestMany,
	// RemoveMany) and per pipeline flush of the plain rows. Default 1,000.
	Batch int

	// ScriptBatch is the number of items per call of the naive Lua batch
	// script. Default 200.
	ScriptBatch int

	// Rounds is how many slices each row's items are cut into; every round
	// runs one slice of every row. Default 3 (quick: 1).
	Rounds int

	// SeedItems is the number of items of the slowest row, k SETBIT round
	// trips per item. Default 2,000 (quick: 100).
	SeedItems int

	// SingleItems is the number of items of each row that makes a round
	// trip per item (pipelined SETBIT, EVALSHA per item, single-item calls,
	// concurrent Add). Default 20,000 (quick: 400).
	SingleItems int

	// Goroutines is the number of goroutines of the concurrent Add row.
	// Default 8.
	Goroutines int

	// WindowGens is G, the past generations of the window row's window
	// (its Span in buckets): before the rows, each is filled with N events,
	// so that every call reads G+1 existing generations. Default 4.
	WindowGens int

	// Records is M, the calls of each kind whose operation records are
	// measured: M single Counting.Add calls, then M Counting.AddOnce calls
	// with distinct ids. Default 20,000 (quick: 500).
	Records int

	// Chart, when not empty, is the path of a chart of throughput against
	// batch size, which Draw writes. Default: no chart.
	Chart string

	// Draw writes the chart to the path Chart names; it must be set when
	// Chart is. This package draws nothing itself: internal/bench/chart,
	// a command of its own, draws a PNG with gonum/plot.
	Draw func(path string, c Chart) error

	// ChartItems bounds the items measured at each point of the chart.
	// Default 100,000 (quick: 1,000).
	ChartItems int

	// ChartBatches are the batch sizes of the chart. Default 1, 10, 100,
	// 1,000 and 10,000 (quick: 1, 10, 100).
	ChartBatches []int

	// Timeout bounds the whole run. Default 15 minutes (quick: 1 minute).
	Timeout time.Duration

	// Seed runs the seed's workload at its real size instead of the rows
	// (RunSeed), each phase lasting SeedDuration (default 2 minutes).
	Seed         bool
	SeedDuration time.Duration

	// Quick makes the defaults small, so that a run takes a few seconds:
	// enough for CI to prove that the benchmark works, not to measure.
	Quick bool

	// Progress, when not nil, receives a line per row and round while the
	// benchmark runs.
	Progress io.Writer
}

// RegisterFlags defines flags on fs that set the fields of c, with the
// field names in lower case ("-n", "-batch", ...), but for the chart's
// (RegisterChartFlags). Flags left unset keep the field's zero value,
// which means its default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "Redis `host:port` on the loopback interface")
	fs.IntVar(&c.N, "n", c.N, "items of each bulk row (default 1000000; 5000 with -quick)")
	fs.Float64Var(&c.P, "p", c.P, "target false-positive rate the filters are sized for (default 0.01)")
	fs.IntVar(&c.Batch, "batch", c.Batch, "items per library call and per pipeline flush (default 1000)")
	fs.IntVar(&c.ScriptBatch, "script-batch", c.ScriptBatch, "items per call of the naive Lua batch script (default 200)")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "rounds, each running a slice of every row (default 3; 1 with -quick)")
	fs.IntVar(&c.SeedItems, "seed-items", c.SeedItems, "items of the k-SETBIT-round-trips row (default 2000; 100 with -quick)")
	fs.IntVar(&c.SingleItems, "single-items", c.SingleItems, "items of each round-trip-per-item row (default 20000; 400 with -quick)")
	fs.IntVar(&c.Goroutines, "goroutines", c.Goroutines, "goroutines of the concurrent Add row (default 8)")
	fs.IntVar(&c.WindowGens, "window-gens", c.WindowGens, "past generations of the window row, written as full ones first (default 24, a day of hourly buckets)")
	fs.IntVar(&c.Records, "records", c.Records, "Add and AddOnce calls whose operation records are measured (default 20000; 500 with -quick)")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on the whole run (default 15m; 1m with -quick)")
	fs.BoolVar(&c.Quick, "quick", c.Quick, "small sizes: a few seconds, to check that the benchmark works")
	fs.BoolVar(&c.Seed, "seed", c.Seed, "run the seed's stream at its real size instead: a 24-hour window of 10^9 events a day at 1e-9 (7.4 GB of rings in Redis), 4 consumers, paced then unpaced")
	fs.DurationVar(&c.SeedDuration, "seed-duration", c.SeedDuration, "each phase of -seed (default 2m)")
}

// RegisterChartFlags defines -chart and -chart-items on fs, for a program
// that sets Draw.
func (c *Config) RegisterChartFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Chart, "chart", c.Chart, "write a PNG chart of throughput against batch size to `path`")
	fs.IntVar(&c.ChartItems, "chart-items", c.ChartItems, "most items per point of the chart (default 100000; 1000 with -quick)")
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	def := func(v *int, normal, quick int) {
		if *v == 0 {
			*v = normal
			if c.Quick {
				*v = quick
			}
		}
	}
	def(&c.N, 1_000_000, 5_000)
	def(&c.Batch, 1_000, 1_000)
	def(&c.ScriptBatch, 200, 200)
	def(&c.Rounds, 3, 1)
	def(&c.SeedItems, 2_000, 100)
	def(&c.SingleItems, 20_000, 400)
	def(&c.Goroutines, 8, 8)
	def(&c.WindowGens, 24, 24)
	def(&c.Records, 20_000, 500)
	def(&c.ChartItems, 100_000, 1_000)
	if c.P == 0 {
		c.P = 0.01
	}
	if c.ChartBatches == nil {
		c.ChartBatches = []int{1, 10, 100, 1_000, 10_000}
		if c.Quick {
			c.ChartBatches = []int{1, 10, 100}
		}
	}
	if c.Timeout == 0 {
		c.Timeout = 15 * time.Minute
		if c.Quick {
			c.Timeout = time.Minute
		}
	}
	return c
}

// check rejects a configuration that cannot run. c has its defaults.
func (c Config) check() error {
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{
		{"N", c.N, 2}, {"Batch", c.Batch, 1}, {"ScriptBatch", c.ScriptBatch, 1},
		{"Rounds", c.Rounds, 1}, {"SeedItems", c.SeedItems, 1}, {"SingleItems", c.SingleItems, 1},
		{"Goroutines", c.Goroutines, 1}, {"ChartItems", c.ChartItems, 1},
		{"WindowGens", c.WindowGens, 1}, {"Records", c.Records, 1},
	} {
		if f.v < f.min {
			return fmt.Errorf("bench: %s = %d: want at least %d", f.name, f.v, f.min)
		}
	}
	// The window row writes WindowGens past generations before the rows.
	if c.WindowGens > maxWindowGens {
		return fmt.Errorf("bench: WindowGens = %d: want at most %d", c.WindowGens, maxWindowGens)
	}
	if c.P <= 0 || c.P >= 1 {
		return fmt.Errorf("bench: P = %g: want a rate in (0, 1)", c.P)
	}
	for _, b := range c.ChartBatches {
		if b < 1 {
			return fmt.Errorf("bench: ChartBatches holds %d: want sizes of at least 1", b)
		}
	}
	if c.Chart != "" && c.Draw == nil {
		return errors.New("bench: Chart is set but Draw is nil: this program draws no charts (go run ./internal/bench/chart does)")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("bench: Timeout = %v: want a positive duration", c.Timeout)
	}
	if c.Client == nil && c.Addr == "" {
		return errors.New("bench: no Redis: set Addr or Client")
	}
	return nil
}

// checkLoopback rejects an address that is not on this machine: the
// benchmark sends a million commands as fast as it can, which is only ever
// acceptable against a server of one's own.
func checkLoopback(network, addr string) error {
	if network == "unix" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bench: Redis address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("bench: Redis address %q is not on the loopback interface: the benchmark only runs against a Redis on this machine (127.0.0.1)", addr)
}
