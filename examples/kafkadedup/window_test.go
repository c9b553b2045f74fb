package main

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/rbloom/rbloom"
)

// TestWindowMadeWhereTheStreamStarts: openWindow makes the window while
// the group has committed nothing, and never once it has: a window Redis
// lost then fails the consumers' calls with ErrNotFound, where one made
// again would count the events it held a second time.
func TestWindowMadeWhereTheStreamStarts(t *testing.T) {
	e := newEnv(t, 10)
	ctx := t.Context()
	if _, err := e.win.TestOrAddManyOnce(ctx, []string{"a", "b"}, "clicks/0/0-1"); err != nil {
		t.Fatalf("the window made for a new group: %v", err)
	}
	offsets := kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: e.cfg.input, Partition: 0, At: 2, LeaderEpoch: -1})
	if err := e.adm.CommitAllOffsets(ctx, e.cfg.group, offsets); err != nil {
		t.Fatal(err)
	}
	e.rdb.FlushAll(ctx)
	win, err := openWindow(ctx, e.rdb, e.adm, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if seen, err := win.TestOrAddManyOnce(ctx, []string{"a", "b"}, "clicks/0/0-1"); !errors.Is(err, rbloom.ErrNotFound) {
		t.Fatalf("the window lost after offsets were committed: %v, %v; want ErrNotFound", seen, err)
	}
}
