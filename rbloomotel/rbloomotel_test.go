package rbloomotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomotel"
	"github.com/rbloom/rbloom/rbloomtest"
)

var ctx = context.Background()

// setup starts a redis-server (skipped without one, failed under CI) and
// an Observer whose metrics and spans the test reads.
type setup struct {
	rdb    *redis.Client
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	obs    *rbloomotel.Observer
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	s := &setup{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	s.rdb = redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t)})
	t.Cleanup(func() { s.rdb.Close() })
	s.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
	obs, err := rbloomotel.NewObserver(rbloomotel.WithMeterProvider(mp), rbloomotel.WithTracerProvider(s.tp),
		rbloomotel.WithAttributes(attribute.String("service.role", "test")))
	if err != nil {
		t.Fatal(err)
	}
	s.obs = obs
	return s
}

// point is one data point of a metric: its attributes (those the test
// looks at, as "k=v" sorted and joined by ","), and its value.
type point struct {
	attrs string
	value float64 // a sum's or gauge's value; a histogram's count
	sum   float64 // a histogram's sum
}

// collect returns the points of every metric, by name. The error of the
// collection, if any, is returned with what it did collect.
func (s *setup) collect(t *testing.T) (map[string][]point, error) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	err := s.reader.Collect(ctx, &rm)
	out := map[string][]point{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != rbloomotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, rbloomotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic {
					t.Errorf("%s is not monotonic", m.Name)
				}
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrString(p.Attributes), value: float64(p.Value)})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrString(p.Attributes), value: float64(p.Count), sum: p.Sum})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrString(p.Attributes), value: float64(p.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = append(out[m.Name], point{attrs: attrString(p.Attributes), value: p.Value})
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out, err
}

func attrString(set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// value returns the value of the point of name whose attributes are
// attrs (sorted "k=v" joined by ","), failing the test when there is none.
func value(t *testing.T, ms map[string][]point, name, attrs string) point {
	t.Helper()
	for _, p := range ms[name] {
		if p.attrs == attrs {
			return p
		}
	}
	t.Errorf("%s has no point {%s}; it has %v", name, attrs, ms[name])
	return point{}
}

// callAttrs are the attributes of a call's point of rbloom.calls,
// rbloom.items and rbloom.call.duration.
func callAttrs(typ, method, filter, outcome string) string {
	return fmt.Sprintf("rbloom.filter=%s,rbloom.method=%s,rbloom.outcome=%s,rbloom.type=%s,service.role=test", filter, method, outcome, typ)
}

// errAttrs are the attributes of a point of rbloom.errors.
func errAttrs(typ, method, filter, kind string) string {
	return fmt.Sprintf("error.type=%s,rbloom.filter=%s,rbloom.method=%s,rbloom.type=%s,service.role=test", kind, filter, method, typ)
}

// parents is a go-redis hook that records the span each command's
// context holds, as redisotel's would take for its parent.
type parents struct {
	mu  sync.Mutex
	ids map[trace.SpanID]int
}

func (p *parents) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *parents) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { p.note(ctx); return next(ctx, cmd) }
}
func (p *parents) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { p.note(ctx); return next(ctx, cmds) }
}
func (p *parents) note(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids[trace.SpanContextFromContext(ctx).SpanID()]++
}

