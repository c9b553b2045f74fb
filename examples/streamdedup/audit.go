package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// audit is what the consumers counted, checked against what the producer
// wrote. Each field below the first group is a way exactly-once could
// fail, and problems lists those that did.
type audit struct {
	Entries, Distinct, Counted int
	Counts, Truth              map[string]int64 // per "dimension=value"

	// Twice are events that the audit trail shows counted more than once,
	// Over the dimensions counted above the truth: double counting.
	Twice, Over []string
	// Unknown are counted events the producer never wrote; Mismatch the
	// dimensions whose count is not what the audit trail's events add up
	// to (the two are written by one script).
	Unknown, Mismatch []string
	// Added is how many events the window holds (Info). Each was answered
	// new exactly once, when added, so it must equal Counted: more means a
	// batch was deduplicated and its new events never counted.
	Added int64
	// Uncounted distinct events are false positives of the window, if the
	// checks pass: none was ever added (Added == Counted), yet every
	// delivery of it was answered "seen". Lost are those the window does
	// not even hold now: never deduplicated at all.
	Uncounted int
	Lost      []string
	// Pending entries are not acknowledged; Unapplied batches were
	// journaled and never counted.
	Pending   int64
	Unapplied []string

	// ExpectedFalsePositives is what the Bloom formula expects for the
	// first deliveries of Distinct events into one generation of the
	// window's size; TargetRate is the window's rate at capacity.
	ExpectedFalsePositives, TargetRate float64
}

// runAudit reads the counts, the audit trail, the window and the stream,
// and checks them against the events the producer wrote.
func runAudit(ctx context.Context, rdb redis.UniversalClient, k keys, w *rbloom.Window, written []event) (*audit, error) {
	tr := truthOf(written)
	a := &audit{Entries: len(written), Distinct: len(tr.events), Truth: tr.counts}
	var err error
	if a.Counts, err = hashInts(ctx, rdb, k.counts()); err != nil {
		return nil, err
	}
	counted, err := hashInts(ctx, rdb, k.counted())
	if err != nil {
		return nil, err
	}
	a.Counted = len(counted)

	sums := map[string]int64{}
	for id, n := range counted {
		if n > 1 {
			a.Twice = append(a.Twice, id)
		}
		e, ok := tr.events[id]
		if !ok {
			a.Unknown = append(a.Unknown, id)
			continue
		}
		for _, d := range e.dimensions() {
			sums[d] += n
		}
	}
	for d := range union(a.Counts, a.Truth, sums) {
		if a.Counts[d] > a.Truth[d] {
			a.Over = append(a.Over, d)
		}
		if a.Counts[d] != sums[d] {
			a.Mismatch = append(a.Mismatch, d)
		}
	}

	var uncounted []string
	for id := range tr.events {
		if _, ok := counted[id]; !ok {
			uncounted = append(uncounted, id)
		}
	}
	slices.Sort(uncounted)
	a.Uncounted = len(uncounted)
	held, err := w.TestMany(ctx, uncounted)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	for i, id := range uncounted {
		if !held[i] {
			a.Lost = append(a.Lost, id)
		}
	}
	info, err := w.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	for _, g := range info.Generations {
		a.Added += g.Items
	}
	a.TargetRate = info.ErrorRate
	a.ExpectedFalsePositives = expectedFalsePositives(a.Distinct, float64(info.Slots), float64(info.Hashes))

	pending, err := rdb.XPending(ctx, k.stream(), group).Result()
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	a.Pending = pending.Count
	if a.Unapplied, err = unappliedBatches(ctx, rdb, k); err != nil {
		return nil, err
	}
	for _, s := range [][]string{a.Twice, a.Over, a.Unknown, a.Mismatch, a.Lost, a.Unapplied} {
		slices.Sort(s)
	}
	return a, nil
}

