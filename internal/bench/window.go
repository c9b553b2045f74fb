package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// The window rows measure deduplication with a Window (rows 7c, 7d and
// 8f) at the seed's error rate (1e-9 over the window) and G past
// generations (24 by default: a day of hourly buckets), with m from N
// events per bucket (the cost of an event depends on k, G and the fill of
// the generations, and on m through the memory its slots are scattered
// over). Before the rows, the window's one ring is made by a first event
// and its G past generations are written directly at the density of full
// ones (synthesize). The window runs on Redis's clock, so the
// current generation is the real hour's.
//
// Two plain rows go with it. 7c is the seed's tumbling day filter: one
// pipelined BITFIELD SET u1 of k bits per event, on a key laid out like a
// classic filter with the window's k and m. 7d is the window's own work
// with plain commands and no script: a BITFIELD_RO GET of the event's k
// words of the ring, then a BITFIELD SET u1 of its k bits in the current
// generation.

const (
	windowName  = "rbloom-bench-window"
	keyWindowU1 = "rbloom-bench:window-u1"

	// maxWindowGens bounds Config.WindowGens.
	maxWindowGens = 100

	// windowErrorRate is the seed's false-positive rate over the window.
	windowErrorRate = 1e-9
)

// windowBench is the window of the rows and what they keep of it.
type windowBench struct {
	w    *rbloom.Window
	gens int    // G, past generations
	k    int    // of one generation
	m    uint64 // slots of one generation
	n    uint64 // EventsPerBucket, the events a generation is sized for
	ring ringLayout

	limit plain // row 7c: a key laid out like one generation
	qc    int   // the position of the current generation in the ring, at the fill
	seen  int   // events row 8f answered seen: false positives, the events being new
}

// newWindowBench returns the window of the rows, sized for N events per
// bucket. Like NewWindow it does not contact Redis.
func newWindowBench(rdb *redis.Client, cfg Config) (*windowBench, error) {
	wb := &windowBench{gens: cfg.WindowGens, n: uint64(cfg.N)}
	var err error
	wb.w, err = rbloom.NewWindow(rdb, windowName, rbloom.WindowOptions{
		EventsPerBucket: wb.n, ErrorRate: windowErrorRate, Partitions: 1,
		Bucket: time.Hour, Span: time.Duration(wb.gens) * time.Hour,
	})
	return wb, err
}

// fill makes the window and writes one event, then its past generations
// at the density of full ones, then creates the plain key.
func (wb *windowBench) fill(ctx context.Context, rdb *redis.Client, progress func(string)) error {
	progress(fmt.Sprintf("window: %d past generations written as full ones", wb.gens))
	if err := wb.w.Create(ctx); err != nil {
		return err
	}
	if _, err := wb.w.TestOrAdd(ctx, "window-fill-current"); err != nil {
		return err
	}
	key := "rbloom:{" + windowName + "}:ring"
	var err error
	if wb.k, wb.m, err = readHeader(ctx, rdb, key); err != nil {
		return err
	}
	wb.ring = newRingLayout(key, wb.gens, wb.m, wb.k)
	if err := wb.ring.synthesize(ctx, rdb, int64(wb.n), 1); err != nil {
		return err
	}
	if _, wb.qc, err = wb.ring.current(ctx, rdb); err != nil {
		return err
	}
	in, err := wb.w.Info(ctx)
	if err != nil {
		return err
	}
	if len(in.Generations) != wb.gens+1 {
		return fmt.Errorf("window: %d live generations after the fill, want %d", len(in.Generations), wb.gens+1)
	}
	wb.limit = plain{key: keyWindowU1, k: wb.k, m: wb.m, width: 1}
	return rdb.SetRange(ctx, wb.limit.key, wb.limit.size()-1, "\x00").Err()
}

// plainWindowKeys are the names of the plain keys of the window rows.
func plainWindowKeys(int) []string { return []string{keyWindowU1} }

// ringLayout is where a window's ring keeps what (docs/format.md).
type ringLayout struct {
	key  string
	w    int    // bits a word: G + 2
	m    uint64 // slots
	k    int
	data int64 // the byte the words start at
	size int64
}

func newRingLayout(key string, gens int, m uint64, k int) ringLayout {
	w := gens + 2
	data := int64(64 + 8*(3+2*w))
	return ringLayout{key: key, w: w, m: m, k: k, data: data, size: data + int64((m*uint64(w)+7)/8)}
}

