package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// The memory of operation records is measured from the outside, without
// knowing how the library stores them: used_memory (INFO memory) and the
// number of keys (DBSIZE) before and after M single Counting.Add calls,
// each of which leaves a retry record, and then M Counting.AddOnce calls
// with distinct ids, each of which leaves a once-record. The filter they
// write is created, at its full size, before the first reading, so the
// growth is the records' alone: their keys or fields, TTLs, and their share
// of the keyspace's hash tables (which grow by doubling).
//
// It runs before the rows and before the window's fill, while no other
// key of the benchmark can expire (records of a single write live for
// minutes), and on the connections the setup opened, so that no new
// client's buffers are counted. Keys that expired meanwhile are reported:
// each would make the figures too small.

const recordsName = "rbloom-bench-records"

// recordUse is what M calls of each kind added to Redis.
type recordUse struct {
	calls     int
	add, once growth
	expired   int64 // keys that expired while measuring (INFO stats)
}

// growth is the change of used_memory and DBSIZE over some calls.
type growth struct{ bytes, keys int64 }

// memUse is one reading of the server.
type memUse struct {
	used, keys, expired int64
}

func (a memUse) minus(b memUse) growth { return growth{a.used - b.used, a.keys - b.keys} }

// newRecordsFilter returns the filter whose records are measured. Like
// NewCounting, it does not contact Redis.
func newRecordsFilter(rdb *redis.Client, cfg Config) (*rbloom.Counting, error) {
	return rbloom.NewCounting(rdb, recordsName, rbloom.Options{Capacity: uint64(2*cfg.Records + 2), ErrorRate: cfg.P})
}

// measureRecords measures the memory of cfg.Records retry records and as
// many once-records.
func (b *bench) measureRecords(ctx context.Context) (recordUse, error) {
	m := b.cfg.Records
	u := recordUse{calls: m}
	c := b.records
	b.progress(fmt.Sprintf("records: %s Counting.Add calls, then %s Counting.AddOnce calls", count(m), count(m)))
	// One call of each kind before the first reading, so that the scripts
	// are loaded and every command the measurement sends has been seen (a
	// command's latency histogram is made at its first call).
	if err := c.Create(ctx); err != nil {
		return u, err
	}
	if _, err := c.Add(ctx, "records-warm-up"); err != nil {
		return u, err
	}
	if _, err := c.AddOnce(ctx, "records-warm-up", "records-warm-up"); err != nil {
		return u, err
	}
	before, err := b.settledMemory(ctx)
	if err != nil {
		return u, err
	}
	for _, item := range names("records-add", 0, m) {
		if _, err := c.Add(ctx, item); err != nil {
			return u, err
		}
	}
	afterAdd, err := b.settledMemory(ctx)
	if err != nil {
		return u, err
	}
	ids := names("orders/7", 0, m) // ids such as a stream's partition and offset
	for i, item := range names("records-once", 0, m) {
		if _, err := c.AddOnce(ctx, item, ids[i]); err != nil {
			return u, err
		}
	}
	afterOnce, err := b.settledMemory(ctx)
	if err != nil {
		return u, err
	}
	u.add, u.once = afterAdd.minus(before), afterOnce.minus(afterAdd)
	u.expired = afterOnce.expired - before.expired
	return u, nil
}

// settledMemory reads used_memory, DBSIZE and expired_keys until two
// readings 100 ms apart agree on used_memory (at most 20 readings), so
// that the server's own background work (rehashing the keyspace, shrinking
// client buffers) is done or nearly.
func (b *bench) settledMemory(ctx context.Context) (memUse, error) {
	var last memUse
	for i := range 20 {
		pipe := b.rdb.Pipeline()
		mem, stats, keys := pipe.Info(ctx, "memory"), pipe.Info(ctx, "stats"), pipe.DBSize(ctx)
		if _, err := pipe.Exec(ctx); err != nil {
			return last, err
		}
		var u memUse
		var err error
		if u.used, err = infoField(mem.Val(), "used_memory"); err != nil {
			return last, err
		}
		if u.expired, err = infoField(stats.Val(), "expired_keys"); err != nil {
			return last, err
		}
		u.keys = keys.Val()
		if i > 0 && u.used == last.used {
			return u, nil
		}
		last = u
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return last, nil
}

// infoField returns the integer field name of an INFO reply.
func infoField(info, name string) (int64, error) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", name)
}

// reportRecords writes line 13c.
func reportRecords(w io.Writer, u recordUse) {
	per := func(g growth, what string) string {
		return fmt.Sprintf("%s bytes, %s keys: %s bytes and %s keys per %s",
			signed(g.bytes), signed(g.keys),
			strconv.FormatFloat(float64(g.bytes)/float64(u.calls), 'f', 1, 64),
			strconv.FormatFloat(float64(g.keys)/float64(u.calls), 'f', 4, 64), what)
	}
	fmt.Fprintf(w, "13c. Memory of operation records (measured before the rows): growth of used_memory (INFO memory) and of DBSIZE, each read once settled:\n")
	fmt.Fprintf(w, "     %s single Counting.Add calls, each leaving a retry record: %s\n", count(u.calls), per(u.add, "call"))
	fmt.Fprintf(w, "     %s Counting.AddOnce calls with distinct ids, each leaving a once-record: %s\n", count(u.calls), per(u.once, "once-id"))
	if u.expired != 0 {
		fmt.Fprintf(w, "     %s keys expired while measuring: these figures are too small\n", count(int(u.expired)))
	}
}

// signed writes n with its sign: +1,234 or -5.
func signed(n int64) string {
	if n >= 0 {
		return "+" + count(int(n))
	}
	return count(int(n))
}
