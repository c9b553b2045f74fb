package main

import (
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// newRedis returns a client of a new redis-server (see rbloomtest.StartRedis).
func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// smallSettings are for a stream of a few hundred events, at an error
// rate that makes a false positive all but impossible: every distinct
// event must be counted.
func smallSettings(name string) settings {
	return settings{name: name, eventsPerBucket: 10_000, errorRate: 1e-9,
		bucket: time.Hour, span: time.Hour, ttl: time.Hour}
}

// newTestConsumer returns a consumer that reads size entries at a time and
// claims entries idle for minIdle, with the stream and group in place.
func newTestConsumer(t *testing.T, rdb *redis.Client, s settings, name string, size int, minIdle time.Duration) *consumer {
	t.Helper()
	if err := ensureGroup(t.Context(), rdb, s.keys()); err != nil {
		t.Fatal(err)
	}
	c, err := newConsumer(t.Context(), rdb, s, name, size, minIdle)
	if err != nil {
		t.Fatal(err)
	}
	c.block = 10 * time.Millisecond
	c.log = log.New(t.Output(), "", 0)
	return c
}

// writeStream generates n clicks, a share dupRate of them written twice,
// and writes them to s's stream.
func writeStream(t *testing.T, rdb *redis.Client, s settings, n int, dupRate float64, seed uint64) []event {
	t.Helper()
	written := generate(s.name, n, dupRate, seed)
	if err := ensureGroup(t.Context(), rdb, s.keys()); err != nil {
		t.Fatal(err)
	}
	if err := produce(t.Context(), rdb, s.keys(), written, 0); err != nil {
		t.Fatal(err)
	}
	return written
}

// pollUntilCrash polls c until its crash hook panics, at most 1,000 times.
func pollUntilCrash(t *testing.T, c *consumer) *crash {
	t.Helper()
	for range 1000 {
		var err error
		if cr := survive(func() { _, err = c.poll(t.Context()) }); cr != nil {
			return cr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("%s never crashed", c.name)
	return nil
}

// drain polls c until the stream is drained, at most 2,000 times.
func drain(t *testing.T, rdb *redis.Client, c *consumer) {
	t.Helper()
	for range 2000 {
		if _, err := c.poll(t.Context()); err != nil {
			t.Fatal(err)
		}
		ok, err := drained(t.Context(), rdb, c.keys)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
	}
	t.Fatalf("%s did not drain the stream in 2,000 polls", c.name)
}

// auditOK audits the stream and fails the test on any problem.
func auditOK(t *testing.T, rdb *redis.Client, s settings, written []event) *audit {
	t.Helper()
	a := auditStream(t, rdb, s, written)
	for _, p := range a.problems() {
		t.Error(p)
	}
	return a
}

// auditStream audits the stream.
func auditStream(t *testing.T, rdb *redis.Client, s settings, written []event) *audit {
	t.Helper()
	w, err := s.window(rdb)
	if err != nil {
		t.Fatal(err)
	}
	a, err := runAudit(t.Context(), rdb, s.keys(), w, written)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// flags are the command-line flags that give a process the settings s.
func (s settings) flags() []string {
	return []string{"-name", s.name, "-events-per-bucket", fmt.Sprint(s.eventsPerBucket),
		"-error-rate", fmt.Sprint(s.errorRate), "-bucket", s.bucket.String(), "-span", s.span.String(), "-ttl", s.ttl.String()}
}
