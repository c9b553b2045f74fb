package rbloom

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/internal/redisserver"
)

// dumpFilters makes a small filter of each mode, of three partitions, on
// rdb, holds items in it (some twice) and returns them with the items.
func dumpFilters(t *testing.T, rdb redis.UniversalClient, prefix string) (map[string]Filter, []string) {
	t.Helper()
	o := Options{Capacity: 3000, ErrorRate: 0.01, Partitions: 3, KeyPrefix: prefix}
	c := must(NewCounting(rdb, "dc", o)).on(t)
	k := must(NewClassic(rdb, "db", o)).on(t)
	u := must(NewCuckoo(rdb, "dk", o)).on(t)
	filters := map[string]Filter{"counting": c, "classic": k, "cuckoo": u}
	var items []string
	for i := range 1000 {
		items = append(items, fmt.Sprintf("item-%d", i))
	}
	for _, f := range filters {
		created(t, f)
		must(f.AddMany(ctx, items)).on(t)
		must(f.AddMany(ctx, items[:100])).on(t) // counted twice
	}
	return filters, items
}

// restoredEqual checks that g holds what f does: every item present, the
// same counts, the same slots and item counts in every partition.
func restoredEqual(t *testing.T, f, g Filter, items []string) {
	t.Helper()
	got := must(g.TestMany(ctx, items)).on(t)
	for i, ok := range got {
		if !ok {
			t.Fatalf("restored %s: %q tests absent", g.Name(), items[i])
		}
	}
	if a, b := must(f.CountMany(ctx, items)).on(t), must(g.CountMany(ctx, items)).on(t); !slices.Equal(a, b) {
		t.Fatalf("restored %s: counts differ from the dumped filter's", g.Name())
	}
	fi, gi := must(f.Info(ctx)).on(t), must(g.Info(ctx)).on(t)
	if fi.Items != gi.Items || fi.NonZero != gi.NonZero || fi.Slots != gi.Slots || fi.Mode != gi.Mode || len(fi.Partitions) != len(gi.Partitions) {
		t.Fatalf("restored %s: Info %+v, want %+v", g.Name(), gi, fi)
	}
	for p := range fi.Partitions {
		if fi.Partitions[p].Items != gi.Partitions[p].Items {
			t.Fatalf("restored %s: partition %d holds %d items, want %d", g.Name(), p, gi.Partitions[p].Items, fi.Partitions[p].Items)
		}
	}
}

