package rbloomtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/internal/redisserver"
)

// clusterTimeout bounds how long StartCluster waits for every node to
// report cluster_state:ok. It takes about 2 s: a master waits 2 s after
// it starts before it first calls itself ok (CLUSTER_WRITABLE_DELAY).
const clusterTimeout = 15 * time.Second

// numSlots is the number of hash slots of every Redis Cluster.
const numSlots = 16384

// Cluster is a Redis Cluster of masters only (no replicas), started on
// 127.0.0.1 by StartCluster for one test. Its methods talk to each master
// directly, not through a cluster client, so they work whatever a client
// under test believes. They are safe for concurrent use, except that two
// moves of the same slot must not overlap.
type Cluster struct {
	addrs []string        // "127.0.0.1:port" of each master, in start order
	ids   []string        // their node IDs, same order
	nodes []*redis.Client // a plain client per master, same order
}

// StartCluster starts a Redis Cluster of masters masters and no replicas
// for this test, and returns once every node reports cluster_state:ok (about
// 2 s). Each node is a redis-server with --cluster-enabled yes, its own
// nodes.conf in t.TempDir(), no persistence, bound to 127.0.0.1 on a port
// below 55536 whose cluster bus port (port+10000) was free too; args are
// passed to every node after those options. The 16384 slots are split
// evenly, in order, so the first master owns slot 0. Every node is killed
// when the test ends.
//
// Args must not make the nodes require a password: the harness talks to
// them without one.
//
// Without redis-server on $PATH the test is skipped, or fails when the
// environment variable CI is set, as with StartRedis. redis-cli is not
// needed: the nodes are joined with CLUSTER MEET.
func StartCluster(t testing.TB, masters int, args ...string) *Cluster {
	t.Helper()
	if masters < 1 || masters > numSlots {
		t.Fatalf("rbloomtest: StartCluster: masters = %d, want 1 to %d", masters, numSlots)
	}
	bin := lookRedisServer(t)
	dir := t.TempDir()
	start := time.Now()
	// Ports are free when chosen but another process may bind them before
	// redis-server does: then try again with new ones.
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		c, err := startCluster(t, bin, dir, masters, attempt, args)
		if err == nil {
			t.Logf("rbloomtest: cluster of %d masters ok after %v: %s", masters, time.Since(start).Round(time.Millisecond), strings.Join(c.addrs, " "))
			return c
		}
		lastErr = err
		if !errors.Is(err, redisserver.ErrPortTaken) {
			break
		}
	}
	t.Fatalf("rbloomtest: StartCluster: %v", lastErr)
	return nil
}

// startCluster makes one attempt. On success it has registered the cleanup
// that kills the nodes; on failure they are already gone.
func startCluster(t testing.TB, bin, dir string, masters, attempt int, extra []string) (c *Cluster, err error) {
	ports, err := clusterPorts(masters)
	if err != nil {
		return nil, err
	}
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	c = &Cluster{}
	cl := c // c is nil after a failed return
	defer func() {
		if err != nil {
			cl.close()
			stopAll()
		}
	}()
	for i, port := range ports {
		name := fmt.Sprintf("%d-%d", attempt, i)
		args := append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+name+".conf"),
			// Without it a lone master never learns its own IP (it comes
			// with the first MEET) and CLUSTER SLOTS shows "".
			"--cluster-announce-ip", "127.0.0.1",
		}, extra...)
		srv, err := redisserver.Start(context.Background(), redisserver.Options{
			Bin: bin, Dir: dir, Port: port, Log: filepath.Join(dir, "node-"+name+".log"), Args: args,
		})
		if err != nil {
			return nil, err
		}
		stops = append(stops, srv.Stop)
		c.addrs = append(c.addrs, srv.Addr())
		c.nodes = append(c.nodes, redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.join(ctx); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		c.close()
		stopAll()
	})
	return c, nil
}

// clusterPorts returns n distinct ports p below 55536 with p and p+10000
// both free. Every port it looked at stays bound until it returns, so that
// the kernel cannot hand out the same port twice, or one node's bus port as
// another's port.
func clusterPorts(n int) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("found %d of %d ports p < 55536 with p+10000 free", len(ports), n)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if p+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		if err != nil {
			continue
		}
		held = append(held, bus)
		ports = append(ports, p)
	}
	return ports, nil
}

