// Package rbloomotel records the calls of rbloom's filters as OpenTelemetry
// metrics and spans, and their state (Info) as gauges, as go-redis's
// redisotel does for Redis commands.
//
// An Observer is an rbloom.Observer: set it in the Options of the
// handles to observe (Options.Observer, WindowOptions.Observer). Each call
// of their methods then counts in these instruments, whose attributes
// are rbloom.type (Counting, Classic, Cuckoo or Window), rbloom.method
// (AddMany, TestMany ...: a one-item method counts as its batch form),
// rbloom.filter (the filter's name) and rbloom.outcome (ok or error):
//
//	rbloom.calls          counter    {call}   the calls
//	rbloom.items          counter    {item}   the items (events) they were given
//	rbloom.call.duration  histogram  s        how long they took
//	rbloom.errors         counter    {error}  the calls that failed, by error.type
//
// error.type is rbloom.ErrorKind of the call's error: full, damaged,
// not_replicated, loading, not_found, op_id_reused, canceled,
// deadline_exceeded, timeout, other ... (rbloom.errors has no
// rbloom.outcome). Each call is also a span, of kind client, named after
// its type and method ("rbloom.Counting.AddMany"), with db.system
// "redis", db.operation its method, rbloom.filter, rbloom.type and
// rbloom.items; a failed call records its error, sets the span's status
// to Error and error.type to its kind. The span is in the context the
// call runs with, so the spans of go-redis's own instrumentation
// (redisotel on the client) are its children: one per round trip.
//
// ObserveInfo adds gauges read from a filter's Info: see it. The filter's
// name is an attribute of every instrument: observe a bounded set of
// filters, as the names of tables or streams are.
package rbloomotel

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.24.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/rbloom/rbloom"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/rbloom/rbloom/rbloomotel"

// The attribute keys of the instruments and spans, besides semconv's
// (db.system, db.operation, error.type).
const (
	FilterKey  = attribute.Key("rbloom.filter")  // the filter's name
	TypeKey    = attribute.Key("rbloom.type")    // Counting, Classic, Cuckoo or Window
	MethodKey  = attribute.Key("rbloom.method")  // AddMany, TestMany ...
	OutcomeKey = attribute.Key("rbloom.outcome") // ok or error
	ItemsKey   = attribute.Key("rbloom.items")   // a span's number of items
)

// durationBounds are the bucket bounds of rbloom.call.duration, in
// seconds: a call takes from about a hundred microseconds (one item, one
// round trip) to seconds (a large batch, Info of a large filter, Rebuild).
var durationBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Option configures NewObserver.
type Option func(*config)

type config struct {
	mp    metric.MeterProvider
	tp    trace.TracerProvider
	attrs []attribute.KeyValue
}

// WithMeterProvider sets the MeterProvider the instruments come from.
// Default: the global one (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets the TracerProvider the spans come from.
// Default: the global one (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithAttributes adds attributes to every span and every measurement: a
// server.address, say, since rbloom does not know its client's.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) { c.attrs = append(c.attrs, attrs...) }
}

// Observer records the calls it sees (it is an rbloom.Observer) as
// metrics and spans. It is safe for concurrent use, and one Observer may
// serve any number of handles.
type Observer struct {
	tracer   trace.Tracer
	meter    metric.Meter
	attrs    []attribute.KeyValue
	spanOpts []trace.SpanStartOption

	calls    metric.Int64Counter
	items    metric.Int64Counter
	duration metric.Float64Histogram
	errs     metric.Int64Counter

	gauges gauges
}

var _ rbloom.Observer = (*Observer)(nil)

// NewObserver returns an Observer whose instruments and tracer come from
// the providers of opts (the global ones by default). It fails when an
// instrument cannot be made.
func NewObserver(opts ...Option) (*Observer, error) {
	c := config{mp: otel.GetMeterProvider(), tp: otel.GetTracerProvider()}
	for _, opt := range opts {
		opt(&c)
	}
	o := &Observer{
		tracer: c.tp.Tracer(ScopeName),
		meter:  c.mp.Meter(ScopeName),
		attrs:  c.attrs,
		spanOpts: []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(append([]attribute.KeyValue{semconv.DBSystemRedis}, c.attrs...)...),
		},
	}
	var err, e error
	o.calls, e = o.meter.Int64Counter("rbloom.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Calls of rbloom's methods."))
	err = errors.Join(err, e)
	o.items, e = o.meter.Int64Counter("rbloom.items", metric.WithUnit("{item}"),
		metric.WithDescription("Items (a window's events) given to rbloom's methods."))
	err = errors.Join(err, e)
	o.duration, e = o.meter.Float64Histogram("rbloom.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of the calls of rbloom's methods."),
		metric.WithExplicitBucketBoundaries(durationBounds...))
	err = errors.Join(err, e)
	o.errs, e = o.meter.Int64Counter("rbloom.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Calls of rbloom's methods that failed, by error.type."))
	err = errors.Join(err, e)
	err = errors.Join(err, o.gauges.make(o.meter))
	if err != nil {
		return nil, err
	}
	return o, nil
}

