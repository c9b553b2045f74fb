package rbloom

import (
	"context"
	"errors"
	"net"
	"time"
)

// Observer sees the calls of a handle made with it (Options.Observer,
// WindowOptions.Observer): each call of its methods but Name, with its
// method, filter, number of items, duration and error. It is
// how metrics and traces are taken without rbloom depending on a
// telemetry library: the module github.com/rbloom/rbloom/rbloomotel
// gives one for OpenTelemetry.
//
// Start runs as the call begins, before it sends anything, and End once
// it returns, on the goroutine of the call; calls of one handle run
// concurrently, so an Observer must be safe for concurrent use. Both
// must return quickly: they are on the path of every call.
//
// The one-item methods are reported as their batch form with one item
// (Add as AddMany, Test as TestMany, AddOnce as AddManyOnce). Resize is
// not reported (the calls of the handle it returns are), nor are the
// constructors and Open. A handle without an Observer (nil, the default)
// costs nothing more.
type Observer interface {
	// Start is called as a call begins. The context it returns is the
	// one the call runs with, and so the one every Redis command of the
	// call carries (a go-redis hook sees it), and the one End gets:
	// return ctx, or one derived from it (holding a span, say).
	Start(ctx context.Context, c Call) context.Context

	// End is called once the call returns, with the context Start
	// returned and c as Start got it, with Duration and Err set.
	End(ctx context.Context, c Call)
}

// Call describes one call of a handle's method to an Observer.
type Call struct {
	// Type is the handle's type: "Counting", "Classic", "Cuckoo" or
	// "Window".
	Type string
	// Method is the method's name, as AddMany, TestOrAddManyOnce or Info
	// (see Observer for the one-item forms).
	Method string
	// Filter is the filter's name (the window's, for a Window).
	Filter string
	// Items is the number of items (a window's events) the call was
	// given; 0 for the methods that take none (Create, Rebuild, Info,
	// Drop, Dump).
	Items int
	// Start is when the call began.
	Start time.Time
	// Duration is how long the call took: set for End.
	Duration time.Duration
	// Err is the error the call returned, nil when it succeeded: set for
	// End. ErrorKind names its kind.
	Err error
}

// The kinds of error ErrorKind returns.
var errorKinds = []struct {
	err  error
	name string
}{
	{ErrFull, "full"},
	{ErrDamaged, "damaged"},
	{ErrNotReplicated, "not_replicated"},
	{ErrLoading, "loading"},
	{ErrNotFound, "not_found"},
	{ErrOpIDReused, "op_id_reused"},
	{ErrParamsMismatch, "params_mismatch"},
	{ErrNotFilter, "not_filter"},
	{ErrInvalidOptions, "invalid_options"},
	{ErrRebuilding, "rebuilding"},
	{ErrRebuildLost, "rebuild_lost"},
	{ErrNoFunctions, "no_functions"},
	{ErrExists, "exists"},
	{ErrBadDump, "bad_dump"},
	{errors.ErrUnsupported, "unsupported"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "deadline_exceeded"},
}

// ErrorKind names the kind of err, an error of an rbloom call, in a word
// fit for a metric's attribute: "" for nil; for rbloom's sentinels
// "full" (ErrFull), "damaged", "not_replicated", "loading", "not_found",
// "op_id_reused", "params_mismatch", "not_filter", "invalid_options",
// "rebuilding", "rebuild_lost", "no_functions", "exists" and "bad_dump"
// (of Restore); "unsupported" (an error wrapping errors.ErrUnsupported);
// "canceled" and "deadline_exceeded"
// (the context's errors); "timeout" (a network timeout, as go-redis
// returns when a read outlasts its ReadTimeout or the context's
// deadline); else "other" (a lost connection, a Redis error reply). A
// BatchError has the kind of its Err.
func ErrorKind(err error) string {
	if err == nil {
		return ""
	}
	for _, k := range errorKinds {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "other"
}

// errPanicked is the Err an Observer's End gets for a call that
// panicked (in a Rebuild's fill, say); the panic goes on.
var errPanicked = errors.New("rbloom: the call panicked")

// observe runs call, telling o of it as c when o is not nil: call runs
// with the context o's Start returned.
func observe[T any](ctx context.Context, o Observer, c Call, call func(ctx context.Context) (T, error)) (T, error) {
	if o == nil {
		return call(ctx)
	}
	c.Start = time.Now()
	ctx = o.Start(ctx, c)
	ended := false
	defer func() {
		if !ended {
			c.Duration, c.Err = time.Since(c.Start), errPanicked
			o.End(ctx, c)
		}
	}()
	v, err := call(ctx)
	c.Duration, c.Err = time.Since(c.Start), err
	ended = true
	o.End(ctx, c)
	return v, err
}

// observeErr is observe of a call that returns only an error.
func observeErr(ctx context.Context, o Observer, c Call, call func(ctx context.Context) error) error {
	_, err := observe(ctx, o, c, func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
	return err
}

// callOf describes a call of method on b with n items.
func (b *base) callOf(method string, n int) Call {
	typ := "Counting"
	switch b.f.h.mode {
	case ModeClassic:
		typ = "Classic"
	case ModeCuckoo:
		typ = "Cuckoo"
	}
	return Call{Type: typ, Method: method, Filter: b.f.name, Items: n}
}

// callOf describes a call of method on w with n events.
func (w *Window) callOf(method string, n int) Call {
	return Call{Type: "Window", Method: method, Filter: w.f.name, Items: n}
}
