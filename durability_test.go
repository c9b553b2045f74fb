package rbloom

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestRestartKeepsAcknowledgedWrites kills redis-server (SIGKILL) in the
// middle of writes, with appendonly yes and appendfsync always: every add
// that was acknowledged survives, and after the restart the scripts, lost
// with the server's script cache, are loaded again without an error
// reaching the caller.
func TestRestartKeepsAcknowledgedWrites(t *testing.T) {
	srv := rbloomtest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	c := created(t, must(NewCounting(rdb, "durable", Options{Capacity: 50_000, Partitions: 2})).on(t))

	var acked []string
	done := make(chan struct{})
	go func() { // writes that run into the restart: errors are allowed
		defer close(done)
		for i := range 3000 {
			item := fmt.Sprint("during-", i)
			if _, err := c.Add(ctx, item); err == nil {
				acked = append(acked, item)
			}
		}
	}()
	for round := range 3 {
		items := make([]string, 2000)
		for i := range items {
			items[i] = fmt.Sprintf("batch-%d-%d", round, i)
		}
		if _, err := c.AddMany(ctx, items); err != nil {
			t.Fatalf("round %d before the restart: %v", round, err)
		}
		srv.Restart()
		acked2 := append([]string(nil), items...)
		// After the restart the script cache is empty: these must work.
		if _, err := c.Add(ctx, fmt.Sprint("after-", round)); err != nil {
			t.Fatalf("Add right after restart %d: %v", round, err)
		}
		if _, err := c.AddMany(ctx, []string{fmt.Sprint("after-many-", round), "x"}); err != nil {
			t.Fatalf("AddMany right after restart %d: %v", round, err)
		}
		if _, err := c.Remove(ctx, "x"); err != nil {
			t.Fatalf("Remove right after restart %d: %v", round, err)
		}
		for i, ok := range must(c.TestMany(ctx, acked2)).on(t) {
			if !ok {
				t.Fatalf("restart %d lost the acknowledged add of %q", round, acked2[i])
			}
		}
	}
	<-done
	lost := 0
	for i, ok := range must(c.TestMany(ctx, acked)).on(t) {
		if !ok {
			lost++
			t.Errorf("acknowledged add of %q lost", acked[i])
		}
	}
	t.Logf("%d of 3000 concurrent adds were acknowledged across 3 restarts; %d lost", len(acked), lost)
	if in := must(c.Info(ctx)).on(t); in.Items < int64(len(acked)+6000) {
		t.Errorf("Info.Items = %d, want at least %d", in.Items, len(acked)+6000)
	}
}
