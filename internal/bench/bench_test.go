package bench

import (
	"bytes"
	"context"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

// wantRows are the table's rows, by number and the start of their name.
var wantRows = []struct{ id, name string }{
	{"1", "seed: k SETBIT, 1 round trip each"},
	{"2", "seed: k SETBIT pipelined"},
	{"3", "baseline Lua: 1 EVALSHA per item"},
	{"4", "baseline Lua: 1 EVALSHA per 200 items"},
	{"5", "limit: BITFIELD INCRBY u4"},
	{"6", "limit: BITFIELD_RO GET u4"},
	{"7a", "limit: BITFIELD SET u1"},
	{"7b", "limit: BITFIELD_RO GET u1"},
	{"7c", "limit: the seed's day filter, BITFIELD SET u1, k = 21"},
	{"7d", "limit: window's work as plain commands, GET k words + SET u1, k = 21"},
	{"5b", "bound: script with no checks"},
	{"8a", "Counting.AddMany"},
	{"8b", "Counting.TestMany"},
	{"8c", "Counting.RemoveMany"},
	{"8d", "Classic.AddMany"},
	{"8e", "Classic.TestMany"},
	{"8f", "Window.TestOrAddMany, 25 generations, k = 21"},
	{"9a", "plain BITFIELD INCRBY u4, 1 item per round trip"},
	{"9b", "plain BITFIELD_RO GET u4, 1 item per round trip"},
	{"9c", "Counting.Add"},
	{"9d", "Counting.Test"},
	{"9e", "Counting.Remove"},
	{"10", "Counting.Add, 8 goroutines"},
	{"17a", "Cuckoo.AddMany"},
	{"17b", "Cuckoo.TestMany"},
	{"17c", "Cuckoo.RemoveMany"},
}

// TestRunQuick runs the whole benchmark in quick mode against a real Redis
// and checks that the report has every part, with sane figures. It never
// checks a time: only that times were measured, and counts that do not
// depend on the machine, such as round trips per item.
func TestRunQuick(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	before, err := rdb.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}

	const chart = "docs/throughput.png"
	var drawn []Chart
	draw := func(path string, c Chart) error {
		if path != chart {
			t.Errorf("Draw(%q, ...), want path %q", path, chart)
		}
		drawn = append(drawn, c)
		return nil
	}
	var out bytes.Buffer
	const rounds = 2 // more than quick's 1, to take turns
	if err := Run(ctx, Config{Addr: addr, Quick: true, Rounds: rounds, Chart: chart, Draw: draw}, &out); err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	report := out.String()
	t.Log("\n" + report)

	table := tableRows(report, "| #", 1)
	// Round trips per item: k SETBIT, or one per item, or one per batch
	// of each round (quick: n = 5,000 and p = 1%, so k = 7; batch 1,000).
	perBatch := func(batch int) func(items float64) float64 {
		return func(items float64) float64 { return math.Ceil(items/rounds/float64(batch)) * rounds / items }
	}
	perItem := func(float64) float64 { return 1 }
	// TestMany reads in transactions of at most 2,048 slots (read.go's
	// maxTxSlots), sent at once: 292 items each at k = 7.
	perTx := func(items float64) float64 {
		trips := 0.0
		for n := items / rounds; n > 0; n -= 1000 {
			trips += math.Ceil(math.Min(n, 1000) / float64(2048/7))
		}
		return trips * rounds / items
	}
	wantTrips := map[string]func(items float64) float64{
		"1": func(float64) float64 { return 7 }, "2": perItem, "3": perItem, "4": perBatch(200),
		"5": perBatch(1000), "6": perBatch(1000), "7a": perBatch(1000), "7b": perBatch(1000), "5b": perBatch(1000),
		"7c": perBatch(1000), "7d": perBatch(1000),
		"8a": perBatch(1000), "8b": perTx, "8c": perBatch(1000), "8d": perBatch(1000), "8e": perTx,
		"9a": perItem, "9b": perItem, "9c": perItem, "9d": perItem, "9e": perItem, "10": perItem,
		"17a": perBatch(1000), "17b": perBatch(1000), "17c": perBatch(1000),
	}
	for _, want := range wantRows {
		cells, ok := table[want.id]
		if !ok {
			t.Errorf("no row %s (%s) in the table", want.id, want.name)
			continue
		}
		if !strings.HasPrefix(cells["row"], want.name) {
			t.Errorf("row %s is %q, want it to start with %q", want.id, cells["row"], want.name)
		}
		if number(t, cells["spread"]) < 0 {
			t.Errorf("row %s: spread %s, want a percentage", want.id, cells["spread"])
		}
		for _, col := range []string{"items", "items/s", "round trips/item", "server µs/item"} {
			if v := number(t, cells[col]); v <= 0 {
				t.Errorf("row %s: %s = %s, want > 0", want.id, col, cells[col])
			}
		}
		if want.id == "8f" {
			// The window reads before its calls (Window.TestMany's reads):
			// transactions of at most 315 words, sent at once, of the
			// first 5 words of every event (63 events each), then of the
			// other 16 of the events those leave in doubt; then one
			// pipeline of script calls.
			lo, hi := 0.0, 0.0
			for n := number(t, cells["items"]) / rounds; n > 0; n -= 1000 {
				b := math.Min(n, 1000)
				lo += rounds * (1 + math.Ceil(b/63))
				hi += rounds * (1 + math.Ceil(b/63) + math.Ceil(b*16/315))
			}
			if trips := number(t, cells["round trips/item"]) * number(t, cells["items"]); trips < lo-0.5 || trips > hi+0.5 {
				t.Errorf("row 8f: %v round trips, want %v to %v", trips, lo, hi)
			}
		} else if trips := strconv.FormatFloat(wantTrips[want.id](number(t, cells["items"])), 'f', 4, 64); cells["round trips/item"] != trips {
			t.Errorf("row %s: round trips/item = %s, want %s", want.id, cells["round trips/item"], trips)
		}
		limit := strings.HasPrefix(want.name, "limit") || strings.HasPrefix(want.name, "plain")
		if (cells["ratio"] == "") != limit || (cells["vs row"] == "") != limit {
			t.Errorf("row %s: vs row %q, ratio %q, want both unless it is a limit", want.id, cells["vs row"], cells["ratio"])
		}
		if cells["ratio"] != "" && number(t, cells["ratio"]) <= 0 {
			t.Errorf("row %s: ratio %s, want > 0", want.id, cells["ratio"])
		}
	}

	// Debian's Redis has no CF.*: the cuckoo filter's rows and line are
	// left out (TestRunQuickCuckoo checks them).
	if cf, err := hasCuckoo(ctx, rdb); err != nil || cf {
		t.Fatalf("hasCuckoo = %v, %v: this test wants a server without CF.*", cf, err)
	}
	for _, part := range cuckooParts {
		if strings.Contains(report, part) {
			t.Errorf("the report has %q, from a server without CF.*", part)
		}
	}

	for _, part := range []string{
		"11. Counting.AddMany vs the seed's k SETBIT round trips (row 8a / row 1): ",
		"10. Counting.Add from 8 goroutines vs 1 (row 10 / row 9c): ",
		"11b. Window.TestOrAddMany, 1,000 events per call, 24 past generations written as full ones + the current one, k = 21",
		"vs the seed's day filter, plain BITFIELD SET u1 with the window's k (row 8f / row 7c): throughput ",
		"vs the window's reads and writes as plain commands (row 8f / row 7d): throughput ",
		"13b. Memory per event of the window after row 8f: MEMORY USAGE of its ring (25 live generations) ",
		"13c. Memory of operation records",
		"500 single Counting.Add calls, each leaving a retry record: ",
		"500 Counting.AddOnce calls with distinct ids, each leaving a once-record: ",
		"12. Latency of single calls",
		"13. Memory of the counting filter rbloom:{rbloom-bench-counting}: ",
		"14. Server time of the library's calls",
		"Slowest call the library sent: ",
		"15. Throughput by batch size",
		"17. rbloom's cuckoo filter",
		"| rbloom Cuckoo, p = 0.01 (10-bit fingerprints) ",
		"| load held ",
		"How to read it.",
	} {
		if !strings.Contains(report, part) {
			t.Errorf("the report has no %q", part)
		}
	}

	lat := tableRows(report, "| call", 1)
	for _, name := range []string{"Counting.Add", "Counting.Test", "Counting.Remove", "plain BITFIELD INCRBY u4", "plain BITFIELD_RO GET u4"} {
		cells, ok := lat[name]
		if !ok {
			t.Errorf("no latency of %s", name)
			continue
		}
		if calls, p50, p99, max := number(t, cells["calls"]), number(t, cells["p50"]), number(t, cells["p99"]), number(t, cells["max"]); calls != 400 || p50 <= 0 || p99 < p50 || max < p99 {
			t.Errorf("latency of %s: calls %v, p50 %v, p99 %v, max %v: want 400 calls and 0 < p50 <= p99 <= max", name, calls, p50, p99, max)
		}
	}

	// ceil(m/2) + 64 with m = OptimalSlots(5000, 0.01), and the key
	// must be exactly that long.
	m := rbloom.OptimalSlots(5000, 0.01)
	if want := "STRLEN " + count(int((m+1)/2+64)) + " bytes"; !strings.Contains(report, want) {
		t.Errorf("the memory line does not say %q, which is ceil(m/2)+64", want)
	}

	// The window's events: 24 past generations of 5,000 and the current
	// one, all new events, the false positives excepted.
	if held, per, theory, ok := windowMemory(report); !ok {
		t.Error("no figures in line 13b")
	} else if held < 0.9*25*5000 || held > 25*5000+2 || per < theory || per > 2*theory {
		t.Errorf("line 13b: %v events held, %v bytes per event, %v in theory: want about 125,000 events and between 1 and 2 times the theory", held, per, theory)
	}
	if n := records(report); len(n) != 2 {
		t.Errorf("line 13c: %d figures of growth per call, want 2", len(n))
	}
	if strings.Contains(report, "expired while measuring") {
		t.Error("keys expired while the records were measured")
	}

	server := tableRows(report, "| row", 2)
	for row, cmd := range map[string]string{
		"8a Counting.AddMany, 1,000 per call":  "EVALSHA",
		"8b Counting.TestMany, 1,000 per call": "EXEC", // its BITFIELD_RO are in transactions
		"8f " + table["8f"]["row"]:             "EVALSHA",
		"9c Counting.Add":                      "EVALSHA",
	} {
		if cells, ok := server[row+" "+cmd]; !ok || number(t, cells["calls"]) <= 0 || number(t, cells["µs/call"]) <= 0 {
			t.Errorf("server time of %s, %s: %q, want calls and µs/call", row, cmd, cells)
		}
	}

	points := tableRows(report, "| batch", 1)
	for _, b := range []string{"1", "10", "100"} {
		cells, ok := points[b]
		if !ok {
			t.Errorf("no point of batch %s in the chart's table", b)
			continue
		}
		for col, c := range cells {
			if number(t, c) <= 0 {
				t.Errorf("chart, batch %s: %s = %q, want a positive figure", b, col, c)
			}
		}
	}
	if len(drawn) != 1 {
		t.Fatalf("Draw called %d times, want once", len(drawn))
	}
	c := drawn[0]
	if len(c.Points) != 3 || !strings.Contains(c.Title, "k = 7") || c.Series != series {
		t.Errorf("chart handed to Draw: %+v, want 3 points, k = 7 in the title and the series", c)
	}
	for _, p := range c.Points {
		if cells := points[p.Label]; cells == nil || count(p.Batch) != p.Label {
			t.Errorf("chart point %+v: not in the report's table", p)
		}
		for i, r := range p.Rates {
			if !(r > 0) {
				t.Errorf("chart point %s: rate of %s = %v, want positive", p.Label, series[i], r)
			}
		}
	}

	// Everything written is deleted, and the settings are back.
	if keys, err := rdb.Keys(ctx, "*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("keys left behind: %v (%v)", keys, err)
	}
	after, err := rdb.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"slowlog-log-slower-than", "slowlog-max-len", "latency-tracking-info-percentiles"} {
		if after[name] != before[name] {
			t.Errorf("%s is %q after Run, want %q as before", name, after[name], before[name])
		}
	}
}