// current reads Redis's clock and the ring's state: the hour, and the
// position of the current generation, which must hold it.
func (r ringLayout) current(ctx context.Context, rdb *redis.Client) (int64, int, error) {
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return 0, 0, err
	}
	c := now.UnixMilli() / time.Hour.Milliseconds()
	qc := int(c % int64(r.w))
	held, err := rdb.GetRange(ctx, r.key, 64+24+16*int64(qc), 64+24+16*int64(qc)+7).Result()
	if err != nil {
		return 0, 0, err
	}
	if len(held) != 8 || int64(binary.BigEndian.Uint64([]byte(held))) != c {
		return 0, 0, fmt.Errorf("%s: the current generation is not at position %d", r.key, qc)
	}
	return c, qc, nil
}

// synthesize writes the G past generations of the ring as full ones would
// be, n events each: each bit set with the probability a full
// generation's bit has, 1 - e^(-kn/m) (1/2 at the optimal k; rbloom's
// windows take fewer hashes, for less work an event), the current and the
// next generation's bits left as they are, n events recorded in each. The
// ring's current generation must be the real hour's. Rings are written
// 1 MiB per SETRANGE.
func (r ringLayout) synthesize(ctx context.Context, rdb *redis.Client, n int64, seed uint64) error {
	c, qc, err := r.current(ctx, rdb)
	if err != nil {
		return err
	}
	// keep is the mask of the past positions in a period of W bytes (8
	// words); what the ring holds elsewhere is kept.
	keep := make([]byte, r.w)
	for b := range 8 * r.w {
		q := b % r.w
		if q != qc && q != int((c+1)%int64(r.w)) {
			keep[b/8] |= 0x80 >> (b % 8)
		}
	}
	density := -math.Expm1(-float64(r.k) * float64(n) / float64(r.m))
	chunk := int64(r.w) * ((1 << 20) / int64(r.w))
	rng := rand.New(rand.NewPCG(seed, uint64(c)))
	buf := make([]byte, chunk)
	for from := r.data; from < r.size; from += chunk {
		part := buf[:min(chunk, r.size-from)]
		old, err := rdb.GetRange(ctx, r.key, from, from+int64(len(part))-1).Bytes()
		if err != nil {
			return err
		}
		for i := 0; i < len(part); i += 8 {
			var x [8]byte
			binary.LittleEndian.PutUint64(x[:], randomBits(rng, density))
			for j := i; j < min(i+8, len(part)); j++ {
				m := keep[j%r.w]
				part[j] = x[j-i]&m | old[j]&^m
			}
		}
		if err := rdb.SetRange(ctx, r.key, from, string(part)).Err(); err != nil {
			return err
		}
	}
	args := []any{"BITFIELD", r.key}
	for g := c - int64(r.w) + 2; g < c; g++ {
		q := g % int64(r.w)
		args = append(args, "SET", "i64", 64*8+192+128*q, g, "SET", "i64", 64*8+256+128*q, n)
	}
	return rdb.Do(ctx, args...).Err()
}

// randomBits returns 64 bits each set with probability p, to 1/256: the
// binary digits of p from the last, each ORing (1) or ANDing (0) another
// random word into the result.
func randomBits(rng *rand.Rand, p float64) uint64 {
	d := int(math.Round(p * 256))
	var x uint64
	for i := range 8 {
		if d>>i&1 == 1 {
			x |= rng.Uint64()
		} else {
			x &= rng.Uint64()
		}
	}
	if d >= 256 {
		return ^uint64(0)
	}
	return x
}

