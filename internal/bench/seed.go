package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// The seed's workload at its real size, on one Redis (RunSeed): a click
// stream of 10^9 events a day deduplicated over 24 hours at a
// false-positive rate of 10^-9, in hourly buckets. The window is made at
// its real size (25 live generations of 42 million events, k = 35) and
// its 24 past generations are written at the density of full ones; then consumers send batches of events with
// TestOrAddManyOnce, some of them repeats of events sent before, first
// paced at the seed's rate, then as fast as they go.

// SeedConfig is the seed's workload.
type SeedConfig struct {
	Addr       string        // Redis host:port, on loopback
	Client     *redis.Client // or a client, which Addr then does not replace
	Duration   time.Duration // of each phase; default 2 minutes
	Consumers  int           // default 4
	Batch      int           // events per TestOrAddManyOnce; default 1,000
	Repeats    float64       // share of each batch that repeats earlier events; default 0.15
	Rate       float64       // events/s of the paced phase; default 11,574 (10^9 a day)
	Partitions int           // of the window; default 16 (425 MB rings)
	Progress   io.Writer     // where progress goes; nil for none
}

// seedWindow is the seed's window: 10^9 events a day, 24 hours, p = 1e-9.
var seedWindow = rbloom.WindowOptions{EventsPerBucket: 1_000_000_000 / 24, ErrorRate: 1e-9,
	Bucket: time.Hour, Span: 24 * time.Hour}

const seedName = "rbloom-seed"

func (c SeedConfig) withDefaults() SeedConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Consumers, 4)
	def(&c.Batch, 1000)
	def(&c.Partitions, 16)
	if c.Duration == 0 {
		c.Duration = 2 * time.Minute
	}
	if c.Repeats == 0 {
		c.Repeats = 0.15
	}
	if c.Rate == 0 {
		c.Rate = 1e9 / 86400
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// phase is what one phase of the run measured.
type phase struct {
	name         string
	clearing     bool          // the phase ends when the rings have no generation to clear
	cleared      time.Duration // how long the clearing took
	events       int64
	elapsed      time.Duration
	cpu          float64 // Redis's CPU seconds, user and system
	batches      []time.Duration
	calls        int64   // script calls (EVALSHA)
	callMean     float64 // µs
	callP999     float64 // µs, INFO latencystats
	slow         int64   // SLOWLOG entries of 1 ms or more
	slowest      int64   // µs
	falsePos     int64   // new events answered seen
	repeatsNew   int64   // repeated events answered new
	new, repeats int64
}

// RunSeed runs the seed's workload and writes what it measured to out.
func RunSeed(ctx context.Context, cfg SeedConfig, out io.Writer) error {
	cfg = cfg.withDefaults()
	rdb := cfg.Client
	if rdb == nil {
		if err := checkLoopback("tcp", cfg.Addr); err != nil {
			return err
		}
		rdb = redis.NewClient(&redis.Options{Addr: cfg.Addr, PoolSize: 2 * cfg.Consumers})
		defer rdb.Close()
	}
	o := seedWindow
	o.Partitions = cfg.Partitions
	w, err := rbloom.NewWindow(rdb, seedName, o)
	if err != nil {
		return err
	}
	progress := func(format string, args ...any) { fmt.Fprintf(cfg.Progress, format+"\n", args...) }
	if err := w.Drop(ctx); err != nil {
		return err
	}
	if err := w.Create(ctx); err != nil {
		return err
	}
	start := time.Now()
	progress("seed: making the rings (%d partitions)", cfg.Partitions)
	if _, err := w.TestOrAdd(ctx, "seed-first"); err != nil {
		return err
	}
	keys, err := rdb.Keys(ctx, "rbloom:{"+seedName+"*}:ring").Result()
	if err != nil {
		return err
	}
	if len(keys) != cfg.Partitions {
		return fmt.Errorf("bench: %d rings, want %d", len(keys), cfg.Partitions)
	}
	in, err := w.Info(ctx)
	if err != nil {
		return err
	}
	m := in.Slots / uint64(cfg.Partitions)
	var ringBytes int64
	for i, key := range keys {
		progress("seed: writing 24 past generations as full ones in %s (%d of %d)", key, i+1, len(keys))
		r := newRingLayout(key, 24, m, in.Hashes)
		if err := r.synthesize(ctx, rdb, int64(seedWindow.EventsPerBucket)/int64(cfg.Partitions), uint64(i)); err != nil {
			return err
		}
		ringBytes += r.size
	}
	if in, err = w.Info(ctx); err != nil {
		return err
	}
	mem, err := infoNumber(ctx, rdb, "memory", "used_memory")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "The seed's window at its real size: %s events an hour, 24 hours, p = 1e-9: k = %d, m = %s slots a generation in %d partitions,\n",
		count(int(seedWindow.EventsPerBucket)), in.Hashes, count(int(in.Slots)), cfg.Partitions)
	fmt.Fprintf(out, "%d live generations (24 past ones written as full ones), rings of %s bytes in all; Redis used_memory %s bytes. Made in %v.\n\n",
		len(in.Generations), count(int(ringBytes)), count(int(mem)), time.Since(start).Round(time.Second))

	var sent history
	phases := []*phase{{name: fmt.Sprintf("paced at %s events/s", count(int(cfg.Rate)))}, {name: "as fast as it goes"},
		{name: "as fast, clearing a generation", clearing: true}}
	for i, ph := range phases {
		rate := cfg.Rate
		if i > 0 {
			rate = 0
		}
		if ph.clearing {
			// The next bucket's position, clean, is marked to clean again:
			// the pass over every word that each hour's turn makes.
			for _, key := range keys {
				r := newRingLayout(key, 24, m, in.Hashes)
				c, _, err := r.current(ctx, rdb)
				if err != nil {
					return err
				}
				if err := rdb.Do(ctx, "BITFIELD", key, "SET", "i64", 64*8+192+128*((c+1)%int64(r.w)), -1).Err(); err != nil {
					return err
				}
			}
		}
		progress("seed: %s for up to %v", ph.name, cfg.Duration)
		if err := runPhase(ctx, rdb, w, cfg, rate, ph, &sent, i); err != nil {
			return err
		}
	}
	writeSeed(out, cfg, phases)
	return nil
}

