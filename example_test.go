package rbloom_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

// exampleRedis starts an in-memory Redis for the examples. In an
// application, rdb is a client of a real Redis or Redis Cluster.
func exampleRedis() (*redis.Client, func()) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	if err := rbloomtest.Register(m); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, func() { rdb.Close(); m.Close() }
}

func ExampleNewCounting() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	users, err := rbloom.NewCounting(rdb, "users", rbloom.Options{Capacity: 1_000_000, ErrorRate: 0.001})
	if err != nil {
		panic(err)
	}
	// A filter exists only on purpose: Create makes it, empty, for a
	// source of truth that is empty now (Rebuild loads it from one that
	// is not). Until then every call fails with ErrNotFound.
	if err := users.Create(ctx); err != nil {
		panic(err)
	}
	existed, _ := users.Add(ctx, "user:42")
	fmt.Println("user:42 was there before:", existed)
	ok, _ := users.Test(ctx, "user:42")
	fmt.Println("user:42 may be present:", ok)
	ok, _ = users.Test(ctx, "user:43")
	fmt.Println("user:43 may be present:", ok)
	// Output:
	// user:42 was there before: false
	// user:42 may be present: true
	// user:43 may be present: false
}

func ExampleNewCuckoo() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	// A quarter of a counting filter's memory, with Remove, and a hard
	// capacity: past it, adds fail with ErrFull and change nothing.
	sessions, err := rbloom.NewCuckoo(rdb, "sessions", rbloom.Options{Capacity: 1_000_000, ErrorRate: 0.01})
	if err != nil {
		panic(err)
	}
	if err := sessions.Create(ctx); err != nil {
		panic(err)
	}
	seen, _ := sessions.TestOrAdd(ctx, "s:1") // adds it: no copy if it was there
	fmt.Println("s:1 was there before:", seen)
	seen, _ = sessions.TestOrAdd(ctx, "s:1")
	fmt.Println("s:1 was there the second time:", seen)
	removed, _ := sessions.Remove(ctx, "s:1")
	fmt.Println("s:1 removed:", removed)
	ok, _ := sessions.Test(ctx, "s:1")
	fmt.Println("s:1 may be present:", ok)
	in, _ := sessions.Info(ctx)
	fmt.Printf("fingerprints of %d bits, %d buckets, load %.1f\n", in.Hashes, in.Slots, in.Load)
	// Output:
	// s:1 was there before: false
	// s:1 was there the second time: true
	// s:1 removed: true
	// s:1 may be present: false
	// fingerprints of 10 bits, 312500 buckets, load 0.0
}

func ExampleCounting_Remove() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	rows, _ := rbloom.NewCounting(rdb, "rows", rbloom.Options{Capacity: 10_000})
	rows.Create(ctx)
	rows.AddMany(ctx, []string{"row:1", "row:2", "row:2"})

	// The row is deleted from the database: forget it.
	removed, _ := rows.Remove(ctx, "row:1")
	fmt.Println("row:1 removed:", removed)
	ok, _ := rows.Test(ctx, "row:1")
	fmt.Println("row:1 may be present:", ok)

	// An item added twice needs two removes.
	n, _ := rows.Count(ctx, "row:2")
	fmt.Println("row:2 count:", n)

	// Removing what is definitely absent changes nothing.
	removed, _ = rows.Remove(ctx, "row:3")
	fmt.Println("row:3 removed:", removed)
	// Output:
	// row:1 removed: true
	// row:1 may be present: false
	// row:2 count: 2
	// row:3 removed: false
}

func ExampleOpen() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	seen, _ := rbloom.NewClassic(rdb, "seen", rbloom.Options{Capacity: 100_000, ErrorRate: 0.01})
	seen.Create(ctx)
	seen.Add(ctx, "event:1")

	// Another process needs only the name.
	f, err := rbloom.Open(ctx, rdb, "seen", rbloom.Options{})
	if err != nil {
		panic(err)
	}
	info, _ := f.Info(ctx)
	fmt.Printf("%s filter, m=%d, k=%d, %d item(s)\n", info.Mode, info.Slots, info.Hashes, info.Items)
	// Output:
	// classic filter, m=958506, k=7, 1 item(s)
}