// words appends the bit offsets of event's k words in the ring to dst.
func (r ringLayout) words(dst []uint64, event string) []uint64 {
	n := len(dst)
	dst = locate(dst, event, r.k, r.m)
	for i := n; i < len(dst); i++ {
		dst[i] = uint64(r.data)*8 + dst[i]*uint64(r.w)
	}
	return dst
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
// plain commands and no script: a BITFIELD_RO GET of its k words, then a
// BITFIELD SET u1 of its k bits in the current generation; batch events
// per pipeline flush.
func plainWindow(ctx context.Context, rdb *redis.Client, r ringLayout, qc int, items []string, batch int) error {
	typ := "u" + strconv.Itoa(min(r.w, 32))
	return chunks(items, batch, func(part []string) error {
		pipe := rdb.Pipeline()
		var buf [64]uint64
		for _, item := range part {
			words := r.words(buf[:0], item)
			get := []any{argBitfieldRO, r.key}
			set := []any{argBitfield, r.key}
			for _, o := range words {
				get = append(get, argGet, typ, o)
				set = append(set, argSet, argU1, o+uint64(qc), argOne)
			}
			_ = pipe.Process(ctx, redis.NewIntSliceCmd(ctx, get...))
			_ = pipe.Process(ctx, redis.NewIntSliceCmd(ctx, set...))
		}
		_, err := pipe.Exec(ctx)
		return err
	})
}

// windowUse is the window's memory after its row.
type windowUse struct {
	usage int64 // MEMORY USAGE of the ring
	held  int64 // events its live generations hold (Window.Info)
	m     uint64
	n     uint64 // events a generation is sized for
	gens  int    // live generations
}

// perEvent is the measured bytes per event held.
func (u windowUse) perEvent() float64 { return float64(u.usage) / float64(max(u.held, 1)) }

// theory is what the bits of a full generation cost per event, in bytes:
// m/n bits.
func (u windowUse) theory() float64 { return float64(u.m) / float64(max(u.n, 1)) / 8 }

// memory measures the window's ring: its MEMORY USAGE and the events its
// live generations hold.
func (wb *windowBench) memory(ctx context.Context, rdb *redis.Client) (windowUse, error) {
	u := windowUse{m: wb.m, n: wb.n}
	in, err := wb.w.Info(ctx)
	if err != nil {
		return u, err
	}
	for _, g := range in.Generations {
		u.held += g.Items
	}
	u.gens = len(in.Generations)
	if u.usage, err = rdb.MemoryUsage(ctx, wb.ring.key).Result(); err != nil {
		return u, fmt.Errorf("MEMORY USAGE %s: %w", wb.ring.key, err)
	}
	return u, nil
}

// windowRows returns rows 7c, 7d and 8f.
func (b *bench) windowRows() (limit, reads, window *row) {
	c, wb := b.cfg, b.window
	k := fmt.Sprintf("k = %d", wb.k)
	limit = &row{id: "7c", name: fmt.Sprintf("limit: the seed's day filter, BITFIELD SET u1, %s, pipelined, %s per flush", k, count(c.Batch)),
		items: b.source("window-limit", c.N),
		do: func(ctx context.Context, items []string) error {
			return pipelined(ctx, b.rdb, items, c.Batch, wb.limit.setArgs)
		}}
	reads = &row{id: "7d", name: fmt.Sprintf("limit: window's work as plain commands, GET k words + SET u1, %s, %s per flush", k, count(c.Batch)),
		items: b.source("window-plain", c.N),
		do: func(ctx context.Context, items []string) error {
			return plainWindow(ctx, b.rdb, wb.ring, wb.qc, items, c.Batch)
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
	fmt.Fprintf(w, "11b. Window.TestOrAddMany, %s events per call, %d past generations written as full ones + the current one, k = %d, m = %s per generation:\n",
		count(b.cfg.Batch), wb.gens, wb.k, count(int(wb.m)))
	fmt.Fprintf(w, "     %s events/s, %s server µs/event; %s of its %s events answered seen (false positives, all being new; p = %g over the window)\n",
		count(int(math.Round(win.rate()))), strconv.FormatFloat(win.serverPerItem(), 'f', 2, 64), percent(wb.seen, win.n), count(win.n), windowErrorRate)
	fmt.Fprintf(w, "     vs the seed's day filter, plain BITFIELD SET u1 with the window's k (row 8f / row 7c): %s\n", vs(limit))
	fmt.Fprintf(w, "     vs the window's reads and writes as plain commands (row 8f / row 7d): %s\n", vs(reads))
}

// percent writes a/b as a percentage with two decimals.
func percent(a, b int) string {
	return strconv.FormatFloat(100*float64(a)/float64(max(b, 1)), 'f', 2, 64) + "%"
}

// reportWindowMemory writes line 13b.
func reportWindowMemory(w io.Writer, u windowUse) {
	fmt.Fprintf(w, "13b. Memory per event of the window after row 8f: MEMORY USAGE of its ring (%d live generations) %s bytes / %s events held = %s bytes per event;\n",
		u.gens, count(int(u.usage)), count(int(u.held)), strconv.FormatFloat(u.perEvent(), 'f', 3, 64))
	fmt.Fprintf(w, "     in theory, the bits of full generations: m/n = %s / %s = %s bits = %s bytes per event (measured / theory: %s)\n",
		count(int(u.m)), count(int(u.n)), strconv.FormatFloat(8*u.theory(), 'f', 2, 64), strconv.FormatFloat(u.theory(), 'f', 3, 64),
		times(u.perEvent()/u.theory()))
}
