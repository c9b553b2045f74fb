package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// produceChunk is how many entries the producer sends per round trip.
const produceChunk = 500

// produce writes events to the stream with XADD, in order, at about rate
// entries a second (0: as fast as it can). A retried click is simply in
// events twice: the producer knows nothing of duplicates.
func produce(ctx context.Context, rdb redis.Cmdable, k keys, events []event, rate int) error {
	start := time.Now()
	for lo := 0; lo < len(events); lo += produceChunk {
		if rate > 0 {
			due := start.Add(time.Duration(lo) * time.Second / time.Duration(rate))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Until(due)):
			}
		}
		pipe := rdb.Pipeline()
		for _, e := range events[lo:min(lo+produceChunk, len(events))] {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: k.stream(), Values: e.fields()})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	return nil
}

// drained reports whether the group has been given every entry of the
// stream and has acknowledged them all.
func drained(ctx context.Context, rdb redis.Cmdable, k keys) (bool, error) {
	s, err := rdb.XInfoStream(ctx, k.stream()).Result()
	if err != nil {
		return false, fmt.Errorf("drained: %w", err)
	}
	groups, err := rdb.XInfoGroups(ctx, k.stream()).Result()
	if err != nil {
		return false, fmt.Errorf("drained: %w", err)
	}
	for _, g := range groups {
		if g.Name == group {
			return g.Pending == 0 && g.LastDeliveredID == s.LastGeneratedID, nil
		}
	}
	return false, fmt.Errorf("drained: no consumer group %q on %s", group, k.stream())
}

// waitDrained polls drained until it is true, ctx is done or timeout
// passes.
func waitDrained(ctx context.Context, rdb redis.Cmdable, k keys, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := drained(ctx, rdb, k)
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream %s not drained after %v", k.stream(), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
