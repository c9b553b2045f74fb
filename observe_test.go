package rbloom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// recorder is an Observer that keeps every call it is told of, and marks
// the context of each call so that the test sees where it goes.
type recorder struct {
	mu     sync.Mutex
	starts []Call
	ends   []Call
	bad    []string // what Start and End found wrong
}

type callMark struct{}

func (r *recorder) Start(ctx context.Context, c Call) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.Duration != 0 || c.Err != nil || c.Start.IsZero() {
		r.bad = append(r.bad, fmt.Sprintf("Start(%+v): Duration and Err set, or no Start", c))
	}
	r.starts = append(r.starts, c)
	return context.WithValue(ctx, callMark{}, c.Method)
}

func (r *recorder) End(ctx context.Context, c Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if got := ctx.Value(callMark{}); got != c.Method {
		r.bad = append(r.bad, fmt.Sprintf("End of %s got the context of %v", c.Method, got))
	}
	r.ends = append(r.ends, c)
}

// take returns the calls ended since the last take, and fails the test
// on what Start and End found wrong, and on a call started and not ended.
func (r *recorder) take(t *testing.T) []Call {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bad {
		t.Error(b)
	}
	if len(r.starts) != len(r.ends) {
		t.Errorf("%d calls started, %d ended", len(r.starts), len(r.ends))
	}
	ends := r.ends
	r.starts, r.ends, r.bad = nil, nil, nil
	return ends
}

// marks is a go-redis hook that records the mark of the context of every
// command sent, as a tracing hook would find its parent span.
type marks struct {
	mu   sync.Mutex
	seen map[any]int
}

func (m *marks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (m *marks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		m.note(ctx)
		return next(ctx, cmd)
	}
}

func (m *marks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		m.note(ctx)
		return next(ctx, cmds)
	}
}

func (m *marks) note(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen[ctx.Value(callMark{})]++
}

func (m *marks) take() map[any]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.seen
	m.seen = map[any]int{}
	return s
}

// want is what a test expects of one observed call.
type want struct {
	typ, method string
	items       int
	kind        string // ErrorKind of its error
}

func checkCalls(t *testing.T, got []Call, filter string, wants ...want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("observed %d calls, want %d: %+v", len(got), len(wants), got)
	}
	for i, c := range got {
		w := wants[i]
		if c.Type != w.typ || c.Method != w.method || c.Filter != filter || c.Items != w.items || ErrorKind(c.Err) != w.kind {
			t.Errorf("call %d = %s.%s(%s, %d items) kind %q (%v), want %s.%s(%s, %d items) kind %q",
				i, c.Type, c.Method, c.Filter, c.Items, ErrorKind(c.Err), c.Err, w.typ, w.method, filter, w.items, w.kind)
		}
		if c.Duration <= 0 || c.Start.IsZero() || time.Since(c.Start) < c.Duration {
			t.Errorf("call %d (%s): Start %v, Duration %v", i, c.Method, c.Start, c.Duration)
		}
	}
}

