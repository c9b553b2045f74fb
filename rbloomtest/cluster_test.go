package rbloomtest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// newClusterClient connects to c and closes the client when the test ends.
func newClusterClient(t testing.TB, c *rbloomtest.Cluster) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestStartCluster(t *testing.T) {
	t.Parallel() // each cluster spends ~2 s waiting for CLUSTER_WRITABLE_DELAY
	ctx := context.Background()
	var addrs []string
	var pids []int
	t.Run("start", func(t *testing.T) {
		start := time.Now()
		c := rbloomtest.StartCluster(t, 3)
		t.Logf("3 masters up and ok in %v", time.Since(start).Round(time.Millisecond))
		addrs = c.Addrs()
		if len(addrs) != 3 {
			t.Fatalf("Addrs() = %v, want 3 addresses", addrs)
		}
		for _, addr := range addrs {
			host, port, _ := net.SplitHostPort(addr)
			if p, _ := strconv.Atoi(port); host != "127.0.0.1" || p >= 55536 {
				t.Errorf("master at %s, want 127.0.0.1 and a port below 55536", addr)
			}
		}
		info, err := c.DoAll(ctx, "INFO", "server")
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range info {
			pids = append(pids, processID(t, cmd.String()))
		}

		rdb := newClusterClient(t, c)
		const n = 300
		for i := range n {
			if err := rdb.Set(ctx, fmt.Sprint("key", i), i, 0).Err(); err != nil {
				t.Fatalf("SET key%d through the cluster client: %v", i, err)
			}
		}
		for i := range n {
			if got, err := rdb.Get(ctx, fmt.Sprint("key", i)).Int(); got != i || err != nil {
				t.Fatalf("GET key%d = %d, %v; want %d", i, got, err, i)
			}
		}
		sizes, err := c.DoAll(ctx, "DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		total := int64(0)
		for i, cmd := range sizes {
			size, _ := cmd.Int64()
			total += size
			if size == 0 {
				t.Errorf("master %s holds no key: the keys did not spread over all masters", addrs[i])
			}
		}
		if total != n {
			t.Errorf("DBSIZE summed over the masters = %d, want %d", total, n)
		}
		t.Logf("keys per master: %v", sizes)
	})
	t.Run("stopped after the test", func(t *testing.T) {
		if len(pids) == 0 {
			t.Skip("no cluster was started")
		}
		for _, pid := range pids {
			// Signal 0 checks existence. The harness waited for each
			// process, so it is reaped: no zombie answers.
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("redis-server pid %d after its test ended: kill -0 = %v, want ESRCH", pid, err)
			}
		}
		for _, addr := range addrs {
			if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				conn.Close()
				t.Errorf("%s still accepts connections after its test ended", addr)
			}
		}
	})
}

// processID reads process_id from an INFO server reply.
func processID(t *testing.T, info string) int {
	t.Helper()
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("process_id %q: %v", v, err)
			}
			return pid
		}
	}
	t.Fatalf("no process_id in INFO server:\n%s", info)
	return 0
}

