package rbloom

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestOnceRecordHorizon: an operation id's record is found for at least
// OnceWindow after its call, by a process whose clock is a bucket ahead or
// behind too, and is forgotten within OnceWindow plus two buckets. Reusing
// the id for another item shows whether the record was found: it is
// ErrOpIDReused when it is.
func TestOnceRecordHorizon(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		const keep = time.Minute
		span := keep / recordBucketsPerKeep
		c := newCounting(t, rdb, "horizon", Options{Capacity: 1000, OnceWindow: keep})
		clk := newClock(time.UnixMilli(1_700_000_000_000).Truncate(span).Add(span / 2))
		c.f.now = clk.now
		t0 := clk.now()
		must(c.AddOnce(ctx, "a", "id")).on(t)
		for _, d := range []time.Duration{-3 * span / 4, 0, span / 2, span, 2 * span, keep / 2, keep - time.Millisecond, keep + span/3} {
			clk.t = t0.Add(d)
			if _, err := c.AddOnce(ctx, "b", "id"); !errors.Is(err, ErrOpIDReused) {
				t.Errorf("%v after the call: reusing the id gave %v, want ErrOpIDReused", d, err)
			}
			if maybe := must(c.AddOnce(ctx, "a", "id")).on(t); maybe {
				t.Errorf("%v after the call: the replay answered %v, want the first answer (new)", d, maybe)
			}
		}
		clk.t = t0.Add(keep + 2*span)
		if _, err := c.AddOnce(ctx, "b", "id"); err != nil {
			t.Errorf("OnceWindow plus two buckets after the call, the id is still remembered: %v", err)
		}
		if items := must(c.Info(ctx)).on(t).Items; items != 2 {
			t.Errorf("Items = %d, want 2 (a once, b once)", items)
		}
	})
}

// TestRecordHashes: records are fields of small hashes, a handle's random
// records at most recordChunk to a hash, and every hash has a TTL from its
// first record, so none outlives its bucket.
func TestRecordHashes(t *testing.T) {
	onBoth(t, func(t *testing.T, rdb *redis.Client) {
		c := newCounting(t, rdb, "records", Options{Capacity: 10_000, OnceWindow: time.Hour})
		const calls = 300
		for i := range calls {
			must(c.Add(ctx, fmt.Sprint("plain-", i))).on(t)
			must(c.AddOnce(ctx, fmt.Sprint("once-", i), fmt.Sprint("id-", i))).on(t)
		}
		keys := rdb.Keys(ctx, "rbloom:{records}:r:*").Val()
		fields := int64(0)
		for _, k := range keys {
			n := rdb.HLen(ctx, k).Val()
			fields += n
			if !strings.Contains(k, ":once:") && n > recordChunk {
				t.Errorf("%s: %d records, want at most %d", k, n, recordChunk)
			}
			ttl := rdb.PTTL(ctx, k).Val()
			if ttl <= 0 || ttl > time.Hour+2*time.Hour/recordBucketsPerKeep {
				t.Errorf("%s: TTL %v", k, ttl)
			}
		}
		if fields != 2*calls {
			t.Errorf("%d records, want one per call (%d)", fields, 2*calls)
		}
	})
}

// TestRecordMemory measures the Redis memory a write's record takes, on
// a real server: a record key took 150 bytes (MEMORY USAGE, 195 with its
// expiry); a record must take at most a third of that.
func TestRecordMemory(t *testing.T) {
	rdb := realRedis(t)
	for _, once := range []bool{false, true} {
		name := fmt.Sprint("memory-", once)
		c := newCounting(t, rdb, name, Options{Capacity: 100_000})
		const calls = 20_000
		for i := range calls {
			if once {
				must(c.AddOnce(ctx, fmt.Sprint(i), fmt.Sprint("event-", i))).on(t)
			} else {
				must(c.Add(ctx, fmt.Sprint(i))).on(t)
			}
		}
		var bytes int64
		for _, k := range rdb.Keys(ctx, "rbloom:{"+name+"}:r:*").Val() {
			bytes += rdb.MemoryUsage(ctx, k, 0).Val()
		}
		per := float64(bytes) / calls
		t.Logf("once %v: %d calls, %.1f bytes of record hashes per call", once, calls, per)
		if per > 50 {
			t.Errorf("once %v: %.1f bytes per call, want at most 50 (a third of 150)", once, per)
		}
	}
}

// TestRetryKeep: a call's record outlives every re-send go-redis may make,
// as its options bound them, and the record hash gets that lifetime.
func TestRetryKeep(t *testing.T) {
	for _, tt := range []struct {
		name string
		rdb  Client
		want time.Duration
	}{
		{"defaults", redis.NewClient(&redis.Options{}), defaultRetryKeep},
		{"cluster defaults", redis.NewClusterClient(&redis.ClusterOptions{}), defaultRetryKeep},
		{"short timeouts", redis.NewClient(&redis.Options{DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond, MaxRetries: 1}), minRetryKeep},
		{"more retries", redis.NewClient(&redis.Options{MaxRetries: 9}), 10*(6*time.Second+5*5100*time.Millisecond+10*time.Second) + 9*time.Second},
		{"no read timeout", redis.NewClient(&redis.Options{ReadTimeout: -1}), maxRetryKeep},
	} {
		if got := retryKeep(tt.rdb); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if defaultRetryKeep != 169*time.Second {
		t.Errorf("defaultRetryKeep = %v, want 169s", defaultRetryKeep)
	}

	rdb := realRedis(t)
	c := newCounting(t, rdb, "retry-keep", Options{Capacity: 100})
	must(c.Add(ctx, "a")).on(t)
	keys := rdb.Keys(ctx, "rbloom:{retry-keep}:r:*").Val()
	if len(keys) != 1 {
		t.Fatalf("record hashes %v, want one", keys)
	}
	span := defaultRetryKeep / recordBucketsPerKeep
	if ttl := rdb.PTTL(ctx, keys[0]).Val(); ttl <= defaultRetryKeep || ttl > defaultRetryKeep+span {
		t.Errorf("record hash TTL %v, want above %v, at most %v", ttl, defaultRetryKeep, defaultRetryKeep+span)
	}
}
