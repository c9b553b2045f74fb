package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The server's side of each row comes from Redis itself. Before every row
// the statistics are reset (CONFIG RESETSTAT); after it, INFO commandstats
// gives the calls and microseconds of each command, and INFO latencystats
// the slowest call of each (its p100, to Redis's 2 significant digits).
// While a library row runs, SLOWLOG logs every call of 1 ms or more
// (slowlog-log-slower-than 1000), which counts them and gives their exact
// time. Both count the commands that scripts call too, under their own
// names. SLOWLOG does not log everything (threshold 0): it then records
// every command a script calls, which was measured to add about 5 µs of
// server time to each library write, a third of a single Add.

// cmdStat is what INFO commandstats and latencystats say of one command,
// and how many of its calls the benchmark sent itself.
type cmdStat struct {
	calls int64
	usec  int64
	max   time.Duration // the slowest call, 0 when latency tracking is off
	sent  int64         // calls sent on their own, not run by a script or a transaction (tripCounter)
}

// cmdStats maps lower-case command names to their figures.
type cmdStats map[string]cmdStat

// admin are the commands the benchmark sends around the rows, left out of
// every row's figures.
var admin = map[string]bool{
	"info": true, "config": true, "slowlog": true, "hello": true, "client": true, "ping": true,
}

// usec returns the server time of a row: that of the commands the
// benchmark sent, a script's or a transaction's (EXEC) with the commands it
// ran, which INFO also counts under their own names. A command both sent
// and run by scripts or transactions counts for the share of its calls
// that were sent.
func (s cmdStats) usec() int64 {
	var total float64
	for name, st := range s {
		switch {
		case name == "eval" || name == "evalsha" || name == "exec":
			total += float64(st.usec)
		case st.calls > 0:
			total += float64(st.usec) * float64(min(st.sent, st.calls)) / float64(st.calls)
		}
	}
	return int64(total)
}

func (s cmdStats) add(o cmdStats) {
	for name, st := range o {
		t := s[name]
		s[name] = cmdStat{t.calls + st.calls, t.usec + st.usec, max(t.max, st.max), t.sent + st.sent}
	}
}

// slowCalls is what SLOWLOG says of one command in one row: the calls of
// 1 ms or more.
type slowCalls struct {
	calls int64         // calls logged
	max   time.Duration // the longest
}

func (c slowCalls) add(o slowCalls) slowCalls {
	return slowCalls{c.calls + o.calls, max(c.max, o.max)}
}

// slowThreshold is the time from which SLOWLOG logs a library call.
const slowThreshold = time.Millisecond

// serverWatch takes the server's figures around each row.
type serverWatch struct {
	rdb         *redis.Client
	threshold   string // slowlog-log-slower-than as found
	maxLen      string // slowlog-max-len as found
	percentiles string // latency-tracking-info-percentiles as found
	full        bool   // SLOWLOG was full after a library row: calls were lost
}

// slowlogLen is slowlog-max-len while the benchmark runs.
const slowlogLen = 10_000

// newServerWatch saves the server's settings that the benchmark changes,
// and changes them: SLOWLOG holds slowlogLen calls, INFO latencystats
// gives the slowest call of each command, and its p99.9 (line 17). Call
// restore when done.
func newServerWatch(ctx context.Context, rdb *redis.Client) (*serverWatch, error) {
	w := &serverWatch{rdb: rdb}
	for name, dst := range map[string]*string{
		"slowlog-log-slower-than": &w.threshold, "slowlog-max-len": &w.maxLen,
		"latency-tracking-info-percentiles": &w.percentiles,
	} {
		v, err := rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			return nil, fmt.Errorf("CONFIG GET %s: %w", name, err)
		}
		*dst = v[name] // "" when the server does not have it (before 7.0)
	}
	if w.threshold == "" || w.maxLen == "" {
		return nil, errors.New("CONFIG GET slowlog-*: no value")
	}
	pipe := rdb.Pipeline()
	pipe.ConfigSet(ctx, "slowlog-max-len", strconv.Itoa(slowlogLen))
	if w.percentiles != "" {
		pipe.ConfigSet(ctx, "latency-tracking-info-percentiles", "99.9 100")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("CONFIG SET: %w", err)
	}
	return w, nil
}

