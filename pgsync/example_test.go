package pgsync_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/rbloom/rbloom/pgsync"
	"github.com/redis/go-redis/v9"
)

// A filter that follows the keys of the table items. It needs a
// PostgreSQL with wal_level = logical and a publication of the table
// (CREATE PUBLICATION items_pub FOR TABLE items), so it is compiled but
// not run by go test.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	s, err := pgsync.New(pgsync.Config{
		DatabaseURL: "postgres://app@localhost/shop",
		Table:       "items",
		KeyColumn:   "id",
		Publication: "items_pub",
		Slot:        "items_filter", // created at the first run, with the load's snapshot
		Redis:       rdb,
		Filter:      "items",
		Capacity:    10_000_000,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for range time.Tick(10 * time.Second) {
			st := s.Stats()
			fmt.Printf("%s: %.0f changes/s, %d bytes and %v behind\n", st.Phase, st.PerSecond, st.LagBytes, st.Lag)
		}
	}()
	if err := s.Run(ctx); err != nil && !pgsync.Permanent(err) {
		log.Print(err) // a lost connection: run again
	} else if err != nil {
		log.Fatal(err) // the operator must act: the message says how
	}
}

// The command line, as `rbloom sync` and rbloom-sync run it.
func ExampleCommand() {
	err := pgsync.Command(context.Background(), []string{
		"-db", "postgres://app@localhost/shop", "-table", "items", "-key", "id",
		"-filter", "items", "-slot", "items_filter", "-publication", "items_pub",
		"-redis", "localhost:6379", "-stats", "10s",
	}, os.Stdout, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
}
