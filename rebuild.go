package rbloom

import (
	"context"
	"fmt"
)

// A rebuild refills a filter from its source of truth without stopping it.
// Each partition gets a copy in the same cluster slot, its key followed by
// ":next". While the copy is filled, the live partition's header is marked,
// and every add and remove script, in any process, applies its write to
// both, atomically. When the copy is full, each partition is replaced by
// its copy with one RENAME: an item's partition switches at once, from the
// old counters to the new ones. The new counters hold no ghosts (items
// deleted from the source but never removed) and no counter stuck at 15
// but for items that are really there that often.

// rebuild fills a fresh copy of f with the items fill adds, then puts it in
// f's place. Writes made meanwhile go to both.
func (f *filter) rebuild(ctx context.Context, fill func(add func(items []string) error) error) error {
	next := *f // the same filter, at the keys of the copies
	next.parts = nil
	for _, p := range f.parts {
		next.parts = append(next.parts, part{key: copyKey(p.key), head: p.head})
	}
	// A copy left by a rebuild that died would hold items of its own.
	if err := next.drop(ctx); err != nil {
		return err
	}
	if err := next.createAll(ctx, true); err != nil {
		return err
	}
	// abort undoes begin after err; its own failure is reported too.
	abort := func(err error) error {
		if abortErr := f.rebuildStep(context.WithoutCancel(ctx), "abort"); abortErr != nil {
			return fmt.Errorf("%w; and then %w", err, abortErr)
		}
		return err
	}
	if err := f.rebuildStep(ctx, "begin"); err != nil {
		return abort(err)
	}
	err := fill(func(items []string) error {
		_, err := next.add(ctx, items)
		return err
	})
	if err != nil {
		return abort(fmt.Errorf("fill: %w", err))
	}
	if err := f.rebuildStep(ctx, "switch"); err != nil {
		// Some partitions may have switched: abort leaves those alone (no
		// copy, no mark) and unmarks the others, ending the writes to both.
		return abort(err)
	}
	return nil
}

// rebuildStep runs rebuild.lua's action on every partition, in one round
// trip.
func (f *filter) rebuildStep(ctx context.Context, action string) error {
	calls := make([]scriptCall, len(f.parts))
	for p, part := range f.parts {
		calls[p] = scriptCall{keys: []string{part.key, copyKey(part.key)}, args: []any{part.head, action}}
	}
	if _, err := runScripts(ctx, f.rdb, rebuildScript, f.fcall, calls, replication{}); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}

// Rebuild refills the filter from its source of truth without stopping it:
// fill must call add with every item the filter should hold (all the keys
// of a table, say), in batches of any size. Meanwhile the filter keeps
// answering from its old counters, and every Add and Remove, from any
// process, also goes to the new ones. Then the new counters take the old
// ones' place, partition by partition, each at once. That clears the ghosts
// of items removed from the source but not from the filter, and counters
// stuck at 15. If fill returns an error, the old filter is left as it was.
// An item added both by fill and by a concurrent Add is counted twice:
// harmless, as a later Remove leaves it a ghost at worst.
func (c *Counting) Rebuild(ctx context.Context, fill func(add func(items []string) error) error) error {
	return callError("rebuild", c.f.rebuild(ctx, fill))
}

// Rebuild refills the filter from its source of truth without stopping it,
// as Counting.Rebuild does; for a classic filter, that is the way to forget
// items.
func (c *Classic) Rebuild(ctx context.Context, fill func(add func(items []string) error) error) error {
	return callError("rebuild", c.f.rebuild(ctx, fill))
}
