package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// When the server has Redis's cuckoo filter (the CF.* commands of the
// RedisBloom module, built into Redis 8), the benchmark measures it beside
// the counting filter, the deletable filter a user weighs against it:
//
//   - rows 16a-16d, taking turns with the other rows in every round: CF.ADD
//     pipelined, CF.INSERT of a batch per call, CF.MEXISTS of a batch per
//     call and CF.DEL pipelined, each compared with Counting.AddMany,
//     TestMany and RemoveMany (rows 8a-8c);
//   - after the rows, line 16: three filters, each filled with N new items
//     (a counting filter sized for N at P, and cuckoo filters of capacity N
//     with buckets of 1 and of 2 fingerprints), their MEMORY USAGE per
//     item, the false positives of up to cfProbes never-added items, and
//     what deleting up to cfDeletes of those false positives costs: how
//     many of the N held items then test absent.
//
// None of it runs on a server without CF.*: on Debian's Redis 7.0 the
// report has no such rows.

const (
	keyCFAdd    = "rbloom-bench:cf-add"    // rows 16a, 16c and 16d
	keyCFInsert = "rbloom-bench:cf-insert" // row 16b
	keyCFFull   = "rbloom-bench:cf-full-b" // + bucket size: line 16's filters

	cfCountingName = "rbloom-bench-cf-counting" // line 16's counting filter

	// cfProbes bounds the never-added items tested for false positives.
	cfProbes = 200_000
	// cfDeletes bounds the false positives deleted from each filter.
	cfDeletes = 1_000
)

// cfBucketSizes are the bucket sizes of line 16's cuckoo filters. Their
// fingerprints are 8 bits, so the bucket size sets the false-positive
// rate: about 2b/256 when full, 0.8% for 1 and 1.6% for 2.
var cfBucketSizes = []int{1, 2}

// hasCuckoo reports whether the server has the CF.* commands: COMMAND INFO
// CF.ADD describes the command, or answers nil where there is none.
func hasCuckoo(ctx context.Context, rdb *redis.Client) (bool, error) {
	reply, err := rdb.Do(ctx, "COMMAND", "INFO", "CF.ADD").Slice()
	if err != nil {
		return false, fmt.Errorf("COMMAND INFO CF.ADD: %w", err)
	}
	return commandListed(reply), nil
}

// commandListed reports whether a reply of COMMAND INFO for one command
// describes it: one entry, not nil.
func commandListed(reply []any) bool {
	if len(reply) != 1 {
		return false
	}
	entry, ok := reply[0].([]any)
	return ok && len(entry) > 0
}

// setupCuckoo creates the cuckoo filters of rows 16a-16d, empty, with
// capacity N and the default bucket size (2).
func (b *bench) setupCuckoo(ctx context.Context) error {
	for _, key := range []string{keyCFAdd, keyCFInsert} {
		if err := b.rdb.Do(ctx, "CF.RESERVE", key, b.cfg.N).Err(); err != nil {
			return fmt.Errorf("CF.RESERVE %s: %w", key, err)
		}
	}
	return nil
}

// cuckooRows returns rows 16a-16d, compared with the counting filter's
// batch rows.
func (b *bench) cuckooRows(addMany, testMany, removeMany *row) []*row {
	c := b.cfg
	addItems := b.source("cf-add", c.N)
	insertItems := b.source("cf-insert", c.N)
	flush := fmt.Sprintf("pipelined, %s per flush", count(c.Batch))
	perCall := fmt.Sprintf("%s per call", count(c.Batch))
	return []*row{
		{id: "16a", name: "CF.ADD (cuckoo, bucket size 2), " + flush, vs: addMany, items: addItems,
			do: func(ctx context.Context, items []string) error {
				return cfEach(ctx, b.rdb, "CF.ADD", keyCFAdd, items, c.Batch)
			}},
		{id: "16b", name: "CF.INSERT (cuckoo, bucket size 2), " + perCall, vs: addMany, items: insertItems,
			do: func(ctx context.Context, items []string) error {
				return chunks(items, c.Batch, func(part []string) error {
					res, err := cfInsert(ctx, b.rdb, keyCFInsert, part)
					if err != nil {
						return err
					}
					if n := countTrue(res); n != len(part) {
						return fmt.Errorf("CF.INSERT inserted %d of %d items", n, len(part))
					}
					return nil
				})
			}},
		{id: "16c", name: "CF.MEXISTS (cuckoo, bucket size 2), " + perCall, vs: testMany, items: addItems,
			do: func(ctx context.Context, items []string) error {
				return chunks(items, c.Batch, func(part []string) error {
					return allTrue("CF.MEXISTS", part)(cfExists(ctx, b.rdb, keyCFAdd, part))
				})
			}},
		{id: "16d", name: "CF.DEL (cuckoo, bucket size 2), " + flush, vs: removeMany, items: firstHalf(addItems),
			do: func(ctx context.Context, items []string) error {
				return cfEach(ctx, b.rdb, "CF.DEL", keyCFAdd, items, c.Batch)
			}},
	}
}