// spanKey holds, in the context of a call, the span Start began for it.
type spanKey struct{}

// untracedKey marks the context of ObserveInfo's own Info calls, which
// make no span: they belong to no request, and would each be a trace.
type untracedKey struct{}

// Start begins the call's span, unless it is an Info of ObserveInfo's,
// and returns the context that holds it.
func (o *Observer) Start(ctx context.Context, c rbloom.Call) context.Context {
	if ctx.Value(untracedKey{}) != nil {
		// No span, and none for End to end: not a span of an rbloom
		// call the context may come from.
		return context.WithValue(ctx, spanKey{}, nil)
	}
	opts := append(o.spanOpts[:len(o.spanOpts):len(o.spanOpts)], trace.WithTimestamp(c.Start),
		trace.WithAttributes(semconv.DBOperation(c.Method), TypeKey.String(c.Type),
			FilterKey.String(c.Filter), ItemsKey.Int(c.Items)))
	ctx, span := o.tracer.Start(ctx, "rbloom."+c.Type+"."+c.Method, opts...)
	return context.WithValue(ctx, spanKey{}, span)
}

// End records the call in the metrics, and ends its span.
func (o *Observer) End(ctx context.Context, c rbloom.Call) {
	outcome := "ok"
	if c.Err != nil {
		outcome = "error"
	}
	attrs := make([]attribute.KeyValue, 0, 4+len(o.attrs))
	attrs = append(attrs, TypeKey.String(c.Type), MethodKey.String(c.Method), FilterKey.String(c.Filter))
	attrs = append(attrs, o.attrs...)
	set := metric.WithAttributes(append(attrs, OutcomeKey.String(outcome))...)
	o.calls.Add(ctx, 1, set)
	o.items.Add(ctx, int64(c.Items), set)
	o.duration.Record(ctx, c.Duration.Seconds(), set)
	if c.Err != nil {
		o.errs.Add(ctx, 1, metric.WithAttributes(append(attrs, semconv.ErrorTypeKey.String(rbloom.ErrorKind(c.Err)))...))
	}
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	if c.Err != nil {
		span.RecordError(c.Err)
		span.SetStatus(codes.Error, c.Err.Error())
		span.SetAttributes(semconv.ErrorTypeKey.String(rbloom.ErrorKind(c.Err)))
	}
	span.End(trace.WithTimestamp(c.Start.Add(c.Duration)))
}

// InfoSource is what ObserveInfo reads: every rbloom.Filter (*Counting,
// *Classic, *Cuckoo) is one.
type InfoSource interface {
	Info(ctx context.Context) (*rbloom.Info, error)
	Name() string
}

// gauges are the instruments ObserveInfo reports in.
type gauges struct {
	exists, items, bytes, overfull, damaged metric.Int64ObservableGauge
	fill, load, fpr, measured               metric.Float64ObservableGauge
}

func (g *gauges) make(m metric.Meter) error {
	var err, e error
	i64 := func(name, unit, desc string) metric.Int64ObservableGauge {
		var gauge metric.Int64ObservableGauge
		gauge, e = m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = errors.Join(err, e)
		return gauge
	}
	f64 := func(name, desc string) metric.Float64ObservableGauge {
		var gauge metric.Float64ObservableGauge
		gauge, e = m.Float64ObservableGauge(name, metric.WithUnit("1"), metric.WithDescription(desc))
		err = errors.Join(err, e)
		return gauge
	}
	g.exists = i64("rbloom.filter.exists", "", "1 when some partition of the filter exists, 0 when Redis lost it or it was never made (Info.Exists).")
	g.items = i64("rbloom.filter.items", "{item}", "Items added minus items removed (Info.Items).")
	g.bytes = i64("rbloom.filter.size", "By", "Memory the filter's keys take in Redis (Info.Bytes).")
	g.overfull = i64("rbloom.filter.overfull", "", "1 when the filter holds more than it was sized for (Info.Overfull): rebuild it bigger.")
	g.damaged = i64("rbloom.filter.damaged", "", "1 when some partitions are missing or hold something else (Info.Damaged): drop and rebuild it.")
	g.fill = f64("rbloom.filter.fill", "Items over capacity (Info.Fill).")
	g.load = f64("rbloom.filter.load", "Share of a cuckoo filter's slots that hold a fingerprint (Info.Load); cuckoo filters only.")
	g.fpr = f64("rbloom.filter.false_positives", "False-positive rate expected with the filter's items (Info.FalsePositiveRate).")
	g.measured = f64("rbloom.filter.measured_false_positives", "False-positive rate its slots give as they are (Info.MeasuredFalsePositiveRate).")
	return err
}

