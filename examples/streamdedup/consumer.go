package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// The steps of a batch, where a consumer may die. Each leaves Redis in a
// state the next consumer recovers from (see the package doc).
const (
	stepRead      = "read"      // entries read or claimed, nothing written
	stepJournaled = "journaled" // the batch is in its journal, not deduplicated
	stepDeduped   = "deduped"   // the window has the batch, not counted
	stepCounted   = "counted"   // counted, the entries not acknowledged
)

var steps = []string{stepRead, stepJournaled, stepDeduped, stepCounted}

// batch is the unit of exactly-once: stream entries deduplicated together
// under one id, events in the order of its journal.
type batch struct {
	id     string
	events []event
}

// consumer is one member of the consumer group. It is not safe for
// concurrent use: run one per goroutine or process, each with its own
// name.
type consumer struct {
	rdb     redis.UniversalClient
	keys    keys
	window  *rbloom.Window
	name    string        // its name in the group, never reused by a later consumer
	size    int           // entries read or claimed at a time
	minIdle time.Duration // pending entries idle this long are another's to claim
	ttl     time.Duration // journals and markers: the window's IDLifetime
	block   time.Duration // how long a read waits for new entries

	log *log.Logger // gets what the consumer has to say: errors, replays

	// crash, when set, is called at each step of a batch. Tests and the
	// demo panic there, or kill the process, to stop where a dying
	// consumer would.
	crash func(step string)

	stats    stats
	cursor   string    // XAUTOCLAIM's: "0-0" starts a scan of the pending entries
	lastScan time.Time // when the last scan ended
}

