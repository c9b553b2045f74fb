// Command streamdedup is an at-least-once stream consumer that counts each
// click exactly once. A producer writes click events to a Redis stream
// (XADD), and retries: some clicks are written twice, right after or some
// entries later. The consumers of one consumer group read the stream
// (XREADGROUP), drop the duplicates with an rbloom Window, count the new
// clicks by country and campaign, and acknowledge (XACK). A consumer may
// die at any point of a batch: another claims its pending entries
// (XAUTOCLAIM) and the counts come out the same.
//
//	go run ./examples/streamdedup                        # in-memory Redis, 3 consumers, 3 crashes
//	go run ./examples/streamdedup -redis 127.0.0.1:6379  # a real one
//
// The subcommands produce, consume and report run the same parts as
// separate processes (see README.md); the tests kill consumer processes
// with SIGKILL in the middle of batches.
//
// # A batch, step by step, and why
//
//  1. Read up to -batch new entries (XREADGROUP), or claim entries that
//     have been pending, with any consumer, for -min-idle (XAUTOCLAIM): a
//     dead consumer's entries.
//  2. Journal (journal.go): give the batch a fresh random id and, in one
//     script, write its events in order to the journal batch:<id>, and
//     the id to entry:<entry id> of each entry, skipping the entries that
//     already belong to a batch. Claimed entries come grouped as the claim
//     found them, not as they were first read; the entry keys and the
//     journal let the claimer rebuild each original batch whole, which the
//     next step needs. One script, so an entry belongs to one batch only,
//     even when two consumers journal it at once.
//  3. Dedup: Window.TestOrAddManyOnce(the events' ids, batch id). The
//     window adds the events it has not seen and records the answers under
//     the batch id; called again with the same id and the same events in
//     the same order, it returns those first answers and adds nothing.
//     A plain TestOrAddMany would answer "seen" to a replayed batch's own
//     events, and they would never be counted.
//  4. Count (apply.go): one script that does nothing if the marker
//     applied:<id> exists, and otherwise sets it and adds the new events
//     to the counts (HINCRBY "country=FR" ...) and to an audit trail of
//     counted event ids. The window replays its answers, so without the
//     marker a replayed batch would be counted twice.
//  5. XACK the batch's entries, last: an acknowledged entry is never
//     delivered again.
//
// A consumer killed after step 1 wrote nothing: the claimer journals the
// entries in a new batch. Killed after step 2, 3 or 4, its entries belong
// to a batch: the claimer loads the journal and runs the batch whole under
// its id (steps 3-5), which dedups it for the first time, or replays the
// window's answers, and counts it, or finds it counted. A consumer that
// is only slow may run a batch at the same time as the one that claimed
// its entries: both get the same answers and one counts.
//
// So each distinct click is counted exactly once: the window adds it at its
// first test and answers "seen" to every later one, so exactly one batch
// is answered "new" for it, and that batch is counted once. The exception
// is a click whose first test is a false positive of the filter: it is
// never counted (about ErrorRate of the clicks at the window's capacity;
// the audit measures them).
//
// Limits: journals, markers and the window's records of batches live -ttl
// (1 hour by default). An entry pending longer than that is handled in a
// new batch, which may lose its clicks (answered "seen") or, once the
// window has forgotten them too (-span), count them again: keep both above
// the longest time an entry can stay pending. The stream, the journals and the counts share a hash tag, so
// that each script stays on one node of a Redis Cluster.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/internal/memredis"
)

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, args := "run", os.Args[1:]
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = demoCommand(ctx, args)
	case "produce":
		err = produceCommand(ctx, args)
	case "consume":
		err = consumeCommand(ctx, args)
	case "report":
		err = reportCommand(ctx, args)
	default:
		err = fmt.Errorf("unknown command %q: want run, produce, consume or report", cmd)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// connect connects to the Redis at addr or, with addr empty, starts an
// in-memory one (miniredis, with the BITFIELD command rbloom needs) that
// is gone when the program exits.
func connect(ctx context.Context, addr string) (*redis.Client, func(), error) {
	if addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		if err := rdb.Ping(ctx).Err(); err != nil {
			rdb.Close()
			return nil, nil, fmt.Errorf("connect to Redis at %s: %w", addr, err)
		}
		return rdb, func() { rdb.Close() }, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return nil, nil, fmt.Errorf("start in-memory Redis: %w", err)
	}
	if err := memredis.Register(m); err != nil {
		m.Close()
		return nil, nil, err
	}
	log.Printf("redis: in-memory at %s (set -redis for a real one)", m.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, func() { rdb.Close(); m.Close() }, nil
}
