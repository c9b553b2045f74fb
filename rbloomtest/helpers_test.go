package rbloomtest_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// newClient connects to addr and closes the client when the test ends.
// MaxRetries -1: a retried BITFIELD INCRBY would count twice and hide or
// fake a bug.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 20})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