// run polls until ctx is done. An error is logged and the entries it
// concerned stay pending, to be claimed and handled again.
func (c *consumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		if _, err := c.poll(ctx); err != nil && ctx.Err() == nil {
			c.log.Printf("%s: %v", c.name, err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// poll handles one batch's worth of entries: entries other consumers left
// pending too long, if there are any, else new ones. It returns how many
// entries it got.
func (c *consumer) poll(ctx context.Context) (int, error) {
	msgs, err := c.claim(ctx)
	if err == nil && len(msgs) == 0 {
		msgs, err = c.read(ctx)
	}
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	return len(msgs), c.handle(ctx, msgs)
}

// claim takes over entries pending, with any consumer, for minIdle or
// more: those of consumers that died. It scans the pending entries once
// per minIdle/2, and on until a scan is done.
func (c *consumer) claim(ctx context.Context) ([]redis.XMessage, error) {
	if c.cursor == "" {
		c.cursor = "0-0"
	}
	if c.cursor == "0-0" && time.Since(c.lastScan) < c.minIdle/2 {
		return nil, nil
	}
	msgs, next, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: c.keys.stream(), Group: group, Consumer: c.name,
		MinIdle: c.minIdle, Start: c.cursor, Count: int64(c.size),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if c.cursor = next; next == "0-0" {
		c.lastScan = time.Now()
	}
	c.stats.claimed.Add(int64(len(msgs)))
	return msgs, nil
}

// read takes up to size new entries.
func (c *consumer) read(ctx context.Context) ([]redis.XMessage, error) {
	streams, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: group, Consumer: c.name, Streams: []string{c.keys.stream(), ">"},
		Count: int64(c.size), Block: c.block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil // nothing new within block
	}
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	var msgs []redis.XMessage
	for _, s := range streams {
		msgs = append(msgs, s.Messages...)
	}
	return msgs, nil
}

// handle journals the entries msgs as a new batch, but for those that
// belong to a batch already (claimed from a consumer that died after
// journaling them): it runs those batches whole, then the new one.
func (c *consumer) handle(ctx context.Context, msgs []redis.XMessage) error {
	events := make([]event, 0, len(msgs))
	for _, m := range msgs {
		e, err := fromEntry(m.ID, m.Values)
		if err != nil {
			// A malformed entry would stay pending forever: drop it, loudly.
			c.log.Printf("%s: dropping %v", c.name, err)
			if err := c.rdb.XAck(ctx, c.keys.stream(), group, m.ID).Err(); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
			continue
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		return nil
	}
	c.step(stepRead)

	id := rand.Text() // fresh for every batch, so never reused for other events
	owners, err := journal(ctx, c.rdb, c.keys, id, events, c.ttl)
	if err != nil {
		return err
	}
	fresh := batch{id: id}
	var older []string
	for i, owner := range owners {
		switch {
		case owner == id:
			fresh.events = append(fresh.events, events[i])
		case !slices.Contains(older, owner):
			older = append(older, owner)
		}
	}
	if len(older) > 0 {
		replays, err := loadJournals(ctx, c.rdb, c.keys, older)
		if err != nil {
			return err
		}
		for _, b := range replays {
			c.log.Printf("%s: replaying batch %s (%d events), journaled before", c.name, b.id, len(b.events))
			c.stats.replays.Add(1)
			if err := c.runBatch(ctx, b); err != nil {
				return err
			}
		}
	}
	if len(fresh.events) == 0 {
		return nil
	}
	return c.runBatch(ctx, fresh)
}

// runBatch deduplicates, counts and acknowledges a journaled batch. Run
// again, by anyone, it gives the same counts: the window answers a batch
// id it has seen with its first answers, and the counts are applied once
// per batch id.
func (c *consumer) runBatch(ctx context.Context, b batch) error {
	c.step(stepJournaled)
	ids := make([]string, len(b.events))
	for i, e := range b.events {
		ids[i] = e.ID
	}
	seen, err := c.window.TestOrAddManyOnce(ctx, ids, b.id)
	if err != nil {
		return fmt.Errorf("dedup batch %s: %w", b.id, err)
	}
	c.step(stepDeduped)

	applied, err := apply(ctx, c.rdb, c.keys, b, seen, c.ttl)
	if err != nil {
		return err
	}
	c.stats.record(applied, seen)
	c.step(stepCounted)

	entries := make([]string, len(b.events))
	for i, e := range b.events {
		entries[i] = e.Entry
	}
	// Last: once acknowledged, no one will ever handle these entries again.
	if err := c.rdb.XAck(ctx, c.keys.stream(), group, entries...).Err(); err != nil {
		return fmt.Errorf("ack batch %s: %w", b.id, err)
	}
	return nil
}

func (c *consumer) step(name string) {
	if c.crash != nil {
		c.crash(name)
	}
}

// openWindow returns the stream's dedup window, and makes it while the
// consumer group has delivered no entry: that is where the stream starts
// (ensureGroup made the group). No call makes a window, so once entries
// are delivered a window Redis lost fails every call with
// rbloom.ErrNotFound, and the consumers stop rather than count again the
// events it held; making it then is an operator's choice, taking those
// duplicates.
func openWindow(ctx context.Context, rdb redis.UniversalClient, s settings) (*rbloom.Window, error) {
	w, err := s.window(rdb)
	if err != nil {
		return nil, err
	}
	groups, err := rdb.XInfoGroups(ctx, s.keys().stream()).Result()
	if err != nil {
		return nil, fmt.Errorf("the stream's consumer groups: %w", err)
	}
	for _, g := range groups {
		// Redis answers 0-0 for the "0" the group was made at;
		// miniredis, the embedded Redis, answers "0".
		if g.Name == group && (g.LastDeliveredID == "0-0" || g.LastDeliveredID == "0") {
			if err := w.Create(ctx); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// ensureGroup creates the stream and its consumer group, reading from the
// first entry, unless they exist.
func ensureGroup(ctx context.Context, rdb redis.Cmdable, k keys) error {
	err := rdb.XGroupCreateMkStream(ctx, k.stream(), group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("create consumer group: %w", err)
	}
	return nil
}
