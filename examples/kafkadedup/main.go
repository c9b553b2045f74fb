// Command kafkadedup counts click events read from a Kafka topic exactly
// once, although the producer's retries write some clicks twice and
// consumers die in the middle of batches.
//
// The consumers of one consumer group read the topic of clicks (JSON: the
// click's own id and its campaign). Each transaction of a consumer takes
// what it polled and, per partition:
//
//  1. Cuts the records into batches, each ending where the journal in
//     Redis says (journal.go): the first consumer to cut a batch stores its
//     last offset, and a consumer that runs the batch again, after the
//     transaction was aborted, cuts it the same way.
//  2. Runs each batch through an rbloom Window with TestOrAddManyOnce,
//     under the id "topic/partition/first-last": the window adds the
//     clicks it has not seen within its span and records its answers; the
//     same batch run again gets the first answers and adds nothing. With
//     plain TestOrAddMany, a batch run again after its transaction
//     aborted would find its own clicks "seen", and they would never be
//     counted.
//  3. Produces the new clicks' counts per campaign to the output topic
//     and commits the consumed offsets in the same Kafka transaction
//     (franz-go's GroupTransactSession): both happen, or neither. A
//     consumer that dies, or a rebalance, aborts the transaction, and the
//     batches are run again from the committed offsets.
//
// So each distinct click is counted once: the window answers "new" for it
// in exactly one batch, that batch's answers are the same every time it
// runs, and only one of its runs commits. The exception is a click whose
// first test is a false positive of the window: it is never counted (the
// window is sized for a rate of 1e-6 by default).
//
// Run without flags, it starts an in-process Kafka (kfake) and an
// in-memory Redis, writes the clicks with duplicates, runs the consumers
// with crashes and rebalances, and prints what was counted against the
// truth. -brokers and -redis (or KAFKA_BROKERS and REDIS_URL) point it at
// real ones. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/internal/memredis"
)

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := demo(ctx, os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the flags were printed
	}
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		os.Exit(1)
	}
}

// demoFlags are the demo's settings.
type demoFlags struct {
	brokers, redisURL, name string
	events, consumers       int
	crashes, timeouts       int
	partitions              int
	batch                   int
	dupRate, errorRate      float64
	seed                    uint64
	timeout                 time.Duration
}

func parseFlags(args []string) (demoFlags, error) {
	var f demoFlags
	fs := flag.NewFlagSet("kafkadedup", flag.ContinueOnError)
	fs.StringVar(&f.brokers, "brokers", os.Getenv("KAFKA_BROKERS"), "Kafka seed brokers, host:port,...; empty (and KAFKA_BROKERS unset): an in-process kfake cluster")
	fs.StringVar(&f.redisURL, "redis", os.Getenv("REDIS_URL"), "Redis URL (redis://host:port/0); empty (and REDIS_URL unset): an in-memory Redis")
	fs.StringVar(&f.name, "name", "", "names the topics, group and window (clicks-NAME, counts-NAME, kafkadedup-NAME); empty: a random one")
	fs.IntVar(&f.events, "events", 20_000, "distinct clicks to write")
	fs.Float64Var(&f.dupRate, "dup-rate", 0.15, "share of the clicks the producer writes twice")
	fs.IntVar(&f.timeouts, "timeouts", 5, "produce requests the in-process Kafka writes and then answers REQUEST_TIMED_OUT, so that the producer retries them (kfake only)")
	fs.IntVar(&f.consumers, "consumers", 3, "consumers of the group; they join one after the other")
	fs.IntVar(&f.crashes, "crashes", 3, "consumers that die in the middle of a transaction, each replaced by a fresh one")
	fs.IntVar(&f.partitions, "partitions", 4, "partitions of each topic, when the demo creates them")
	fs.IntVar(&f.batch, "batch", 100, "records of one batch, at most")
	fs.Float64Var(&f.errorRate, "error-rate", 1e-6, "false-positive rate of the window")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the clicks and of the crashes")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "give up when the group has not counted every click by then")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch {
	case f.events < 1:
		return f, fmt.Errorf("-events %d: want at least 1", f.events)
	case f.dupRate < 0 || f.dupRate > 1:
		return f, fmt.Errorf("-dup-rate %v: want 0 to 1", f.dupRate)
	case f.consumers < 1:
		return f, fmt.Errorf("-consumers %d: want at least 1", f.consumers)
	case f.crashes < 0 || f.timeouts < 0:
		return f, fmt.Errorf("-crashes %d, -timeouts %d: want 0 or more", f.crashes, f.timeouts)
	case f.partitions < 1 || f.batch < 1:
		return f, fmt.Errorf("-partitions %d, -batch %d: want at least 1", f.partitions, f.batch)
	}
	if f.name == "" {
		f.name = fmt.Sprintf("%06x", rand.Uint32()&0xffffff)
	}
	return f, nil
}