// TestObserver: an Observer sees each call of a handle, with its type,
// method, filter, items and error, and the context it returns is the one
// every Redis command of the call carries, and the one End gets.
func TestObserver(t *testing.T) {
	rdb := realRedis(t)
	m := &marks{seen: map[any]int{}}
	rdb.AddHook(m)
	rec := &recorder{}
	o := Options{Capacity: 1000, Observer: rec}

	c := must(NewCounting(rdb, "seen", o)).on(t)
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	must(c.AddMany(ctx, []string{"a", "b", "c"})).on(t)
	must(c.Add(ctx, "d")).on(t)
	must(c.TestMany(ctx, []string{"a", "z"})).on(t)
	must(c.TestOrAddMany(ctx, []string{"e"})).on(t)
	must(c.AddManyOnce(ctx, []string{"f", "g"}, "op1")).on(t)
	must(c.RemoveMany(ctx, []string{"a"})).on(t)
	must(c.RemoveOnce(ctx, "b", "op2")).on(t)
	must(c.CountMany(ctx, []string{"c", "d", "e"})).on(t)
	must(c.Info(ctx)).on(t)
	if err := c.Rebuild(ctx, func(add func([]string) error) error { return add([]string{"c", "d"}) }); err != nil {
		t.Fatal(err)
	}
	if err := c.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	checkCalls(t, rec.take(t), "seen",
		want{"Counting", "Create", 0, ""},
		want{"Counting", "AddMany", 3, ""},
		want{"Counting", "AddMany", 1, ""},
		want{"Counting", "TestMany", 2, ""},
		want{"Counting", "TestOrAddMany", 1, ""},
		want{"Counting", "AddManyOnce", 2, ""},
		want{"Counting", "RemoveMany", 1, ""},
		want{"Counting", "RemoveManyOnce", 1, ""},
		want{"Counting", "CountMany", 3, ""},
		want{"Counting", "Info", 0, ""},
		want{"Counting", "Rebuild", 0, ""},
		want{"Counting", "Drop", 0, ""},
	)
	seen := m.take()
	if n := seen[nil]; n != 0 {
		t.Errorf("%d Redis round trips carried a context that was not the observer's: %v", n, seen)
	}
	for _, method := range []string{"Create", "AddMany", "TestMany", "RemoveManyOnce", "Info", "Rebuild", "Drop"} {
		if seen[method] == 0 {
			t.Errorf("no Redis round trip carried the context of %s: %v", method, seen)
		}
	}

	// Errors, with their kinds: a filter never made, a full cuckoo
	// filter, a classic filter's Remove (which sends nothing), an id
	// reused, a context already done.
	if _, err := c.Test(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Test of a dropped filter = %v, want ErrNotFound", err)
	}
	checkCalls(t, rec.take(t), "seen", want{"Counting", "TestMany", 1, "not_found"})

	k := must(NewCuckoo(rdb, "tiny", Options{Slots: 64, Hashes: 12, Observer: rec})).on(t)
	if err := k.Create(ctx); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		must(k.Add(ctx, "a")).on(t)
	}
	if _, err := k.Add(ctx, "a"); !errors.Is(err, ErrFull) {
		t.Fatalf("9th Add = %v, want ErrFull", err)
	}
	if _, err := k.AddManyOnce(ctx, []string{"x"}, "op"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.AddManyOnce(ctx, []string{"y"}, "op"); !errors.Is(err, ErrOpIDReused) {
		t.Fatalf("AddManyOnce with a used id = %v, want ErrOpIDReused", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := k.Count(done, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Count with a canceled context = %v, want context.Canceled", err)
	}
	calls := rec.take(t)
	wants := []want{{"Cuckoo", "Create", 0, ""}}
	for range 8 {
		wants = append(wants, want{"Cuckoo", "AddMany", 1, ""})
	}
	wants = append(wants, want{"Cuckoo", "AddMany", 1, "full"},
		want{"Cuckoo", "AddManyOnce", 1, ""}, want{"Cuckoo", "AddManyOnce", 1, "op_id_reused"},
		want{"Cuckoo", "CountMany", 1, "canceled"})
	checkCalls(t, calls, "tiny", wants...)

	b := must(NewClassic(rdb, "bits", Options{Capacity: 100, Observer: rec})).on(t)
	if _, err := b.Remove(ctx, "a"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Classic.Remove = %v, want ErrUnsupported", err)
	}
	if _, err := b.RemoveManyOnce(ctx, []string{"a", "b"}, "op"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Classic.RemoveManyOnce = %v, want ErrUnsupported", err)
	}
	if _, err := b.Count(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Classic.Count = %v, want ErrNotFound", err)
	}
	checkCalls(t, rec.take(t), "bits",
		want{"Classic", "RemoveMany", 1, "unsupported"},
		want{"Classic", "RemoveManyOnce", 2, "unsupported"},
		want{"Classic", "CountMany", 1, "not_found"})

	// Open's handle has the Observer of Open's options.
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	opened := must(Open(ctx, rdb, "seen", Options{Observer: rec})).on(t)
	must(opened.Test(ctx, "a")).on(t)
	checkCalls(t, rec.take(t), "seen", want{"Counting", "Create", 0, ""}, want{"Counting", "TestMany", 1, ""})
}

// TestObserverWindow: a Window's calls are observed with the type
// "Window", and carry the observer's context to Redis.
func TestObserverWindow(t *testing.T) {
	rdb := realRedis(t)
	m := &marks{seen: map[any]int{}}
	rdb.AddHook(m)
	rec := &recorder{}
	w := created(t, must(NewWindow(rdb, "events", WindowOptions{EventsPerBucket: 100, Bucket: time.Minute, Span: 2 * time.Minute, Observer: rec})).on(t))
	must(w.TestOrAddMany(ctx, []string{"a", "b"})).on(t)
	must(w.TestOrAdd(ctx, "a")).on(t)
	must(w.TestMany(ctx, []string{"a", "b", "c"})).on(t)
	must(w.TestOrAddManyOnce(ctx, []string{"c"}, "op")).on(t)
	if _, err := w.TestOrAddManyOnce(ctx, []string{"d"}, ""); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("TestOrAddManyOnce with no id = %v, want ErrInvalidOptions", err)
	}
	must(w.Info(ctx)).on(t)
	if err := w.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	checkCalls(t, rec.take(t), "events",
		want{"Window", "Create", 0, ""},
		want{"Window", "TestOrAddMany", 2, ""},
		want{"Window", "TestOrAddMany", 1, ""},
		want{"Window", "TestMany", 3, ""},
		want{"Window", "TestOrAddManyOnce", 1, ""},
		want{"Window", "TestOrAddManyOnce", 1, "invalid_options"},
		want{"Window", "Info", 0, ""},
		want{"Window", "Drop", 0, ""},
	)
	seen := m.take()
	if seen[nil] != 0 {
		t.Errorf("%d Redis round trips carried a context that was not the observer's: %v", seen[nil], seen)
	}
	for _, method := range []string{"TestOrAddMany", "TestMany", "TestOrAddManyOnce", "Info", "Drop"} {
		if seen[method] == 0 {
			t.Errorf("no Redis round trip carried the context of %s: %v", method, seen)
		}
	}
}

// TestObserverPanic: a call that panics (in a Rebuild's fill) is still
// ended, with an error, and the panic goes on.
func TestObserverPanic(t *testing.T) {
	rdb := realRedis(t)
	rec := &recorder{}
	c := must(NewCounting(rdb, "panics", Options{Capacity: 100, Observer: rec})).on(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the fill's panic", r)
			}
		}()
		c.Rebuild(ctx, func(add func([]string) error) error { panic("boom") })
	}()
	calls := rec.take(t)
	if len(calls) != 1 || calls[0].Method != "Rebuild" || calls[0].Err == nil || ErrorKind(calls[0].Err) != "other" {
		t.Fatalf("observed %+v, want one Rebuild ended with an error", calls)
	}
}

