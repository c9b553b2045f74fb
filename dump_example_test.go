package rbloom_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/rbloom/rbloom"
)

func ExampleRestore() {
	src, stop := exampleRedis()
	defer stop()
	dst, stop2 := exampleRedis() // another server: Redis, Valkey, a cluster
	defer stop2()
	ctx := context.Background()

	users, err := rbloom.NewCounting(src, "users", rbloom.Options{Capacity: 10_000})
	if err != nil {
		panic(err)
	}
	if err := users.Create(ctx); err != nil {
		panic(err)
	}
	users.AddMany(ctx, []string{"user:42", "user:42", "user:7"})

	// Dump streams to any io.Writer: a file, a pipe, an upload.
	var dump bytes.Buffer
	if _, err := users.Dump(ctx, &dump); err != nil {
		panic(err)
	}
	copied, err := rbloom.Restore(ctx, dst, "users", rbloom.Options{}, bytes.NewReader(dump.Bytes()))
	if err != nil {
		panic(err)
	}
	counts, _ := copied.CountMany(ctx, []string{"user:42", "user:7", "user:1"})
	fmt.Println("counts on the other server:", counts)

	// Restore never overwrites a filter unless asked (RestoreReplace), and
	// refuses a dump that is cut or damaged, leaving nothing behind.
	_, err = rbloom.Restore(ctx, dst, "users", rbloom.Options{}, bytes.NewReader(dump.Bytes()))
	fmt.Println("again:", errors.Is(err, rbloom.ErrExists))
	_, err = rbloom.Restore(ctx, dst, "other", rbloom.Options{}, bytes.NewReader(dump.Bytes()[:100]))
	fmt.Println("cut:", errors.Is(err, rbloom.ErrBadDump))
	// Output:
	// counts on the other server: [2 1 0]
	// again: true
	// cut: true
}