// newConfig names a run's topics, group and window, and sizes the window
// for events clicks in one bucket of an hour, remembered for an hour.
func newConfig(brokers []string, name string, events int, errorRate float64, batch int) config {
	return config{
		brokers: brokers, input: "clicks-" + name, output: "counts-" + name, group: "kafkadedup-" + name,
		window: "kafkadedup:" + name,
		windowOptions: rbloom.WindowOptions{EventsPerBucket: uint64(events), ErrorRate: errorRate,
			Bucket: time.Hour, Span: time.Hour, IDLifetime: time.Hour},
		maxBatch: batch,
	}
}

// demo runs the whole example and writes its report to w; it reports
// whether the clicks were counted exactly once.
func demo(ctx context.Context, args []string, w *os.File) (bool, error) {
	f, err := parseFlags(args)
	if err != nil {
		return false, err
	}
	rdb, closeRedis, err := connectRedis(ctx, f.redisURL)
	if err != nil {
		return false, err
	}
	defer closeRedis()

	var cluster *kfake.Cluster
	brokers := splitBrokers(f.brokers)
	if len(brokers) == 0 {
		cluster, err = kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return false, fmt.Errorf("start the in-process Kafka: %w", err)
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
		log.Printf("kafka: in-process kfake at %s (set -brokers for a real one)", strings.Join(brokers, ","))
	}
	cfg := newConfig(brokers, f.name, f.events, f.errorRate, f.batch)
	cfg.heartbeat = 250 * time.Millisecond // rebalances in a fraction of a second
	if err := createTopics(ctx, cfg, int32(f.partitions)); err != nil {
		return false, err
	}
	adm, closeAdm, err := newAdmin(cfg)
	if err != nil {
		return false, err
	}
	defer closeAdm()
	win, err := openWindow(ctx, rdb, adm, cfg)
	if err != nil {
		return false, err
	}

	written := generate(f.events, f.dupRate, f.seed)
	truth := distinct(written)
	if cluster != nil && f.timeouts > 0 {
		// Written, then answered REQUEST_TIMED_OUT: the producer sends
		// the same records again, at new offsets.
		cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.input, Err: kerr.RequestTimedOut, Count: f.timeouts})
	}

	runCtx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	st := &stats{}
	g := newGroup(cfg, rdb, win, st, log.Default())
	r := rand.New(rand.NewPCG(f.seed, 0x637261736865))
	crashes := make([]int, f.consumers) // crashes planned per slot
	for range f.crashes {
		crashes[r.IntN(f.consumers)]++
	}
	steps := []string{stepPolled, stepDeduped, stepDeduped, stepProduced} // dying after the window call is the case that matters
	for i := range f.consumers {
		slot := fmt.Sprintf("consumer-%d", i)
		plan := make([]crashAt, crashes[i])
		for k := range plan {
			plan[k] = crashAt{step: steps[r.IntN(len(steps))], txn: 2 + r.IntN(4)}
		}
		g.start(runCtx, slot, plan)
		time.Sleep(300 * time.Millisecond) // each joins a running group: a rebalance
	}

	start := time.Now()
	log.Printf("producing %d records (%d clicks, %.0f%% written twice) to %s", len(written), f.events, 100*f.dupRate, cfg.input)
	if err := produce(runCtx, cfg, written); err != nil {
		g.stop()
		return false, err
	}
	err = waitDrained(runCtx, adm, cfg)
	g.stop()
	if err != nil {
		return false, errors.Join(err, g.err())
	}
	if err := g.err(); err != nil {
		return false, err
	}
	records, err := inputRecords(ctx, adm, cfg)
	if err != nil {
		return false, err
	}
	out, err := readOutput(runCtx, adm, cfg)
	if err != nil {
		return false, err
	}
	problems := check(truth, out)

	counted := 0
	for _, n := range out.counts {
		counted += n
	}
	fmt.Fprintf(w, "counted in %.1fs by %d consumers (%d died mid-transaction and were replaced): %s\n",
		time.Since(start).Seconds(), f.consumers, g.crashed(), st)
	fmt.Fprintf(w, "written: %d records: %d distinct clicks, %d written again by the producer, %d by produce requests retried after a timeout\n",
		records, len(truth), len(written)-len(truth), records-int64(len(written)))
	fmt.Fprintf(w, "counted: %d clicks in %d committed output records\n", counted, out.records)
	want := map[string]int{}
	for _, e := range truth {
		want[e.Campaign]++
	}
	for _, c := range slices.Sorted(func(yield func(string) bool) {
		for c := range want {
			if !yield(c) {
				return
			}
		}
	}) {
		fmt.Fprintf(w, "  campaign %-4s %6d  (truth %d)\n", c, out.counts[c], want[c])
	}
	if len(problems) > 0 {
		fmt.Fprintf(w, "NOT exactly once (a click never counted can be a false positive of the window, rate %g):\n", f.errorRate)
		for _, p := range problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		return false, nil
	}
	fmt.Fprintln(w, "exactly once: every distinct click counted once, none twice, none lost")
	return true, nil
}

