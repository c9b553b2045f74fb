// Command cacheguard is a small HTTP service over a SQL table of items that
// keeps a counting Bloom filter of the table's primary keys in Redis, so that
// lookups of ids that do not exist are answered 404 without a database query.
//
//	go run ./examples/cacheguard            # SQLite in a temp dir, in-memory Redis
//	curl -X POST localhost:8080/items -d '{"id":"a1","value":"hello"}'
//	curl -i localhost:8080/items/a1         # 200, X-Answered-By: database
//	curl -i localhost:8080/items/zz         # 404, X-Answered-By: filter
//	curl -X DELETE localhost:8080/items/a1
//	curl localhost:8080/stats
//
// DATABASE_URL (postgres://...) selects PostgreSQL instead of SQLite, and
// REDIS_URL (redis://host:6379/0) a real Redis instead of the in-memory one.
//
// With PostgreSQL, -sync is the recommended mode:
//
//	DATABASE_URL=postgres://app@db/shop go run ./examples/cacheguard -sync postgres://repl@db/shop
//
// A pgsync.Sync, in this process, keeps the filter equal to the table from
// logical replication (wal_level=logical; the -sync URL's user needs the
// REPLICATION attribute), and the service only reads the filter: whatever
// writes the table (psql, a migration, another service) is seen. The
// service creates the publication if it is missing; the sync creates its
// slot and the filter, which must not be one the dual-write mode loaded
// (choose another -filter, or drop it). Without -sync the service writes
// the filter itself, next to each write of the table (guard.go).
//
// guard.go holds the idea: the order of the two writes that keeps the filter
// free of false negatives when the process dies between them; a filter
// Redis lost, the library loads again from guard.fill. lineage.go holds the
// rule that decides, at start, whether the filter in Redis was loaded from
// this database as it is or must be rebuilt.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/internal/memredis"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	sqlitePath := flag.String("sqlite", "", "SQLite file when DATABASE_URL is not set (default: a new one in a temp dir)")
	name := flag.String("filter", "cacheguard-items", "name of the filter in Redis")
	capacity := flag.Uint64("capacity", 1_000_000, "number of rows the filter is sized for")
	errorRate := flag.Float64("error-rate", 0.01, "false-positive rate wanted at capacity")
	syncURL := flag.String("sync", "", "PostgreSQL URL of a user with REPLICATION: keep the filter equal to the table by logical replication, and never write it from the service (needs DATABASE_URL)")
	publication := flag.String("publication", "cacheguard_items", "with -sync: the publication of the table items, created if missing")
	slot := flag.String("slot", "cacheguard_items", "with -sync: the replication slot, created by the sync")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sync := syncFlags{url: *syncURL, publication: *publication, slot: *slot}
	if err := run(ctx, *addr, *sqlitePath, *name, rbloom.Options{Capacity: *capacity, ErrorRate: *errorRate}, sync); err != nil {
		log.Fatal(err)
	}
}

// syncFlags are the flags of the sync mode; url "" is the dual-write mode.
type syncFlags struct{ url, publication, slot string }

func run(ctx context.Context, addr, sqlitePath, name string, opts rbloom.Options, sync syncFlags) error {
	if sync.url != "" && os.Getenv("DATABASE_URL") == "" {
		return errors.New("-sync follows a PostgreSQL table: set DATABASE_URL too")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	syncFailed := make(chan error, 1) // the sync's error that stops the service
	if sqlitePath == "" && os.Getenv("DATABASE_URL") == "" {
		dir, err := os.MkdirTemp("", "cacheguard-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		sqlitePath = filepath.Join(dir, "items.db")
	}
	tbl, err := openDatabase(ctx, sqlitePath)
	if err != nil {
		return err
	}
	defer tbl.Close()
	rdb, closeRedis, err := connectRedis(ctx)
	if err != nil {
		return err
	}
	defer closeRedis()

	var follow *follower
	if sync.url != "" {
		follow = &follower{}
	}
	g, err := newGuard(tbl, rdb, name, opts, follow)
	if err != nil {
		return err
	}
	if follow != nil {
		if err := tbl.ensurePublication(ctx, sync.publication); err != nil {
			return err
		}
		go func() {
			err := g.follow.run(ctx, syncConfig(sync.url, sync.publication, sync.slot, rdb, name, opts))
			if err != nil {
				syncFailed <- fmt.Errorf("sync: %w", err)
				cancel()
			}
		}()
		log.Printf("filter %q kept by the sync (slot %s, publication %s): lookups go to the database until it is loaded", name, sync.slot, sync.publication)
	} else {
		start := time.Now()
		n, err := g.warm(ctx)
		if err != nil {
			return fmt.Errorf("warm the filter: %w", err)
		}
		log.Printf("filter %q follows the database (%d keys loaded from the table in %v)", name, n, time.Since(start).Round(time.Millisecond))
	}

	srv := &http.Server{Addr: addr, Handler: g.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("listening on http://%s (GET/DELETE /items/{id}, POST /items, GET /stats)", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	select {
	case err := <-syncFailed:
		return err
	default:
		return nil
	}
}

// openDatabase opens PostgreSQL when DATABASE_URL is set, else SQLite in
// sqlitePath.
func openDatabase(ctx context.Context, sqlitePath string) (*table, error) {
	if url := os.Getenv("DATABASE_URL"); url != "" {
		log.Printf("database: PostgreSQL (DATABASE_URL)")
		return openPostgres(ctx, url)
	}
	log.Printf("database: SQLite in %s (set DATABASE_URL for PostgreSQL)", sqlitePath)
	return openSQLite(ctx, sqlitePath)
}

// connectRedis connects to the Redis that REDIS_URL names or, without it,
// starts an in-memory one (miniredis, with the BITFIELD command that rbloom
// needs) that is gone when the program exits.
func connectRedis(ctx context.Context) (*redis.Client, func(), error) {
	if url := os.Getenv("REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		rdb := redis.NewClient(opt)
		if err := rdb.Ping(ctx).Err(); err != nil {
			rdb.Close()
			return nil, nil, fmt.Errorf("connect to Redis at %s: %w", opt.Addr, err)
		}
		log.Printf("redis: %s (REDIS_URL)", opt.Addr)
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
	log.Printf("redis: in-memory at %s (set REDIS_URL for a real one)", m.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, func() { rdb.Close(); m.Close() }, nil
}