func (g *gauges) all() []metric.Observable {
	return []metric.Observable{g.exists, g.items, g.bytes, g.overfull, g.damaged, g.fill, g.load, g.fpr, g.measured}
}

// ObserveInfo reports f's Info in gauges, at each collection of the
// meter's readers, read from Redis at most once per interval (each
// collection when interval is 0): Info scans the whole filter (see
// rbloom's Counting.Info), so take an interval that keeps that cost
// small, a minute, say. A collection within the interval reports the
// last Info read. The gauges, with the attribute rbloom.filter (and those
// of WithAttributes):
//
//	rbloom.filter.exists                   1 or 0  Info.Exists: 0 when Redis lost the filter
//	rbloom.filter.items                    {item}  Info.Items
//	rbloom.filter.size                     By      Info.Bytes
//	rbloom.filter.fill                     1       Info.Fill
//	rbloom.filter.load                     1       Info.Load, of a cuckoo filter only
//	rbloom.filter.false_positives          1       Info.FalsePositiveRate, from the items
//	rbloom.filter.measured_false_positives 1       Info.MeasuredFalsePositiveRate, from the slots
//	rbloom.filter.overfull                 1 or 0  Info.Overfull()
//	rbloom.filter.damaged                  1 or 0  Info.Damaged
//
// A collection whose Info fails reports none of them for f, and returns
// the error to the reader (whose exporter hands it to otel.Handle). The
// Info calls run with the collection's context, and make no span (when f
// has this Observer, they count in its metrics as Info calls). Unregister
// the Registration to stop.
func (o *Observer) ObserveInfo(f InfoSource, interval time.Duration) (metric.Registration, error) {
	if interval < 0 {
		return nil, errors.New("rbloomotel: ObserveInfo: negative interval")
	}
	r := &infoReader{f: f, every: interval, attrs: metric.WithAttributes(append([]attribute.KeyValue{FilterKey.String(f.Name())}, o.attrs...)...)}
	return o.meter.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		in, err := r.read(ctx)
		if err != nil {
			return err
		}
		o.gauges.report(obs, in, r.attrs)
		return nil
	}, o.gauges.all()...)
}

// infoReader keeps the last Info of one filter.
type infoReader struct {
	f     InfoSource
	every time.Duration
	attrs metric.MeasurementOption

	mu   sync.Mutex
	last *rbloom.Info
	at   time.Time
}

func (r *infoReader) read(ctx context.Context) (*rbloom.Info, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != nil && time.Since(r.at) < r.every {
		return r.last, nil
	}
	in, err := r.f.Info(context.WithValue(ctx, untracedKey{}, true))
	if err != nil {
		return nil, err
	}
	r.last, r.at = in, time.Now()
	return in, nil
}

func (g *gauges) report(obs metric.Observer, in *rbloom.Info, attrs metric.MeasurementOption) {
	b := func(v bool) int64 {
		if v {
			return 1
		}
		return 0
	}
	obs.ObserveInt64(g.exists, b(in.Exists), attrs)
	obs.ObserveInt64(g.items, in.Items, attrs)
	obs.ObserveInt64(g.bytes, in.Bytes, attrs)
	obs.ObserveInt64(g.overfull, b(in.Overfull()), attrs)
	obs.ObserveInt64(g.damaged, b(in.Damaged), attrs)
	obs.ObserveFloat64(g.fill, in.Fill, attrs)
	if in.Mode == rbloom.ModeCuckoo {
		obs.ObserveFloat64(g.load, in.Load, attrs)
	}
	obs.ObserveFloat64(g.fpr, in.FalsePositiveRate, attrs)
	obs.ObserveFloat64(g.measured, in.MeasuredFalsePositiveRate, attrs)
}