// cfEach sends cmd (CF.ADD or CF.DEL) for each item, batch per pipeline
// flush, and checks that each answered 1: added, or deleted.
func cfEach(ctx context.Context, rdb *redis.Client, cmd, key string, items []string, batch int) error {
	res, err := cfEachResult(ctx, rdb, cmd, key, items, batch)
	if err != nil {
		return err
	}
	return allTrue(cmd, items)(res, nil)
}

// cfEachResult sends cmd for each item, batch per pipeline flush, and
// returns the answers.
func cfEachResult(ctx context.Context, rdb *redis.Client, cmd, key string, items []string, batch int) ([]bool, error) {
	res := make([]bool, 0, len(items))
	err := chunks(items, batch, func(part []string) error {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(part))
		for i, item := range part {
			cmds[i] = pipe.Do(ctx, cmd, key, item)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
		for _, c := range cmds {
			ok, err := c.Bool()
			if err != nil {
				return fmt.Errorf("%s: %w", cmd, err)
			}
			res = append(res, ok)
		}
		return nil
	})
	return res, err
}

// cfInsert adds items to the filter at key with one CF.INSERT, which
// answers per item 1 (added) or -1 (the filter is full); true or -1 in
// RESP3.
func cfInsert(ctx context.Context, rdb *redis.Client, key string, items []string) ([]bool, error) {
	args := make([]any, 0, 4+len(items))
	args = append(args, "CF.INSERT", key, "NOCREATE", "ITEMS")
	for _, item := range items {
		args = append(args, item)
	}
	res, err := rdb.Do(ctx, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("CF.INSERT: %w", err)
	}
	out := make([]bool, len(res))
	for i, r := range res {
		switch r := r.(type) {
		case bool: // RESP3
			out[i] = r
		case int64:
			out[i] = r == 1
		default:
			return nil, fmt.Errorf("CF.INSERT: answer %d is %T %v, want 1, -1 or a boolean", i, r, r)
		}
	}
	if len(out) != len(items) {
		return nil, fmt.Errorf("CF.INSERT: %d answers for %d items", len(out), len(items))
	}
	return out, nil
}

// cfExists tests items in the filter at key with one CF.MEXISTS.
func cfExists(ctx context.Context, rdb *redis.Client, key string, items []string) ([]bool, error) {
	args := make([]any, 0, 2+len(items))
	args = append(args, "CF.MEXISTS", key)
	for _, item := range items {
		args = append(args, item)
	}
	res, err := rdb.Do(ctx, args...).BoolSlice()
	if err != nil {
		return nil, fmt.Errorf("CF.MEXISTS: %w", err)
	}
	if len(res) != len(items) {
		return nil, fmt.Errorf("CF.MEXISTS: %d answers for %d items", len(res), len(items))
	}
	return res, nil
}

// firstHalf returns a source of the first half of items' slice of each
// round.
func firstHalf(items func(int) []string) func(int) []string {
	return func(round int) []string {
		s := items(round)
		return s[:len(s)/2]
	}
}

func countTrue(res []bool) int {
	n := 0
	for _, ok := range res {
		if ok {
			n++
		}
	}
	return n
}

