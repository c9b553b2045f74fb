package rbloom

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestWaitReplicas runs a master and a replica on loopback. With
// WaitReplicas 1, a write returns only once the replica has it; with the
// replica down, writes fail with ErrNotReplicated (they were applied on the
// master, which the error says).
func TestWaitReplicas(t *testing.T) {
	master := rbloomtest.StartServer(t, "--repl-diskless-sync-delay", "0")
	replica := rbloomtest.StartServer(t, "--replicaof", "127.0.0.1", strings.Split(master.Addr(), ":")[1])
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	defer rdb.Close()
	rep := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rep.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// The replica says its link is up before the master counts it:
		// WAIT counts the replicas the master lists as online.
		if strings.Contains(rdb.Info(ctx, "replication").Val(), "state=online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not sync with its master in 10 s")
		}
	}
	c := must(NewCounting(rdb, "replicated", Options{Capacity: 1000, WaitReplicas: 1, WaitTimeout: 2 * time.Second})).on(t)
	start := time.Now()
	if _, err := c.AddMany(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	t.Logf("AddMany waited %v for the replica", time.Since(start))
	// The replica has the write as soon as AddMany returned.
	onReplica := must(NewCounting(rep, "replicated", Options{Capacity: 1000})).on(t)
	for _, item := range []string{"a", "b"} {
		if !must(onReplica.Test(ctx, item)).on(t) {
			t.Errorf("the replica does not have %q after a write that waited for it", item)
		}
	}
	replica.Stop()
	c = must(NewCounting(rdb, "replicated", Options{Capacity: 1000, WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})).on(t)
	start = time.Now()
	if _, err := c.Add(ctx, "c"); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("Add with the replica down: %v, want ErrNotReplicated", err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("Add returned after %v, before WaitTimeout", waited)
	}
	if !must(c.Test(ctx, "c")).on(t) {
		t.Error("the write was not applied on the master")
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{master.Addr()}})
	defer cluster.Close()
	if _, err := NewCounting(cluster, "x", Options{Capacity: 10, WaitReplicas: 1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("WaitReplicas with a cluster client: %v, want ErrInvalidOptions", err)
	}
}