// timeoutErr is a network timeout, as go-redis returns on a read that
// outlasts its deadline.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func TestErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{callError("add", failf(ErrFull, "partition 0")), "full"},
		{callError("add", &BatchError{Err: failf(ErrFull, "x")}), "full"},
		{callError("add", failf(ErrDamaged, "x")), "damaged"},
		{callError("add", failf(ErrNotReplicated, "x")), "not_replicated"},
		{callError("test", failf(ErrLoading, "x")), "loading"},
		{callError("test", failf(ErrNotFound, "x")), "not_found"},
		{callError("add", failf(ErrOpIDReused, "x")), "op_id_reused"},
		{callError("add", failf(ErrParamsMismatch, "x")), "params_mismatch"},
		{callError("add", failf(ErrNotFilter, "x")), "not_filter"},
		{callError("new", failf(ErrInvalidOptions, "x")), "invalid_options"},
		{callError("rebuild", ErrRebuilding), "rebuilding"},
		{callError("rebuild", failf(ErrRebuildLost, "x")), "rebuild_lost"},
		{callError("add", failf(ErrNoFunctions, "x")), "no_functions"},
		{callError("restore", failf(ErrExists, "x")), "exists"},
		{callError("restore", failf(ErrBadDump, "x")), "bad_dump"},
		{callError("remove", errNoRemove), "unsupported"},
		{callError("test", context.Canceled), "canceled"},
		{callError("test", fmt.Errorf("read: %w", context.DeadlineExceeded)), "deadline_exceeded"},
		{callError("test", &net.OpError{Op: "read", Err: timeoutErr{}}), "timeout"},
		{callError("test", os.ErrDeadlineExceeded), "timeout"},
		{callError("test", errors.New("ERR unknown command")), "other"},
		{callError("test", errors.New("dial tcp: connection refused")), "other"},
	} {
		if got := ErrorKind(tc.err); got != tc.want {
			t.Errorf("ErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	// Every sentinel of errors.go has a kind of its own.
	names := map[string]bool{}
	for _, k := range errorKinds {
		if names[k.name] || strings.ContainsAny(k.name, " -.") {
			t.Errorf("kind %q repeated, or not a word", k.name)
		}
		names[k.name] = true
	}
}

// cancelStart is an Observer whose Start returns a cancelled context.
type cancelStart struct{ recorder }

func (c *cancelStart) Start(ctx context.Context, call Call) context.Context {
	ctx, cancel := context.WithCancel(c.recorder.Start(ctx, call))
	cancel()
	return ctx
}

// TestObserverDump checks that Dump is reported like the other methods,
// and runs with the context Start returns.
func TestObserverDump(t *testing.T) {
	rdb := realRedis(t)
	r := &recorder{}
	f := must(NewCounting(rdb, "od", Options{Capacity: 1000, Observer: r})).on(t)
	must(0, f.Create(ctx)).on(t)
	r.take(t)
	n := must(f.Dump(ctx, io.Discard)).on(t)
	calls := r.take(t)
	if len(calls) != 1 || calls[0].Method != "Dump" || calls[0].Type != "Counting" || calls[0].Filter != "od" || calls[0].Err != nil {
		t.Fatalf("Dump of %d bytes reported as %+v, want one Dump call", n, calls)
	}
	c := &cancelStart{}
	g := must(NewCounting(rdb, "od", Options{Capacity: 1000, Observer: c})).on(t)
	if _, err := g.Dump(ctx, io.Discard); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dump with a context Start cancelled = %v, want context.Canceled", err)
	}
	if calls := c.take(t); len(calls) != 1 || !errors.Is(calls[0].Err, context.Canceled) {
		t.Fatalf("reported %+v, want one Dump ending canceled", calls)
	}
}