// slotBytes returns the slots of every partition of f (without headers).
func slotBytes(t *testing.T, f Filter) []string {
	t.Helper()
	c := f.(interface{ core() *filter }).core()
	var out []string
	for _, p := range c.parts {
		v, err := c.rdb.Pipeline().GetRange(ctx, p.key, headerSize, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func dumpOf(t *testing.T, f Filter) []byte {
	t.Helper()
	var buf bytes.Buffer
	n := must(f.Dump(ctx, &buf)).on(t)
	if n != int64(buf.Len()) {
		t.Fatalf("Dump = %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

func TestDumpRestore(t *testing.T) {
	rdb := realRedis(t)
	filters, items := dumpFilters(t, rdb, "")
	for mode, f := range filters {
		t.Run(mode, func(t *testing.T) {
			b := dumpOf(t, f)
			for _, prefix := range []string{"", "other:"} {
				g, err := Restore(ctx, rdb, f.Name()+"-copy", Options{KeyPrefix: prefix}, bytes.NewReader(b))
				if err != nil {
					t.Fatalf("Restore under %q: %v", prefix, err)
				}
				restoredEqual(t, f, g, items)
				if !slices.Equal(slotBytes(t, f), slotBytes(t, g)) {
					t.Fatalf("restored under %q: slots differ", prefix)
				}
				// A handle opened by name sees the same filter, and it
				// takes writes.
				h := must(Open(ctx, rdb, f.Name()+"-copy", Options{KeyPrefix: prefix})).on(t)
				must(h.Add(ctx, "after")).on(t)
				if !must(h.Test(ctx, "after")).on(t) {
					t.Fatal("an item added to the restored filter tests absent")
				}
				// Dumped again, it gives the same bytes.
				if b2 := dumpOf(t, g); len(b2) != len(b) {
					t.Fatalf("dump of the restored filter: %d bytes, want %d", len(b2), len(b))
				}
			}
		})
	}
}

// keysNow returns every key of rdb, sorted.
func keysNow(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	var keys []string
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			k, err := m.Keys(ctx, "*").Result()
			mu.Lock()
			keys = append(keys, k...)
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	} else {
		keys = rdb.Keys(ctx, "*").Val()
	}
	slices.Sort(keys)
	return keys
}

func TestRestoreRefusesBadDumps(t *testing.T) {
	rdb := realRedis(t)
	filters, _ := dumpFilters(t, rdb, "")
	b := dumpOf(t, filters["counting"])
	before := keysNow(t, rdb)
	section := dumpHeadSize
	slots := (len(b) - dumpHeadSize - trailerSize) / 3 // one section
	cases := map[string][]byte{}
	for name, at := range map[string]int{
		"magic": 0, "version": 9, "filter header": 20, "header crc": 77,
		"section magic": section, "section index": section + 5, "section items": section + 10, "section length": section + 20,
		"slots": section + sectionSize + 100, "slots crc": section + slots - 2,
		"last slots": len(b) - trailerSize - 10, "trailer": len(b) - 10, "trailer crc": len(b) - 1,
	} {
		c := bytes.Clone(b)
		c[at] ^= 0x20
		cases["flip "+name] = c
	}
	for _, cut := range []int{0, 10, dumpHeadSize, section + sectionSize + 5, len(b) / 2, len(b) - trailerSize, len(b) - 1} {
		cases[fmt.Sprintf("cut at %d of %d", cut, len(b))] = b[:cut]
	}
	cases["a byte more"] = append(bytes.Clone(b), 0)
	cases["two sections swapped"] = func() []byte {
		c := bytes.Clone(b)
		s1 := c[section : section+slots]
		s2 := bytes.Clone(c[section+slots : section+2*slots])
		copy(c[section+slots:], s1)
		copy(c[section:], s2)
		return c
	}()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Restore(ctx, rdb, "bad", Options{}, bytes.NewReader(c))
			if !errors.Is(err, ErrBadDump) {
				t.Fatalf("Restore = %v, want ErrBadDump", err)
			}
			if after := keysNow(t, rdb); !slices.Equal(after, before) {
				t.Fatalf("keys after a refused restore: %v, want %v", after, before)
			}
		})
	}
	t.Run("replace keeps the old filter", func(t *testing.T) {
		f := filters["classic"]
		old := slotBytes(t, f)
		_, err := RestoreReplace(ctx, rdb, f.Name(), Options{}, bytes.NewReader(b[:len(b)-1]))
		if !errors.Is(err, ErrBadDump) {
			t.Fatalf("RestoreReplace = %v, want ErrBadDump", err)
		}
		if !slices.Equal(slotBytes(t, f), old) {
			t.Fatal("a refused RestoreReplace changed the filter")
		}
	})
}

func TestRestoreExisting(t *testing.T) {
	rdb := realRedis(t)
	filters, items := dumpFilters(t, rdb, "")
	b := dumpOf(t, filters["counting"])
	// A classic filter of one partition named as the dump will be.
	other := created(t, newClassicT(t, rdb, "target", Options{Capacity: 100, Partitions: 1}))
	must(other.Add(ctx, "old")).on(t)
	before := dump(t, rdb)
	_, err := Restore(ctx, rdb, "target", Options{}, bytes.NewReader(b))
	if !errors.Is(err, ErrExists) {
		t.Fatalf("Restore over a filter = %v, want ErrExists", err)
	}
	if after := dump(t, rdb); !mapsEqual(after, before) {
		t.Fatal("a refused Restore changed Redis")
	}
	g, err := RestoreReplace(ctx, rdb, "target", Options{}, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	restoredEqual(t, filters["counting"], g, items)
	// Nothing of the classic filter of one partition is left.
	for _, k := range keysNow(t, rdb) {
		if strings.Contains(k, ":restore:") || strings.Contains(k, ":dump:") || strings.HasSuffix(k, ":rebuild") {
			t.Errorf("key %s left behind", k)
		}
	}
	if got := must(Open(ctx, rdb, "target", Options{})).on(t); got.(*Counting) == nil {
		t.Fatal("not a counting filter")
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestRestoreOptions(t *testing.T) {
	rdb := realRedis(t)
	filters, items := dumpFilters(t, rdb, "")
	b := dumpOf(t, filters["counting"])
	for _, o := range []Options{{Partitions: 2}, {Partitions: 4}, {Capacity: 10}, {Hashes: 3}, {IDLifetime: 7200e9}} {
		_, err := Restore(ctx, rdb, "opts", o, bytes.NewReader(b))
		if !errors.Is(err, ErrInvalidOptions) {
			t.Fatalf("Restore with %+v = %v, want ErrInvalidOptions", o, err)
		}
		if o.Partitions != 0 && !strings.Contains(err.Error(), "functions of P") {
			t.Errorf("Restore with Partitions %d: %v does not say why", o.Partitions, err)
		}
	}
	// The dump's own number is fine, and TTL is given to every key.
	g := must(Restore(ctx, rdb, "opts", Options{Partitions: 3, TTL: 3600e9}, bytes.NewReader(b))).on(t)
	restoredEqual(t, filters["counting"], g, items)
	for _, p := range g.(*Counting).f.parts {
		if ttl := rdb.PTTL(ctx, p.key).Val(); ttl <= 0 {
			t.Errorf("%s: TTL %v, want about an hour", p.key, ttl)
		}
	}
}

// TestRestoreNeverHalf shows what a reader sees at each stage: ErrNotFound
// while the dump is read, ErrLoading once the partitions are installed,
// the whole filter once they are open; a write made between the install
// and the open is kept.
func TestRestoreNeverHalf(t *testing.T) {
	rdb := realRedis(t)
	filters, items := dumpFilters(t, rdb, "")
	b := dumpOf(t, filters["counting"])
	reader := must(NewCounting(rdb, "half", Options{Capacity: 3000, ErrorRate: 0.01, Partitions: 3})).on(t)

	// Staging: the dump read up to its trailer.
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := Restore(ctx, rdb, "half", Options{}, r)
		done <- err
	}()
	must(w.Write(b[:len(b)-trailerSize])).on(t)
	waitFor(t, "the staging keys", func() bool {
		n := 0
		for _, k := range keysNow(t, rdb) {
			if strings.Contains(k, "{half") && strings.Contains(k, ":restore:") {
				n++
			}
		}
		return n == 3
	})
	if _, err := reader.TestMany(ctx, items); !errors.Is(err, ErrNotFound) {
		t.Fatalf("TestMany while staging = %v, want ErrNotFound", err)
	}
	must(w.Write(b[len(b)-trailerSize:])).on(t)
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	restoredEqual(t, filters["counting"], reader, items)

	// Installed, not yet open: the restore's steps one by one.
	h, err := (&dumpReader{r: bytes.NewReader(b), crc: crc32.New(castagnoli)}).header()
	if err != nil {
		t.Fatal(err)
	}
	f := must(Options{}.handle(rdb, "half2", h)).on(t)
	rs := &restorer{f: f, token: newToken(), inc: randomIncarnation()}
	d := &dumpReader{r: bytes.NewReader(b), crc: crc32.New(castagnoli)}
	must(d.header()).on(t)
	if err := rs.stage(ctx, d); err != nil {
		t.Fatal(err)
	}
	half := &Counting{base{f}}
	// Partition 0 installed, the others not yet: its items ErrLoading,
	// theirs "may be present" as in a lost partition; never absent.
	if err := rs.stepOn(ctx, "install", []int{0}); err != nil {
		t.Fatal(err)
	}
	if _, err := half.TestMany(ctx, inPartition(half, items, 0)); !errors.Is(err, ErrLoading) {
		t.Fatalf("TestMany of partition 0, installed = %v, want ErrLoading", err)
	}
	var absent []string // items never added, in partition 1
	for i := 0; len(absent) < 10; i++ {
		absent = append(absent, inPartition(half, []string{fmt.Sprint("never-added-", i)}, 1)...)
	}
	for _, ok := range must(half.TestMany(ctx, append(inPartition(half, items, 1), absent...))).on(t) {
		if !ok {
			t.Fatal("an item of a partition not yet installed tests absent")
		}
	}
	if _, err := half.AddMany(ctx, absent); !errors.Is(err, ErrDamaged) {
		t.Fatalf("AddMany to a partition not yet installed = %v, want ErrDamaged", err)
	}
	if err := rs.step(ctx, "install"); err != nil {
		t.Fatal(err)
	}
	if _, err := half.TestMany(ctx, items); !errors.Is(err, ErrLoading) {
		t.Fatalf("TestMany once installed = %v, want ErrLoading", err)
	}
	if in := must(half.Info(ctx)).on(t); !in.Loading {
		t.Fatal("Info.Loading is false once installed")
	}
	// A rebuild cannot start meanwhile.
	if err := half.Rebuild(ctx, func(func([]string) error) error { return nil }); !errors.Is(err, ErrRebuilding) {
		t.Fatalf("Rebuild once installed = %v, want ErrRebuilding", err)
	}
	must(half.AddMany(ctx, []string{"written-between"})).on(t)
	if err := rs.step(ctx, "open"); err != nil {
		t.Fatal(err)
	}
	if !must(half.Test(ctx, "written-between")).on(t) {
		t.Fatal("an add made between install and open is lost")
	}
	// Sent again (a lost reply), open answers ok.
	if err := rs.step(ctx, "open"); err != nil {
		t.Fatalf("open sent again: %v", err)
	}
	got := must(half.CountMany(ctx, items)).on(t)
	if want := must(filters["counting"].CountMany(ctx, items)).on(t); !slices.Equal(got, want) {
		t.Fatal("counts differ after a stepwise restore")
	}
}

// TestRestoreRaceLeavesNothing: a filter made while the restore stages
// (by CreateOnWrite, say) makes the install fail with ErrExists; the
// restore then leaves none of its keys, and the other filter as it is.
func TestRestoreRaceLeavesNothing(t *testing.T) {
	rdb := realRedis(t)
	filters, _ := dumpFilters(t, rdb, "")
	b := dumpOf(t, filters["counting"])
	r, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := Restore(ctx, rdb, "race", Options{}, r)
		done <- err
	}()
	must(w.Write(b[:len(b)-trailerSize])).on(t)
	// Partition 2 only: the install of the others succeeds first.
	racer := must(NewCounting(rdb, "race", Options{Capacity: 3000, ErrorRate: 0.01, Partitions: 3, CreateOnWrite: true})).on(t)
	var item string
	for i := 0; ; i++ {
		item = fmt.Sprint("r", i)
		if p, _ := racer.f.locate(nil, item); p == 2 {
			break
		}
	}
	must(racer.Add(ctx, item)).on(t)
	before := dump(t, rdb)
	must(w.Write(b[len(b)-trailerSize:])).on(t)
	w.Close()
	if err := <-done; !errors.Is(err, ErrExists) {
		t.Fatalf("Restore = %v, want ErrExists", err)
	}
	after := dump(t, rdb)
	for k := range after {
		if strings.Contains(k, ":restore:") {
			t.Errorf("staging key %s left", k)
		}
	}
	for k, v := range before {
		if strings.Contains(k, ":restore:") {
			continue
		}
		if after[k] != v {
			t.Errorf("%s changed by the failed restore", k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s made by the failed restore", k)
		}
	}
}

// TestDumpConsistentUnderWrites dumps a counting filter while writers add
// to it: in each partition of the restored filter the counters sum to k
// times the item count of its header, as in any state of a partition
// (no counter saturates here). A partition read in several GETRANGEs
// without a snapshot tears: its header's count and its slots are then
// read at different moments.
func TestDumpConsistentUnderWrites(t *testing.T) {
	rdb := realRedis(t)
	o := Options{Slots: 1 << 21, Hashes: 4, Capacity: 100000, Partitions: 2}
	c := created(t, newCounting(t, rdb, "busy", o))
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				batch := make([]string, 200)
				for j := range batch {
					batch[j] = fmt.Sprintf("w%d-%d-%d", w, i, j)
				}
				if _, err := c.AddMany(ctx, batch); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	waitFor(t, "some items", func() bool { return must(c.Info(ctx)).on(t).Items > 20000 })
	var dumps [][]byte
	for range 3 {
		dumps = append(dumps, dumpOf(t, c))
	}
	stop.Store(true)
	wg.Wait()
	for i, b := range dumps {
		g := must(Restore(ctx, rdb, fmt.Sprint("busy-copy-", i), Options{}, bytes.NewReader(b))).on(t).(*Counting)
		vals := slotValues(t, rdb, g.f)
		in := must(g.Info(ctx)).on(t)
		for p := range g.f.parts {
			sum := 0
			for _, v := range vals[uint64(p)*g.f.h.m : uint64(p+1)*g.f.h.m] {
				sum += v
			}
			if want := int(in.Partitions[p].Items) * g.f.h.k; sum != want {
				t.Errorf("dump %d, partition %d: counters sum to %d, its header says %d items (%d): torn", i, p, sum, in.Partitions[p].Items, want)
			}
		}
	}
}

// TestDumpRefusesLoading: a filter being loaded is not dumped; one being
// rebuilt is, as it was; a missing one is not found.
func TestDumpRefusesLoading(t *testing.T) {
	rdb := realRedis(t)
	c := newCounting(t, rdb, "loading", Options{Capacity: 1000})
	r := rebuilder{f: c.f, g: c.f, token: "t", inc: randomIncarnation(), ttl: "0"}
	if err := r.start(ctx); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := c.Dump(ctx, &buf); !errors.Is(err, ErrLoading) {
		t.Fatalf("Dump of a loading filter = %v, want ErrLoading", err)
	}
	if keys := keysNow(t, rdb); slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, ":dump:") }) {
		t.Fatalf("snapshot left: %v", keys)
	}
	// A partition held by a rebuild is dumped: its counters hold every item.
	held := created(t, newCounting(t, rdb, "held", Options{Capacity: 1000, Partitions: 2}))
	must(held.AddMany(ctx, []string{"x", "y"})).on(t)
	clean := dumpOf(t, held)
	r = rebuilder{f: held.f, g: held.f, token: "t", inc: randomIncarnation(), ttl: "0"}
	if err := r.start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := dumpOf(t, held); !bytes.Equal(got, clean) {
		t.Fatal("the dump of a filter held by a rebuild differs from the one before (its mark must be dumped as 0)")
	}
	missing := newCounting(t, rdb, "missing", Options{Capacity: 1000})
	if _, err := missing.Dump(ctx, &buf); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Dump of a missing filter = %v, want ErrNotFound", err)
	}
}

