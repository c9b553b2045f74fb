package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// A row is one line of the table: one way of doing one operation, timed
// over its items.
type row struct {
	id   string // as the table numbers it: "1", "8a", ...
	name string
	vs   *row // the row it is compared with: ratio = items/s over vs's
	lib  bool // the library's own calls: SLOWLOG watches them

	items func(round int) []string // this round's items
	do    func(ctx context.Context, items []string) error

	// Summed over the rounds.
	n       int
	elapsed time.Duration
	trips   int64
	server  cmdStats
	slow    map[string]slowCalls
	rates   []float64 // items per second of each round
}

// rate is the row's throughput in items per second.
func (r *row) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.n) / r.elapsed.Seconds()
}

// ratio is the row's throughput over that of the row it is compared with.
func (r *row) ratio() (float64, bool) {
	if r.vs == nil || r.vs.rate() == 0 {
		return 0, false
	}
	return r.rate() / r.vs.rate(), true
}

// spread is how far the rounds' throughputs are apart, relative to the
// row's: (fastest - slowest) / overall. It is 0 with one round.
func (r *row) spread() float64 {
	if len(r.rates) < 2 || r.rate() == 0 {
		return 0
	}
	return (slices.Max(r.rates) - slices.Min(r.rates)) / r.rate()
}

func (r *row) tripsPerItem() float64 { return float64(r.trips) / float64(max(r.n, 1)) }

// serverPerItem is the server's time per item in microseconds.
func (r *row) serverPerItem() float64 { return float64(r.server.usec()) / float64(max(r.n, 1)) }

