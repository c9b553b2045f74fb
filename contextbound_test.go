package rbloom

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbloom/rbloom/rbloomtest"
	"github.com/redis/go-redis/v9"
)

// TestQuickStartClientHonoursContext: go-redis sets a connection's read
// deadline from the call's context only with ContextTimeoutEnabled.
// Against a Redis whose replies never come, a Test with a 500 ms context
// returns after 500 ms with it, after the client's ReadTimeout (5 s)
// without. README's quick start, which newcomers copy, makes its client
// with it.
func TestQuickStartClientHonoursContext(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	client := regexp.MustCompile(`(?s)redis\.NewClient\(&redis\.Options\{.*?\}\)`).Find(readme)
	if client == nil {
		t.Fatal("README.md makes no client with redis.NewClient(&redis.Options{...})")
	}
	if !regexp.MustCompile(`ContextTimeoutEnabled:\s*true`).Match(client) {
		t.Errorf("README's quick start client %s does not set ContextTimeoutEnabled: true", client)
	}

	p := rbloomtest.NewProxy(t, rbloomtest.StartRedis(t))
	p.DelayReplies(time.Minute)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c := must(NewCounting(rdb, "stalled", Options{Capacity: 1000})).on(t)
	tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Test(tctx, "a")
	took := time.Since(start)
	t.Logf("Test against a server that never answers, 500ms context: %v after %v", err, took.Round(10*time.Millisecond))
	if err == nil || took > 2*time.Second {
		t.Errorf("Test with a 500ms context returned after %v (%v), want an error within 2s", took, err)
	}
}

// TestRedisDownOneError: with Redis down, a call whose context has no
// deadline fails, once go-redis's dial retries are spent, with one error
// that names the address and the cause.
func TestRedisDownOneError(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	c := must(NewCounting(rdb, "down", Options{Capacity: 1000})).on(t)
	start := time.Now()
	_, err := c.Test(ctx, "a")
	t.Logf("Test with Redis down: %v after %v", err, time.Since(start).Round(10*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Test with Redis down: %v, want an error naming 127.0.0.1:1 and the refusal", err)
	}
}
