package bench

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// report writes what was measured: the table of rows, the ratios that are
// not in it, latency, memory, the server's side, the chart's figures and
// how to read them. Every table is markdown, aligned as plain text too.
func (b *bench) report(out io.Writer, rows []*row, mem memoryUse, points []point, took time.Duration) error {
	var w bytes.Buffer
	byID := make(map[string]*row, len(rows))
	for _, r := range rows {
		byID[r.id] = r
	}
	c := b.cfg

	fmt.Fprintf(&w, "rbloom bench: Redis %s at %s; %s %s/%s, %d CPUs%s\n",
		b.version, b.rdb.Options().Addr, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), b.load)
	fmt.Fprintf(&w, "filters sized for n = %s, p = %g: m = %s slots, k = %d; batch %s items; %d rounds, the rows taking turns in each\n\n",
		count(c.N), c.P, count(int(b.m)), b.k, count(c.Batch), c.Rounds)

	t := newTable("#", "row", "items", "items/s", "spread", "round trips/item", "server µs/item", "vs row", "ratio")
	for _, r := range rows {
		vs, ratio, spread := "", "", ""
		if x, ok := r.ratio(); ok {
			vs, ratio = r.vs.id, times(x)
		}
		if c.Rounds > 1 {
			spread = strconv.Itoa(int(math.Round(100*r.spread()))) + "%"
		}
		t.add(r.id, r.name, count(r.n), count(int(math.Round(r.rate()))), spread,
			strconv.FormatFloat(r.tripsPerItem(), 'f', 4, 64),
			strconv.FormatFloat(r.serverPerItem(), 'f', 2, 64), vs, ratio)
	}
	t.write(&w)

	fmt.Fprintln(&w)
	if x, ok := byID["10"].ratio(); ok {
		fmt.Fprintf(&w, "10. Counting.Add from %d goroutines vs 1 (row 10 / row 9c): %s\n", c.Goroutines, times(x))
	}
	if bound, add := byID["9f"], byID["9c"]; bound != nil && add != nil && bound.n > 0 && add.n > 0 {
		fmt.Fprintf(&w, "10b. Counting.Add vs a script that only calls one BITFIELD (row 9c / row 9f): throughput %s (target at least 0.8x), server µs per call %s (target at most 1.5x)\n",
			times(add.rate()/bound.rate()), times(add.serverPerItem()/bound.serverPerItem()))
	}
	if x, ok := ratioOf(byID["8a"], byID["1"]); ok {
		verdict := "met"
		if x < 100 {
			verdict = "NOT met"
		}
		fmt.Fprintf(&w, "11. Counting.AddMany vs the seed's k SETBIT round trips (row 8a / row 1): %s (target at least 100x: %s)\n", times(x), verdict)
	}
	b.reportWindow(&w, byID)

	fmt.Fprintf(&w, "\n12. Latency of single calls from one goroutine, µs (HdrHistogram of every call of rows 9a-9e):\n\n")
	t = newTable("call", "calls", "p50", "p99", "max", "p50 vs plain", "p99 vs plain")
	for _, l := range []struct {
		l, vs *latency
	}{
		{b.lat.plainIncr, nil}, {b.lat.plainGet, nil},
		{b.lat.add, b.lat.plainIncr}, {b.lat.test, b.lat.plainGet}, {b.lat.remove, b.lat.plainIncr},
	} {
		p50, p99 := l.l.percentile(50), l.l.percentile(99)
		vs50, vs99 := "", ""
		if l.vs != nil {
			vs50 = times(float64(p50) / float64(l.vs.percentile(50)))
			vs99 = times(float64(p99) / float64(l.vs.percentile(99)))
		}
		t.add(l.l.name, count(int(l.l.h.TotalCount())), micros(p50), micros(p99),
			micros(time.Duration(l.l.h.Max())), vs50, vs99)
	}
	t.write(&w)

	fmt.Fprintf(&w, "\n13. Memory of the counting filter %s: STRLEN %s bytes, MEMORY USAGE %s bytes; ceil(m/2)+64 = %s bytes\n",
		mem.key, count(int(mem.strlen)), count(int(mem.usage)), count(int(mem.want)))
	reportWindowMemory(&w, b.winMem)
	reportRecords(&w, b.recs)

	b.reportServer(&w, rows)

	if len(points) > 0 {
		fmt.Fprintf(&w, "\n15. Throughput by batch size, items/s (chart: %s):\n\n", c.Chart)
		t = newTable("batch", "items", series[0], series[1], "ratio", series[2], series[3], "ratio")
		for _, p := range points {
			t.add(count(p.batch), count(p.items),
				count(int(p.rates[0])), count(int(p.rates[1])), times(p.rates[0]/p.rates[1]),
				count(int(p.rates[2])), count(int(p.rates[3])), times(p.rates[2]/p.rates[3]))
		}
		t.write(&w)
	}
	b.reportCuckoo(&w, byID, b.cfUses)
	b.reportRcuckoo(&w, byID)

	fmt.Fprintf(&w, `
How to read it. items/s: a row's items over the wall time of its calls, summed over the rounds; spread: how far
apart the rounds' items/s are, (fastest - slowest) / items/s, a measure of the machine's noise. Round trips are
counted by a go-redis hook on the benchmark's client: every command sent alone and every pipeline is one. Server
µs/item: INFO commandstats, reset before each row: the time of the commands the benchmark sent, a script's or a
transaction's (EXEC) with the commands it ran. ratio: the row's items/s over the items/s of the row in "vs row".
The limits (5-7, 9a-9b) send plain BITFIELD commands at the library's offsets to keys of their own, with no script
and no header check, one command per item: what Redis does for a filter at best, on one connection. TestMany can
beat its limit: it reads several items with each BITFIELD_RO. The bound (5b) batches and sends its arguments as
AddMany does, with a script that checks nothing and only calls BITFIELD: no script batched this way that checks what
it writes can be faster, so its ratio is the most such an add can reach on this server. The window row (8f) adds new
events to a window at the seed's error rate whose G past generations were written first at the density of full
ones; 7c is the seed's tumbling day filter (row 7a with the window's k and m), 7d does the
window's reads and writes with plain commands, two per event. 13b divides the ring's MEMORY USAGE by the events
its live generations hold. 13c is measured before the rows, from
outside: used_memory and DBSIZE growth over single calls, whatever the records' format.
`)
	fmt.Fprintf(&w, "\ntook %v%s\n", took.Round(100*time.Millisecond), loadAverage(", load average now "))
	_, err := out.Write(w.Bytes())
	return err
}

