package rbloom

import (
	"bufio"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkDumpRestore measures Dump to a file and Restore from it, for a
// counting filter of 10^8 items at 1% (8 partitions, 457 MiB), against
// Redis's DUMP and RESTORE of the same keys (one key per call, the whole
// payload in the client). The slots are filled as a filter at capacity
// has them, each counter drawn from Poisson(ln 2) (half of them zero),
// written straight into the partitions: what the dump moves is the same
// as after 10^8 adds, which would take minutes. Redis needs about 1.5 GB.
//
//	RBLOOM_BENCH_DUMP=1 go test -run '^$' -bench DumpRestore -benchtime 3x -timeout 30m
func BenchmarkDumpRestore(b *testing.B) {
	if os.Getenv("RBLOOM_BENCH_DUMP") == "" {
		b.Skip("set RBLOOM_BENCH_DUMP=1 to run it: a 457 MiB filter, about 1.5 GB of Redis memory")
	}
	rdb := realRedis(b)
	c := must(NewCounting(rdb, "big", Options{Capacity: 100_000_000, ErrorRate: 0.01})).on(b)
	created(b, c)
	fillAtCapacity(b, rdb, c.f)
	size := float64(c.f.h.size()*int64(len(c.f.parts))) / (1 << 20)
	file := filepath.Join(b.TempDir(), "big.dump")
	var dumpT, restoreT, redisDumpT, redisRestoreT time.Duration
	var payload int
	rdb.ConfigResetStat(ctx)
	for b.Loop() {
		start := time.Now()
		fh := must(os.Create(file)).on(b)
		w := bufio.NewWriterSize(fh, 1<<20)
		must(c.Dump(ctx, w)).on(b)
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
		fh.Close()
		dumpT += time.Since(start)

		start = time.Now()
		fh = must(os.Open(file)).on(b)
		g := must(Restore(ctx, rdb, "big-copy", Options{}, bufio.NewReaderSize(fh, 1<<20))).on(b)
		fh.Close()
		restoreT += time.Since(start)
		if err := g.Drop(ctx); err != nil {
			b.Fatal(err)
		}

		payload = 0
		for _, p := range c.f.parts {
			start = time.Now()
			v := must(rdb.Dump(ctx, p.key).Result()).on(b)
			redisDumpT += time.Since(start)
			payload += len(v)
			start = time.Now()
			must(rdb.Restore(ctx, p.key+":restored", 0, v).Result()).on(b)
			redisRestoreT += time.Since(start)
			rdb.Del(ctx, p.key+":restored")
		}
	}
	n := float64(b.N)
	b.ReportMetric(size, "MiB")
	b.ReportMetric(size*n/dumpT.Seconds(), "Dump-MiB/s")
	b.ReportMetric(size*n/restoreT.Seconds(), "Restore-MiB/s")
	b.ReportMetric(size*n/redisDumpT.Seconds(), "DUMP-MiB/s")
	b.ReportMetric(size*n/redisRestoreT.Seconds(), "RESTORE-MiB/s")
	b.ReportMetric(float64(payload)/(1<<20), "DUMP-payload-MiB")
	b.ReportMetric(float64(must(os.Stat(file)).on(b).Size())/(1<<20), "file-MiB")
	// How long one command holds the server, on average: a DUMP or a
	// RESTORE a whole 64 MiB key, a COPY the same, the others 1 MiB.
	for _, cmd := range []string{"copy", "getrange", "setrange", "dump", "restore"} {
		b.ReportMetric(commandMS(b, rdb, cmd), cmd+"-ms/call")
	}
}

// commandMS returns the server time of one call of cmd in ms, from INFO
// commandstats.
func commandMS(b *testing.B, rdb *redis.Client, cmd string) float64 {
	b.Helper()
	info := must(rdb.Info(ctx, "commandstats").Result()).on(b)
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					us, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return us / 1000
				}
			}
		}
	}
	b.Fatalf("INFO commandstats has no %s", cmd)
	return 0
}

// fillAtCapacity writes into every partition of f counters drawn from
// Poisson(ln 2), as a counting filter holds at its capacity, and the
// partition's share of the items in its header.
func fillAtCapacity(b *testing.B, rdb *redis.Client, f *filter) {
	b.Helper()
	var cdf [16]float64 // P(counter <= v), 15 saturating
	const lambda = math.Ln2
	term, sum := math.Exp(-lambda), 0.0
	for v := range cdf {
		sum += term
		cdf[v] = sum
		term *= lambda / float64(v+1)
	}
	cdf[15] = 1
	// Bytes of two counters, drawn from a table of 64K draws.
	rng := rand.New(rand.NewPCG(1, 2))
	nibble := func() byte {
		u := rng.Float64()
		for v := range cdf {
			if u < cdf[v] {
				return byte(v)
			}
		}
		return 15
	}
	table := make([]byte, 1<<16)
	for i := range table {
		table[i] = nibble()<<4 | nibble()
	}
	n := f.h.size() - headerSize
	chunk := make([]byte, dumpChunk)
	items := make([]byte, 8)
	binary.BigEndian.PutUint64(items, f.h.capacity/uint64(len(f.parts)))
	for _, p := range f.parts {
		for off := int64(0); off < n; off += dumpChunk {
			c := chunk[:min(dumpChunk, n-off)]
			for i := range c {
				c[i] = table[rng.Uint32()&0xffff]
			}
			if err := rdb.Do(ctx, "SETRANGE", p.key, headerSize+off, c).Err(); err != nil {
				b.Fatal(err)
			}
		}
		if err := rdb.Do(ctx, "SETRANGE", p.key, itemsByte, items).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