// problems lists what went wrong, if anything: exactly-once held when it
// is empty. False positives are not problems: they are the price of the
// filter, measured apart.
func (a *audit) problems() []string {
	var out []string
	add := func(what string, ids []string) {
		if len(ids) > 0 {
			out = append(out, fmt.Sprintf("%d %s: %s", len(ids), what, sample(ids)))
		}
	}
	add("events counted more than once", a.Twice)
	add("dimensions counted above the truth", a.Over)
	add("counted events never written", a.Unknown)
	add("dimensions whose count differs from the audit trail", a.Mismatch)
	add("distinct events neither counted nor held by the window (lost)", a.Lost)
	add("journaled batches never counted", a.Unapplied)
	if a.Added != int64(a.Counted) {
		out = append(out, fmt.Sprintf("the window added %d events but %d were counted", a.Added, a.Counted))
	}
	if a.Pending != 0 {
		out = append(out, fmt.Sprintf("%d entries still pending", a.Pending))
	}
	return out
}

// falsePositiveRate is the share of distinct events dropped as seen.
func (a *audit) falsePositiveRate() float64 {
	return float64(a.Uncounted) / float64(max(a.Distinct, 1))
}

func (a *audit) print(w io.Writer) {
	fmt.Fprintf(w, "written: %d entries, %d distinct events (%d duplicates)\n", a.Entries, a.Distinct, a.Entries-a.Distinct)
	fmt.Fprintf(w, "counted: %d events; not counted: %d, the window's false positives (%.3f%%; about %.0f expected at this fill, target %g%% at capacity)\n",
		a.Counted, a.Uncounted, 100*a.falsePositiveRate(), a.ExpectedFalsePositives, 100*a.TargetRate)
	for _, d := range slices.Sorted(maps.Keys(a.Truth)) {
		fmt.Fprintf(w, "  %-14s %7d  (truth %d)\n", d, a.Counts[d], a.Truth[d])
	}
	if p := a.problems(); len(p) > 0 {
		fmt.Fprintf(w, "NOT EXACTLY ONCE:\n  %s\n", strings.Join(p, "\n  "))
		return
	}
	fmt.Fprintf(w, "exactly once: no event counted twice, the window holds exactly the %d counted events, nothing pending\n", a.Counted)
}

// expectedFalsePositives is the sum, over n events each tested against a
// filter of m slots and k hashes holding the i before it, of the chance
// (1 - e^(-ki/m))^k that it tests present.
func expectedFalsePositives(n int, m, k float64) float64 {
	sum := 0.0
	for i := range n {
		sum += math.Pow(-math.Expm1(-k*float64(i)/m), k)
	}
	return sum
}

// hashInts reads a hash of integers, a thousand fields at a time.
func hashInts(ctx context.Context, rdb redis.Cmdable, key string) (map[string]int64, error) {
	out := map[string]int64{}
	var cursor uint64
	for {
		kv, next, err := rdb.HScan(ctx, key, cursor, "*", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("audit: %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			n, err := strconv.ParseInt(kv[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("audit: %s %s: %w", key, kv[i], err)
			}
			out[kv[i]] = n
		}
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// journaledBatches lists the ids of the batches that have a journal.
func journaledBatches(ctx context.Context, rdb redis.Cmdable, k keys) ([]string, error) {
	var ids []string
	prefix := k.journal("")
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		ids = append(ids, strings.TrimPrefix(iter.Val(), prefix))
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return ids, nil
}

// unappliedBatches lists the journaled batches without an applied marker.
func unappliedBatches(ctx context.Context, rdb redis.Cmdable, k keys) ([]string, error) {
	ids, err := journaledBatches(ctx, rdb, k)
	if err != nil {
		return nil, err
	}
	pipe := rdb.Pipeline()
	exists := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		exists[i] = pipe.Exists(ctx, k.applied(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && len(ids) > 0 {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var out []string
	for i, id := range ids {
		if exists[i].Val() == 0 {
			out = append(out, id)
		}
	}
	return out, nil
}

func union(ms ...map[string]int64) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			out[k] = true
		}
	}
	return out
}

// sample is the first few of ids, for a message.
func sample(ids []string) string {
	if len(ids) > 5 {
		return strings.Join(ids[:5], ", ") + ", ..."
	}
	return strings.Join(ids, ", ")
}
