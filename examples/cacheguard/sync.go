package main

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/pgsync"
)

// follower runs a pgsync.Sync that keeps the filter equal to the ids of the
// table, from PostgreSQL's logical replication: the sync mode, in which the
// guard never writes the filter itself. Every writer of the table (this
// service, psql, a migration, another service) is seen by the filter, some
// milliseconds after its commit.
//
// In this mode the filter holds the ids as they are (the sync adds the key
// column's text), not "item:<id>", and has no marker: the sync's phase says
// when it is loaded. A follower is safe for concurrent use.
type follower struct {
	// cur is the Sync running now, nil between runs. Each run gets a new
	// Sync, whose phase starts at "starting": a phase left at "streaming"
	// by a run that failed says nothing about the next.
	cur atomic.Pointer[pgsync.Sync]
}

// loaded reports whether the filter holds every row committed before the
// sync's consistent point and the sync is following the table from there:
// only then may an "absent" from the filter answer a lookup. Until the
// initial load has finished, and while the sync is down, it is false.
func (f *follower) loaded() bool {
	s := f.cur.Load()
	return s != nil && s.Stats().Phase == "streaming"
}

// stats returns the running sync's progress, and false between runs.
func (f *follower) stats() (pgsync.Stats, bool) {
	s := f.cur.Load()
	if s == nil {
		return pgsync.Stats{}, false
	}
	return s.Stats(), true
}

// run runs the sync described by cfg until ctx is done, and then returns
// nil. A run that fails on a connection (PostgreSQL or Redis restarting) is
// started again after a backoff of 1 s doubling to 30 s; an error that
// needs the operator (pgsync.Permanent) is returned.
func (f *follower) run(ctx context.Context, cfg pgsync.Config) error {
	backoff := time.Second
	for {
		s, err := pgsync.New(cfg)
		if err != nil {
			return err
		}
		f.cur.Store(s)
		start := time.Now()
		err = s.Run(ctx)
		f.cur.Store(nil)
		if ctx.Err() != nil {
			return nil
		}
		if pgsync.Permanent(err) {
			return err
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second // it had been running: a new failure
		}
		log.Printf("sync: %v (lookups go to the database; starting again in %v)", err, backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// syncConfig is the pgsync configuration of the sync mode: the table items,
// key column id, followed through the publication and slot given, with the
// user of url (who needs the REPLICATION attribute), into the filter name
// in rdb, created with opts' sizing.
func syncConfig(url, publication, slot string, rdb redis.UniversalClient, name string, opts rbloom.Options) pgsync.Config {
	return pgsync.Config{
		DatabaseURL: url,
		Table:       "items",
		KeyColumn:   "id",
		Publication: publication,
		Slot:        slot,
		Redis:       rdb,
		Filter:      name,
		Capacity:    opts.Capacity,
		ErrorRate:   opts.ErrorRate,
		KeyPrefix:   opts.KeyPrefix,
		SlotWait:    10 * time.Second, // a previous process's slot is released within a second or so
	}
}

// ensurePublication creates the publication name for the table items
// unless it exists. The service owns the table (it creates it), so it may.
func (t *table) ensurePublication(ctx context.Context, name string) error {
	var exists bool
	if err := t.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := t.db.ExecContext(ctx, `CREATE PUBLICATION `+pgx.Identifier{name}.Sanitize()+` FOR TABLE items`); err != nil {
		return fmt.Errorf("database: create publication %s: %w", name, err)
	}
	log.Printf("database: created publication %s for table items", name)
	return nil
}