// tableRows returns the rows of the markdown table whose header line starts
// with head, each as its cells by column name, by their first keyCells
// cells joined with spaces.
func tableRows(report, head string, keyCells int) map[string]map[string]string {
	rows := make(map[string]map[string]string)
	split := func(line string) []string {
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		return cells
	}
	lines := strings.Split(report, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, head+" ") {
			continue
		}
		names := split(line)
		for _, line := range lines[i+2:] {
			if !strings.HasPrefix(line, "|") {
				break
			}
			cells := split(line)
			row := make(map[string]string)
			for j, c := range cells {
				row[names[j]] = c
			}
			rows[strings.Join(cells[:keyCells], " ")] = row
		}
		break
	}
	return rows
}

// windowMemory returns the figures of line 13b: events held, bytes per
// event, and bytes per event in theory.
func windowMemory(report string) (held, per, theory float64, ok bool) {
	re := regexp.MustCompile(`bytes / ([0-9,]+) events held = ([0-9.]+) bytes per event;\n.* = ([0-9.]+) bytes per event \(`)
	m := re.FindStringSubmatch(report)
	if m == nil {
		return 0, 0, 0, false
	}
	f := func(s string) float64 {
		v, _ := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
		return v
	}
	return f(m[1]), f(m[2]), f(m[3]), true
}

// records returns the bytes per call of line 13c, one figure per kind of
// call.
func records(report string) []string {
	re := regexp.MustCompile(`bytes, [-+][0-9,]+ keys: (-?[0-9.]+) bytes and [0-9.]+ keys per (call|once-id)\n`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(report, -1) {
		out = append(out, m[1])
	}
	return out
}

// number parses a figure of the report: 1,234.5 or 0.45x.
func number(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimRight(strings.ReplaceAll(s, ",", ""), "x%"), 64)
	if err != nil {
		t.Errorf("%q is not a number", s)
	}
	return v
}
