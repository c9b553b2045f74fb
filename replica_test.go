package rbloom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbloom/rbloom/rbloomtest"
	"github.com/redis/go-redis/v9"
)

// TestWaitReplicas runs a master and a replica on loopback. With
// WaitReplicas 1, a write returns only once the replica has it; with the
// replica down, writes fail with ErrNotReplicated (they were applied on the
// master, which the error says).
func TestWaitReplicas(t *testing.T) {
	_, replica, rdb, rep := startReplicated(t)
	c := created(t, must(NewCounting(rdb, "replicated", Options{Capacity: 1000, WaitReplicas: 1, WaitTimeout: 2 * time.Second})).on(t))
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
	c := created(t, must(NewCounting(rdb, "replicated", Options{Capacity: 6000, Partitions: 6, WaitReplicas: 1, WaitTimeout: 2 * time.Second})).on(t))
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

// TestFailoverWaitReplicas: a master of a 3-master cluster fails over to
// its replica (CLUSTER FAILOVER) while a Rebuild with WaitReplicas fills
// the filter and writers add. The writes made right after the failover
// follow the MOVED to the new master and succeed (before the fix they
// failed with "WAIT cannot be used with replica instances", the WAIT's
// error being looked at before the MOVED, until go-redis reloaded its slot
// map); the rebuild switches, and no item tests absent.
func TestFailoverWaitReplicas(t *testing.T) {
	cl, _ := clusterClient(t)
	rdb := longReads(t, cl)
	replicas := cl.AddReplicas(t)
	masters := cl.Addrs()
	o := Options{Capacity: 6000, Partitions: 3, WaitReplicas: 1, WaitTimeout: 5 * time.Second}
	c := created(t, must(NewCounting(rdb, "failover", o)).on(t))
	items := make([]string, 600)
	for i := range items {
		items[i] = fmt.Sprint("item-", i)
	}
	must(c.AddMany(ctx, items)).on(t)
	owner := must(cl.SlotOwner(ctx, int(keySlot(c.f.parts[0].key[len("rbloom:{"):len(c.f.parts[0].key)-1])))).on(t)
	promoted := replicas[slices.Index(masters, owner)]
	late := []string{"late-1", "late-2", "late-3", "late-4", "late-5", "late-6"}
	err := c.Rebuild(ctx, func(add func([]string) error) error {
		if err := add(items[:300]); err != nil {
			return err
		}
		rep := redis.NewClient(&redis.Options{Addr: promoted})
		defer rep.Close()
		rep.ConfigSet(ctx, "repl-diskless-sync-delay", "0")
		if err := rep.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
			return fmt.Errorf("CLUSTER FAILOVER: %w", err)
		}
		var info string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			info = rep.Info(ctx, "replication").Val()
			if strings.Contains(info, "role:master") && strings.Contains(info, "state=online") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s did not become a master with a replica online: %s", promoted, info)
			}
		}
		if _, err := c.AddMany(ctx, late); err != nil {
			return fmt.Errorf("AddMany right after the failover: %w", err)
		}
		return add(items[300:])
	})
	if err != nil {
		t.Fatalf("Rebuild across a failover: %v", err)
	}
	all := append(slices.Clone(items), late...)
	for i, ok := range must(c.TestMany(ctx, all)).on(t) {
		if !ok {
			t.Errorf("%q tests absent after the failover and the rebuild", all[i])
		}
	}
	for _, p := range c.f.parts {
		if n := rdb.Exists(ctx, copyKey(p.key), leaseKey(p.key)).Val(); n != 0 {
			t.Errorf("%s: its copy or lease is left after the rebuild", p.key)
		}
	}
}