func ExampleCounting_TestOrAdd() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	seen, _ := rbloom.NewCounting(rdb, "clicks", rbloom.Options{Capacity: 10_000})
	seen.Create(ctx)
	for _, click := range []string{"c1", "c2", "c1"} {
		dup, _ := seen.TestOrAdd(ctx, click)
		fmt.Println(click, "duplicate:", dup)
	}
	// A duplicate is not counted again: one Remove forgets c1.
	n, _ := seen.Count(ctx, "c1")
	fmt.Println("c1 count:", n)
	// Output:
	// c1 duplicate: false
	// c2 duplicate: false
	// c1 duplicate: true
	// c1 count: 1
}

func ExampleCounting_AddOnce() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	rows, _ := rbloom.NewCounting(rdb, "rows", rbloom.Options{Capacity: 10_000})
	rows.Create(ctx)
	// Events from a stream delivered at least once carry an id (topic,
	// partition, offset): the second delivery of an event changes nothing.
	rows.AddOnce(ctx, "row:7", "orders/0/100")
	rows.AddOnce(ctx, "row:7", "orders/0/100") // redelivered
	n, _ := rows.Count(ctx, "row:7")
	fmt.Println("row:7 count after the insert event twice:", n)

	rows.RemoveOnce(ctx, "row:7", "orders/0/101")
	rows.RemoveOnce(ctx, "row:7", "orders/0/101") // redelivered
	ok, _ := rows.Test(ctx, "row:7")
	fmt.Println("row:7 may be present after the delete event twice:", ok)
	// Output:
	// row:7 count after the insert event twice: 1
	// row:7 may be present after the delete event twice: false
}

func ExampleCounting_AddManyOnce() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	seen, _ := rbloom.NewCounting(rdb, "seen", rbloom.Options{Capacity: 10_000})
	seen.Create(ctx)
	batch := []string{"a", "b", "a"}
	first, _ := seen.AddManyOnce(ctx, batch, "batch-1")
	// A consumer that crashed before committing its offset replays the
	// batch: it gets the same answers, and nothing is added twice.
	again, _ := seen.AddManyOnce(ctx, batch, "batch-1")
	fmt.Println(first, again)
	n, _ := seen.Count(ctx, "b")
	fmt.Println("b count:", n)
	// Output:
	// [false false true] [false false true]
	// b count: 1
}

func ExampleCounting_Rebuild() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	rows, _ := rbloom.NewCounting(rdb, "rows", rbloom.Options{Capacity: 10_000})
	rows.Create(ctx)
	rows.AddMany(ctx, []string{"row:1", "row:2", "row:3"})
	// row:3 was deleted from the table, but a crash lost its Remove: a
	// ghost. Rebuild from the table (in an application, one snapshot of
	// SELECT id FROM rows) clears it, without stopping the filter.
	table := []string{"row:1", "row:2"}
	err := rows.Rebuild(ctx, func(add func([]string) error) error { return add(table) })
	fmt.Println("rebuilt:", err == nil)
	ghost, _ := rows.Test(ctx, "row:3")
	kept, _ := rows.Test(ctx, "row:1")
	fmt.Println("row:3 may be present:", ghost, "- row:1 may be present:", kept)
	// Output:
	// rebuilt: true
	// row:3 may be present: false - row:1 may be present: true
}

func ExampleNewWindow() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	// Remember click ids for an hour, forgetting them ten minutes at a time.
	clicks, err := rbloom.NewWindow(rdb, "clicks", rbloom.WindowOptions{
		EventsPerBucket: 100_000, Bucket: 10 * time.Minute, Span: time.Hour, ErrorRate: 1e-6,
	})
	if err != nil {
		panic(err)
	}
	// Once, where the stream starts: no call makes a window, so one that
	// Redis lost fails with ErrNotFound rather than answer its events new.
	if err := clicks.Create(ctx); err != nil {
		panic(err)
	}
	seen, _ := clicks.TestOrAddManyOnce(ctx, []string{"k1", "k2", "k1"}, "clicks/3/5000-5002")
	fmt.Println("seen before:", seen)
	seen, _ = clicks.TestOrAddMany(ctx, []string{"k2", "k3"})
	fmt.Println("seen before:", seen)
	// Output:
	// seen before: [false false true]
	// seen before: [true false]
}