// otherServer starts the server of ../shared/servers/<dir>/bin, or skips
// the test when it is not there. Valkey's is valkey-server: its
// redis-server there may be a link that was copied as a text file.
func otherServer(t *testing.T, dir string) *redis.Client {
	t.Helper()
	var bin string
	for _, name := range []string{"valkey-server", "redis-server"} {
		path, err := filepath.Abs(filepath.Join("..", "shared", "servers", dir, "bin", name))
		if err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err == nil && st.Mode()&0o111 != 0 {
			bin = path
			break
		}
	}
	if bin == "" {
		t.Skipf("no server to run in ../shared/servers/%s/bin (see ../shared/servers/README.md)", dir)
	}
	srv, err := redisserver.Start(ctx, redisserver.Options{Bin: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestDumpAcrossServers dumps from each server and restores into each
// other: Redis 7.0 (PATH), Valkey 8.0.1 and Redis 8.0-m01, whose DUMP
// payloads do not load into each other.
func TestDumpAcrossServers(t *testing.T) {
	acrossServers(t, func(t *testing.T, src, dst *redis.Client) {
		filters, items := dumpFilters(t, src, "")
		for mode, f := range filters {
			g, err := Restore(ctx, dst, f.Name(), Options{KeyPrefix: "moved:"}, bytes.NewReader(dumpOf(t, f)))
			if err != nil {
				t.Fatalf("%s: %v", mode, err)
			}
			restoredEqual(t, f, g, items)
		}
	})
}

// acrossServers runs fn for each pair of servers, a subtest each: Redis
// 7.0 (PATH), Valkey 8.0.1 and Redis 8.0-m01 (skipped where missing).
func acrossServers(t *testing.T, fn func(t *testing.T, src, dst *redis.Client)) {
	servers := map[string]func(t *testing.T) *redis.Client{
		"redis-path":    func(t *testing.T) *redis.Client { return realRedis(t) },
		"valkey-8.0.1":  func(t *testing.T) *redis.Client { return otherServer(t, "valkey-8.0.1") },
		"redis-8.0-m01": func(t *testing.T) *redis.Client { return otherServer(t, "redis-8.0-m01") },
	}
	for from, startFrom := range servers {
		for to, startTo := range servers {
			if from != to {
				t.Run(from+"->"+to, func(t *testing.T) { fn(t, startFrom(t), startTo(t)) })
			}
		}
	}
}

// TestDumpCluster restores a dump of a single server into a cluster of
// three masters, and a dump of the cluster back into a single server.
func TestDumpCluster(t *testing.T) {
	_, cc := clusterClient(t)
	single := realRedis(t)
	filters, items := dumpFilters(t, single, "")
	for mode, f := range filters {
		g, err := Restore(ctx, cc, f.Name(), Options{}, bytes.NewReader(dumpOf(t, f)))
		if err != nil {
			t.Fatalf("%s into the cluster: %v", mode, err)
		}
		restoredEqual(t, f, g, items)
		back, err := Restore(ctx, single, f.Name()+"-back", Options{}, bytes.NewReader(dumpOf(t, g)))
		if err != nil {
			t.Fatalf("%s from the cluster: %v", mode, err)
		}
		restoredEqual(t, f, back, items)
	}
	for _, k := range keysNow(t, cc) {
		if strings.Contains(k, ":restore:") || strings.Contains(k, ":dump:") || strings.HasSuffix(k, ":rebuild") {
			t.Errorf("key %s left behind on the cluster", k)
		}
	}
}

// TestDumpACL: the least-privilege user of docs/operations.md restores a
// dump, and dumps given +copy, without which Dump fails and says why.
func TestDumpACL(t *testing.T) {
	admin := realRedis(t)
	filters, items := dumpFilters(t, admin, "")
	b := dumpOf(t, filters["counting"])
	app := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: aclUser, Password: aclPassword, MaxRetries: -1})
	defer app.Close()
	for _, cmd := range [][]any{aclSetUser(aclCommands), {"SCRIPT", "FLUSH"}} {
		if err := admin.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	g := must(Restore(ctx, app, "acl", Options{}, bytes.NewReader(b))).on(t)
	restoredEqual(t, filters["counting"], g, items)
	var buf bytes.Buffer
	if _, err := g.Dump(ctx, &buf); err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "'copy'") {
		t.Fatalf("Dump without +copy = %v, want an error naming COPY", err)
	} else {
		t.Log(err)
	}
	admin.Do(ctx, aclSetUser(append(slices.Clone(aclCommands), "+copy"))...)
	buf.Reset()
	must(g.Dump(ctx, &buf)).on(t)
	if !bytes.Equal(buf.Bytes(), b) {
		t.Fatal("the dump of the restored filter differs from the first")
	}
}

// TestRestoreRefusesEveryDamage flips each byte of a small dump in turn,
// and cuts it at each length: every one is refused with ErrBadDump, and
// leaves no key.
func TestRestoreRefusesEveryDamage(t *testing.T) {
	rdb := realRedis(t)
	f := created(t, newClassicT(t, rdb, "small", Options{Slots: 256, Hashes: 3, Partitions: 2}))
	must(f.AddMany(ctx, []string{"a", "b", "c"})).on(t)
	b := dumpOf(t, f)
	before := keysNow(t, rdb)
	try := func(what string, c []byte) {
		t.Helper()
		if _, err := Restore(ctx, rdb, "small-copy", Options{}, bytes.NewReader(c)); !errors.Is(err, ErrBadDump) {
			t.Fatalf("%s: Restore = %v, want ErrBadDump", what, err)
		}
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		try(fmt.Sprintf("bit 0 of byte %d of %d flipped", i, len(b)), c)
		c[i] ^= 0xff
		try(fmt.Sprintf("byte %d of %d inverted", i, len(b)), c)
		try(fmt.Sprintf("cut at %d of %d", i, len(b)), b[:i])
	}
	if after := keysNow(t, rdb); !slices.Equal(after, before) {
		t.Fatalf("keys after the refused restores: %v, want %v", after, before)
	}
	must(Restore(ctx, rdb, "small-copy", Options{}, bytes.NewReader(b))).on(t)
}

// TestRestoreFreshIncarnation: an operation id recorded by the filter a
// RestoreReplace replaces is not replayed on the restored one, which
// may lack its item: the id is applied again.
func TestRestoreFreshIncarnation(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "inc", Options{Capacity: 1000}))
	b := dumpOf(t, c)
	if existed := must(c.AddOnce(ctx, "x", "op-1")).on(t); existed {
		t.Fatal("x was there before its first add")
	}
	g := must(RestoreReplace(ctx, rdb, "inc", Options{}, bytes.NewReader(b))).on(t)
	if n := must(g.Count(ctx, "x")).on(t); n != 0 {
		t.Fatalf("Count(x) = %d in the restored filter, dumped before x was added", n)
	}
	if existed := must(g.AddOnce(ctx, "x", "op-1")).on(t); existed {
		t.Fatal("AddOnce(x, op-1) after the restore answered from the old filter's record")
	}
	if n := must(g.Count(ctx, "x")).on(t); n != 1 {
		t.Fatalf("Count(x) = %d after AddOnce on the restored filter, want 1: the id was replayed, not applied", n)
	}
}