// join assigns the slots, meets the nodes and waits until every node
// reports cluster_state:ok and knows all the others.
func (c *Cluster) join(ctx context.Context) error {
	n := len(c.nodes)
	for i, rdb := range c.nodes {
		lo, hi := i*numSlots/n, (i+1)*numSlots/n-1
		if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", c.addrs[i], lo, hi, err)
		}
		// Distinct epochs from the start, as redis-cli does: otherwise the
		// nodes first have to resolve the collision among themselves.
		if err := rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", c.addrs[i], err)
		}
		id, err := rdb.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", c.addrs[i], err)
		}
		c.ids = append(c.ids, id)
	}
	// Every node meets every other. Meeting only the first node leaves the
	// others to find each other by gossip, and a node learns who owns which
	// slots only from the owner itself: that took 2 to 12 s here, against
	// 2.0 s every time this way (redis-cli --cluster create: 2 to 6 s).
	for i, rdb := range c.nodes {
		for j, addr := range c.addrs {
			if i == j {
				continue
			}
			host, port, _ := net.SplitHostPort(addr)
			if err := rdb.ClusterMeet(ctx, host, port).Err(); err != nil {
				return fmt.Errorf("%s: CLUSTER MEET %s: %w", c.addrs[i], addr, err)
			}
		}
	}
	// The first node can say ok while the others still say fail.
	want := "cluster_known_nodes:" + strconv.Itoa(n)
	for {
		var notReady string
		for i, rdb := range c.nodes {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("%s: CLUSTER INFO: %w", c.addrs[i], err)
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				notReady = c.addrs[i] + " says:\n" + info
				break
			}
		}
		if notReady == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not ok after %v: %s", clusterTimeout, notReady)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Cluster) close() {
	for _, rdb := range c.nodes {
		rdb.Close()
	}
}

