package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

// env is one test's Kafka (kfake, in process), Redis (a redis-server of
// its own) and topics, with a window sized so that a false positive is all
// but impossible: every distinct click must be counted.
type env struct {
	cluster *kfake.Cluster
	rdb     *redis.Client
	cfg     config
	win     *rbloom.Window
	adm     *kadm.Client
	st      *stats
}

func newEnv(t *testing.T, events int) *env {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cfg := newConfig(cluster.ListenAddrs(), strings.ToLower(t.Name()[4:]), events, 1e-9, 40)
	cfg.heartbeat = 100 * time.Millisecond
	if err := createTopics(t.Context(), cfg, 4); err != nil {
		t.Fatal(err)
	}
	adm, closeAdm, err := newAdmin(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAdm)
	win, err := openWindow(t.Context(), rdb, adm, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{cluster: cluster, rdb: rdb, cfg: cfg, win: win, adm: adm, st: &stats{}}
}

// group returns a group of consumers that log to the test, stopped when
// the test ends.
func (e *env) group(t *testing.T, mode dedupMode) *group {
	g := newGroup(e.cfg, e.rdb, e.win, e.st, log.New(t.Output(), "", log.Lmicroseconds))
	g.dedup = mode
	t.Cleanup(g.stop)
	return g
}

// produce writes clicks, failing the test on an error.
func (e *env) produce(t *testing.T, clicks []event) {
	t.Helper()
	if err := produce(t.Context(), e.cfg, clicks); err != nil {
		t.Fatal(err)
	}
}

// waitMembers waits, at most 20 s, until the group is stable with n
// members, each assigned some partition.
func (e *env) waitMembers(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	last := ""
	for ctx.Err() == nil {
		ds, err := e.adm.DescribeGroups(ctx, e.cfg.group)
		if err == nil {
			d := ds[e.cfg.group]
			assigned := 0
			for _, m := range d.Members {
				if a, ok := m.Assigned.AsConsumer(); ok && len(a.Topics) > 0 {
					assigned++
				}
			}
			last = fmt.Sprintf("state %s, %d members, %d assigned", d.State, len(d.Members), assigned)
			if d.State == "Stable" && len(d.Members) == n && assigned == n {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the group did not become stable with %d members in 20 s (last seen: %s)", n, last)
}

// drain waits, at most 30 s, until the group committed every click, then
// stops the consumers and returns what the output topic holds.
func (e *env) drain(t *testing.T, g *group) *output {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := waitDrained(ctx, e.adm, e.cfg)
	g.stop()
	if gerr := g.err(); gerr != nil {
		t.Fatalf("a consumer failed: %v", gerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := readOutput(ctx, e.adm, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
