package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// The filter holds "item:<id>" for every row of the table.
func filterItem(id string) string { return "item:" + id }

var (
	errNotFound = errors.New("no such item")
	errExists   = errors.New("item already exists")

	// errSyncLoading stands for the filter's answer, in the sync mode,
	// until the sync has loaded the table.
	errSyncLoading = errors.New("the sync has not loaded the filter")
)

// guard keeps a counting Bloom filter of the table's primary keys in Redis
// and answers lookups of keys that are definitely absent without asking the
// database.
//
// The order of its two writes is what keeps the filter safe when the process
// dies between them, so that it never answers "absent" for a row that exists:
//
//   - insert: add to the filter first, then insert the row;
//   - delete: delete the row first, then remove from the filter, and only if
//     a row was deleted.
//
// A crash between the two steps leaves at worst a ghost, a key in the filter
// without a row, which costs one database query when it is looked up. The
// other order would leave a row that the filter says is absent: a false
// negative, answered 404 until the filter is rebuilt.
//
// A filter Redis lost is the library's to load again: the handle's Source
// is fill, reads meanwhile fail with ErrLoading, and lookups then ask the
// database. Which database the filter was loaded from is the guard's to
// check, at start: see lineage.go.
type guard struct {
	table  *table
	filter *rbloom.Counting
	rdb    redis.UniversalClient // the filter's Redis, for its record
	record string                // the record's key: recordKey(filter.Name())
	stats  stats
	batch  int // keys per add of fill

	// changing is held shared by each insert and delete from its first
	// write to its last, and alone by fill while it opens its snapshot:
	// the fill's rule (docs/semantics.md, Rebuild).
	changing sync.RWMutex

	// follow, when set, is the sync mode: a pgsync.Sync keeps the filter
	// equal to the table (see sync.go), and the guard only reads the
	// filter. insert and delete write the table alone, and lookups trust
	// the filter's "absent" only once follow says the sync has loaded it.
	follow *follower

	// crash, when set, is called between the filter write and the database
	// write of insert and delete, before delete's remove, and after each
	// batch that warm adds. Tests make it panic, to stop the work where a dying
	// process would.
	crash func(step, id string)
}

// newGuard returns a guard over tbl whose filter, name in rdb, has the
// options o and, unless follow (the sync mode) loads it, fill as its
// Source. It does not contact Redis.
func newGuard(tbl *table, rdb redis.UniversalClient, name string, o rbloom.Options, follow *follower) (*guard, error) {
	g := &guard{table: tbl, rdb: rdb, record: recordKey(name), batch: 10_000, follow: follow}
	if follow == nil {
		o.Source = g.fill
	}
	f, err := rbloom.NewCounting(rdb, name, o)
	g.filter = f
	return g, err
}

// fill calls add with the key of every row, batch keys at a time, from one
// query: one consistent snapshot of the table. It opens the snapshot while
// no insert or delete of this process is between its two writes, so that
// every key added is in it, or its insert was given up, and every row
// missing from it has had its key removed (docs/semantics.md, Rebuild).
// Other processes' changes are not held back: one service process per
// database (several would share a lock in the database instead, such as
// PostgreSQL's advisory locks).
func (g *guard) fill(add func(items []string) error) error {
	g.changing.Lock()
	release := sync.OnceFunc(g.changing.Unlock)
	defer release()
	keys := make([]string, 0, g.batch)
	// A Source has no context: the load it serves runs in the background.
	err := g.table.ids(context.Background(), func(id string) error {
		release() // the first row is read: the snapshot is taken
		if keys = append(keys, filterItem(id)); len(keys) < g.batch {
			return nil
		}
		err := add(keys)
		keys = keys[:0]
		return err
	})
	if err == nil && len(keys) > 0 {
		err = add(keys)
	}
	return err
}

// answeredBy names who answered a lookup: the filter alone, or the database.
type answeredBy string

const (
	byFilter   answeredBy = "filter"
	byDatabase answeredBy = "database"
)

// get returns the value of row id, or errNotFound. The filter is asked
// first: when it says id is definitely absent, the database is not.
func (g *guard) get(ctx context.Context, id string) (string, answeredBy, error) {
	g.stats.lookups.Add(1)
	maybe, err := false, errSyncLoading
	switch {
	case g.follow == nil:
		maybe, err = g.filter.Test(ctx, filterItem(id))
	case g.follow.loaded():
		maybe, err = g.filter.Test(ctx, id) // the sync's items are the ids
	}
	switch {
	case err != nil:
		// Not loaded (ErrNotFound, ErrLoading), or Redis failed: the
		// database still knows. Never guess "absent".
		if !errors.Is(err, rbloom.ErrLoading) && !errors.Is(err, rbloom.ErrNotFound) && err != errSyncLoading {
			log.Printf("filter unavailable, asking the database: %v", err)
		}
		g.stats.filterUnavailable.Add(1)
	case !maybe:
		g.stats.filterAbsent.Add(1)
		return "", byFilter, errNotFound
	}
	filterSaidMaybe := err == nil
	g.stats.dbQueries.Add(1)
	value, err := g.table.get(ctx, id)
	if filterSaidMaybe && errors.Is(err, errNotFound) {
		g.stats.falsePositives.Add(1) // a false positive, a ghost, or a row just deleted
	}
	return value, byDatabase, err
}

