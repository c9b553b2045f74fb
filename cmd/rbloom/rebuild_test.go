package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

func TestRebuildCommand(t *testing.T) {
	backends(t, func(t *testing.T, u string) {
		must(t, u, "create", "rows", "--capacity", "1000", "--partitions", "2")
		must(t, u, "add", "rows", "a", "b", "ghost")
		truth := filepath.Join(t.TempDir(), "rows.txt")
		if err := os.WriteFile(truth, []byte("a\nb\nc\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out := must(t, u, "rebuild", "rows", truth); !strings.HasPrefix(out, "rebuilt rows from 3 items") {
			t.Errorf("rebuild printed %q", out)
		}
		rb(t, u, "", "test", "rows", "a", "b", "c").want(t, 0, "maybe\ta\nmaybe\tb\nmaybe\tc\n")
		rb(t, u, "", "test", "rows", "ghost").want(t, 1, "absent\tghost\n")
		rb(t, u, "", "rebuild", "nosuch", truth).fails(t, "nosuch")
	})
}

// TestRebuildResizes: rebuild with sizing flags resizes the filter, and an
// overfull filter's warning names that command.
func TestRebuildResizes(t *testing.T) {
	backends(t, func(t *testing.T, u string) {
		must(t, u, "create", "small", "--capacity", "10")
		var items []string
		for i := range 40 {
			items = append(items, "i"+strings.Repeat("x", i))
		}
		must(t, u, append([]string{"add", "small"}, items...)...)
		r := rb(t, u, "", "info", "small")
		if !strings.Contains(r.stderr, "rbloom rebuild small ITEMS-FILE --capacity") {
			t.Errorf("info on an overfull filter warned %q, want the rebuild command", r.stderr)
		}
		file := filepath.Join(t.TempDir(), "items.txt")
		if err := os.WriteFile(file, []byte(strings.Join(items, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out := must(t, u, "rebuild", "small", file, "--capacity", "1000", "--partitions", "2"); !strings.HasPrefix(out, "resized small from 40 items") {
			t.Errorf("rebuild --capacity printed %q", out)
		}
		if out := must(t, u, "info", "small"); !strings.Contains(out, "sized for:      1000 items") || !strings.Contains(out, "partitions:     2,") {
			t.Errorf("info after the resize:\n%s", out)
		}
		rb(t, u, "", "rebuild", "small", file, "--ttl", "1h").fails(t, "keeps the filter's mode and TTL")
	})
}

// TestRebuildLoadsAndKeepsRate: rebuild of a missing filter with sizing
// flags loads it; without, it says which flags; a resize given
// --capacity alone keeps the filter's error rate.
func TestRebuildLoadsAndKeepsRate(t *testing.T) {
	backends(t, func(t *testing.T, u string) {
		file := filepath.Join(t.TempDir(), "items.txt")
		if err := os.WriteFile(file, []byte("a\nb\nc\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		rb(t, u, "", "rebuild", "fresh", file).fails(t, "give --capacity N")
		if out := must(t, u, "rebuild", "fresh", file, "--capacity", "100", "--error-rate", "0.001"); !strings.HasPrefix(out, "loaded fresh from 3 items") {
			t.Errorf("rebuild of a missing filter printed %q", out)
		}
		rb(t, u, "", "test", "fresh", "a", "b", "c").want(t, 0, "maybe\ta\nmaybe\tb\nmaybe\tc\n")
		must(t, u, "rebuild", "fresh", file, "--capacity", "1000")
		if out := must(t, u, "info", "fresh"); !strings.Contains(out, "1000 items at error rate 0.1%") {
			t.Errorf("info after a resize by --capacity alone:\n%s", out)
		}
	})
}

// TestInfoWarnsOfEviction: info says, and warns, when the server's
// maxmemory-policy can evict the filter's records or partitions.
func TestInfoWarnsOfEviction(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	u := "redis://" + addr
	must(t, u, "create", "f", "--capacity", "100")
	if r := rb(t, u, "", "info", "f"); !strings.Contains(r.stdout, "eviction:       noeviction: never evicted") || r.stderr != "" {
		t.Errorf("info under noeviction: %q, %q", r.stdout, r.stderr)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	rdb.ConfigSet(context.Background(), "maxmemory-policy", "volatile-lru")
	if r := rb(t, u, "", "info", "f"); !strings.Contains(r.stderr, "maxmemory-policy is volatile-lru") {
		t.Errorf("info under volatile-lru warned %q", r.stderr)
	}
	// --json says it too, and warns on stderr, its output staying JSON.
	rdb.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru")
	r := rb(t, u, "", "info", "f", "--json")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got["eviction_policy"] != "allkeys-lru" || got["evicts"] != true {
		t.Errorf("info --json under allkeys-lru: %v, %v", got, err)
	}
	if !strings.Contains(r.stderr, "maxmemory-policy is allkeys-lru") {
		t.Errorf("info --json under allkeys-lru warned %q", r.stderr)
	}
}