// history is the events sent so far, from which repeats are drawn.
type history struct {
	mu     sync.Mutex
	events []string
}

func (h *history) add(events []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, events...)
}

func (h *history) draw(rng *rand.Rand, n int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = h.events[rng.IntN(len(h.events))]
	}
	return out
}

// runPhase runs the consumers for cfg.Duration, at rate events/s in all,
// or as fast as they go when rate is 0.
func runPhase(ctx context.Context, rdb *redis.Client, w *rbloom.Window, cfg SeedConfig, rate float64, ph *phase, sent *history, n int) error {
	for _, set := range [][2]string{{"slowlog-log-slower-than", "1000"}, {"slowlog-max-len", "100000"}} {
		if err := rdb.ConfigSet(ctx, set[0], set[1]).Err(); err != nil {
			return err
		}
	}
	if err := rdb.SlowLogReset(ctx).Err(); err != nil {
		return err
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	cpu0, err := redisCPU(ctx, rdb)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var (
		mu                              sync.Mutex
		events, fp, repeatsNew, nw, rep atomic.Int64
		wg                              sync.WaitGroup
		firstErr                        error
	)
	start := time.Now()
	if ph.clearing {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			for ctx.Err() == nil {
				in, err := w.Info(ctx)
				if err == nil && in.Cleaning == 0 {
					ph.cleared = time.Since(start)
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	for c := range cfg.Consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(n), uint64(c)))
			var tick <-chan time.Time
			if rate > 0 {
				t := time.NewTicker(time.Duration(float64(cfg.Consumers*cfg.Batch) / rate * float64(time.Second)))
				defer t.Stop()
				tick = t.C
			}
			for b := 0; ; b++ {
				if tick != nil {
					select {
					case <-tick:
					case <-ctx.Done():
						return
					}
				}
				if ctx.Err() != nil {
					return
				}
				repeats := sent.draw(rng, int(float64(cfg.Batch)*cfg.Repeats))
				fresh := make([]string, 0, cfg.Batch)
				for i := len(repeats); i < cfg.Batch; i++ {
					fresh = append(fresh, "seed-"+strconv.Itoa(n)+"-"+strconv.Itoa(c)+"-"+strconv.Itoa(b)+"-"+strconv.Itoa(i))
				}
				batch := append(slices.Clone(fresh), repeats...)
				rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
				isRepeat := map[string]bool{}
				for _, e := range repeats {
					isRepeat[e] = true
				}
				t0 := time.Now()
				seen, err := w.TestOrAddManyOnce(ctx, batch, "seed-"+strconv.Itoa(n)+"-"+strconv.Itoa(c)+"-"+strconv.Itoa(b))
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
				d := time.Since(t0)
				for i, e := range batch {
					switch {
					case isRepeat[e] && !seen[i]:
						repeatsNew.Add(1)
					case !isRepeat[e] && seen[i]:
						fp.Add(1)
					}
				}
				events.Add(int64(len(batch)))
				nw.Add(int64(len(fresh)))
				rep.Add(int64(len(repeats)))
				sent.add(fresh)
				mu.Lock()
				ph.batches = append(ph.batches, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	ph.elapsed = time.Since(start)
	if firstErr != nil {
		return firstErr
	}
	cpu1, err := redisCPU(context.Background(), rdb)
	if err != nil {
		return err
	}
	ph.events, ph.falsePos, ph.repeatsNew, ph.new, ph.repeats = events.Load(), fp.Load(), repeatsNew.Load(), nw.Load(), rep.Load()
	ph.cpu = cpu1 - cpu0
	bg := context.Background()
	stats, err := rdb.Info(bg, "commandstats").Result()
	if err != nil {
		return err
	}
	parsed, err := parseStats(stats)
	if err != nil {
		return err
	}
	if st := parsed["evalsha"]; st.calls > 0 {
		ph.calls, ph.callMean = st.calls, float64(st.usec)/float64(st.calls)
	}
	if lat, err := rdb.Info(bg, "latencystats").Result(); err == nil {
		ph.callP999 = percentile(lat, "evalsha", "p99.9")
	}
	slow, err := rdb.SlowLogGet(bg, -1).Result()
	if err != nil {
		return err
	}
	ph.slow = int64(len(slow))
	for _, s := range slow {
		ph.slowest = max(ph.slowest, s.Duration.Microseconds())
	}
	return nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// redisCPU is Redis's CPU time so far, user and system, in seconds.
func redisCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := infoNumber(ctx, rdb, "cpu", f)
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// infoField reads one number of INFO section.
func infoNumber(ctx context.Context, rdb *redis.Client, section, field string) (float64, error) {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, errors.New("INFO " + section + " has no " + field)
}

// percentile reads percentile p of cmd from INFO latencystats (Redis 7+),
// in µs; 0 when the server has none.
func percentile(lat, cmd, p string) float64 {
	for line := range strings.Lines(lat) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "latency_percentiles_usec_"+cmd+":")
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			if k, v, _ := strings.Cut(kv, "="); k == p {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
	}
	return 0
}

// writeSeed writes the table of the run.
func writeSeed(out io.Writer, cfg SeedConfig, phases []*phase) {
	fmt.Fprintf(out, "%d consumers, TestOrAddManyOnce of %s events a batch, %.0f%% of them repeats of earlier events; %v a phase.\n\n",
		cfg.Consumers, count(cfg.Batch), 100*cfg.Repeats, cfg.Duration)
	head := []string{""}
	for _, ph := range phases {
		head = append(head, ph.name)
	}
	t := newTable(head...)
	row := func(name string, f func(ph *phase) string) {
		cells := []string{name}
		for _, ph := range phases {
			cells = append(cells, f(ph))
		}
		t.add(cells...)
	}
	row("time", func(ph *phase) string {
		if ph.clearing {
			if ph.cleared == 0 {
				return ph.elapsed.Round(time.Second).String() + ", not cleared"
			}
			return ph.cleared.Round(time.Second).String() + " to clear the rings"
		}
		return ph.elapsed.Round(time.Second).String()
	})
	row("events/s held", func(ph *phase) string { return count(int(float64(ph.events) / ph.elapsed.Seconds())) })
	row("Redis CPU per event (used_cpu_user+sys)", func(ph *phase) string {
		return strconv.FormatFloat(ph.cpu/float64(max(ph.events, 1))*1e6, 'f', 1, 64) + " µs"
	})
	row("Redis CPU", func(ph *phase) string {
		return strconv.FormatFloat(100*ph.cpu/ph.elapsed.Seconds(), 'f', 0, 64) + "%"
	})
	row("batch latency p50 / p99 / max", func(ph *phase) string {
		d := slices.Clone(ph.batches)
		slices.Sort(d)
		if len(d) == 0 {
			return "no batch"
		}
		q := func(p float64) string {
			return d[min(len(d)-1, int(p*float64(len(d))))].Round(time.Millisecond).String()
		}
		return q(0.5) + " / " + q(0.99) + " / " + d[len(d)-1].Round(time.Millisecond).String()
	})
	row("script calls: mean / p99.9 (INFO latencystats)", func(ph *phase) string {
		return strconv.FormatFloat(ph.callMean, 'f', 0, 64) + " µs / " + strconv.FormatFloat(ph.callP999, 'f', 0, 64) + " µs"
	})
	row("commands of 1 ms or more (SLOWLOG), slowest", func(ph *phase) string {
		return fmt.Sprintf("%d of %s calls, %s µs", ph.slow, count(int(ph.calls)), count(int(ph.slowest)))
	})
	row("new events answered seen (false positives)", func(ph *phase) string {
		return fmt.Sprintf("%d of %s", ph.falsePos, count(int(ph.new)))
	})
	row("repeats answered new", func(ph *phase) string {
		return fmt.Sprintf("%d of %s", ph.repeatsNew, count(int(ph.repeats)))
	})
	t.write(out)
}
