package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// apply adds the events of b that the window answered new (seen[i] false)
// to the counts, once per batch, and reports whether this call did.
//
// Why a marker: a consumer can die after counting and before XACK, and
// the claimer replays the batch; the window gives it the same answers, so
// without the marker the same events would be counted again. The marker,
// the counts and the audit trail are written by one script: never one
// without the others.
func apply(ctx context.Context, rdb redis.Scripter, k keys, b batch, seen []bool, ttl time.Duration) (bool, error) {
	args := []any{ttl.Milliseconds(), len(event{}.dimensions())}
	for i, e := range b.events {
		if !seen[i] {
			args = append(args, e.ID)
			for _, d := range e.dimensions() {
				args = append(args, d)
			}
		}
	}
	n, err := applyScript.Run(ctx, rdb, []string{k.applied(b.id), k.counts(), k.counted()}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("count batch %s: %w", b.id, err)
	}
	return n == 1, nil
}
