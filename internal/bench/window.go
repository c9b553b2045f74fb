package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// The window rows measure deduplication with a Window (rows 7c, 7d and
// 8f): Window.TestOrAddMany of new events, in batches, on a window whose
// G past generations and current one all exist, so that every call reads
// G+1 generations. Its clock is the benchmark's own (WindowOptions.Now):
// before the rows each past bucket is filled with N events, then the clock
// stays in the current bucket, where the row adds its N events. The next
// bucket's generation, which every call also looks for, does not exist, as
// is usual away from a bucket boundary.
//
// Two plain rows go with it, on keys of their own laid out like a
// generation (k and m of the window's, 1-bit slots): the limit of its
// writes (BITFIELD SET u1 per event, as row 7a with the window's k) and
// the window's whole work done with plain commands (per event, a
// BITFIELD_RO GET u1 of its k bits in each of the G+1 generations, then
// the BITFIELD SET u1 in the current one).

const (
	windowName   = "rbloom-bench-window"
	keyWindowU1  = "rbloom-bench:window-u1"
	keyWindowGen = "rbloom-bench:window-gen:" // + 0 (current) .. G

	// maxWindowGens bounds Config.WindowGens: the fill writes G * N events.
	maxWindowGens = 100

	// windowFillCall is the number of events per TestOrAddMany call of the
	// fill, which is not timed.
	windowFillCall = 5_000
)

// windowStart is the clock of the window's oldest generation: any fixed
// time will do, since the window's keys are named by bucket number.
var windowStart = time.UnixMilli(1_000_000_000_000)

// windowBench is the window of the rows and what they keep of it.
type windowBench struct {
	w     *rbloom.Window
	clock atomic.Int64 // Unix ms, what WindowOptions.Now answers
	gens  int          // G, past generations
	k     int          // of one generation
	m     uint64       // bits of one generation
	n     uint64       // EventsPerBucket, the events a generation is sized for

	limit plain   // row 7c: a key laid out like one generation
	reads []plain // row 7d: the current generation first, then the G past ones

	seen int // events row 8f answered seen: false positives, the events being new
}

func (wb *windowBench) now() time.Time { return time.UnixMilli(wb.clock.Load()) }

// setClock puts the window's clock in the bucket of generation g, 0 being
// the oldest.
func (wb *windowBench) setClock(g int) {
	wb.clock.Store(windowStart.Add(time.Duration(g) * time.Hour).UnixMilli())
}

// newWindowBench returns the window of the rows, sized for N events per
// bucket at P over the window. Like NewWindow it does not contact Redis.
func newWindowBench(rdb *redis.Client, cfg Config) (*windowBench, error) {
	wb := &windowBench{gens: cfg.WindowGens, n: uint64(cfg.N)}
	wb.setClock(0)
	var err error
	wb.w, err = rbloom.NewWindow(rdb, windowName, rbloom.WindowOptions{
		EventsPerBucket: wb.n, ErrorRate: cfg.P,
		Bucket: time.Hour, Span: time.Duration(wb.gens) * time.Hour, Now: wb.now,
	})
	return wb, err
}

// fill adds N events to each past generation, oldest first, leaves the
// clock in the current bucket and checks that G+1 generations then exist
// (the current one made by one event, so that the plain keys can take k
// and m from its header). It then creates the plain keys, empty and at
// full size.
func (wb *windowBench) fill(ctx context.Context, rdb *redis.Client, progress func(string)) error {
	for g := range wb.gens {
		wb.setClock(g)
		progress(fmt.Sprintf("window: filling past generation %d/%d with %s events", g+1, wb.gens, count(int(wb.n))))
		err := chunks(names("window-fill-"+strconv.Itoa(g), 0, int(wb.n)), windowFillCall, func(part []string) error {
			_, err := wb.w.TestOrAddMany(ctx, part)
			return err
		})
		if err != nil {
			return err
		}
	}
	wb.setClock(wb.gens)
	if _, err := wb.w.TestOrAdd(ctx, "window-fill-current"); err != nil {
		return err
	}
	in, err := wb.w.Info(ctx)
	if err != nil {
		return err
	}
	if len(in.Generations) != wb.gens+1 {
		return fmt.Errorf("window: %d generations exist after the fill, want %d", len(in.Generations), wb.gens+1)
	}
	keys, err := wb.keys(ctx)
	if err != nil {
		return err
	}
	if wb.k, wb.m, err = readHeader(ctx, rdb, keys[len(keys)-1]); err != nil {
		return err
	}
	if wb.k != in.Hashes || wb.m != in.Slots {
		return fmt.Errorf("window: header of %s says k = %d, m = %d; Info says %d and %d", keys[len(keys)-1], wb.k, wb.m, in.Hashes, in.Slots)
	}
	wb.limit = plain{key: keyWindowU1, k: wb.k, m: wb.m, width: 1}
	wb.reads = nil
	for g := range wb.gens + 1 {
		wb.reads = append(wb.reads, plain{key: keyWindowGen + strconv.Itoa(g), k: wb.k, m: wb.m, width: 1})
	}
	for _, p := range append([]plain{wb.limit}, wb.reads...) {
		if err := rdb.SetRange(ctx, p.key, p.size()-1, "\x00").Err(); err != nil {
			return err
		}
	}
	return nil
}