// reportServer writes the server's time of the library's calls, by row
// and command, and the slowest of them.
func (b *bench) reportServer(w io.Writer, rows []*row) {
	fmt.Fprintf(w, "\n14. Server time of the library's calls: calls and µs/call from INFO commandstats, slowest from INFO\n")
	fmt.Fprintf(w, "    latencystats (p100) or, from 1 ms up, SLOWLOG, which logged every call of 1 ms or more of the library rows:\n\n")
	t := newTable("row", "command", "calls", "µs/call", "slowest µs", "calls >= 1 ms")
	var (
		slowest          time.Duration
		slowestCmd, in   string
		calls, slowCalls int64
	)
	for _, r := range rows {
		if !r.lib {
			continue
		}
		cmds := make([]string, 0, len(r.server))
		for name := range r.server {
			cmds = append(cmds, name)
		}
		slices.Sort(cmds)
		for _, name := range cmds {
			st, slow := r.server[name], r.slow[name]
			top := st.sent > 0 || name == "eval" || name == "evalsha" || name == "exec" // sent by the client
			label := strings.ToUpper(name)
			switch {
			case !top && !strings.HasPrefix(name, "bitfield"):
				continue // the small calls of scripts and transactions: GET, SET, STRLEN, ...
			case !top:
				label += " (in script or transaction)"
			}
			longest := max(st.max, slow.max)
			t.add(r.id+" "+r.name, label, count(int(st.calls)),
				strconv.FormatFloat(float64(st.usec)/float64(max(st.calls, 1)), 'f', 2, 64),
				micros(longest), count(int(slow.calls)))
			if top {
				calls += st.calls
				slowCalls += slow.calls
				if longest > slowest {
					slowest, slowestCmd, in = longest, label, r.id+" "+r.name
				}
			}
		}
	}
	t.write(w)
	fmt.Fprintf(w, "\nSlowest call the library sent: %s, %s µs, in row %s. Calls of 1 ms or more: %s of %s.\n",
		slowestCmd, micros(slowest), in, count(int(slowCalls)), count(int(calls)))
	if b.srv.full {
		fmt.Fprintf(w, "SLOWLOG was full after a row (slowlog-max-len %s): some calls of 1 ms or more were not counted.\n", count(slowlogLen))
	}
}

// ratioOf is a's throughput over b's.
func ratioOf(a, b *row) (float64, bool) {
	if a == nil || b == nil || b.rate() == 0 {
		return 0, false
	}
	return a.rate() / b.rate(), true
}

// count writes n with thousands separators: 1,234,567.
func count(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out.WriteByte(',')
		}
		out.WriteRune(c)
	}
	if neg {
		return "-" + out.String()
	}
	return out.String()
}

// times writes a ratio with three significant digits: 0.452x, 105x.
func times(x float64) string {
	if x >= 1000 {
		return count(int(math.Round(x))) + "x"
	}
	return strconv.FormatFloat(x, 'g', 3, 64) + "x"
}

// micros writes d in microseconds with one decimal: 1,234.5.
func micros(d time.Duration) string {
	tenths := int(math.Round(float64(d) / float64(100*time.Nanosecond)))
	return count(tenths/10) + "." + strconv.Itoa(tenths%10)
}

// loadAverage returns prefix and the 1-minute load average of the machine
// (Linux), or "" where it is not known.
func loadAverage(prefix string) string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	one, _, _ := strings.Cut(string(b), " ")
	return prefix + one
}

// table is a markdown table whose columns are padded to the same width, so
// that it reads as well in a terminal as rendered. Columns of numbers are
// aligned right.
type table struct {
	head []string
	rows [][]string
}

func newTable(head ...string) *table { return &table{head: head} }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	width := make([]int, len(t.head))
	for _, r := range append([][]string{t.head}, t.rows...) {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	numeric := make([]bool, len(t.head))
	for i := range numeric {
		numeric[i] = true
		for _, r := range t.rows {
			if i < len(r) && r[i] != "" && !isNumber(r[i]) {
				numeric[i] = false
			}
		}
	}
	right := func(i int) bool { return numeric[i] }
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if right(i) {
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		fmt.Fprintln(w, b.String())
	}
	line(t.head)
	sep := make([]string, len(t.head))
	for i := range sep {
		if right(i) {
			sep[i] = strings.Repeat("-", width[i]-1) + ":"
		} else {
			sep[i] = strings.Repeat("-", width[i])
		}
	}
	line(sep)
	for _, r := range t.rows {
		line(r)
	}
}

// isNumber reports whether s is a number as this file writes them: with
// thousands separators, a ratio ending in x or a percentage.
func isNumber(s string) bool {
	_, err := strconv.ParseFloat(strings.TrimRight(strings.ReplaceAll(s, ",", ""), "x%"), 64)
	return err == nil
}
