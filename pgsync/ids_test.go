package pgsync

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/redis/go-redis/v9"
)

func TestOpID(t *testing.T) {
	if got, want := opID(0x16B3748, 0x1A2B3C4D, 7), "pgsync:0/16B3748:0/1A2B3C4D:7"; got != want {
		t.Errorf("opID = %q, want %q", got, want)
	}
	seen := map[string]bool{}
	for _, cp := range []pglogrepl.LSN{1, 2} {
		for _, commit := range []pglogrepl.LSN{10, 11, 1 << 32} {
			for idx := range 3 {
				id := opID(cp, commit, idx)
				if seen[id] {
					t.Errorf("opID(%s, %s, %d) = %q, given before", cp, commit, idx, id)
				}
				seen[id] = true
			}
		}
	}
}

// TestCalls: a group's ops are netted per key, then become its adds and
// its removes, in calls of at most chunk keys, each call named by the
// first op of its first key; the same group gives the same calls (a
// replayed group makes the same calls under the same ids).
func TestCalls(t *testing.T) {
	group := []*txn{
		{commit: 100, ops: []op{{key: "a", idx: 0}, {key: "b", idx: 1}, {remove: true, key: "c", idx: 2}}},
		{commit: 200, ops: []op{{remove: true, key: "d", idx: 0}, {key: "e", idx: 1}, {key: "h", idx: 2}}},
		{commit: 300},
		{commit: 400, ops: []op{{key: "f", idx: 0}, {remove: true, key: "a", idx: 1}, {key: "a", idx: 2}, {remove: true, key: "g", idx: 3}, {remove: true, key: "h", idx: 4}}},
	}
	// "a" nets to one add, "h" to nothing: a key inserted and deleted in
	// the group is not touched, and one deleted and inserted again never
	// reads absent.
	want := []call{
		{keys: []string{"a", "b", "e", "f"}, id: opID(9, 100, 0)},
		{remove: true, keys: []string{"c", "d", "g"}, id: opID(9, 100, 2)},
	}
	if got := calls(9, group); !reflect.DeepEqual(got, want) {
		t.Errorf("calls =\n%+v\nwant\n%+v", got, want)
	}

	big := &txn{commit: 500}
	for i := range 2*chunk + 1 {
		big.ops = append(big.ops, op{key: fmt.Sprint(i), idx: i})
	}
	got := calls(9, []*txn{big})
	if len(got) != 3 || len(got[0].keys) != chunk || len(got[2].keys) != 1 ||
		got[1].id != opID(9, 500, chunk) || got[2].id != opID(9, 500, 2*chunk) {
		t.Errorf("calls of %d adds: %d calls, want 3 of %d, %d, 1", len(big.ops), len(got), chunk, chunk)
	}
	if again := calls(9, []*txn{big}); !reflect.DeepEqual(got, again) {
		t.Error("the same group gave other calls")
	}
	// Every op is in exactly one call, and ids are distinct.
	ids := map[string]bool{}
	n := 0
	for _, c := range calls(9, group) {
		if ids[c.id] {
			t.Errorf("id %s used twice", c.id)
		}
		ids[c.id] = true
		n += len(c.keys)
	}
	if n != 7 {
		t.Errorf("calls hold %d keys, want 7", n)
	}
}

func TestReplayAllowed(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		age time.Duration
		ok  bool
	}{
		{0, true},
		{time.Minute, true},
		{onceWindow - windowMargin, true},
		{onceWindow - windowMargin + time.Second, false},
		{onceWindow, false},
		{3 * time.Hour, false},
	} {
		err := replayAllowed(now.Add(-c.age), now)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrWindowPassed)) {
			t.Errorf("replayAllowed(now - %v) = %v, want ok %v", c.age, err, c.ok)
		}
	}
}

func TestNewRejects(t *testing.T) {
	good := Config{DatabaseURL: "postgres://x", Table: "items", KeyColumn: "id", Publication: "p", Slot: "s", Filter: "f"}
	good.Redis = redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	if _, err := New(good); err != nil {
		t.Fatalf("New(good) = %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"no redis":   func(c *Config) { c.Redis = nil },
		"slot case":  func(c *Config) { c.Slot = "Items" },
		"slot empty": func(c *Config) { c.Slot = "" },
		"no table":   func(c *Config) { c.Table = "" },
		"rate":       func(c *Config) { c.ErrorRate = 2 },
	} {
		c := good
		mut(&c)
		if _, err := New(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: New = %v, want ErrInvalid", name, err)
		}
	}
}

func TestRateMeter(t *testing.T) {
	var r rateMeter
	t0 := time.Unix(1000, 0)
	for i := range 20 {
		r.add(t0.Add(time.Duration(i)*time.Second), 90)
	}
	if got := r.perSecond(t0.Add(19 * time.Second)); got != 90 {
		t.Errorf("perSecond = %v, want 90", got)
	}
	if got := r.perSecond(t0.Add(60 * time.Second)); got != 0 {
		t.Errorf("perSecond long after = %v, want 0", got)
	}
}
