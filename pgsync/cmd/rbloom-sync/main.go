// Command rbloom-sync keeps a counting filter in Redis equal to the keys
// of a PostgreSQL table, from logical replication: see package pgsync.
//
//	rbloom-sync -db postgres://... -table items -key id -filter items \
//	    -slot items_filter -publication items_pub -redis localhost:6379
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rbloom/rbloom/pgsync"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := pgsync.Command(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rbloom-sync:", err)
		os.Exit(2)
	}
}