// inputRecords is the number of records written to the input topic.
func inputRecords(ctx context.Context, adm *kadm.Client, cfg config) (int64, error) {
	ends, err := adm.ListEndOffsets(ctx, cfg.input)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("list the end offsets of %s: %w", cfg.input, err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

func splitBrokers(s string) []string {
	var out []string
	for b := range strings.SplitSeq(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// newAdmin returns an admin client of cfg's cluster.
func newAdmin(cfg config) (*kadm.Client, func(), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...))
	if err != nil {
		return nil, nil, fmt.Errorf("admin client: %w (check -brokers)", err)
	}
	return kadm.NewClient(cl), cl.Close, nil
}

// connectRedis connects to the Redis at url or, with url empty, starts an
// in-memory one (miniredis, with the BITFIELD command rbloom needs) that is
// gone when the program exits.
func connectRedis(ctx context.Context, url string) (redis.UniversalClient, func(), error) {
	if url != "" {
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("-redis %q: %w (want redis://host:port/db)", url, err)
		}
		o.ContextTimeoutEnabled = true
		rdb := redis.NewClient(o)
		if err := rdb.Ping(ctx).Err(); err != nil {
			rdb.Close()
			return nil, nil, fmt.Errorf("connect to Redis at %s: %w (is it running? check -redis or REDIS_URL)", o.Addr, err)
		}
		return rdb, func() { rdb.Close() }, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, nil, fmt.Errorf("start the in-memory Redis: %w", err)
	}
	if err := memredis.Register(m); err != nil {
		m.Close()
		return nil, nil, err
	}
	log.Printf("redis: in-memory at %s (set -redis or REDIS_URL for a real one)", m.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	return rdb, func() { rdb.Close(); m.Close() }, nil
}

// crashAt is a planned death: at step of the consumer's txn-th
// transaction, after calling before if it is not nil.
type crashAt struct {
	step   string
	txn    int
	before func()
}

// group runs the consumers of one slot each, replacing one that dies at
// a planned crash with a fresh one of the same name (which fences the
// dead one's open transaction).
type group struct {
	cfg    config
	rdb    redis.UniversalClient
	win    *rbloom.Window
	st     *stats
	log    *log.Logger
	dedup  dedupMode
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	deaths int
	slots  map[string]slotRun
}

// slotRun stops a slot's consumers (cancel) and tells when they stopped.
type slotRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newGroup(cfg config, rdb redis.UniversalClient, win *rbloom.Window, st *stats, logger *log.Logger) *group {
	return &group{cfg: cfg, rdb: rdb, win: win, st: st, log: logger, slots: map[string]slotRun{}}
}

// start runs the slot's consumers until ctx is done, stop is called, or
// one fails: each dies at the next crash of plan and is replaced.
func (g *group) start(ctx context.Context, slot string, plan []crashAt) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	g.mu.Lock()
	g.slots[slot] = slotRun{cancel: cancel, done: done}
	g.mu.Unlock()
	g.wg.Go(func() {
		defer close(done)
		j := newJournal(g.rdb, g.cfg.group, g.cfg.windowOptions.IDLifetime)
		for gen := 0; ctx.Err() == nil; gen++ {
			c, err := newConsumer(g.cfg, slot, g.win, j, g.log, g.st)
			if err != nil {
				g.fail(err)
				return
			}
			c.dedup = g.dedup
			if gen < len(plan) {
				at := plan[gen]
				c.crash = func(step string, txn int) bool {
					if step != at.step || txn != at.txn {
						return false
					}
					if at.before != nil {
						at.before()
					}
					return true
				}
			}
			err = c.run(ctx)
			if !errors.Is(err, errCrashed) {
				if err != nil {
					g.fail(err)
				}
				return
			}
			g.mu.Lock()
			g.deaths++
			g.mu.Unlock()
			g.log.Printf("%s died at step %s of its transaction %d; a fresh %s takes its place", slot, plan[gen].step, plan[gen].txn, slot)
		}
	})
}

func (g *group) fail(err error) {
	g.mu.Lock()
	g.errs = append(g.errs, err)
	g.mu.Unlock()
}

// stop stops every consumer and waits for them.
func (g *group) stop() {
	g.mu.Lock()
	for _, s := range g.slots {
		s.cancel()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// err is the consumers' errors, joined.
func (g *group) err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

// crashed is how many consumers died at a planned crash.
func (g *group) crashed() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.deaths
}

// stopSlot stops the consumer of slot, which leaves the group, and waits
// for it.
func (g *group) stopSlot(slot string) {
	g.mu.Lock()
	cancel, done := g.slots[slot].cancel, g.slots[slot].done
	g.mu.Unlock()
	cancel()
	<-done
}