// rows returns the table's rows in the order they run in each round, which
// is also the order they are printed in: a row that reads or removes items
// comes after the row that added them. The cuckoo filter's rows come last,
// and only when the server has it.
func (b *bench) rows() []*row {
	c := b.cfg
	seedItems := b.source("seed", c.SeedItems)
	pipeItems := b.source("pipe", c.SingleItems)
	evalItems := b.source("eval", c.SingleItems)
	batchItems := b.source("evalbatch", c.N)
	relayItems := b.source("relay", c.N)
	u4Items := b.source("u4", c.N)
	u1Items := b.source("u1", c.N)
	countingItems := b.source("counting", c.N)
	classicItems := b.source("classic", c.N)
	singlePlain := b.source("single-plain", c.SingleItems)
	singleLib := b.source("single", c.SingleItems)
	singleBound := b.source("single-bound", c.SingleItems)
	concurrent := b.source("concurrent", c.SingleItems)
	flush := fmt.Sprintf("pipelined, %s per flush", count(c.Batch))
	perCall := fmt.Sprintf("%s per call", count(c.Batch))

	incrU4 := &row{id: "5", name: "limit: BITFIELD INCRBY u4, " + flush, items: u4Items,
		do: func(ctx context.Context, items []string) error {
			return pipelined(ctx, b.rdb, items, c.Batch, b.u4.incrArgs)
		}}
	getU4 := &row{id: "6", name: "limit: BITFIELD_RO GET u4, " + flush, items: u4Items,
		do: func(ctx context.Context, items []string) error {
			return pipelined(ctx, b.rdb, items, c.Batch, b.u4.getArgs)
		}}
	setU1 := &row{id: "7a", name: "limit: BITFIELD SET u1, " + flush, items: u1Items,
		do: func(ctx context.Context, items []string) error {
			return pipelined(ctx, b.rdb, items, c.Batch, b.u1.setArgs)
		}}
	getU1 := &row{id: "7b", name: "limit: BITFIELD_RO GET u1, " + flush, items: u1Items,
		do: func(ctx context.Context, items []string) error {
			return pipelined(ctx, b.rdb, items, c.Batch, b.u1.getArgs)
		}}
	plainIncr := &row{id: "9a", name: "plain BITFIELD INCRBY u4, 1 item per round trip", items: singlePlain,
		do: func(ctx context.Context, items []string) error {
			return b.lat.plainIncr.each(items, func(item string) error {
				return b.rdb.Process(ctx, redis.NewIntSliceCmd(ctx, b.u4.incrArgs(item)...))
			})
		}}
	plainGet := &row{id: "9b", name: "plain BITFIELD_RO GET u4, 1 item per round trip", items: singlePlain,
		do: func(ctx context.Context, items []string) error {
			return b.lat.plainGet.each(items, func(item string) error {
				return b.rdb.Process(ctx, redis.NewIntSliceCmd(ctx, b.u4.getArgs(item)...))
			})
		}}
	add := &row{id: "9c", name: "Counting.Add", vs: plainIncr, lib: true, items: singleLib,
		do: func(ctx context.Context, items []string) error {
			return b.lat.add.each(items, func(item string) error {
				_, err := b.counting.Add(ctx, item)
				return err
			})
		}}
	addMany := &row{id: "8a", name: "Counting.AddMany, " + perCall, vs: incrU4, lib: true, items: countingItems,
		do: func(ctx context.Context, items []string) error {
			return chunks(items, c.Batch, func(part []string) error {
				_, err := b.counting.AddMany(ctx, part)
				return err
			})
		}}
	testMany := &row{id: "8b", name: "Counting.TestMany, " + perCall, vs: getU4, lib: true, items: countingItems,
		do: func(ctx context.Context, items []string) error {
			return chunks(items, c.Batch, func(part []string) error {
				return allTrue("TestMany", part)(b.counting.TestMany(ctx, part))
			})
		}}
	removeMany := &row{id: "8c", name: "Counting.RemoveMany, " + perCall, vs: incrU4, lib: true, items: firstHalf(countingItems),
		do: func(ctx context.Context, items []string) error {
			return chunks(items, c.Batch, func(part []string) error {
				return allTrue("RemoveMany", part)(b.counting.RemoveMany(ctx, part))
			})
		}}

	windowLimit, windowReads, window := b.windowRows()

	rows := []*row{
		{id: "1", name: "seed: k SETBIT, 1 round trip each", vs: setU1, items: seedItems,
			do: func(ctx context.Context, items []string) error {
				return seedSetbit(ctx, b.rdb, b.seed, items)
			}},
		{id: "2", name: "seed: k SETBIT pipelined, 1 round trip per item", vs: setU1, items: pipeItems,
			do: func(ctx context.Context, items []string) error {
				return seedPipelined(ctx, b.rdb, b.seed, items)
			}},
		{id: "3", name: "baseline Lua: 1 EVALSHA per item", vs: incrU4, items: evalItems,
			do: func(ctx context.Context, items []string) error {
				return naiveAdd(ctx, b.rdb, b.naive, items)
			}},
		{id: "4", name: fmt.Sprintf("baseline Lua: 1 EVALSHA per %s items", count(c.ScriptBatch)), vs: incrU4, items: batchItems,
			do: func(ctx context.Context, items []string) error {
				return naiveBatch(ctx, b.rdb, b.naive, items, c.ScriptBatch)
			}},
		incrU4, getU4, setU1, getU1, windowLimit, windowReads,
		{id: "5b", name: fmt.Sprintf("bound: script with no checks, %d slots per EVALSHA, %s per flush", relaySlots, count(c.Batch)),
			vs: incrU4, items: relayItems,
			do: func(ctx context.Context, items []string) error {
				return relay(ctx, b.rdb, b.relay, items, c.Batch)
			}},
		addMany, testMany, removeMany,
		{id: "8d", name: "Classic.AddMany, " + perCall, vs: setU1, lib: true, items: classicItems,
			do: func(ctx context.Context, items []string) error {
				return chunks(items, c.Batch, func(part []string) error {
					_, err := b.classic.AddMany(ctx, part)
					return err
				})
			}},
		{id: "8e", name: "Classic.TestMany, " + perCall, vs: getU1, lib: true, items: classicItems,
			do: func(ctx context.Context, items []string) error {
				return chunks(items, c.Batch, func(part []string) error {
					return allTrue("TestMany", part)(b.classic.TestMany(ctx, part))
				})
			}},
		window,
		plainIncr, plainGet,
		{id: "9f", name: "bound: script that only calls one BITFIELD, 1 item per round trip", vs: plainIncr, items: singleBound,
			do: func(ctx context.Context, items []string) error {
				return relayEach(ctx, b.rdb, b.relay, items)
			}},
		add,
		{id: "9d", name: "Counting.Test", vs: plainGet, lib: true, items: singleLib,
			do: func(ctx context.Context, items []string) error {
				return b.lat.test.each(items, func(item string) error {
					return allTrue("Test", []string{item})(oneOf(b.counting.Test(ctx, item)))
				})
			}},
		{id: "9e", name: "Counting.Remove", vs: plainIncr, lib: true, items: singleLib,
			do: func(ctx context.Context, items []string) error {
				return b.lat.remove.each(items, func(item string) error {
					return allTrue("Remove", []string{item})(oneOf(b.counting.Remove(ctx, item)))
				})
			}},
		{id: "10", name: fmt.Sprintf("Counting.Add, %d goroutines", c.Goroutines), vs: add, lib: true, items: concurrent,
			do: func(ctx context.Context, items []string) error {
				return concurrently(items, c.Goroutines, func(item string) error {
					_, err := b.counting.Add(ctx, item)
					return err
				})
			}},
	}
	// Rows 16a-16d only where the server has the cuckoo filter
	// (cuckoo.go).
	if b.cf {
		rows = append(rows, b.cuckooRows(addMany, testMany, removeMany)...)
	}
	// Rows 17a-17c: rbloom's cuckoo filter (rcuckoo.go).
	rows = append(rows, b.ckRows(addMany, testMany, removeMany)...)
	return rows
}

