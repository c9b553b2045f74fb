package rbloom_test

import (
	"context"
	"fmt"

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

func ExampleCounting_Remove() {
	rdb, stop := exampleRedis()
	defer stop()
	ctx := context.Background()

	rows, _ := rbloom.NewCounting(rdb, "rows", rbloom.Options{Capacity: 10_000})
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
	seen.Add(ctx, "event:1")

	// Another process needs only the name.
	f, err := rbloom.Open(ctx, rdb, "seen")
	if err != nil {
		panic(err)
	}
	info, _ := f.Info(ctx)
	fmt.Printf("%s filter, m=%d, k=%d, %d item(s)\n", info.Mode, info.Slots, info.Hashes, info.Items)
	// Output:
	// classic filter, m=958506, k=7, 1 item(s)
}
