package main

import (
	"errors"
	"testing"
	"time"

	"github.com/rbloom/rbloom"
)

// TestWindowMadeWhereTheStreamStarts: a consumer makes the window while
// the group has delivered nothing, and never once it has: a window Redis
// lost then fails the consumers with ErrNotFound, where one made again
// would count the events it held a second time.
func TestWindowMadeWhereTheStreamStarts(t *testing.T) {
	rdb := newRedis(t)
	s := smallSettings("lost")
	writeStream(t, rdb, s, 100, 0, 1)
	c := newTestConsumer(t, rdb, s, "first", 50, time.Minute)
	if n, err := c.poll(t.Context()); err != nil || n == 0 {
		t.Fatalf("the first poll: %d entries, %v", n, err)
	}
	for _, key := range rdb.Keys(t.Context(), "rbloom:*").Val() {
		rdb.Del(t.Context(), key) // the window evicted; the stream lives
	}
	c = newTestConsumer(t, rdb, s, "second", 50, time.Minute)
	if _, err := c.poll(t.Context()); !errors.Is(err, rbloom.ErrNotFound) {
		t.Fatalf("a poll with the window lost: %v, want ErrNotFound", err)
	}
}

// TestDemoEmbedded runs the demo as README's first command does, on the
// embedded Redis, whose answers are miniredis's (a group's last delivered
// id "0", where Redis says "0-0").
func TestDemoEmbedded(t *testing.T) {
	if err := demoCommand(t.Context(), []string{"-events", "2000", "-crashes", "1", "-timeout", "20s"}); err != nil {
		t.Fatal(err)
	}
}