// TestClusterMasterLostReloads: after a master dies and its replica takes
// over, a handle whose client sends nothing again (MaxRedirects -1) gets
// an error for the calls that met the dead master, and the calls after
// them find the new one: the lost connection made the client read the
// cluster's state again. Before, its calls kept failing with "connection
// refused" until go-redis read the state on its own, 10 s after it last
// did (an outside review saw 95 such failures in a row).
func TestClusterMasterLostReloads(t *testing.T) {
	cl, _ := clusterClient(t)
	replicas := cl.AddReplicas(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRedirects: -1})
	defer rdb.Close()
	c := created(t, must(NewCounting(rdb, "master-lost", Options{Capacity: 6000, Partitions: 3})).on(t))
	items := make([]string, 300)
	for i := range items {
		items[i] = fmt.Sprint("item-", i)
	}
	must(c.AddMany(ctx, items)).on(t)
	owner := must(cl.SlotOwner(ctx, int(keySlot(c.f.parts[0].key[len("rbloom:{"):len(c.f.parts[0].key)-1])))).on(t)
	promoted := replicas[slices.Index(cl.Addrs(), owner)]
	dead := redis.NewClient(&redis.Options{Addr: owner})
	_ = dead.Do(ctx, "SHUTDOWN", "NOSAVE").Err() // the connection closes: no reply
	dead.Close()
	rep := redis.NewClient(&redis.Options{Addr: promoted})
	defer rep.Close()
	if err := rep.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatalf("CLUSTER FAILOVER TAKEOVER: %v", err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(rep.Info(ctx, "replication").Val(), "role:master"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become a master", promoted)
		}
	}
	// go-redis reads the state on its own once it is 10 s old; the first
	// failed call's reload takes milliseconds, and a call that fails
	// takes up to a second dialing the dead master.
	start := time.Now()
	for failed := 0; ; failed++ {
		_, err := c.AddMany(ctx, items)
		if err == nil {
			t.Logf("%d calls failed after the takeover, for %v", failed, time.Since(start))
			break
		}
		if time.Since(start) > 6*time.Second {
			t.Fatalf("calls still fail %v after the takeover (%d failed): %v", time.Since(start), failed, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, ok := range must(c.TestMany(ctx, items)).on(t) {
		if !ok {
			t.Fatalf("%s tests absent after the takeover", items[i])
		}
	}
}

// TestClusterWindowFailover: the master of a window's root partition
// fails over to its replica (CLUSTER FAILOVER TAKEOVER) while writers send
// TestOrAddManyOnce with WaitReplicas. Every event a call answered for is
// seen afterwards, every batch sent again under its id gets its first
// answers, and the window keeps working: the root's keys, settings first,
// were on the replica before any call returned.
func TestClusterWindowFailover(t *testing.T) {
	cl, _ := clusterClient(t)
	rdb := longReads(t, cl)
	replicas := cl.AddReplicas(t)
	o := WindowOptions{EventsPerBucket: 10_000, Bucket: time.Hour, Span: 24 * time.Hour, Partitions: 6,
		WaitReplicas: 1, WaitTimeout: 5 * time.Second}
	w := created(t, must(NewWindow(rdb, "window-failover", o)).on(t))
	type sent struct {
		id     string
		events []string
		seen   []bool
	}
	var done []sent
	batch := 0
	write := func() error {
		ev := events(fmt.Sprint("b", batch, "-"), 100)
		if batch > 0 {
			copy(ev[:10], done[len(done)-1].events[:10]) // repeats
		}
		id := fmt.Sprint("id-", batch)
		seen, err := w.TestOrAddManyOnce(ctx, ev, id)
		if err == nil {
			done = append(done, sent{id, ev, seen})
			batch++
		}
		return err
	}
	for range 10 {
		must(0, write()).on(t)
	}
	owner := must(cl.SlotOwner(ctx, int(keySlot(w.f.parts[w.root].key[len("rbloom:{"):len(w.f.parts[w.root].key)-1])))).on(t)
	promoted := replicas[slices.Index(cl.Addrs(), owner)]
	rep := redis.NewClient(&redis.Options{Addr: promoted})
	defer rep.Close()
	rep.ConfigSet(ctx, "repl-diskless-sync-delay", "0")
	must(0, rep.Do(ctx, "CLUSTER", "FAILOVER", "TAKEOVER").Err()).on(t)
	failed := 0
	// The demoted master syncs from the new one before it acknowledges:
	// on a loaded machine that takes a while, and each failed write
	// waits WaitTimeout.
	for deadline := time.Now().Add(60 * time.Second); batch < 30; {
		if err := write(); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("writes still fail after the failover (%d failed): %v", failed, err)
			}
			failed++
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("%d calls failed around the failover", failed)
	if !strings.Contains(rep.Info(ctx, "replication").Val(), "role:master") {
		t.Fatalf("%s is not a master after the failover", promoted)
	}
	for _, s := range done {
		for i, ok := range must(w.TestMany(ctx, s.events)).on(t) {
			if !ok {
				t.Fatalf("%s's event %q not seen after the failover", s.id, s.events[i])
			}
		}
		if again := must(w.TestOrAddManyOnce(ctx, s.events, s.id)).on(t); !slices.Equal(again, s.seen) {
			t.Fatalf("%s sent again after the failover: %v, first %v", s.id, again, s.seen)
		}
	}
}

// longReads is a client of cl whose ReadTimeout (10 s) takes a WaitTimeout
// of 5 s (checkWaitTimeout), for the replicas of a master that just failed
// over.
func longReads(t *testing.T, cl *rbloomtest.Cluster) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