// TestRestoreScriptForged calls restore.lua with forged arguments: each
// is refused, and nothing is written.
func TestRestoreScriptForged(t *testing.T) {
	rdb := realRedis(t)
	c := newCounting(t, rdb, "forged", Options{Capacity: 1000})
	key := c.f.parts[0].key
	staging := stagingKey(key, "tok")
	head := []byte(withIncarnation(c.f.parts[0].head, randomIncarnation()))
	head[markByte] = markLoad
	rdb.Set(ctx, staging, string(head), 0)
	rdb.SetRange(ctx, staging, c.f.h.size()-1, "\x00")
	unmarked := withIncarnation(c.f.parts[0].head, randomIncarnation())
	good := []any{string(head), "install", "tok", "30000", "0"}
	with := func(i int, v any) []any { a := slices.Clone(good); a[i] = v; return a }
	before := dump(t, rdb)
	for name, args := range map[string][]any{
		"no header":          with(0, "x"),
		"not marked":         with(0, unmarked),
		"unknown step":       with(1, "switch"),
		"token with colon":   with(2, "a:b"),
		"empty token":        with(2, ""),
		"token too long":     with(2, strings.Repeat("t", 41)),
		"lease of 0":         with(3, "0"),
		"lease not a number": with(3, "soon"),
		"negative ttl":       with(4, "-1"),
	} {
		err := restoreScript.Run(ctx, rdb, []string{key, staging, leaseKey(key)}, args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "RBLOOM_ARGS") {
			t.Errorf("%s: %v, want RBLOOM_ARGS", name, err)
		}
	}
	if after := dump(t, rdb); !mapsEqual(after, before) {
		t.Fatal("a refused call of restore.lua wrote")
	}
	// The same call with its arguments as restore.go makes them installs.
	if got := must(restoreScript.Run(ctx, rdb, []string{key, staging, leaseKey(key)}, good...).Text()).on(t); got != restoreOK {
		t.Fatalf("install = %q, want %q", got, restoreOK)
	}
}