// runRounds runs every row on its slice of items, round after round, and
// sums up each row's figures.
func (b *bench) runRounds(ctx context.Context, rows []*row) error {
	for round := range b.cfg.Rounds {
		for _, r := range rows {
			items := r.items(round)
			if len(items) == 0 {
				continue
			}
			if err := b.srv.before(ctx, r.lib); err != nil {
				return fmt.Errorf("bench: before row %s: %w", r.id, err)
			}
			trips, sent := b.trips.count(), b.trips.sentSoFar()
			start := time.Now()
			err := r.do(ctx, items)
			elapsed := time.Since(start)
			trips = b.trips.count() - trips
			if err != nil {
				return fmt.Errorf("bench: row %s (%s): %w", r.id, r.name, err)
			}
			stats, slow, err := b.srv.after(ctx, r.lib)
			if err != nil {
				return fmt.Errorf("bench: after row %s: %w", r.id, err)
			}
			for name, n := range b.trips.sentSoFar() {
				if st, ok := stats[name]; ok {
					st.sent = n - sent[name]
					stats[name] = st
				}
			}
			r.n += len(items)
			r.elapsed += elapsed
			r.rates = append(r.rates, float64(len(items))/elapsed.Seconds())
			r.trips += trips
			if r.server == nil {
				r.server, r.slow = make(cmdStats), make(map[string]slowCalls)
			}
			r.server.add(stats)
			for name, s := range slow {
				r.slow[name] = r.slow[name].add(s)
			}
			if b.cfg.Progress != nil {
				fmt.Fprintf(b.cfg.Progress, "round %d/%d  %-3s %-55s %9s items %8.3fs\n",
					round+1, b.cfg.Rounds, r.id, r.name, count(len(items)), elapsed.Seconds())
			}
		}
	}
	return nil
}

// source returns the items of a row: total items named prefix:0,
// prefix:1, ..., cut into as many slices as there are rounds. Rows that
// share a source share its items: a test reads what an add wrote. The
// slice of the current round is kept, the others made on demand.
func (b *bench) source(prefix string, total int) func(round int) []string {
	last, items := -1, []string(nil)
	return func(round int) []string {
		if round != last {
			lo, hi := total*round/b.cfg.Rounds, total*(round+1)/b.cfg.Rounds
			items, last = names(prefix, lo, hi), round
		}
		return items
	}
}

// allTrue returns a check that a call answered true for every item: Test
// of an item that was added, Remove of one that is present. A false there
// would be a bug in the library, and the figures would not mean much.
func allTrue(call string, items []string) func([]bool, error) error {
	return func(res []bool, err error) error {
		if err != nil {
			return err
		}
		if i := slices.Index(res, false); i >= 0 {
			return fmt.Errorf("%s answered false for item %q, which was added", call, items[i])
		}
		return nil
	}
}

// oneOf turns a single answer into a batch of one.
func oneOf(ok bool, err error) ([]bool, error) { return []bool{ok}, err }