// TestClusterMoveSlot moves a slot holding keys while a cluster client
// keeps incrementing and reading keys of that slot: no call may fail, no
// increment may be lost or doubled, and the keys end on the new owner.
func TestClusterMoveSlot(t *testing.T) {
	t.Parallel() // each cluster spends ~2 s waiting for CLUSTER_WRITABLE_DELAY
	ctx := context.Background()
	c := rbloomtest.StartCluster(t, 3)
	rdb := newClusterClient(t, c)

	// Enough keys for several MIGRATE batches, all in one slot.
	const n = 1000
	key := func(i int) string { return fmt.Sprintf("{move}%d", i) }
	for i := range n {
		if err := rdb.Set(ctx, key(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot64, err := rdb.ClusterKeySlot(ctx, "{move}").Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := int(slot64)
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	to := c.Addrs()[0]
	if to == from {
		to = c.Addrs()[1]
	}

	// The client: INCR a counter and GET a key of the slot, in a loop.
	var incrs, calls atomic.Int64
	var callErrs []error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			err := rdb.Incr(ctx, "{move}counter").Err()
			if err == nil {
				incrs.Add(1)
				err = rdb.Get(ctx, key(i%n)).Err()
			}
			calls.Add(1)
			if err != nil && len(callErrs) < 5 {
				callErrs = append(callErrs, err)
			}
		}
	})
	time.Sleep(50 * time.Millisecond)
	before, moveStart := calls.Load(), time.Now()
	err = c.MoveSlot(ctx, slot, to)
	during, moveTime := calls.Load()-before, time.Since(moveStart)
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	stats, err := c.DoAll(ctx, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	var asking int64 // ASK redirections the client followed
	for _, cmd := range stats {
		asking += commandCalls(t, cmd.String(), "asking")
	}
	// The move is quick: whether calls land inside it, and so follow ASK
	// redirections, depends on timing; not asserted.
	t.Logf("moved slot %d (%d keys) from %s to %s in %v; the client made %d calls meanwhile (%d ASKING), %d in all",
		slot, n+1, from, to, moveTime.Round(time.Millisecond), during, asking, calls.Load())

	if len(callErrs) > 0 {
		t.Errorf("calls failed during the move: %v", callErrs)
	}
	if got, err := c.SlotOwner(ctx, slot); got != to || err != nil {
		t.Errorf("SlotOwner(%d) after the move = %s, %v; want %s", slot, got, err, to)
	}
	if got, err := rdb.Get(ctx, "{move}counter").Int64(); got != incrs.Load() || err != nil {
		t.Errorf("counter after the move = %d, %v; want %d, one per INCR that succeeded", got, err, incrs.Load())
	}
	for i := range n {
		if got, err := rdb.Get(ctx, key(i)).Int(); got != i || err != nil {
			t.Fatalf("GET %s after the move = %d, %v; want %d", key(i), got, err, i)
		}
	}
	counts, err := c.DoAll(ctx, "CLUSTER", "COUNTKEYSINSLOT", slot)
	if err != nil {
		t.Fatal(err)
	}
	for i, cmd := range counts {
		want := int64(0)
		if c.Addrs()[i] == to {
			want = n + 1
		}
		if got, _ := cmd.Int64(); got != want {
			t.Errorf("CLUSTER COUNTKEYSINSLOT %d on %s = %d, want %d", slot, c.Addrs()[i], got, want)
		}
	}
	// Every master agrees (SETSLOT NODE reached them all).
	for i, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		shards, err := node.ClusterShards(ctx).Result()
		node.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := slotAddr(shards, slot); got != to {
			t.Errorf("master %d (%s) says slot %d is at %s, want %s", i, addr, slot, got, to)
		}
	}

	t.Run("errors", func(t *testing.T) {
		if err := c.MoveSlot(ctx, slot, to); err != nil {
			t.Errorf("MoveSlot to the owner = %v, want nil", err)
		}
		if err := c.MoveSlot(ctx, slot, "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "not a master") {
			t.Errorf("MoveSlot to a stranger = %v, want a 'not a master' error", err)
		}
		if err := c.MoveSlot(ctx, 16384, to); err == nil {
			t.Error("MoveSlot(16384) = nil, want an error")
		}
	})
}

// slotAddr returns the address of the master of slot in a CLUSTER SHARDS
// reply.
func slotAddr(shards []redis.ClusterShard, slot int) string {
	for _, s := range shards {
		for _, r := range s.Slots {
			if int(r.Start) <= slot && slot <= int(r.End) {
				for _, n := range s.Nodes {
					if n.Role == "master" {
						return net.JoinHostPort(n.IP, strconv.Itoa(int(n.Port)))
					}
				}
			}
		}
	}
	return ""
}

func TestClusterDoAll(t *testing.T) {
	t.Parallel() // each cluster spends ~2 s waiting for CLUSTER_WRITABLE_DELAY
	ctx := context.Background()
	c := rbloomtest.StartCluster(t, 2)
	rdb := newClusterClient(t, c)
	// ClusterClient.ScriptLoad loads on every master.
	sha, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DoAll(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	exists, err := c.DoAll(ctx, "SCRIPT", "EXISTS", sha)
	if err != nil {
		t.Fatal(err)
	}
	for i, cmd := range exists {
		if got, err := cmd.Int64Slice(); err != nil || len(got) != 1 || got[0] != 0 {
			t.Errorf("SCRIPT EXISTS on %s after DoAll SCRIPT FLUSH = %v, %v; want [0]", c.Addrs()[i], got, err)
		}
	}
	_, err = c.DoAll(ctx, "NO-SUCH-COMMAND")
	if err == nil || strings.Count(err.Error(), "unknown command") != 2 {
		t.Errorf("DoAll of an unknown command: %v; want one error per master", err)
	}
}

func TestStartClusterNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rbloomtest.StartCluster(r, 3)
	}()
	<-done
	if !strings.Contains(r.skip, "redis-server not found on PATH") || r.fatal != "" {
		t.Errorf("StartCluster without redis-server: skip %q, fatal %q; want a skip", r.skip, r.fatal)
	}
}
