package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// A filter loaded from one database says nothing about another, nor about
// an older copy of the same one: a restored backup holds rows that the
// service deleted after the backup, and removed from the filter. (Redis
// losing the filter is the library's to see: reads of a missing or loading
// filter fail with ErrNotFound or ErrLoading, and the handle's Source
// loads it again.) So the filter is tied to one state of the database:
//
//   - The database holds one row, rbloom_meta (lineage, generation). Warm
//     writes a new random lineage there before it rebuilds the filter from
//     the rows: every copy of the database taken before that has another
//     lineage.
//   - Redis holds the filter's record, a hash {lineage, generation} at
//     "cacheguard:{<filter name>}", whose generation is a clock. Warm, once
//     the rebuild is done, and every delete, after its row is gone and
//     before it removes the key, advance the clock (HINCRBY), then raise the
//     database's generation to its value.
//
// The rule: at start, the filter is trusted only if the record equals the
// database's row. A copy of the database that still has a row whose key
// was removed (a backup, however it was taken) was copied before the
// clock advanced for that remove: it holds an older generation than the
// record. The clock lives in Redis because restoring the database must not
// restore it; a record lost in Redis is re-created by HINCRBY without a
// lineage, and matches nothing until warm starts a new one. Any mismatch
// makes warm rebuild the filter from the rows.
//
// Not covered: rows inserted by another tool, which must Add their keys
// first as insert does (or DELETE FROM rbloom_meta and restart the
// service; until then they are answered 404; with PostgreSQL, the sync
// mode sees them: sync.go); a database swapped while the
// service runs; and Redis losing writes it acknowledged (a failover, a
// restart from an older snapshot: see the rbloom README).

// warm rebuilds the filter from the table, in a new lineage, unless the
// record says it follows the database as it is. It returns the number of
// keys loaded. The service serves once it returns.
//
// A warm that dies leaves the database's new lineage without the record's:
// the next start rebuilds again. Its load, if the filter was missing, is
// given up or left marked as loading, which the library reads as
// ErrLoading and loads again from Source.
func (g *guard) warm(ctx context.Context) (int, error) {
	lineage, ok, err := g.trusted(ctx)
	if err != nil || ok {
		return 0, err
	}
	if lineage != "" {
		log.Printf("filter %s does not follow this database as it is (loaded from another database or an older copy of this one, a warm that died, or its record lost): rebuilding it", g.filter.Name())
	}
	lineage = newLineage()
	if err := g.table.setLineage(ctx, lineage); err != nil {
		return 0, fmt.Errorf("database: %w", err)
	}
	var n int
	fill := func(add func(items []string) error) error {
		n = 0
		return g.fill(func(items []string) error {
			if err := add(items); err != nil {
				return err
			}
			n += len(items)
			g.step("warm", "")
			return nil
		})
	}
	// Another process's rebuild or load holds the filter for a while:
	// wait for it, then rebuild from this database.
	for err = g.filter.Rebuild(ctx, fill); errors.Is(err, rbloom.ErrRebuilding); err = g.filter.Rebuild(ctx, fill) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return n, fmt.Errorf("filter: %w", err)
	}
	gen, err := g.adopt(ctx, lineage)
	if err != nil {
		return n, err
	}
	if err := g.table.raiseGeneration(ctx, gen); err != nil {
		return n, fmt.Errorf("database: %w", err)
	}
	return n, nil
}

// trusted reports whether the record equals the database's row, and
// returns the database's lineage.
func (g *guard) trusted(ctx context.Context) (lineage string, ok bool, err error) {
	lineage, gen, err := g.table.meta(ctx)
	if err != nil {
		return "", false, fmt.Errorf("database: %w", err)
	}
	if lineage == "" {
		return "", false, nil // never loaded from this database
	}
	rec, err := g.rdb.HGetAll(ctx, g.record).Result()
	if err != nil {
		return "", false, fmt.Errorf("filter record: %w", err)
	}
	return lineage, rec["lineage"] == lineage && rec["generation"] == strconv.FormatInt(gen, 10), nil
}

// recordKey is the Redis key of the record of the filter called name: in
// the filter's cluster hash slot, outside rbloom's own keys.
func recordKey(name string) string { return "cacheguard:{" + name + "}" }

// newLineage returns a random lineage, 128 bits in hex.
func newLineage() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// advance advances the record's clock and returns its new value.
func (g *guard) advance(ctx context.Context) (int64, error) {
	gen, err := g.rdb.HIncrBy(ctx, g.record, "generation", 1).Result()
	if err != nil {
		return 0, fmt.Errorf("filter record: %w", err)
	}
	return gen, nil
}

// adopt makes lineage the record's and advances its clock, at once, and
// returns the clock's new value.
func (g *guard) adopt(ctx context.Context, lineage string) (int64, error) {
	var gen *redis.IntCmd
	_, err := g.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, g.record, "lineage", lineage)
		gen = p.HIncrBy(ctx, g.record, "generation", 1)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("filter record: %w", err)
	}
	return gen.Val(), nil
}