// sourceDump makes a counting filter of p partitions called name, adds
// items and returns its dump.
func sourceDump(t *testing.T, rdb *redis.Client, name string, p int, items []string) []byte {
	t.Helper()
	f := must(NewCounting(rdb, name, Options{Capacity: 20_000, Partitions: p})).on(t)
	created(t, f)
	must(f.AddMany(ctx, items)).on(t)
	return dumpOf(t, f)
}

// partitionKeysLeft returns the keys of the partitions of the filter name,
// at any of the numbers of partitions ps, that exist.
func partitionKeysLeft(t *testing.T, rdb *redis.Client, name string, ps ...int) []string {
	t.Helper()
	seen := map[string]bool{}
	var left []string
	for _, p := range ps {
		for _, k := range partitionKeys(DefaultKeyPrefix, name, p) {
			for _, key := range []string{k, leaseKey(k)} {
				if !seen[key] && rdb.Exists(ctx, key).Val() == 1 {
					left = append(left, key)
				}
				seen[key] = true
			}
		}
	}
	slices.Sort(left)
	return left
}

// TestRestoreReplaceOtherP replaces a 5-partition filter that Open
// refuses (its root partition lost) with a 2-partition dump: none of the
// 5-partition filter's keys may stay.
func TestRestoreReplaceOtherP(t *testing.T) {
	rdb := realRedis(t)
	items := []string{"a", "b", "c", "d"}
	two := sourceDump(t, rdb, "two", 2, items)
	old := must(NewCounting(rdb, "rp", Options{Capacity: 20_000, Partitions: 5})).on(t)
	created(t, old)
	twoKeys := partitionKeys(DefaultKeyPrefix, "rp", 2)
	rdb.Del(ctx, keyOf(DefaultKeyPrefix, "rp")) // its root lost: Open refuses it (ErrDamaged)
	g := must(RestoreReplace(ctx, rdb, "rp", Options{}, bytes.NewReader(two))).on(t)
	if got, want := partitionKeysLeft(t, rdb, "rp", 2, 5), slices.Sorted(slices.Values(twoKeys)); !slices.Equal(got, want) {
		t.Fatalf("after RestoreReplace at P = 2 over P = 5: keys %v, want %v", got, want)
	}
	for i, ok := range must(g.TestMany(ctx, items)).on(t) {
		if !ok {
			t.Fatalf("restored: %q absent", items[i])
		}
	}
}

