package rbloomtest

import (
	"os"
	"testing"

	"github.com/rbloom/rbloom/internal/redisserver"
)

// StartRedis starts a redis-server for this test on 127.0.0.1 and a free
// port, without persistence (--save "" --appendonly no) and with its
// directory in t.TempDir(); args are passed after those, so they can add or
// override options. It returns the address ("127.0.0.1:port") once the
// server answers PING, and kills the server when the test ends.
//
// Without redis-server on $PATH the test is skipped, unless the environment
// variable CI is set: there a skip would hide a broken setup, so it fails.
// If the server does not start, the test fails with the tail of its log.
func StartRedis(t testing.TB, args ...string) string {
	t.Helper()
	return StartServer(t, args...).Addr()
}

// lookRedisServer returns the path of redis-server, or skips the test
// (fails it when $CI is set) if there is none.
func lookRedisServer(t testing.TB) string {
	t.Helper()
	bin, err := redisserver.Path()
	if err != nil {
		const msg = "redis-server not found on PATH: install it (apt-get install -y redis-server) to run this test"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " ($CI is set, so this is a failure, not a skip)")
		}
		t.Skip(msg)
	}
	return bin
}