// TestCalls: each call counts in rbloom.calls, rbloom.items and
// rbloom.call.duration by type, method, filter and outcome, a failed
// one in rbloom.errors by its kind; each is a span named after it, with
// redisotel's attributes, a child of the caller's span and the parent of
// every Redis command it sends.
func TestCalls(t *testing.T) {
	s := newSetup(t)
	hook := &parents{ids: map[trace.SpanID]int{}}
	s.rdb.AddHook(hook)

	users, err := rbloom.NewCounting(s.rdb, "users", rbloom.Options{Capacity: 1000, Observer: s.obs})
	if err != nil {
		t.Fatal(err)
	}
	if err := users.Create(ctx); err != nil {
		t.Fatal(err)
	}
	parent, root := s.tp.Tracer("test").Start(ctx, "request")
	if _, err := users.AddMany(parent, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	root.End()
	for _, item := range []string{"a", "z"} {
		if _, err := users.Test(ctx, item); err != nil {
			t.Fatal(err)
		}
	}
	// Errors: a filter never made, a full cuckoo filter.
	missing, _ := rbloom.NewCounting(s.rdb, "missing", rbloom.Options{Capacity: 1000, Observer: s.obs})
	if _, err := missing.Test(ctx, "a"); !errors.Is(err, rbloom.ErrNotFound) {
		t.Fatalf("Test of a filter never made = %v, want ErrNotFound", err)
	}
	tiny, _ := rbloom.NewCuckoo(s.rdb, "tiny", rbloom.Options{Slots: 64, Hashes: 12, Observer: s.obs})
	if err := tiny.Create(ctx); err != nil {
		t.Fatal(err)
	}
	var full error
	for i := 0; i < 9 && full == nil; i++ {
		_, full = tiny.Add(ctx, "a") // 8 copies fit in its two buckets
	}
	if !errors.Is(full, rbloom.ErrFull) {
		t.Fatalf("9th Add = %v, want ErrFull", full)
	}

	ms, err := s.collect(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ, method, filter, outcome string
		calls, items                 float64
	}{
		{"Counting", "Create", "users", "ok", 1, 0},
		{"Counting", "AddMany", "users", "ok", 1, 3},
		{"Counting", "TestMany", "users", "ok", 2, 2},
		{"Counting", "TestMany", "missing", "error", 1, 1},
		{"Cuckoo", "Create", "tiny", "ok", 1, 0},
		{"Cuckoo", "AddMany", "tiny", "ok", 8, 8},
		{"Cuckoo", "AddMany", "tiny", "error", 1, 1},
	} {
		attrs := callAttrs(c.typ, c.method, c.filter, c.outcome)
		if p := value(t, ms, "rbloom.calls", attrs); p.value != c.calls {
			t.Errorf("rbloom.calls{%s} = %v, want %v", attrs, p.value, c.calls)
		}
		if p := value(t, ms, "rbloom.items", attrs); p.value != c.items {
			t.Errorf("rbloom.items{%s} = %v, want %v", attrs, p.value, c.items)
		}
		if p := value(t, ms, "rbloom.call.duration", attrs); p.value != c.calls || p.sum <= 0 || p.sum > 10*c.calls {
			t.Errorf("rbloom.call.duration{%s}: %v calls, %v s in all; want %v calls, a positive sum of seconds", attrs, p.value, p.sum, c.calls)
		}
	}
	if n := len(ms["rbloom.calls"]); n != 7 {
		t.Errorf("rbloom.calls has %d points, want 7: %v", n, ms["rbloom.calls"])
	}
	if got, want := ms["rbloom.errors"], []point{
		{attrs: errAttrs("Cuckoo", "AddMany", "tiny", "full"), value: 1},
		{attrs: errAttrs("Counting", "TestMany", "missing", "not_found"), value: 1},
	}; !samePoints(got, want) {
		t.Errorf("rbloom.errors = %v, want %v", got, want)
	}

	spans := s.spans.Ended()
	var rb []sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if sp.Name() != "request" {
			rb = append(rb, sp)
		}
	}
	if len(rb) != 15 {
		t.Fatalf("%d spans of rbloom, want 15 (2 Create, 1+8+1 AddMany, 3 TestMany)", len(rb))
	}
	add := find(t, rb, "rbloom.Counting.AddMany", "users")
	if add.SpanKind() != trace.SpanKindClient || add.Parent().SpanID() != root.SpanContext().SpanID() ||
		add.SpanContext().TraceID() != root.SpanContext().TraceID() {
		t.Errorf("AddMany span: kind %v, parent %v; want client, child of the request %v", add.SpanKind(), add.Parent().SpanID(), root.SpanContext().SpanID())
	}
	wantAttrs(t, add, map[string]string{"db.system": "redis", "db.operation": "AddMany", "rbloom.filter": "users",
		"rbloom.type": "Counting", "rbloom.items": "3", "service.role": "test"})
	if add.Status().Code != codes.Unset || len(add.Events()) != 0 {
		t.Errorf("AddMany span: status %v, events %v; want unset, none", add.Status(), add.Events())
	}
	if add.EndTime().Sub(add.StartTime()) <= 0 {
		t.Errorf("AddMany span from %v to %v", add.StartTime(), add.EndTime())
	}
	for _, sp := range rb {
		if hook.ids[sp.SpanContext().SpanID()] == 0 {
			t.Errorf("no Redis command of %s (%s) carried its span", sp.Name(), attrOf(sp, "rbloom.filter"))
		}
	}
	if n := hook.ids[trace.SpanID{}]; n != 0 {
		t.Errorf("%d Redis round trips carried no span", n)
	}

	nf := find(t, rb, "rbloom.Counting.TestMany", "missing")
	if nf.Status().Code != codes.Error || !strings.Contains(nf.Status().Description, "filter not found") ||
		attrOf(nf, "error.type") != "not_found" || len(nf.Events()) != 1 || nf.Events()[0].Name != "exception" {
		t.Errorf("span of a Test that failed: status %v, error.type %q, events %v; want Error, not_found, an exception",
			nf.Status(), attrOf(nf, "error.type"), nf.Events())
	}
	var fullSpans int
	for _, sp := range rb {
		if sp.Name() == "rbloom.Cuckoo.AddMany" && attrOf(sp, "error.type") == "full" && sp.Status().Code == codes.Error {
			fullSpans++
		}
	}
	if fullSpans != 1 {
		t.Errorf("%d AddMany spans of tiny ended full, want 1", fullSpans)
	}
}

