package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/rbloom/rbloom"
)

// rbloom's own cuckoo filter (rbloom.Cuckoo), measured on every server:
//
//   - rows 17a-17c, taking turns with the other rows in every round:
//     Cuckoo.AddMany, TestMany and RemoveMany of a filter sized for N at
//     P, each compared with Counting.AddMany, TestMany and RemoveMany
//     (rows 8a-8c); SLOWLOG counts their script calls of 1 ms or more
//     (line 14);
//   - after the rows, line 17: a counting filter and cuckoo filters of
//     several fingerprint widths, each filled with N new items, their
//     MEMORY USAGE per item and false positives, as line 16 does for
//     Redis's own cuckoo filter; then churn at several loads, the planned
//     one included: a filter of capacity N/2 filled to the load, then
//     rounds that each remove the Batch oldest items and add Batch new
//     ones, N items in all, against a counting filter under the same
//     churn: µs per insert, and the server's time of the script calls
//     (p99.9 from INFO latencystats, and SLOWLOG's calls of 1 ms or more).

const (
	ckName     = "rbloom-bench-ck"     // rows 17a-17c
	ckMemName  = "rbloom-bench-ck-mem" // + fingerprint bits: line 17's filters
	ckChurnCk  = "rbloom-bench-ck-churn"
	ckChurnCnt = "rbloom-bench-ck-churn-counting"
)

// ckLoads are the loads held under churn; the last is the planned one.
var ckLoads = []float64{0.6, 0.7, rbloom.CuckooMaxLoad}

// ckRows returns rows 17a-17c.
func (b *bench) ckRows(addMany, testMany, removeMany *row) []*row {
	c := b.cfg
	items := b.source("ck", c.N)
	perCall := fmt.Sprintf("%s per call", count(c.Batch))
	return []*row{
		{id: "17a", name: "Cuckoo.AddMany, " + perCall, vs: addMany, lib: true, items: items,
			do: func(ctx context.Context, items []string) error {
				return chunks(items, c.Batch, func(part []string) error {
					_, err := b.ck.AddMany(ctx, part)
					return err
				})
			}},
		{id: "17b", name: "Cuckoo.TestMany, " + perCall, vs: testMany, lib: true, items: items,
			do: func(ctx context.Context, items []string) error {
				return chunks(items, c.Batch, func(part []string) error {
					return allTrue("Cuckoo.TestMany", part)(b.ck.TestMany(ctx, part))
				})
			}},
		{id: "17c", name: "Cuckoo.RemoveMany, " + perCall, vs: removeMany, lib: true, items: firstHalf(items),
			do: func(ctx context.Context, items []string) error {
				return chunks(items, c.Batch, func(part []string) error {
					return allTrue("Cuckoo.RemoveMany", part)(b.ck.RemoveMany(ctx, part))
				})
			}},
	}
}

// ckChurn is what line 17 says of one load held under churn.
type ckChurn struct {
	load                float64 // held, of the cuckoo filter's slots
	ckUS, countingUS    float64 // client µs per insert under churn
	calls, slow         int64   // the cuckoo filter's script calls, and those of 1 ms or more
	p999, maxUS         float64 // their server µs at p99.9, and the longest
	refused, falseNeg   int     // inserts refused (ErrFull), held items testing absent at the end
	inserted, capacityN int
}

