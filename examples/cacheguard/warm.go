package main

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/rbloom/rbloom"
)

// warm loads every primary key of the table into the filter, in batches of
// batch keys (one AddMany each), unless the filter is trusted for the
// database as it is (see ready.go). It returns the number of keys loaded.
//
// It first writes a new lineage into the database; once every key is
// loaded, it makes the lineage the record's and advances the clock, raises
// the database's generation to match, and adds the marker, last. So
// a warm that dies half-way leaves a filter that is not ready: lookups
// keep asking the database, deletes leave their keys in the filter, and
// the next start warms again. Keys already in the filter are added again
// on top: an extra count only makes a ghost when the row is deleted, while
// starting from an empty filter (Drop) could lose the add of a row being
// inserted meanwhile by another process.
//
// Writes by other processes during warm are safe: an insert adds its key
// itself, and a delete removes a key only from a filter marked ready, once
// its row is gone and the clock advanced.
func (g *guard) warm(ctx context.Context, batch int) (int, error) {
	lineage, ok, err := g.trusted(ctx)
	if err != nil {
		return 0, err
	}
	if ok {
		g.lineage = lineage
		return 0, nil
	}
	if lineage != "" {
		log.Printf("filter %s is not marked ready for this database (loaded from another database or an older copy of this one, a warm that died, or a filter lost): adding every key on top", g.filter.Name())
	}
	lineage = newLineage()
	if err := g.table.setLineage(ctx, lineage); err != nil {
		return 0, fmt.Errorf("database: %w", err)
	}

	n := 0
	fill := func(add func(items []string) error) error {
		keys := make([]string, 0, batch)
		flush := func() error {
			if len(keys) == 0 {
				return nil
			}
			if err := add(keys); err != nil {
				return fmt.Errorf("filter: %w", err)
			}
			n += len(keys)
			keys = keys[:0]
			g.step("warm", "")
			return nil
		}
		err := g.table.ids(ctx, func(id string) error {
			keys = append(keys, filterItem(id))
			if len(keys) < batch {
				return nil
			}
			return flush()
		})
		if err == nil {
			err = flush()
		}
		return err
	}
	if err := g.load(ctx, fill); err != nil {
		return n, err
	}
	gen, err := g.adopt(ctx, lineage)
	if err != nil {
		return n, err
	}
	if err := g.table.raiseGeneration(ctx, gen); err != nil {
		return n, fmt.Errorf("database: %w", err)
	}
	if _, err := g.filter.Add(ctx, readyItem(lineage)); err != nil {
		return n, fmt.Errorf("filter: %w", err)
	}
	g.lineage = lineage
	return n, nil
}

// load runs fill into the filter: on top of what it holds, or, when Redis
// has no filter (never made, or lost), as the load that makes it, which
// lookups see as ErrLoading until it is done.
func (g *guard) load(ctx context.Context, fill func(add func(items []string) error) error) error {
	_, err := g.filter.Test(ctx, readyItem(""))
	if errors.Is(err, rbloom.ErrNotFound) || errors.Is(err, rbloom.ErrLoading) {
		return g.filter.Rebuild(ctx, fill)
	}
	if err != nil {
		return fmt.Errorf("filter: %w", err)
	}
	return fill(func(items []string) error {
		_, err := g.filter.AddMany(ctx, items)
		return err
	})
}
