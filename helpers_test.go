package rbloom

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// realRedis starts a redis-server for the test (skipped, or failed under
// CI, when none is installed) and returns a client of it.
func realRedis(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// miniRedis returns a client of an in-memory miniredis that runs rbloom.
func miniRedis(t testing.TB) *redis.Client {
	t.Helper()
	m := rbloomtest.NewMiniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// onBoth runs fn as a subtest on miniredis and on a real Redis.
func onBoth(t *testing.T, fn func(t *testing.T, rdb *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, miniRedis(t)) })
	t.Run("redis", func(t *testing.T) { fn(t, realRedis(t)) })
}

// slotValues decodes every slot of the filter, partition after partition
// (slot s of partition p at index p*m+s): nil when no partition exists.
func slotValues(t interface{ Fatalf(string, ...any) }, rdb redis.UniversalClient, f *filter) []int {
	vals := make([]int, f.h.m*uint64(len(f.parts)))
	found := false
	for p, part := range f.parts {
		s, err := rdb.Get(context.Background(), part.key).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			t.Fatalf("GET %s: %v", part.key, err)
		}
		if int64(len(s)) != f.h.size() {
			t.Fatalf("len(%s) = %d, want %d", part.key, len(s), f.h.size())
		}
		found = true
		base := uint64(p) * f.h.m
		for i := range f.h.m {
			switch f.h.mode {
			case ModeCounting:
				b := s[headerSize+i/2]
				if i%2 == 0 {
					b >>= 4
				}
				vals[base+i] = int(b & 0x0f)
			case ModeClassic:
				vals[base+i] = int(s[headerSize+i/8]>>(7-i%8)) & 1
			}
		}
	}
	if !found {
		return nil
	}
	return vals
}

// globalSlots returns the slots of item as indices into slotValues.
func globalSlots(f *filter, item string) []uint64 {
	p, slots := f.locate(nil, item)
	for i := range slots {
		slots[i] += uint64(p) * f.h.m
	}
	return slots
}

// dump returns every key and string value in the database, to show that
// an operation changed nothing.
func dump(t testing.TB, rdb redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range rdb.Keys(ctx, "*").Val() {
		typ := rdb.Type(ctx, k).Val()
		if typ == "string" {
			out[k] = rdb.Get(ctx, k).Val()
		} else {
			out[k] = "<" + typ + ">"
		}
	}
	return out
}