// measureRcuckoo measures line 17.
func (b *bench) measureRcuckoo(ctx context.Context) ([]cfUse, []ckChurn, error) {
	c := b.cfg
	var filters []deletable
	counting, err := rbloom.NewCounting(b.rdb, ckMemName+"-counting", rbloom.Options{Capacity: uint64(c.N), ErrorRate: c.P})
	if err != nil {
		return nil, nil, err
	}
	if err := counting.Create(ctx); err != nil {
		return nil, nil, err
	}
	filters = append(filters, deletable{
		name: fmt.Sprintf("rbloom Counting, p = %g", c.P), key: "rbloom:{" + ckMemName + "-counting}",
		add: func(ctx context.Context, items []string) ([]bool, error) {
			return trueAll(counting.AddMany(ctx, items))
		},
		test: counting.TestMany, remove: counting.RemoveMany,
		info: func(context.Context) (string, error) { return "4-bit counters", nil },
	})
	fs, _ := rbloom.CuckooParams(1, c.P)
	for _, f := range []int{fs, 10, 12} {
		name := ckMemName + "-" + strconv.Itoa(f)
		ck, err := rbloom.NewCuckoo(b.rdb, name, rbloom.Options{Capacity: uint64(c.N), Hashes: f})
		if err != nil {
			return nil, nil, err
		}
		if err := ck.Create(ctx); err != nil {
			return nil, nil, err
		}
		label := fmt.Sprintf("rbloom Cuckoo, %d-bit fingerprints", f)
		if f == fs {
			label = fmt.Sprintf("rbloom Cuckoo, p = %g (%d-bit fingerprints)", c.P, f)
		}
		filters = append(filters, deletable{
			name: label, key: "rbloom:{" + name + "}",
			add:  func(ctx context.Context, items []string) ([]bool, error) { return trueAll(ck.AddMany(ctx, items)) },
			test: ck.TestMany, remove: ck.RemoveMany,
			info: func(ctx context.Context) (string, error) {
				in, err := ck.Info(ctx)
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("load %.3f, %s buckets", in.Load, count(int(in.Slots))), nil
			},
		})
		if f == fs && (fs == 10 || fs == 12) {
			break // the default is one of the others: measured once
		}
	}
	var uses []cfUse
	for _, f := range filters {
		b.progress("rbloom cuckoo: " + f.name + ": adding " + count(c.N) + " items, then false positives")
		u, err := b.measureDeletable(ctx, f)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f.name, err)
		}
		uses = append(uses, u)
		if err := b.deleteMatching(ctx, "*{"+strings.TrimSuffix(strings.TrimPrefix(f.key, "rbloom:{"), "}")+"}*"); err != nil {
			return nil, nil, err
		}
	}
	var churns []ckChurn
	for _, load := range ckLoads {
		b.progress(fmt.Sprintf("rbloom cuckoo: churn at load %.2f", load))
		ch, err := b.churn(ctx, load)
		if err != nil {
			return nil, nil, fmt.Errorf("churn at load %.2f: %w", load, err)
		}
		churns = append(churns, ch)
	}
	return uses, churns, nil
}

// trueAll answers true for every item of an add that succeeded: the add
// took every item (an add that cannot fails).
func trueAll(res []bool, err error) ([]bool, error) {
	for i := range res {
		res[i] = true
	}
	return res, err
}

// churn fills a cuckoo filter of capacity N/2 and a counting filter of
// the same capacity to load, then removes the oldest Batch items and adds
// Batch new ones until N have been added, timing the adds of each.
func (b *bench) churn(ctx context.Context, load float64) (ckChurn, error) {
	c := b.cfg
	capacity := max(c.N/2, 4*c.Batch)
	ck, err := rbloom.NewCuckoo(b.rdb, ckChurnCk, rbloom.Options{Capacity: uint64(capacity), ErrorRate: c.P})
	if err != nil {
		return ckChurn{}, err
	}
	counting, err := rbloom.NewCounting(b.rdb, ckChurnCnt, rbloom.Options{Capacity: uint64(capacity), ErrorRate: c.P})
	if err != nil {
		return ckChurn{}, err
	}
	defer func() {
		_ = ck.Drop(ctx)
		_ = counting.Drop(ctx)
	}()
	for _, f := range []rbloom.Filter{ck, counting} {
		if err := f.Create(ctx); err != nil {
			return ckChurn{}, err
		}
	}
	in, err := ck.Info(ctx)
	if err != nil {
		return ckChurn{}, err
	}
	held := int(load * float64(in.Slots) * 4)
	ch := ckChurn{load: load, capacityN: capacity}
	item := func(i int) string { return "churn:" + strconv.Itoa(i) }
	batch := func(lo, hi int) []string {
		out := make([]string, 0, hi-lo)
		for i := lo; i < hi; i++ {
			out = append(out, item(i))
		}
		return out
	}
	for lo := 0; lo < held; lo += c.Batch {
		part := batch(lo, min(lo+c.Batch, held))
		if _, err := ck.AddMany(ctx, part); err != nil {
			return ch, err
		}
		if _, err := counting.AddMany(ctx, part); err != nil {
			return ch, err
		}
	}
	var ckTime, countingTime time.Duration
	oldest, next := 0, held
	if err := b.srv.before(ctx, true); err != nil {
		return ch, err
	}
	for ch.inserted < c.N {
		gone, fresh := batch(oldest, oldest+c.Batch), batch(next, next+c.Batch)
		if _, err := ck.RemoveMany(ctx, gone); err != nil {
			return ch, err
		}
		start := time.Now()
		_, err := ck.AddMany(ctx, fresh)
		ckTime += time.Since(start)
		if errors.Is(err, rbloom.ErrFull) {
			ch.refused += c.Batch // some of its calls; counted as the batch
		} else if err != nil {
			return ch, err
		}
		ch.inserted += c.Batch
		oldest, next = oldest+c.Batch, next+c.Batch
	}
	stats, slow, err := b.srv.after(ctx, true)
	if err != nil {
		return ch, err
	}
	for _, name := range []string{"evalsha", "eval"} {
		ch.calls += stats[name].calls
		ch.slow += slow[name].calls
		ch.maxUS = max(ch.maxUS, float64(max(stats[name].max, slow[name].max).Microseconds()))
	}
	if ch.p999, err = b.percentile(ctx, "evalsha", "p99.9"); err != nil {
		return ch, err
	}
	// The same churn on the counting filter, for its µs per insert.
	for lo := 0; lo < ch.inserted; lo += c.Batch {
		if _, err := counting.RemoveMany(ctx, batch(lo, lo+c.Batch)); err != nil {
			return ch, err
		}
		start := time.Now()
		if _, err := counting.AddMany(ctx, batch(held+lo, held+lo+c.Batch)); err != nil {
			return ch, err
		}
		countingTime += time.Since(start)
	}
	ch.ckUS = float64(ckTime.Microseconds()) / float64(ch.inserted)
	ch.countingUS = float64(countingTime.Microseconds()) / float64(ch.inserted)
	res, err := ck.TestMany(ctx, batch(oldest, next))
	if err != nil {
		return ch, err
	}
	ch.falseNeg = len(res) - countTrue(res)
	return ch, nil
}