// insert inserts row id, or returns errExists. It adds id to the filter
// before it inserts the row: see guard.
func (g *guard) insert(ctx context.Context, id, value string) error {
	if g.follow != nil {
		return g.insertSynced(ctx, id, value)
	}
	g.changing.RLock()
	defer g.changing.RUnlock()
	if _, err := g.filter.Add(ctx, filterItem(id)); err != nil {
		// The row is not inserted. The add may have been applied all the
		// same: a ghost at worst.
		return fmt.Errorf("add to filter: %w", err)
	}
	g.step("insert", id)
	inserted, err := g.table.insert(ctx, id, value)
	if err != nil {
		// The row may have been inserted anyway (a reply lost on the way
		// back looks like a failure): keep the key in the filter.
		return err
	}
	if !inserted {
		// The database said for sure that the row was already there, so
		// our add is one count too many: take it back, or repeated inserts
		// would saturate its counters. Removing is safe because this call
		// added the key (the rule: remove only what you added).
		if _, err := g.filter.Remove(ctx, filterItem(id)); err != nil {
			log.Printf("filter: remove %q after a duplicate insert: %v (an extra count: a ghost at worst)", id, err)
		}
		return errExists
	}
	return nil
}

// delete deletes row id, or returns errNotFound. It removes id from the
// filter after the row is deleted, and only if a row was: see guard.
func (g *guard) delete(ctx context.Context, id string) error {
	if g.follow != nil {
		// The sync removes the key once the delete is committed. Until
		// then the key tests present, and lookups ask the database.
		deleted, err := g.table.delete(ctx, id)
		if err == nil && !deleted {
			err = errNotFound
		}
		return err
	}
	g.changing.RLock()
	defer g.changing.RUnlock()
	deleted, err := g.table.delete(ctx, id)
	if err != nil {
		return err // the row may be gone all the same: a ghost at worst
	}
	if !deleted {
		// No row, so nothing of ours to remove: a key that tests present
		// now is a ghost or a false positive, and removing a false positive
		// takes counts that belong to other keys.
		return errNotFound
	}
	g.step("delete", id)
	// A filter being loaded keeps the remove out of its new counters: the
	// key stays as a ghost at worst.
	if err := g.remove(ctx, id); err != nil {
		log.Printf("filter: remove %q: %v (the row is deleted; its key stays as a ghost)", id, err)
	}
	return nil
}

// remove removes the key of row id, which delete has just deleted. It
// advances the record's clock first, so that no copy of the database that
// still has the row can be trusted with the filter afterwards (see
// lineage.go), and raises the database's generation to the clock, so that
// the database as it is can.
func (g *guard) remove(ctx context.Context, id string) error {
	gen, err := g.advance(ctx)
	if err != nil {
		return err
	}
	if err := g.table.raiseGeneration(ctx, gen); err != nil {
		// Behind the clock, the database will not be trusted: the next
		// start loads every key again.
		log.Printf("database: raise the generation to %d: %v (the next start loads the filter again)", gen, err)
	}
	g.step("remove", id)
	removed, err := g.filter.Remove(ctx, filterItem(id))
	if err == nil && !removed {
		// Every row's key is in the filter: this one was not, so the
		// filter was answering 404 for an existing row.
		log.Printf("filter: %q was absent from the filter while its row existed: the filter has lost keys, rebuild it", id)
	}
	return err
}

// step calls the crash hook, if any.
func (g *guard) step(name, id string) {
	if g.crash != nil {
		g.crash(name, id)
	}
}

// insertSynced is insert in the sync mode: it inserts the row, and leaves
// the filter to the sync. It returns once the filter holds id, waiting at
// most syncWait for the sync to apply the insert, so that a client that
// looks the row up after its 201 is not answered 404 from a filter that
// has not caught up yet (other writers of the table have no such wait:
// their rows are answered 404 for the sync's lag, some milliseconds).
func (g *guard) insertSynced(ctx context.Context, id, value string) error {
	inserted, err := g.table.insert(ctx, id, value)
	if err != nil {
		return err
	}
	if !inserted {
		return errExists
	}
	deadline := time.Now().Add(syncWait)
	for {
		present, err := g.filter.Test(ctx, id)
		if err != nil || present {
			return nil // with Redis failing, lookups ask the database
		}
		if time.Now().After(deadline) {
			log.Printf("sync: %q not in the filter %v after its insert (the sync is behind or down)", id, syncWait)
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // the row is inserted
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// syncWait bounds how long an insert in the sync mode waits for the sync.
const syncWait = 2 * time.Second