// checkHeld compares the filter with the model of writers that each kept
// the multiset of items they added and did not remove: every counter must
// equal the sum of the multisets (which must stay below 15, where counters
// stop being exact), and no item held may test false. It returns the sum of
// the multisets and the largest counter.
func checkHeld(t *testing.T, rdb redis.UniversalClient, f *filter, multisets ...map[string]int) (map[string]int, int) {
	t.Helper()
	total := map[string]int{}
	want := make([]int, f.h.m*uint64(len(f.parts)))
	for _, held := range multisets {
		for item, n := range held {
			total[item] += n
			for _, s := range globalSlots(f, item) {
				want[s] += n
			}
		}
	}
	if largest := slices.Max(want); largest >= 15 {
		t.Fatalf("the workload saturated a counter (%d): the exact check needs fewer items", largest)
	}
	if got := slotValues(t, rdb, f); !slices.Equal(got, want) {
		diff := 0
		for i := range got {
			if got[i] != want[i] {
				if diff < 10 {
					t.Errorf("counter %d = %d, want %d", i, got[i], want[i])
				}
				diff++
			}
		}
		t.Fatalf("%d counters differ from the model", diff)
	}
	var items []string
	for item, n := range total {
		if n == 0 {
			delete(total, item)
			continue
		}
		items = append(items, item)
	}
	tested, err := (&Counting{base{f}}).TestMany(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range tested {
		if !ok {
			t.Errorf("false negative: %q is held %d times but tests false", items[i], total[items[i]])
		}
	}
	return total, slices.Max(want)
}

func newCounting(t *testing.T, rdb redis.UniversalClient, name string, o Options) *Counting {
	t.Helper()
	c, err := NewCounting(rdb, name, o)
	if err != nil {
		t.Fatalf("NewCounting(%q, %+v): %v", name, o, err)
	}
	return c
}

// must holds a call's result until on says which test its error fails:
// must(c.Add(ctx, "a")).on(t) is the value, or t.Fatal with the error.
// Only from the test's own goroutine, as t.Fatal.
func must[T any](v T, err error) result[T] { return result[T]{v, err} }

type result[T any] struct {
	v   T
	err error
}

// on returns the value, or fails t with the error.
func (r result[T]) on(t interface {
	Helper()
	Fatal(...any)
}) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

func newClassicT(t *testing.T, rdb redis.UniversalClient, name string, o Options) *Classic {
	t.Helper()
	c, err := NewClassic(rdb, name, o)
	if err != nil {
		t.Fatalf("NewClassic(%q, %+v): %v", name, o, err)
	}
	return c
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// serverStat returns a field of INFO section, as an integer.
func serverStat(t testing.TB, rdb *redis.Client, section, field string) int64 {
	t.Helper()
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %s = %q", section, field, v)
			}
			return n
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// sortedKeys returns the keys of m in order, for deterministic output.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// deletable is a Counting or a Cuckoo, whose removes the tests run on
// both, with its core.
type deletable interface {
	Filter
	core() *filter
}

func (b *base) core() *filter { return b.f }

var (
	_ deletable = (*Counting)(nil)
	_ deletable = (*Cuckoo)(nil)
)

// deletableModes are the modes of filter that support Remove, each with
// its constructor: the matrices run on each.
var deletableModes = []struct {
	name string
	make func(rdb Client, name string, o Options) (deletable, error)
}{
	{"counting", func(rdb Client, name string, o Options) (deletable, error) { return NewCounting(rdb, name, o) }},
	{"cuckoo", func(rdb Client, name string, o Options) (deletable, error) { return NewCuckoo(rdb, name, o) }},
}

// heldItems adds n items to c and returns them.
func heldItems(t *testing.T, c deletable, n int) []string {
	t.Helper()
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprint("held-", i)
	}
	if _, err := c.AddMany(ctx, items); err != nil {
		t.Fatal(err)
	}
	return items
}

// inPartition returns the items that live in partition p.
func inPartition(c deletable, items []string, p int) []string {
	var in []string
	for _, item := range items {
		if q, _ := c.core().locate(nil, item); q == p {
			in = append(in, item)
		}
	}
	return in
}

// startReplicated starts a master and its replica on loopback and returns
// them and a client of each, once the master lists its replica online (as
// WAIT counts replicas: the replica says its link is up before that).
func startReplicated(t *testing.T) (master, replica *rbloomtest.Server, rdb, rep *redis.Client) {
	t.Helper()
	master = rbloomtest.StartServer(t, "--repl-diskless-sync-delay", "0")
	replica = rbloomtest.StartServer(t, "--replicaof", "127.0.0.1", strings.Split(master.Addr(), ":")[1])
	rdb = redis.NewClient(&redis.Options{Addr: master.Addr()})
	rep = redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { rdb.Close(); rep.Close() })
	waitFor(t, "the replica to sync with its master", func() bool {
		return strings.Contains(rdb.Info(ctx, "replication").Val(), "state=online")
	})
	return master, replica, rdb, rep
}

// forgedField is a record field of the right length (RECORD_FIELD) for
// calls made to the scripts directly.
const forgedField = "forged-field"

// forgedKeys are the keys of a direct call of add.lua to the partition at
// key: it, its copy, and one hash for the call's record.
func forgedKeys(key string) []string {
	return []string{key, copyKey(key), key + ":r:forged"}
}

// forgedRemoveKeys are forgedKeys for remove.lua, which has no copy.
func forgedRemoveKeys(key string) []string {
	return []string{key, key + ":r:forged"}
}

// redisCPU is the server's CPU time so far, user and system, in seconds
// (INFO cpu).
func redisCPU(t testing.TB, rdb *redis.Client) float64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for line := range strings.SplitSeq(info, "\r\n") {
		for _, field := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, field); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("INFO cpu: %q", line)
				}
				total += f
			}
		}
	}
	return total
}

// created makes c's filter on purpose, empty, as a user does before the
// first write (a filter exists only once Create or Rebuild made it), and
// returns c.
func created[F interface {
	Create(context.Context) error
}](t interface {
	Helper()
	Fatalf(string, ...any)
}, c F) F {
	t.Helper()
	if err := c.Create(context.Background()); err != nil {
		t.Fatalf("Create: %v", err)
	}
	return c
}