// restore puts back the SLOWLOG settings found and empties the log.
func (w *serverWatch) restore(ctx context.Context) error {
	pipe := w.rdb.Pipeline()
	pipe.ConfigSet(ctx, "slowlog-log-slower-than", w.threshold)
	pipe.ConfigSet(ctx, "slowlog-max-len", w.maxLen)
	if w.percentiles != "" {
		pipe.ConfigSet(ctx, "latency-tracking-info-percentiles", w.percentiles)
	}
	pipe.SlowLogReset(ctx)
	_, err := pipe.Exec(ctx)
	return err
}

// before resets the statistics and, for a library row, starts logging
// slow calls.
func (w *serverWatch) before(ctx context.Context, lib bool) error {
	pipe := w.rdb.Pipeline()
	pipe.ConfigResetStat(ctx)
	if lib {
		pipe.ConfigSet(ctx, "slowlog-log-slower-than", strconv.FormatInt(slowThreshold.Microseconds(), 10))
		pipe.SlowLogReset(ctx)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// after reads the statistics of the row that has just run and, for a
// library row, stops logging and reads the log.
func (w *serverWatch) after(ctx context.Context, lib bool) (cmdStats, map[string]slowCalls, error) {
	var slow map[string]slowCalls
	if lib {
		if err := w.rdb.ConfigSet(ctx, "slowlog-log-slower-than", w.threshold).Err(); err != nil {
			return nil, nil, err
		}
		log, err := w.rdb.SlowLogGet(ctx, slowlogLen).Result()
		if err != nil {
			return nil, nil, fmt.Errorf("SLOWLOG GET: %w", err)
		}
		if len(log) >= slowlogLen {
			w.full = true
		}
		slow = make(map[string]slowCalls)
		for _, e := range log {
			if len(e.Args) == 0 {
				continue
			}
			name := strings.ToLower(e.Args[0])
			if admin[name] {
				continue
			}
			slow[name] = slow[name].add(slowCalls{1, e.Duration})
		}
		if err := w.rdb.SlowLogReset(ctx).Err(); err != nil {
			return nil, nil, err
		}
	}
	// Two calls: INFO takes one section before Redis 7.0, which has no
	// latencystats (its INFO answers nothing for it).
	pipe := w.rdb.Pipeline()
	cmds, lat := pipe.Info(ctx, "commandstats"), pipe.Info(ctx, "latencystats")
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, fmt.Errorf("INFO: %w", err)
	}
	stats, err := parseStats(cmds.Val() + lat.Val())
	return stats, slow, err
}

// parseStats reads the lines of INFO commandstats and latencystats, such
// as
//
//	cmdstat_evalsha:calls=9260,usec=1234567,usec_per_call=133.32,...
//	latency_percentiles_usec_evalsha:p50=143.359,p99=268.287,p100=376.831
//
// leaving out the commands the benchmark sends around the rows.
func parseStats(info string) (cmdStats, error) {
	stats := make(cmdStats)
	for line := range strings.Lines(info) {
		key, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		name, stat := strings.CutPrefix(key, "cmdstat_")
		name, lat := strings.CutPrefix(name, "latency_percentiles_usec_")
		if !stat && !lat {
			continue
		}
		if base, _, _ := strings.Cut(name, "|"); admin[base] {
			continue
		}
		st := stats[name]
		for field := range strings.SplitSeq(fields, ",") {
			key, val, _ := strings.Cut(field, "=")
			var err error
			switch {
			case stat && key == "calls":
				st.calls, err = strconv.ParseInt(val, 10, 64)
			case stat && key == "usec":
				st.usec, err = strconv.ParseInt(val, 10, 64)
			case lat && key == "p100":
				var us float64
				us, err = strconv.ParseFloat(val, 64)
				st.max = time.Duration(us * float64(time.Microsecond))
			}
			if err != nil {
				return nil, fmt.Errorf("INFO: %q: %w", line, err)
			}
		}
		stats[name] = st
	}
	return stats, nil
}

// serverVersion returns redis_version from INFO server.
func serverVersion(ctx context.Context, rdb *redis.Client) (string, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "unknown", nil
}