// AddReplicas starts one replica for each master, joins it to the cluster
// as that master's replica, and returns the replicas' addresses, in Addrs
// order, once every master lists its replica online (as WAIT counts
// them). The replicas are killed when the test ends.
func (c *Cluster) AddReplicas(t testing.TB) []string {
	t.Helper()
	bin := lookRedisServer(t)
	dir := t.TempDir()
	ports, err := clusterPorts(len(c.nodes))
	if err != nil {
		t.Fatalf("rbloomtest: AddReplicas: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	var addrs []string
	for i, port := range ports {
		srv, err := redisserver.Start(ctx, redisserver.Options{
			Bin: bin, Dir: dir, Port: port, Log: filepath.Join(dir, fmt.Sprintf("replica-%d.log", i)),
			Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, fmt.Sprintf("replica-%d.conf", i)),
				"--cluster-announce-ip", "127.0.0.1"},
		})
		if err != nil {
			t.Fatalf("rbloomtest: AddReplicas: %v", err)
		}
		t.Cleanup(srv.Stop)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		// By default a master waits 5 s before a diskless sync.
		if err := c.nodes[i].ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
			t.Fatalf("rbloomtest: AddReplicas: %s: %v", c.addrs[i], err)
		}
		for _, addr := range c.addrs {
			host, p, _ := net.SplitHostPort(addr)
			if err := rdb.ClusterMeet(ctx, host, p).Err(); err != nil {
				t.Fatalf("rbloomtest: AddReplicas: %s: CLUSTER MEET %s: %v", srv.Addr(), addr, err)
			}
		}
		// The replica must know its master before it can follow it.
		for {
			err := rdb.Do(ctx, "CLUSTER", "REPLICATE", c.ids[i]).Err()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("rbloomtest: AddReplicas: %s: CLUSTER REPLICATE %s: %v", srv.Addr(), c.ids[i], err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		addrs = append(addrs, srv.Addr())
	}
	for i, master := range c.nodes {
		for !strings.Contains(master.Info(ctx, "replication").Val(), "state=online") {
			select {
			case <-ctx.Done():
				t.Fatalf("rbloomtest: AddReplicas: the replica of %s did not come online", c.addrs[i])
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return addrs
}

// Addrs returns the address ("127.0.0.1:port") of every master, in start
// order: the first owns the lowest slots. Pass it to
// redis.ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	return append([]string(nil), c.addrs...)
}

// DoAll runs one command on every master, directly, and returns the
// commands in Addrs order, for example DoAll(ctx, "SCRIPT", "FLUSH") or
// DoAll(ctx, "INFO", "commandstats") followed by cmds[i].Text(). The error
// joins those of the commands that failed, each with its address.
func (c *Cluster) DoAll(ctx context.Context, args ...any) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(c.nodes))
	var errs []error
	for i, rdb := range c.nodes {
		cmds[i] = rdb.Do(ctx, args...)
		if err := cmds[i].Err(); err != nil && !errors.Is(err, redis.Nil) {
			errs = append(errs, fmt.Errorf("%s: %w", c.addrs[i], err))
		}
	}
	if len(errs) > 0 {
		return cmds, fmt.Errorf("rbloomtest: %v: %w", args, errors.Join(errs...))
	}
	return cmds, nil
}

// SlotOwner returns the address of the master that owns slot, as that
// master itself says (CLUSTER NODES marks its own slots).
func (c *Cluster) SlotOwner(ctx context.Context, slot int) (string, error) {
	i, err := c.owner(ctx, slot)
	if err != nil {
		return "", err
	}
	return c.addrs[i], nil
}

// owner returns the index of the master that claims slot for itself.
func (c *Cluster) owner(ctx context.Context, slot int) (int, error) {
	if slot < 0 || slot >= numSlots {
		return 0, fmt.Errorf("rbloomtest: slot %d not in [0, %d)", slot, numSlots)
	}
	for i, rdb := range c.nodes {
		// CLUSTER COUNTKEYSINSLOT answers for any slot, so ask for the
		// node's own view of its slots instead.
		nodes, err := rdb.ClusterNodes(ctx).Result()
		if err != nil {
			return 0, fmt.Errorf("rbloomtest: %s: CLUSTER NODES: %w", c.addrs[i], err)
		}
		if ownsSlot(nodes, slot) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("rbloomtest: no master owns slot %d", slot)
}

// ownsSlot reports whether the "myself" line of a CLUSTER NODES reply lists
// slot among its ranges ("0-5460", "42"; "[...]" entries are migrations in
// progress, not ownership).
func ownsSlot(clusterNodes string, slot int) bool {
	for _, line := range strings.Split(clusterNodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && l <= slot && slot <= h {
				return true
			}
		}
	}
	return false
}

// migrateBatch is how many keys MoveSlot moves per MIGRATE.
const migrateBatch = 100

// MoveSlot moves slot, with its keys, to the master at address to, the way
// redis-cli reshards, so that cluster clients keep working throughout
// (following ASK, then MOVED, redirections):
//
//  1. the destination is set IMPORTING from the source, before
//  2. the source is set MIGRATING to the destination, so that the
//     destination is ready for the ASK redirections the source then sends
//     for keys it no longer has;
//  3. keys are moved with CLUSTER GETKEYSINSLOT and MIGRATE until the
//     source has none left (new keys are created on the destination);
//  4. CLUSTER SETSLOT NODE goes to the destination first, then the source,
//     then the other masters: told first, the source could leave the slot
//     with no owner were the destination to fail in between.
//
// Moving a slot to its owner does nothing. On error the slot may be left
// MIGRATING/IMPORTING; the test should fail.
func (c *Cluster) MoveSlot(ctx context.Context, slot int, to string) error {
	dst := -1
	for i, a := range c.addrs {
		if a == to {
			dst = i
		}
	}
	if dst < 0 {
		return fmt.Errorf("rbloomtest: MoveSlot: %s is not a master of this cluster (%s)", to, strings.Join(c.addrs, " "))
	}
	src, err := c.owner(ctx, slot)
	if err != nil {
		return err
	}
	if src == dst {
		return nil
	}
	from, into := c.nodes[src], c.nodes[dst]
	fail := func(node int, what string, err error) error {
		return fmt.Errorf("rbloomtest: MoveSlot %d from %s to %s: %s: %s: %w", slot, c.addrs[src], to, c.addrs[node], what, err)
	}

	if err := into.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[src]).Err(); err != nil {
		return fail(dst, "SETSLOT IMPORTING", err)
	}
	if err := from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ids[dst]).Err(); err != nil {
		return fail(src, "SETSLOT MIGRATING", err)
	}
	host, port, _ := net.SplitHostPort(to)
	for {
		keys, err := from.ClusterGetKeysInSlot(ctx, slot, migrateBatch).Result()
		if err != nil {
			return fail(src, "CLUSTER GETKEYSINSLOT", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		// NOKEY (a key expired or was deleted meanwhile) is a reply, not
		// an error.
		if err := from.Do(ctx, args...).Err(); err != nil {
			return fail(src, "MIGRATE", err)
		}
	}
	for _, i := range c.setSlotOrder(src, dst) {
		if err := c.nodes[i].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", c.ids[dst]).Err(); err != nil {
			return fail(i, "SETSLOT NODE", err)
		}
	}
	return nil
}

// setSlotOrder lists the masters in the order SETSLOT NODE must reach
// them: destination, source, then the others.
func (c *Cluster) setSlotOrder(src, dst int) []int {
	order := []int{dst, src}
	for i := range c.nodes {
		if i != src && i != dst {
			order = append(order, i)
		}
	}
	return order
}
