package rbloom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestWaitReplicas runs a master and a replica on loopback. With
// WaitReplicas 1, a write returns only once the replica has it; with the
// replica down, writes fail with ErrNotReplicated (they were applied on the
// master, which the error says).
func TestWaitReplicas(t *testing.T) {
	_, replica, rdb, rep := startReplicated(t)
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
}

// TestWaitReplicasCluster runs a 3-master cluster whose masters each have a
// replica. With WaitReplicas 1, a batch spread over every master returns
// only once each master's replica has its partitions; with one replica
// down, a write to its master's partition fails with ErrNotReplicated and
// one to another master's does not.
func TestWaitReplicasCluster(t *testing.T) {
	cl, rdb := clusterClient(t)
	replicas := cl.AddReplicas(t)
	masters := cl.Addrs()
	c := must(NewCounting(rdb, "replicated", Options{Capacity: 6000, Partitions: 6, WaitReplicas: 1, WaitTimeout: 2 * time.Second})).on(t)
	items := make([]string, 600)
	for i := range items {
		items[i] = fmt.Sprint("item-", i)
	}
	must(c.AddMany(ctx, items)).on(t)
	must(c.AddOnce(ctx, "once", "op-1")).on(t)
	// ownerOf returns the index of the master that owns a partition.
	ownerOf := func(key string) int {
		owner := must(cl.SlotOwner(ctx, int(keySlot(key[len("rbloom:{"):len(key)-1])))).on(t)
		return slices.Index(masters, owner)
	}
	readonly := func(ctx context.Context, cn *redis.Conn) error { return cn.ReadOnly(ctx).Err() }
	for _, p := range c.f.parts {
		i := ownerOf(p.key)
		rep := redis.NewClient(&redis.Options{Addr: replicas[i], OnConnect: readonly})
		if got, want := rep.Get(ctx, p.key).Val(), rdb.Get(ctx, p.key).Val(); got != want {
			t.Errorf("the replica of %s does not hold %s as its master does, right after the write", masters[i], p.key)
		}
		rep.Close()
	}

	// A partition's slot moves to another master, behind the client's
	// back: its master answers MOVED, and the call goes again to the new one.
	moving := c.f.parts[1].key
	from := ownerOf(moving)
	to := masters[(from+1)%len(masters)]
	if err := cl.MoveSlot(ctx, int(keySlot(moving[len("rbloom:{"):len(moving)-1])), to); err != nil {
		t.Fatal(err)
	}
	var inMoved []string
	for _, item := range items {
		if p, _ := c.f.locate(nil, item+"-again"); p == 1 {
			inMoved = append(inMoved, item+"-again")
		}
	}
	if len(inMoved) == 0 {
		t.Fatal("no item in the moved partition")
	}
	if _, err := c.AddMany(ctx, inMoved); err != nil {
		t.Errorf("AddMany after the slot of %s moved to %s: %v", moving, to, err)
	}
	for i, ok := range must(c.TestMany(ctx, inMoved)).on(t) {
		if !ok {
			t.Errorf("%q tests absent after an AddMany that followed the move", inMoved[i])
		}
	}

	// The replica of the master of the first partition stops.
	down := ownerOf(c.f.parts[0].key)
	must(redis.NewClient(&redis.Options{Addr: replicas[down]}).Shutdown(ctx).Result())
	var onDown, onOther string
	for _, item := range items {
		p, _ := c.f.locate(nil, item)
		switch {
		case ownerOf(c.f.parts[p].key) == down && onDown == "":
			onDown = item
		case ownerOf(c.f.parts[p].key) != down && onOther == "":
			onOther = item
		}
	}
	c = must(NewCounting(rdb, "replicated", Options{Capacity: 6000, Partitions: 6, WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})).on(t)
	if _, err := c.Add(ctx, onDown); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("Add to %s, whose replica is down: %v, want ErrNotReplicated", masters[down], err)
	}
	if _, err := c.Add(ctx, onOther); err != nil {
		t.Errorf("Add to a master whose replica is up: %v", err)
	}
}
