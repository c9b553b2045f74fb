package main

import (
	"context"
	"fmt"
	"log"
)

// warm loads every primary key of the table into the filter, in batches of
// batch keys (one AddMany each), unless the filter is marked ready. It
// returns the number of keys loaded.
//
// The marker is added last, so a warm that dies half-way leaves a filter
// that is not ready: lookups keep asking the database, deletes leave their
// keys in the filter, and the next start warms again. Keys already in the
// filter are added again on top: an extra count only makes a ghost when the
// row is deleted, while starting from an empty filter (Drop) could lose the
// add of a row being inserted meanwhile by another process.
//
// Writes by other processes during warm are safe: an insert adds its key
// itself, and a delete does not remove from a filter that is not ready.
func (g *guard) warm(ctx context.Context, batch int) (int, error) {
	ready, err := g.filter.Test(ctx, readyMarker)
	if err != nil {
		return 0, fmt.Errorf("filter: %w", err)
	}
	if ready {
		return 0, nil
	}
	info, err := g.filter.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("filter: %w", err)
	}
	if info.Exists {
		log.Printf("filter %s exists but is not marked ready (a warm that died, or a filter lost and re-created by writes): adding every key on top", info.Name)
	}

	n := 0
	keys := make([]string, 0, batch)
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		if _, err := g.filter.AddMany(ctx, keys); err != nil {
			return fmt.Errorf("filter: %w", err)
		}
		n += len(keys)
		keys = keys[:0]
		g.step("warm", "")
		return nil
	}
	err = g.table.ids(ctx, func(id string) error {
		keys = append(keys, filterItem(id))
		if len(keys) < batch {
			return nil
		}
		return flush()
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return n, err
	}
	if _, err := g.filter.Add(ctx, readyMarker); err != nil {
		return n, fmt.Errorf("filter: %w", err)
	}
	return n, nil
}