// percentile reads one percentile of a command's latency (INFO
// latencystats, Redis 7.0 and later), in µs; 0 when the server has none.
func (b *bench) percentile(ctx context.Context, cmd, p string) (float64, error) {
	info, err := b.rdb.Info(ctx, "latencystats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO latencystats: %w", err)
	}
	return percentile(info, cmd, p), nil
}

// reportRcuckoo writes line 17.
func (b *bench) reportRcuckoo(w io.Writer, byID map[string]*row) {
	fmt.Fprintf(w, "\n17. rbloom's cuckoo filter (rbloom.Cuckoo, planned load %g) beside the counting filter, same server, same run.\n", rbloom.CuckooMaxLoad)
	var ratios []string
	for _, pair := range [][2]string{{"17a", "8a"}, {"17b", "8b"}, {"17c", "8c"}} {
		if x, ok := ratioOf(byID[pair[0]], byID[pair[1]]); ok {
			ratios = append(ratios, fmt.Sprintf("row %s / row %s %s", pair[0], pair[1], times(x)))
		}
	}
	fmt.Fprintf(w, "    Cuckoo's throughput over Counting's: %s\n", strings.Join(ratios, ", "))
	fmt.Fprintf(w, "    Each filter below gets %s new items (%s per call), then up to %s never-added items are tested, then up to\n",
		count(b.cfg.N), count(b.cfg.Batch), count(cfProbes))
	fmt.Fprintf(w, "    %s of their false positives deleted, then the %s held items tested again:\n\n", count(cfDeletes), count(b.cfg.N))
	t := newTable("rbloom filter", "what", "items", "refused", "MEMORY USAGE", "bits/item", "tested", "false positives", "FP rate", "FP deleted", "held lost")
	for _, u := range b.ckUses {
		t.add(u.name, u.info, count(u.items), count(u.refused), count(int(u.bytes)),
			strconv.FormatFloat(8*float64(u.bytes)/float64(max(u.items, 1)), 'f', 2, 64),
			count(u.probes), count(u.positives),
			strconv.FormatFloat(100*float64(u.positives)/float64(max(u.probes, 1)), 'f', 3, 64)+"%",
			count(u.deleted), count(u.lost))
	}
	t.write(w)
	fmt.Fprintf(w, "\n    Churn: filters of capacity %s (p = %g) filled to a load, then rounds that remove the %s oldest items and add\n",
		count(max(b.cfg.N/2, 4*b.cfg.Batch)), b.cfg.P, count(b.cfg.Batch))
	fmt.Fprintf(w, "    %s new ones, %s inserts in all; the counting filter gets the same churn. Script calls are the cuckoo filter's,\n", count(b.cfg.Batch), count(b.cfg.N))
	fmt.Fprintf(w, "    removes included (INFO commandstats, latencystats and SLOWLOG):\n\n")
	t = newTable("load held", "cuckoo µs/insert", "counting µs/insert", "cuckoo/counting inserts/s", "script calls", "calls >= 1 ms", "share >= 1 ms", "p99.9 µs", "slowest µs", "refused", "held absent")
	for _, ch := range b.ckChurns {
		share := float64(ch.slow) / float64(max(ch.calls, 1))
		t.add(strconv.FormatFloat(ch.load, 'f', 2, 64), strconv.FormatFloat(ch.ckUS, 'f', 2, 64), strconv.FormatFloat(ch.countingUS, 'f', 2, 64),
			times(ch.countingUS/max(ch.ckUS, 1e-9)), count(int(ch.calls)), count(int(ch.slow)),
			strconv.FormatFloat(100*share, 'f', 3, 64)+"%", strconv.FormatFloat(ch.p999, 'f', 0, 64),
			strconv.FormatFloat(ch.maxUS, 'f', 0, 64), count(ch.refused), count(ch.falseNeg))
	}
	t.write(w)
}
