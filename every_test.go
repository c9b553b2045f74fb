package rbloom

import (
	"context"
	"testing"
	"time"
)

// TestEvery: every calls fn each period until fn says it is done, or
// until its context is done.
func TestEvery(t *testing.T) {
	calls := 0
	every(context.Background(), time.Millisecond, func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Errorf("fn called %d times, want 3: it stops when fn is done", calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	calls = 0
	every(ctx, time.Millisecond, func() bool { calls++; return false })
	if calls == 0 || ctx.Err() == nil {
		t.Errorf("fn called %d times before the context ended (%v), want some, then a return at its end", calls, ctx.Err())
	}
}