// plainWindowKeys are the names of the plain keys of rows 7c and 7d, for G past
// generations.
func plainWindowKeys(gens int) []string {
	keys := []string{keyWindowU1}
	for g := range gens + 1 {
		keys = append(keys, keyWindowGen+strconv.Itoa(g))
	}
	return keys
}

// keys returns the Redis keys of the window's existing generations, oldest
// first: the window's name as a filter's key, ":g:" and the bucket's number
// (NewWindow's documentation), for its one partition.
func (wb *windowBench) keys(ctx context.Context) ([]string, error) {
	in, err := wb.w.Info(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, g := range in.Generations {
		b := g.Start.UnixMilli() / in.Bucket.Milliseconds()
		keys = append(keys, "rbloom:{"+windowName+"}:g:"+strconv.FormatInt(b, 10))
	}
	return keys, nil
}

// testOrAdd is row 8f: TestOrAddMany of new events, batch events per call.
func (wb *windowBench) testOrAdd(ctx context.Context, items []string, batch int) error {
	return chunks(items, batch, func(part []string) error {
		seen, err := wb.w.TestOrAddMany(ctx, part)
		if err != nil {
			return err
		}
		for _, s := range seen {
			if s {
				wb.seen++
			}
		}
		return nil
	})
}

// plainWindow is row 7d: for each event, what the window does for it with
// plain commands and no script: a BITFIELD_RO GET u1 of its k bits in each
// generation (the current one first), then a BITFIELD SET u1 of them in
// the current one; batch events per pipeline flush.
func plainWindow(ctx context.Context, rdb *redis.Client, gens []plain, items []string, batch int) error {
	return chunks(items, batch, func(part []string) error {
		pipe := rdb.Pipeline()
		for _, item := range part {
			for _, g := range gens {
				_ = pipe.Process(ctx, redis.NewIntSliceCmd(ctx, g.getArgs(item)...))
			}
			_ = pipe.Process(ctx, redis.NewIntSliceCmd(ctx, gens[0].setArgs(item)...))
		}
		_, err := pipe.Exec(ctx)
		return err
	})
}

// windowUse is the window's memory after its row.
type windowUse struct {
	gens  int   // generation keys
	usage int64 // MEMORY USAGE, summed over them
	held  int64 // events they hold (Window.Info)
	m     uint64
	n     uint64 // events a generation is sized for
}

// perEvent is the measured bytes per event held.
func (u windowUse) perEvent() float64 { return float64(u.usage) / float64(max(u.held, 1)) }

// theory is what the bits of a full generation cost per event, in bytes:
// m/n bits.
func (u windowUse) theory() float64 { return float64(u.m) / float64(max(u.n, 1)) / 8 }

// memory measures the window's generations: their MEMORY USAGE and the
// events they hold.
func (wb *windowBench) memory(ctx context.Context, rdb *redis.Client) (windowUse, error) {
	u := windowUse{m: wb.m, n: wb.n}
	in, err := wb.w.Info(ctx)
	if err != nil {
		return u, err
	}
	for _, g := range in.Generations {
		u.held += g.Items
	}
	keys, err := wb.keys(ctx)
	if err != nil {
		return u, err
	}
	u.gens = len(keys)
	for _, key := range keys {
		n, err := rdb.MemoryUsage(ctx, key).Result()
		if err != nil {
			return u, fmt.Errorf("MEMORY USAGE %s: %w", key, err)
		}
		u.usage += n
	}
	return u, nil
}

// windowRows returns rows 7c, 7d and 8f.
func (b *bench) windowRows() (limit, reads, window *row) {
	c, wb := b.cfg, b.window
	k := fmt.Sprintf("k = %d", wb.k)
	limit = &row{id: "7c", name: fmt.Sprintf("limit: BITFIELD SET u1, %s, pipelined, %s per flush", k, count(c.Batch)),
		items: b.source("window-limit", c.N),
		do: func(ctx context.Context, items []string) error {
			return pipelined(ctx, b.rdb, items, c.Batch, wb.limit.setArgs)
		}}
	reads = &row{id: "7d", name: fmt.Sprintf("limit: window's work, GET u1 in %d keys + SET u1, %s, %s per flush", len(wb.reads), k, count(c.Batch)),
		items: b.source("window-plain", c.N),
		do: func(ctx context.Context, items []string) error {
			return plainWindow(ctx, b.rdb, wb.reads, items, c.Batch)
		}}
	window = &row{id: "8f", name: fmt.Sprintf("Window.TestOrAddMany, %d generations, %s, %s per call", wb.gens+1, k, count(c.Batch)),
		vs: limit, lib: true, items: b.source("window", c.N),
		do: func(ctx context.Context, items []string) error {
			return wb.testOrAdd(ctx, items, c.Batch)
		}}
	return limit, reads, window
}

// reportWindow writes line 11b: the window row's figures and its ratios
// to the two plain rows.
func (b *bench) reportWindow(w io.Writer, byID map[string]*row) {
	win, limit, reads := byID["8f"], byID["7c"], byID["7d"]
	if win == nil || limit == nil || reads == nil || win.n == 0 {
		return
	}
	wb := b.window
	vs := func(r *row) string {
		x, ok := ratioOf(win, r)
		if !ok || r.serverPerItem() == 0 {
			return "no figure"
		}
		return fmt.Sprintf("throughput %s, server µs/event %s", times(x), times(win.serverPerItem()/r.serverPerItem()))
	}
	fmt.Fprintf(w, "11b. Window.TestOrAddMany, %s events per call, %d generations that all exist (%d past + current; the next bucket's is absent), k = %d, m = %s per generation:\n",
		count(b.cfg.Batch), wb.gens+1, wb.gens, wb.k, count(int(wb.m)))
	fmt.Fprintf(w, "     %s events/s, %s server µs/event; %s of its %s events answered seen (false positives, all being new; p = %g over the window)\n",
		count(int(math.Round(win.rate()))), strconv.FormatFloat(win.serverPerItem(), 'f', 2, 64), percent(wb.seen, win.n), count(win.n), b.cfg.P)
	fmt.Fprintf(w, "     vs plain BITFIELD SET u1 with the window's k (row 8f / row 7c): %s\n", vs(limit))
	fmt.Fprintf(w, "     vs plain BITFIELD_RO GET u1 in %d keys + SET u1, the window's reads and write (row 8f / row 7d): %s\n", len(wb.reads), vs(reads))
}

// percent writes a/b as a percentage with two decimals.
func percent(a, b int) string {
	return strconv.FormatFloat(100*float64(a)/float64(max(b, 1)), 'f', 2, 64) + "%"
}

// reportWindowMemory writes line 13b.
func reportWindowMemory(w io.Writer, u windowUse) {
	fmt.Fprintf(w, "13b. Memory per event of the window after row 8f: MEMORY USAGE of its %d generation keys %s bytes / %s events held = %s bytes per event;\n",
		u.gens, count(int(u.usage)), count(int(u.held)), strconv.FormatFloat(u.perEvent(), 'f', 3, 64))
	fmt.Fprintf(w, "     in theory, the bits of a full generation: m/n = %s / %s = %s bits = %s bytes per event (measured / theory: %s)\n",
		count(int(u.m)), count(int(u.n)), strconv.FormatFloat(8*u.theory(), 'f', 2, 64), strconv.FormatFloat(u.theory(), 'f', 3, 64),
		times(u.perEvent()/u.theory()))
}