// TestRestoreReplaceRaceOtherP runs two RestoreReplace of one name at
// once, with dumps of 2 and 5 partitions: after both, the keys are those
// of one whole filter, the last one installed, and a call that returned
// nil has its filter there unless the other replaced it after.
func TestRestoreReplaceRaceOtherP(t *testing.T) {
	rdb := realRedis(t)
	ia, ib := []string{"a1", "a2", "a3"}, []string{"b1", "b2", "b3"}
	da, db := sourceDump(t, rdb, "srcA", 2, ia), sourceDump(t, rdb, "srcB", 5, ib)
	c1 := redis.NewClient(rdb.Options())
	c2 := redis.NewClient(rdb.Options())
	defer c1.Close()
	defer c2.Close()
	for round := range 40 {
		var e1, e2 error
		var wg sync.WaitGroup
		wg.Go(func() { _, e1 = RestoreReplace(ctx, c1, "rr", Options{}, bytes.NewReader(da)) })
		wg.Go(func() { _, e2 = RestoreReplace(ctx, c2, "rr", Options{}, bytes.NewReader(db)) })
		wg.Wait()
		for _, err := range []error{e1, e2} {
			if err != nil && strings.Contains(err.Error(), "stay loading") {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if e1 != nil && e2 != nil {
			t.Logf("round %d: both failed: %v; %v", round, e1, e2)
		}
		left := partitionKeysLeft(t, rdb, "rr", 2, 5)
		g, err := Open(ctx, rdb, "rr", Options{})
		if err != nil {
			if len(left) > 0 {
				t.Fatalf("round %d: e1 = %v, e2 = %v; Open = %v, keys %v left", round, e1, e2, err, left)
			}
			continue
		}
		info := must(g.Info(ctx)).on(t)
		want := slices.Sorted(slices.Values(partitionKeys(DefaultKeyPrefix, "rr", len(info.Partitions))))
		if !slices.Equal(left, want) {
			t.Fatalf("round %d: e1 = %v, e2 = %v; the filter of %d partitions has keys %v, want %v", round, e1, e2, len(info.Partitions), left, want)
		}
		items, won := ia, e1
		if len(info.Partitions) == 5 {
			items, won = ib, e2
		}
		if won != nil {
			t.Fatalf("round %d: the filter of %d partitions is there, its restore returned %v", round, len(info.Partitions), won)
		}
		for i, ok := range must(g.TestMany(ctx, items)).on(t) {
			if !ok {
				t.Fatalf("round %d: %q absent", round, items[i])
			}
		}
		must(0, g.Drop(ctx)).on(t)
	}
}

// stepHook is a go-redis hook that runs on, once, when a pipeline holds
// restore.lua's step; after it is sent, or instead of it when fail is set.
type stepHook struct {
	step string
	fail bool
	on   func()
	done atomic.Bool
}

func (h *stepHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *stepHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *stepHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		hit := false
		for _, c := range cmds {
			if args := c.Args(); len(args) > 5 && (args[0] == "evalsha" || args[0] == "eval") && slices.Contains(args, any(h.step)) {
				hit = true
			}
		}
		if !hit || h.done.Load() {
			return next(ctx, cmds)
		}
		h.done.Store(true)
		err := next(ctx, cmds)
		h.on()
		if h.fail {
			for _, c := range cmds {
				c.SetErr(errors.New("reply lost"))
			}
			return errors.New("reply lost")
		}
		return err
	}
}

// TestRestoreDeadlineAtInstall ends the caller's context as the install
// is sent, and loses the reply of the open: once installed, a restore is
// opened or undone, and its error says which.
func TestRestoreDeadlineAtInstall(t *testing.T) {
	rdb := realRedis(t)
	items := []string{"a", "b", "c"}
	d := sourceDump(t, rdb, "src", 3, items)
	for _, tc := range []struct {
		step string
		fail bool
	}{{"install", false}, {"open", true}} {
		c := redis.NewClient(rdb.Options())
		defer c.Close()
		cctx, cancel := context.WithCancel(ctx)
		c.AddHook(&stepHook{step: tc.step, fail: tc.fail, on: cancel})
		_, err := Restore(cctx, c, "dl", Options{}, bytes.NewReader(d))
		cancel()
		left := partitionKeysLeft(t, rdb, "dl", 3)
		g := must(NewCounting(rdb, "dl", Options{Capacity: 20_000, Partitions: 3})).on(t)
		if err != nil {
			if len(left) > 0 {
				t.Fatalf("%s: Restore = %v, and keys %v left", tc.step, err, left)
			}
			if !strings.Contains(err.Error(), "undone") {
				t.Fatalf("%s: Restore = %v: it does not say that the install was undone", tc.step, err)
			}
			continue
		}
		for i, ok := range must(g.TestMany(ctx, items)).on(t) {
			if !ok {
				t.Fatalf("%s: Restore returned nil, %q absent", tc.step, items[i])
			}
		}
		if tc.step == "install" {
			t.Logf("%s: the restore was completed", tc.step)
		}
		must(0, g.Drop(ctx)).on(t)
	}
}

// reforge rewrites the dump b with edit applied to its file header's
// filter header and to its partitions' item counts, every checksum made
// right again.
func reforge(b []byte, edit func(head []byte, items []int64)) []byte {
	crc := func(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
	head := append([]byte(nil), b[12:76]...)
	var items []int64
	var data [][]byte
	for off := dumpHeadSize; string(b[off:off+4]) == sectionMagic; {
		n := int(binary.BigEndian.Uint64(b[off+16:]))
		items = append(items, int64(binary.BigEndian.Uint64(b[off+8:])))
		data = append(data, b[off+sectionSize:off+sectionSize+n])
		off += sectionSize + n + 4
	}
	edit(head, items)
	out := append([]byte(nil), b[:12]...)
	out = append(out, head...)
	out = binary.BigEndian.AppendUint32(out, crc(out))
	for p, d := range data {
		sec := binary.BigEndian.AppendUint32([]byte(sectionMagic), uint32(p))
		sec = binary.BigEndian.AppendUint64(sec, uint64(items[p]))
		sec = binary.BigEndian.AppendUint64(sec, uint64(len(d)))
		sec = binary.BigEndian.AppendUint32(sec, crc(sec))
		out = append(append(out, sec...), d...)
		out = binary.BigEndian.AppendUint32(out, crc(d))
	}
	return withTrailer(out, len(data))
}

// withTrailer returns the dump out of p partitions with its trailer.
func withTrailer(out []byte, p int) []byte {
	end := len(out)
	out = binary.BigEndian.AppendUint32(append(out, trailerMagic...), uint32(p))
	out = binary.BigEndian.AppendUint64(out, uint64(end))
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// TestRestoreRefusesForgedFields restores dumps whose every checksum is
// right but a field is not what Dump writes: a partition's item count
// negative or so big that Info's sum overflows, a header field that
// format.md says is zero in a dump, or an error rate outside [0, 1). Each is ErrBadDump with no key left.
func TestRestoreRefusesForgedFields(t *testing.T) {
	rdb := realRedis(t)
	b := sourceDump(t, rdb, "src", 2, []string{"a", "b"})
	if !bytes.Equal(reforge(b, func([]byte, []int64) {}), b) {
		t.Fatal("reforge changes a dump it does not edit")
	}
	before := keysNow(t, rdb)
	for _, tc := range []struct {
		name string
		edit func(head []byte, items []int64)
	}{
		{"items negative", func(_ []byte, items []int64) { items[0] = -5 }},
		{"items MaxInt64", func(_ []byte, items []int64) { items[1] = math.MaxInt64 }},
		{"header items", func(head []byte, _ []int64) { head[itemsByte+7] = 9 }},
		{"header mark", func(head []byte, _ []int64) { head[markByte] = markRebuild }},
		{"header incarnation", func(head []byte, _ []int64) { head[incByte+3] = 7 }},
		{"header error rate NaN", func(head []byte, _ []int64) {
			binary.BigEndian.PutUint64(head[40:], math.Float64bits(math.NaN()))
		}},
		{"header error rate 2", func(head []byte, _ []int64) { binary.BigEndian.PutUint64(head[40:], math.Float64bits(2)) }},
	} {
		f, err := Restore(ctx, rdb, "forged", Options{}, bytes.NewReader(reforge(b, tc.edit)))
		if !errors.Is(err, ErrBadDump) {
			t.Errorf("%s: Restore = %v, want ErrBadDump", tc.name, err)
		}
		if err == nil {
			must(0, f.Drop(ctx)).on(t)
		}
		if after := keysNow(t, rdb); !slices.Equal(after, before) {
			t.Fatalf("%s: keys %v after, %v before", tc.name, after, before)
		}
	}
}

// TestRestoreShortDumpAllocatesLittle restores a 1 KiB forged dump whose
// header declares a partition of 64 MiB: the staging key grows only with
// the bytes read, so Redis's memory peak stays well below 64 MiB.
func TestRestoreShortDumpAllocatesLittle(t *testing.T) {
	rdb := realRedis(t)
	b := sourceDump(t, rdb, "src", 1, []string{"a"})
	const m = 128 << 20 // counters of 4 bits: 64 MiB
	head := append([]byte(nil), b[:dumpHeadSize]...)
	binary.BigEndian.PutUint32(head[12+12:], m)
	binary.BigEndian.PutUint32(head[76:], crc32.Checksum(head[:76], castagnoli))
	sec := binary.BigEndian.AppendUint32([]byte(sectionMagic), 0)
	sec = binary.BigEndian.AppendUint64(sec, 1)
	sec = binary.BigEndian.AppendUint64(sec, m/2)
	sec = binary.BigEndian.AppendUint32(sec, crc32.Checksum(sec, castagnoli))
	forged := append(append(head, sec...), make([]byte, 1024)...)
	peak := func() int64 {
		for l := range strings.SplitSeq(rdb.Info(ctx, "memory").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory_peak:"); ok {
				var n int64
				fmt.Sscan(v, &n)
				return n
			}
		}
		t.Fatal("no used_memory_peak in INFO memory")
		return 0
	}
	before := peak()
	if _, err := Restore(ctx, rdb, "short", Options{}, bytes.NewReader(forged)); !errors.Is(err, ErrBadDump) {
		t.Fatalf("Restore of a cut dump = %v, want ErrBadDump", err)
	}
	if grown := peak() - before; grown > 16<<20 {
		t.Fatalf("a %d-byte dump raised Redis's memory peak by %d MiB", len(forged), grown>>20)
	}
}

// TestDumpOtherDatabase: a dump through a client of another database than
// 0 reads its own database's keys, and leaves no snapshot in any.
func TestDumpOtherDatabase(t *testing.T) {
	base := realRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: base.Options().Addr, DB: 1})
	defer rdb.Close()
	filters, items := dumpFilters(t, rdb, "")
	w, evs := dumpWindow(t, rdb, "wdb", "")
	for mode, f := range filters {
		g := must(Restore(ctx, rdb, "copy-"+mode, Options{}, bytes.NewReader(dumpOf(t, f)))).on(t)
		restoredEqual(t, f, g, items)
	}
	allSeen(t, must(RestoreWindow(ctx, rdb, "wdb-copy", WindowOptions{}, bytes.NewReader(windowDumpOf(t, w)))).on(t), evs)
	if keys := base.Keys(ctx, "*").Val(); len(keys) > 0 {
		t.Errorf("database 0 holds %v", keys)
	}
	for _, k := range rdb.Keys(ctx, "*:dump:*").Val() {
		t.Errorf("snapshot %s left behind", k)
	}
}
