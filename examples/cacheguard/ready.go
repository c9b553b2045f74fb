package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// trusted reports whether the filter holds the key of every row of the
// database as it is, so that warm need not load them, and returns the
// database's lineage.
//
// The filter holds "item:<id>" for every row, plus a marker that warm adds
// after every key. Until the marker is there the filter's "absent" means
// nothing (not loaded yet, or lost by Redis and re-created by writes), and
// lookups go to the database. But a filter loaded from one database says
// nothing about another, nor about an older copy of the same one: a
// restored backup holds rows that the service deleted after the backup,
// and removed from the filter. So the filter is tied to one state of the
// database:
//
//   - The database holds one row, rbloom_meta (lineage, generation). Warm
//     writes a new random lineage there before it reads the rows: every
//     copy of the database taken before that has another lineage. The
//     marker is "ready:<lineage>".
//   - Redis holds the filter's record, a hash {lineage, generation} at
//     "cacheguard:{<filter name>}", whose generation is a clock. Warm, once
//     it has loaded every key, and every delete, after its row is gone and
//     before it removes the key, advance the clock (HINCRBY), then raise the
//     database's generation to its value.
//
// The rule: the filter is trusted only if it holds the marker of the
// database's lineage and the record equals the database's row. A copy of
// the database that still has a row whose key was removed (a backup,
// however it was taken) was copied before the clock advanced for that
// remove: it holds an older generation than the record. The clock lives
// in Redis because restoring the database must not restore it; a record
// lost in Redis is re-created by HINCRBY without a lineage, and matches
// nothing until warm starts a new one. Any mismatch makes warm add every
// key on top: a filter loaded from elsewhere then holds extra keys,
// ghosts, never too few.
//
// Not covered: rows inserted by another tool, which must Add their keys
// first as insert does (or DELETE FROM rbloom_meta and restart the
// service; until then they are answered 404; with PostgreSQL, the sync
// mode sees them: sync.go); a database swapped while the
// service runs; and Redis losing writes it acknowledged (a failover, a
// restart from an older snapshot: see the rbloom README).
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
	if rec["lineage"] != lineage || rec["generation"] != strconv.FormatInt(gen, 10) {
		return lineage, false, nil
	}
	ready, err := g.filter.Test(ctx, readyItem(lineage))
	if errors.Is(err, rbloom.ErrNotFound) || errors.Is(err, rbloom.ErrLoading) {
		return lineage, false, nil // lost by Redis, or a load that died
	}
	if err != nil {
		return "", false, fmt.Errorf("filter: %w", err)
	}
	return lineage, ready, nil
}

// readyItem is the marker warm adds once every key of lineage is loaded.
func readyItem(lineage string) string { return "ready:" + lineage }

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
