package bench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// moduleEnv names the environment variable that holds the path of
// RedisBloom's module (redisbloom.so), for the tests that need CF.*. The
// redis-server on PATH must be one that loads it (Redis 8).
const moduleEnv = "RBLOOM_BENCH_REDISBLOOM"

func TestCommandListed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply []any
		want  bool
	}{
		{"no such command", []any{nil}, false},
		{"empty reply", []any{}, false},
		{"empty entry", []any{[]any{}}, false},
		{"not an entry", []any{"cf.add"}, false},
		{"two entries", []any{[]any{"cf.add"}, []any{"cf.del"}}, false},
		{"CF.ADD described", []any{[]any{"cf.add", int64(3), []any{"write", "denyoom", "module"}, int64(1), int64(1), int64(1)}}, true},
	} {
		if got := commandListed(tc.reply); got != tc.want {
			t.Errorf("%s: commandListed(%v) = %v, want %v", tc.name, tc.reply, got, tc.want)
		}
	}
}

// TestHasCuckoo checks the detection on the redis-server on PATH without
// modules (no CF.*), and with RedisBloom's module when moduleEnv names it.
func TestHasCuckoo(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, addr string, want bool) {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		got, err := hasCuckoo(ctx, rdb)
		if err != nil || got != want {
			t.Errorf("hasCuckoo = %v, %v, want %v, nil", got, err, want)
		}
	}
	t.Run("plain", func(t *testing.T) { check(t, rbloomtest.StartRedis(t), false) })
	t.Run("module", func(t *testing.T) { check(t, startCuckooRedis(t), true) })
}

// startCuckooRedis starts a redis-server with RedisBloom's module, or
// skips the test when moduleEnv is not set.
func startCuckooRedis(t *testing.T) string {
	t.Helper()
	module := os.Getenv(moduleEnv)
	if module == "" {
		t.Skipf("%s is not set: no RedisBloom module to load", moduleEnv)
	}
	return rbloomtest.StartRedis(t, "--loadmodule", module)
}

// cuckooParts are what the report says only when the server has CF.*.
var cuckooParts = []string{"| 16a ", "| 16b ", "| 16c ", "| 16d ", "16. Redis's cuckoo filter"}

// TestRunQuickCuckoo runs the quick benchmark against a Redis with the
// cuckoo filter and checks its rows and line 16. TestRunQuick checks that
// none of it appears without CF.*.
func TestRunQuickCuckoo(t *testing.T) {
	addr := startCuckooRedis(t)
	ctx := context.Background()
	var out bytes.Buffer
	const rounds = 2
	if err := Run(ctx, Config{Addr: addr, Quick: true, Rounds: rounds}, &out); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	report := out.String()
	t.Log("\n" + report)
	for _, part := range cuckooParts {
		if !strings.Contains(report, part) {
			t.Errorf("the report has no %q", part)
		}
	}

	table := tableRows(report, "| #", 1)
	for id, want := range map[string]struct {
		name, vs, items, trips string
	}{
		// 5,000 items in 2 rounds, 1,000 per call or flush: 3 calls a
		// round; the deletes, 2 x 1,250 items, 2 calls a round.
		"16a": {"CF.ADD", "8a", "5,000", "0.0012"},
		"16b": {"CF.INSERT", "8a", "5,000", "0.0012"},
		"16c": {"CF.MEXISTS", "8b", "5,000", "0.0012"},
		"16d": {"CF.DEL", "8c", "2,500", "0.0016"},
	} {
		cells := table[id]
		if !strings.HasPrefix(cells["row"], want.name) || cells["vs row"] != want.vs || cells["items"] != want.items ||
			cells["round trips/item"] != want.trips || number(t, cells["ratio"]) <= 0 || number(t, cells["server µs/item"]) <= 0 {
			t.Errorf("row %s: %q, want %s vs row %s, %s items, %s round trips/item, a ratio and server time", id, cells, want.name, want.vs, want.items, want.trips)
		}
	}

	filters := tableRows(report, "| filter", 1)
	if len(filters) != 3 {
		t.Errorf("line 16: %d filters, want 3 (counting, CF bucket size 1 and 2)", len(filters))
	}
	for name, cells := range filters {
		if cells["items"] != "5,000" || number(t, cells["MEMORY USAGE"]) <= 0 || cells["tested"] != "5,000" {
			t.Errorf("line 16, %s: %q, want 5,000 items, memory, 5,000 tested", name, cells)
		}
		// At about 1%, 5,000 probes find some false positives; every one
		// deleted makes at least one held item absent in a cuckoo filter
		// (it takes another item's fingerprint).
		fp, deleted, lost := number(t, cells["false positives"]), number(t, cells["FP deleted"]), number(t, cells["held lost"])
		if fp < 5 || deleted < 1 || deleted > fp || lost < 1 {
			t.Errorf("line 16, %s: %v false positives, %v deleted, %v held lost: want some of each", name, fp, deleted, lost)
		}
		if strings.HasPrefix(name, "CF") && cells["refused"] != "0" {
			t.Errorf("line 16, %s: %s items refused, want 0 (the filter expands)", name, cells["refused"])
		}
	}

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if keys, err := rdb.Keys(ctx, "*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("keys left behind: %v (%v)", keys, err)
	}
}
