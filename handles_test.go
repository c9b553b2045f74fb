package rbloom

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestHandleOptions is the matrix of per-handle options: for each option,
// two processes whose handles of one filter disagree on it take turns
// through every method, each replaying the other's operation ids. An
// option that belongs to the handle must not change where data lives or
// what it means: no item held tests absent through either handle, a
// replay through the other handle answers what the first call answered
// (applied once), and a call the option refuses fails with its error. An
// option stored with the filter gets ErrParamsMismatch instead, writing
// nothing.
func TestHandleOptions(t *testing.T) {
	_, _, rdb, _ := startReplicated(t)
	if err := InstallFunctions(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	base := Options{Capacity: 2000, Partitions: 2}
	with := func(change func(*Options)) Options {
		o := base
		change(&o)
		return o
	}
	cases := []struct {
		option string
		a, b   Options
		// refused is the error b's writes may fail with (nil: none).
		refused error
	}{
		{"TTL", base, with(func(o *Options) { o.TTL = time.Hour }), nil},
		{"MaxItems", base, with(func(o *Options) { o.MaxItems = 50 }), ErrFull},
		{"UseFunctions", base, with(func(o *Options) { o.UseFunctions = true }), nil},
		{"WaitReplicas", base, with(func(o *Options) { o.WaitReplicas, o.WaitTimeout = 1, 2*time.Second }), nil},
		{"CreateOnWrite", base, with(func(o *Options) { o.CreateOnWrite = true }), nil},
		{"IDLifetime", base, with(func(o *Options) { o.IDLifetime = 2 * time.Hour }), ErrParamsMismatch},
		{"Partitions", base, with(func(o *Options) { o.Partitions = 3 }), ErrParamsMismatch},
		{"ErrorRate", base, with(func(o *Options) { o.ErrorRate = 0.001 }), ErrParamsMismatch},
	}
	for _, mode := range deletableModes {
		for _, tc := range cases {
			t.Run(mode.name+"/"+tc.option, func(t *testing.T) {
				handleOptions(t, rdb, mode.make, "handles-"+mode.name+"-"+tc.option, tc.a, tc.b, tc.refused)
			})
		}
	}
}

// handleOptions is one case of TestHandleOptions: handles a and b, of
// filters made by mk, take turns.
func handleOptions(t *testing.T, rdb Client, mk func(Client, string, Options) (deletable, error), name string, oa, ob Options, refused error) {
	a := must(mk(rdb, name, oa)).on(t)
	b := must(mk(rdb, name, ob)).on(t)
	held := map[string]int{}
	// ok accepts b's refusals of the kind its option documents.
	ok := func(what string, err error) bool {
		t.Helper()
		if err == nil {
			return true
		}
		if refused == nil || !errors.Is(err, refused) {
			t.Errorf("%s: %v", what, err)
		}
		return false
	}
	items := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	if err := a.Create(ctx); err != nil {
		t.Fatal(err)
	}
	must(a.AddMany(ctx, items("a", 40))).on(t)
	for _, item := range items("a", 40) {
		held[item]++
	}
	if _, err := b.AddMany(ctx, items("b", 40)); ok("b.AddMany", err) {
		for _, item := range items("b", 40) {
			held[item]++
		}
	}
	// Ids applied by one, replayed by the other.
	first := must(a.AddOnce(ctx, "once-a", "id-a")).on(t)
	held["once-a"]++
	if again, err := b.AddOnce(ctx, "once-a", "id-a"); ok("b.AddOnce replay", err) && again != first {
		t.Errorf("b's replay of a's AddOnce answered %v, the first call %v: applied twice", again, first)
	}
	if firstB, err := b.AddManyOnce(ctx, items("batch", 20), "batch-b"); ok("b.AddManyOnce", err) {
		for _, item := range items("batch", 20) {
			held[item]++
		}
		if again := must(a.AddManyOnce(ctx, items("batch", 20), "batch-b")).on(t); !slices.Equal(again, firstB) {
			t.Errorf("a's replay of b's batch answered %v, the first call %v", again, firstB)
		}
	}
	must(a.AddMany(ctx, []string{"twice", "twice"})).on(t)
	held["twice"] += 2
	if removed, err := b.RemoveOnce(ctx, "twice", "rm-1"); ok("b.RemoveOnce", err) && removed {
		held["twice"]--
		if again := must(a.RemoveOnce(ctx, "twice", "rm-1")).on(t); !again {
			t.Error("a's replay of b's RemoveOnce answered not removed")
		}
	}
	if seen, err := b.TestOrAdd(ctx, "toa"); ok("b.TestOrAdd", err) && !seen {
		held["toa"]++
	}
	// A rebuild by b from everything held.
	var rows []string
	for item, n := range held {
		for range n {
			rows = append(rows, item)
		}
	}
	ok("b.Rebuild", b.Rebuild(ctx, func(add func([]string) error) error { return add(rows) }))
	if _, err := b.Info(ctx); err != nil && !errors.Is(err, ErrParamsMismatch) {
		t.Errorf("b.Info: %v", err)
	}
	var want []string
	for item, n := range held {
		if n > 0 {
			want = append(want, item)
		}
	}
	slices.Sort(want)
	for _, h := range []deletable{a, b} {
		got, err := h.TestMany(ctx, want)
		if err != nil {
			ok("TestMany", err)
			continue
		}
		for i, present := range got {
			if !present {
				t.Errorf("%q is held and tests absent", want[i])
			}
		}
	}
}