// samePoints reports whether got, sorted by attributes, is want.
func samePoints(got, want []point) bool {
	if len(got) != len(want) {
		return false
	}
	sort.Slice(got, func(i, j int) bool { return got[i].attrs < got[j].attrs })
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func find(t *testing.T, spans []sdktrace.ReadOnlySpan, name, filter string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, sp := range spans {
		if sp.Name() == name && attrOf(sp, "rbloom.filter") == filter {
			return sp
		}
	}
	t.Fatalf("no span %s of %s", name, filter)
	return nil
}

func attrOf(sp sdktrace.ReadOnlySpan, key string) string {
	for _, a := range sp.Attributes() {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

func wantAttrs(t *testing.T, sp sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := attrOf(sp, k); got != v {
			t.Errorf("span %s: %s = %q, want %q", sp.Name(), k, got, v)
		}
	}
}

// TestInfoGauges: ObserveInfo reports a filter's Info in gauges, read
// at most once per interval, without spans; a filter lost, damaged or
// overfull shows in them, and an Info that fails fails the collection.
func TestInfoGauges(t *testing.T) {
	s := newSetup(t)
	f, err := rbloom.NewCounting(s.rdb, "users", rbloom.Options{Capacity: 1000, Partitions: 2, Observer: s.obs})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.AddMany(ctx, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	reg, err := s.obs.ObserveInfo(f, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	in, err := f.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spansBefore := len(s.spans.Ended())
	ms, err := s.collect(t)
	if err != nil {
		t.Fatal(err)
	}
	attrs := "rbloom.filter=users,service.role=test"
	gauge := func(ms map[string][]point, name string) float64 { t.Helper(); return value(t, ms, name, attrs).value }
	for name, want := range map[string]float64{
		"rbloom.filter.exists": 1, "rbloom.filter.items": 3, "rbloom.filter.size": float64(in.Bytes),
		"rbloom.filter.overfull": 0, "rbloom.filter.damaged": 0, "rbloom.filter.fill": 0.003,
		"rbloom.filter.false_positives":          in.FalsePositiveRate,
		"rbloom.filter.measured_false_positives": in.MeasuredFalsePositiveRate,
	} {
		if got := gauge(ms, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if in.Bytes <= 0 || in.FalsePositiveRate <= 0 || in.MeasuredFalsePositiveRate <= 0 {
		t.Errorf("Info: Bytes %d, rates %v and %v; want them positive", in.Bytes, in.FalsePositiveRate, in.MeasuredFalsePositiveRate)
	}
	if _, ok := ms["rbloom.filter.load"]; ok {
		t.Errorf("rbloom.filter.load reported for a counting filter: %v", ms["rbloom.filter.load"])
	}
	if n := len(s.spans.Ended()); n != spansBefore {
		t.Errorf("the gauges' Info made %d spans, want none", n-spansBefore)
	}
	if got := value(t, ms, "rbloom.calls", callAttrs("Counting", "Info", "users", "ok")).value; got != 2 {
		t.Errorf("Info calls = %v, want 2 (the test's, the gauges')", got)
	}

	// Within the interval, the gauges report the Info read before.
	if _, err := f.AddMany(ctx, []string{"d", "e"}); err != nil {
		t.Fatal(err)
	}
	ms, _ = s.collect(t)
	if got := gauge(ms, "rbloom.filter.items"); got != 3 {
		t.Errorf("items within the interval = %v, want 3, as first read", got)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	ms, _ = s.collect(t)
	if _, ok := ms["rbloom.filter.items"]; ok {
		t.Errorf("gauges reported after Unregister: %v", ms["rbloom.filter.items"])
	}

	// With interval 0, each collection reads Info: a partition deleted,
	// the filter is damaged; all deleted, it does not exist; past its
	// capacity, a filter is overfull.
	if _, err := s.obs.ObserveInfo(f, 0); err != nil {
		t.Fatal(err)
	}
	ms, _ = s.collect(t)
	if got := gauge(ms, "rbloom.filter.items"); got != 5 {
		t.Errorf("items = %v, want 5", got)
	}
	if err := s.rdb.Del(ctx, in.Partitions[1].Key).Err(); err != nil {
		t.Fatal(err)
	}
	ms, _ = s.collect(t)
	if got := gauge(ms, "rbloom.filter.damaged"); got != 1 {
		t.Errorf("damaged = %v, want 1", got)
	}
	if err := f.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	ms, _ = s.collect(t)
	if got, damaged := gauge(ms, "rbloom.filter.exists"), gauge(ms, "rbloom.filter.damaged"); got != 0 || damaged != 0 {
		t.Errorf("exists = %v, damaged %v after Drop; want 0, 0", got, damaged)
	}
	small, _ := rbloom.NewCounting(s.rdb, "small", rbloom.Options{Capacity: 100})
	if err := small.Create(ctx); err != nil {
		t.Fatal(err)
	}
	var many []string
	for i := range 110 {
		many = append(many, fmt.Sprint("item", i))
	}
	if _, err := small.AddMany(ctx, many); err != nil {
		t.Fatal(err)
	}
	if _, err := s.obs.ObserveInfo(small, 0); err != nil {
		t.Fatal(err)
	}
	ms, _ = s.collect(t)
	sm := "rbloom.filter=small,service.role=test"
	overfull, fill, damaged := value(t, ms, "rbloom.filter.overfull", sm).value, value(t, ms, "rbloom.filter.fill", sm).value,
		value(t, ms, "rbloom.filter.damaged", sm).value
	if overfull != 1 || math.Abs(fill-1.1) > 1e-9 || damaged != 0 {
		t.Errorf("small: overfull = %v, fill %v, damaged %v; want 1, 1.1, 0", overfull, fill, damaged)
	}

	// A cuckoo filter reports its load.
	k, _ := rbloom.NewCuckoo(s.rdb, "cuckoo", rbloom.Options{Capacity: 1000})
	if err := k.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := k.AddMany(ctx, many[:100]); err != nil {
		t.Fatal(err)
	}
	kin, _ := k.Info(ctx)
	if _, err := s.obs.ObserveInfo(k, 0); err != nil {
		t.Fatal(err)
	}
	ms, _ = s.collect(t)
	if got := value(t, ms, "rbloom.filter.load", "rbloom.filter=cuckoo,service.role=test").value; got != kin.Load || got <= 0 {
		t.Errorf("load = %v, want Info.Load %v, positive", got, kin.Load)
	}

	// An Info that fails fails the collection, and reports nothing of
	// its filter.
	if err := s.rdb.Set(ctx, "rbloom:{other}", "not a filter", 0).Err(); err != nil {
		t.Fatal(err)
	}
	other, _ := rbloom.NewCounting(s.rdb, "other", rbloom.Options{Capacity: 1000})
	if _, err := s.obs.ObserveInfo(other, 0); err != nil {
		t.Fatal(err)
	}
	ms, err = s.collect(t)
	if !errors.Is(err, rbloom.ErrNotFilter) {
		t.Errorf("collection with a failing Info: %v, want ErrNotFilter", err)
	}
	for _, p := range ms["rbloom.filter.items"] {
		if strings.Contains(p.attrs, "other") {
			t.Errorf("gauge of a filter whose Info failed: %v", p)
		}
	}
	if _, err := s.obs.ObserveInfo(f, -time.Second); err == nil {
		t.Error("ObserveInfo with a negative interval: no error")
	}
}

// TestPrometheusNames: the names the Prometheus exporter gives the
// metrics, as docs/operations.md lists them.
func TestPrometheusNames(t *testing.T) {
	s := newSetup(t)
	reg := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	obs, err := rbloomotel.NewObserver(rbloomotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := rbloom.NewCuckoo(s.rdb, "users", rbloom.Options{Capacity: 1000, Observer: obs})
	if _, err := k.Test(ctx, "a"); !errors.Is(err, rbloom.ErrNotFound) {
		t.Fatalf("Test of a filter never made = %v, want ErrNotFound", err)
	}
	if err := k.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := obs.ObserveInfo(k, 0); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "rbloom") {
			names = append(names, f.GetName()+" "+f.GetType().String())
		}
	}
	want := []string{
		"rbloom_call_duration_seconds HISTOGRAM",
		"rbloom_calls_total COUNTER",
		"rbloom_errors_total COUNTER",
		"rbloom_filter_damaged GAUGE",
		"rbloom_filter_exists GAUGE",
		"rbloom_filter_false_positives_ratio GAUGE",
		"rbloom_filter_fill_ratio GAUGE",
		"rbloom_filter_items GAUGE",
		"rbloom_filter_load_ratio GAUGE",
		"rbloom_filter_measured_false_positives_ratio GAUGE",
		"rbloom_filter_overfull GAUGE",
		"rbloom_filter_size_bytes GAUGE",
		"rbloom_items_total COUNTER",
	}
	sort.Strings(names)
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("Prometheus metrics:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	// The labels of the error: the attributes, with _ for the dots.
	for _, f := range families {
		if f.GetName() != "rbloom_errors_total" {
			continue
		}
		labels := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range map[string]string{"error_type": "not_found", "rbloom_filter": "users", "rbloom_method": "TestMany", "rbloom_type": "Cuckoo"} {
			if labels[k] != v {
				t.Errorf("rbloom_errors_total label %s = %q, want %q (labels %v)", k, labels[k], v, labels)
			}
		}
	}
}

// TestInfoInsideCall: an Info of ObserveInfo whose collection runs in the
// context of an rbloom call makes no span, and leaves the call's open.
func TestInfoInsideCall(t *testing.T) {
	s := newSetup(t)
	f, _ := rbloom.NewCounting(s.rdb, "users", rbloom.Options{Capacity: 1000, Observer: s.obs})
	if _, err := s.obs.ObserveInfo(f, 0); err != nil {
		t.Fatal(err)
	}
	call := rbloom.Call{Type: "Counting", Method: "TestMany", Filter: "users", Items: 1, Start: time.Now()}
	inCall := s.obs.Start(ctx, call)
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(inCall, &rm); err != nil {
		t.Fatal(err)
	}
	if ended := s.spans.Ended(); len(ended) != 0 {
		t.Fatalf("spans ended by a collection: %d, first %s; want none", len(ended), ended[0].Name())
	}
	call.Duration = time.Millisecond
	s.obs.End(inCall, call)
	if ended := s.spans.Ended(); len(ended) != 1 || ended[0].Name() != "rbloom.Counting.TestMany" {
		t.Fatalf("%d spans ended, want the call's", len(ended))
	}
}

// TestConcurrent: calls and collections at once (run with -race): every
// call counts once.
func TestConcurrent(t *testing.T) {
	s := newSetup(t)
	f, _ := rbloom.NewCounting(s.rdb, "users", rbloom.Options{Capacity: 1000, Observer: s.obs})
	if err := f.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.obs.ObserveInfo(f, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				if _, err := f.TestOrAdd(ctx, fmt.Sprint(g, "-", i)); err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			for range 5 {
				var rm metricdata.ResourceMetrics
				if err := s.reader.Collect(ctx, &rm); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(5 * time.Millisecond) // past the interval: the next collection reads Info
	ms, err := s.collect(t)
	if err != nil {
		t.Fatal(err)
	}
	if got := value(t, ms, "rbloom.calls", callAttrs("Counting", "TestOrAddMany", "users", "ok")).value; got != 160 {
		t.Errorf("TestOrAddMany calls = %v, want 160", got)
	}
	if got := value(t, ms, "rbloom.filter.items", "rbloom.filter=users,service.role=test").value; got != 160 {
		t.Errorf("items = %v, want 160", got)
	}
	if n := len(s.spans.Ended()); n != 161 {
		t.Errorf("%d spans, want 161 (Create, 160 TestOrAddMany)", n)
	}
}