// deletable is a filter of line 16 as the measurement sees it.
type deletable struct {
	name   string // as the report names it
	key    string // its one key, for MEMORY USAGE
	add    func(ctx context.Context, items []string) ([]bool, error)
	test   func(ctx context.Context, items []string) ([]bool, error)
	remove func(ctx context.Context, items []string) ([]bool, error)
	info   func(ctx context.Context) (string, error) // what else to say of it
}

// cfUse is what line 16 says of one filter.
type cfUse struct {
	name      string
	items     int    // items added
	refused   int    // items the filter refused (full)
	bytes     int64  // MEMORY USAGE of its key
	probes    int    // never-added items tested
	positives int    // of those, the ones that tested present
	deleted   int    // false positives deleted
	lost      int    // held items that tested absent after those deletes
	info      string // sub-filters, k, ...
}

// measureCuckoo fills a counting filter and the cuckoo filters of line 16
// with N new items each and measures them, one after the other.
func (b *bench) measureCuckoo(ctx context.Context) ([]cfUse, error) {
	c := b.cfg
	counting, err := rbloom.NewCounting(b.rdb, cfCountingName, rbloom.Options{Capacity: uint64(c.N), ErrorRate: c.P})
	if err != nil {
		return nil, err
	}
	if err := counting.Create(ctx); err != nil {
		return nil, err
	}
	filters := []deletable{{
		name: fmt.Sprintf("rbloom Counting, p = %g", c.P),
		key:  "rbloom:{" + cfCountingName + "}",
		add: func(ctx context.Context, items []string) ([]bool, error) {
			res, err := counting.AddMany(ctx, items)
			// AddMany answers whether each item was already present; it
			// adds every item.
			for i := range res {
				res[i] = true
			}
			return res, err
		},
		test:   counting.TestMany,
		remove: counting.RemoveMany,
		info: func(ctx context.Context) (string, error) {
			k, m, err := readHeader(ctx, b.rdb, "rbloom:{"+cfCountingName+"}")
			return fmt.Sprintf("k = %d, m = %s 4-bit counters", k, count(int(m))), err
		},
	}}
	for _, bucket := range cfBucketSizes {
		key := keyCFFull + strconv.Itoa(bucket)
		if err := b.rdb.Do(ctx, "CF.RESERVE", key, c.N, "BUCKETSIZE", bucket).Err(); err != nil {
			return nil, fmt.Errorf("CF.RESERVE %s: %w", key, err)
		}
		filters = append(filters, deletable{
			name: fmt.Sprintf("CF, capacity %s, bucket size %d", count(c.N), bucket),
			key:  key,
			add: func(ctx context.Context, items []string) ([]bool, error) {
				return cfInsert(ctx, b.rdb, key, items)
			},
			test: func(ctx context.Context, items []string) ([]bool, error) {
				return cfExists(ctx, b.rdb, key, items)
			},
			remove: func(ctx context.Context, items []string) ([]bool, error) {
				return cfEachResult(ctx, b.rdb, "CF.DEL", key, items, c.Batch)
			},
			info: func(ctx context.Context) (string, error) {
				return cfInfo(ctx, b.rdb, key)
			},
		})
	}
	var uses []cfUse
	for _, f := range filters {
		b.progress("cuckoo: " + f.name + ": adding " + count(c.N) + " items, then false positives")
		u, err := b.measureDeletable(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		uses = append(uses, u)
	}
	return uses, nil
}

// measureDeletable adds N items to f, reads its memory, tests up to
// cfProbes never-added items, deletes up to cfDeletes of the false
// positives and tests the N items again.
func (b *bench) measureDeletable(ctx context.Context, f deletable) (cfUse, error) {
	c := b.cfg
	u := cfUse{name: f.name, items: c.N}
	held := names("cf-held", 0, c.N)
	err := chunks(held, c.Batch, func(part []string) error {
		res, err := f.add(ctx, part)
		u.refused += len(part) - countTrue(res)
		return err
	})
	if err != nil {
		return u, err
	}
	if u.bytes, err = b.rdb.MemoryUsage(ctx, f.key).Result(); err != nil {
		return u, fmt.Errorf("MEMORY USAGE %s: %w", f.key, err)
	}
	if u.info, err = f.info(ctx); err != nil {
		return u, err
	}
	u.probes = min(c.N, cfProbes)
	var positives []string
	err = chunks(names("cf-never-added", 0, u.probes), c.Batch, func(part []string) error {
		res, err := f.test(ctx, part)
		for i, ok := range res {
			if ok {
				positives = append(positives, part[i])
			}
		}
		return err
	})
	if err != nil {
		return u, err
	}
	u.positives = len(positives)
	del := positives[:min(len(positives), cfDeletes)]
	res, err := f.remove(ctx, del)
	if err != nil {
		return u, err
	}
	u.deleted = countTrue(res)
	err = chunks(held, c.Batch, func(part []string) error {
		res, err := f.test(ctx, part)
		u.lost += len(part) - countTrue(res)
		return err
	})
	return u, err
}

// cfInfo returns the sub-filters and buckets of the cuckoo filter at key,
// from CF.INFO.
func cfInfo(ctx context.Context, rdb *redis.Client, key string) (string, error) {
	reply, err := rdb.Do(ctx, "CF.INFO", key).Result()
	if err != nil {
		return "", fmt.Errorf("CF.INFO: %w", err)
	}
	fields := map[string]int64{}
	add := func(k, v any) {
		name, ok1 := k.(string)
		n, ok2 := v.(int64)
		if ok1 && ok2 {
			fields[name] = n
		}
	}
	switch r := reply.(type) {
	case []any: // RESP2: name, value, ...
		for i := 0; i+1 < len(r); i += 2 {
			add(r[i], r[i+1])
		}
	case map[any]any: // RESP3
		for k, v := range r {
			add(k, v)
		}
	}
	return fmt.Sprintf("sub-filters: %d, buckets: %s", fields["Number of filters"], count(int(fields["Number of buckets"]))), nil
}

// reportCuckoo writes line 16, when the cuckoo filter was measured.
func (b *bench) reportCuckoo(w io.Writer, byID map[string]*row, uses []cfUse) {
	if len(uses) == 0 {
		return
	}
	fmt.Fprintf(w, "\n16. Redis's cuckoo filter (CF.*, RedisBloom) beside the counting filter, same server, same run.\n")
	var ratios []string
	for _, pair := range [][2]string{{"16a", "8a"}, {"16b", "8a"}, {"16c", "8b"}, {"16d", "8c"}} {
		if x, ok := ratioOf(byID[pair[1]], byID[pair[0]]); ok {
			ratios = append(ratios, fmt.Sprintf("row %s / row %s %s", pair[1], pair[0], times(x)))
		}
	}
	fmt.Fprintf(w, "    rbloom's throughput over the cuckoo filter's: %s\n", strings.Join(ratios, ", "))
	fmt.Fprintf(w, "    Each filter below gets %s new items (%s per call), then up to %s never-added items are tested, then up to\n",
		count(b.cfg.N), count(b.cfg.Batch), count(cfProbes))
	fmt.Fprintf(w, "    %s of their false positives deleted (Counting.RemoveMany, CF.DEL), then the %s held items tested again:\n\n",
		count(cfDeletes), count(b.cfg.N))
	t := newTable("filter", "what", "items", "refused", "MEMORY USAGE", "bits/item", "tested", "false positives", "FP rate", "FP deleted", "held lost", "lost/delete")
	for _, u := range uses {
		perDelete := ""
		if u.deleted > 0 {
			perDelete = strconv.FormatFloat(float64(u.lost)/float64(u.deleted), 'f', 2, 64)
		}
		t.add(u.name, u.info, count(u.items), count(u.refused), count(int(u.bytes)),
			strconv.FormatFloat(8*float64(u.bytes)/float64(max(u.items, 1)), 'f', 2, 64),
			count(u.probes), count(u.positives),
			strconv.FormatFloat(100*float64(u.positives)/float64(max(u.probes, 1)), 'f', 3, 64)+"%",
			count(u.deleted), count(u.lost), perDelete)
	}
	t.write(w)
	fmt.Fprintf(w, "\n    The CF rows (16a-16d) run no script: their server µs/item is all commands'. \"held lost\": held items that\n")
	fmt.Fprintf(w, "    test absent after the deletes (false negatives). The cuckoo filters' fingerprints are 8 bits (RedisBloom's fixed size).\n")
}
