package rbloomtest_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestBitfieldFromLua checks the nested path: redis.call inside a script,
// where miniredis already holds its lock.
func TestBitfieldFromLua(t *testing.T) {
	ctx := context.Background()
	m := rbloomtest.NewMiniredis(t)
	rdb := newClient(t, m.Addr())

	tests := []struct {
		name   string
		script string
		want   any
	}{
		{"call", `return redis.call('BITFIELD', KEYS[1], 'INCRBY', 'u8', 0, 5, 'GET', 'u4', 4)`,
			[]any{int64(5), int64(5)}},
		{"nil from OVERFLOW FAIL survives the round trip",
			`return redis.call('BITFIELD', KEYS[1], 'OVERFLOW', 'FAIL', 'INCRBY', 'u2', 0, 9, 'GET', 'u2', 0)`,
			[]any{nil, int64(0)}},
		{"Lua sees that nil as false, as in Redis",
			`return redis.call('BITFIELD', KEYS[1], 'OVERFLOW', 'FAIL', 'INCRBY', 'u2', 0, 9)[1] == false and 'false' or 'not false'`,
			"false"},
		{"pcall gets the error text",
			`return redis.pcall('BITFIELD', KEYS[1], 'GET', 'u64', 0)['err']`,
			errType},
		{"sees the script's own earlier writes",
			`redis.call('SET', KEYS[1], 'x'); return redis.call('BITFIELD', KEYS[1], 'INCRBY', 'u8', 0, 1)`,
			[]any{int64('y')}},
		{"BITFIELD_RO",
			`redis.call('SET', KEYS[1], '\5'); return redis.call('BITFIELD_RO', KEYS[1], 'GET', 'u8', 0)`,
			[]any{int64(5)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m.FlushAll()
			got, err := rdb.Eval(ctx, tc.script, []string{"k"}).Result()
			if err != nil {
				t.Fatalf("EVAL: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("EVAL = %#v, want %#v", got, tc.want)
			}
		})
	}

	t.Run("EVAL_RO allows BITFIELD_RO only", func(t *testing.T) {
		m.FlushAll()
		got, err := rdb.EvalRO(ctx, `return redis.call('BITFIELD_RO', KEYS[1], 'GET', 'u8', 0)`, []string{"k"}).Result()
		if err != nil || !reflect.DeepEqual(got, []any{int64(0)}) {
			t.Errorf("EVAL_RO BITFIELD_RO = %#v, %v; want [0]", got, err)
		}
		_, err = rdb.EvalRO(ctx, `return redis.call('BITFIELD', KEYS[1], 'INCRBY', 'u8', 0, 1)`, []string{"k"}).Result()
		if err == nil {
			t.Errorf("EVAL_RO BITFIELD INCRBY succeeded, want an error")
		}
	})
}

// TestBitfieldConnectionState checks that both paths act on the client's
// selected database and keep the key's TTL.
func TestBitfieldConnectionState(t *testing.T) {
	ctx := context.Background()
	m := rbloomtest.NewMiniredis(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), DB: 3, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })

	if err := rdb.Set(ctx, "k", "\x00", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "BITFIELD", "k", "INCRBY", "u8", 0, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Eval(ctx, `return redis.call('BITFIELD', KEYS[1], 'INCRBY', 'u8', 0, 1)`, []string{"k"}).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := m.DB(3).Get("k"); err != nil || got != "\x02" {
		t.Errorf("DB 3 k = %q, %v; want \"\\x02\"", got, err)
	}
	if m.Exists("k") {
		t.Errorf("DB 0 has k, want it only in DB 3")
	}
	if ttl := m.DB(3).TTL("k"); ttl != time.Hour {
		t.Errorf("TTL = %v, want %v (BITFIELD keeps it)", ttl, time.Hour)
	}
}

// TestBitfieldMulti checks that BITFIELD is queued inside MULTI and runs at
// EXEC, like any other command.
func TestBitfieldMulti(t *testing.T) {
	ctx := context.Background()
	m := rbloomtest.NewMiniredis(t)
	rdb := newClient(t, m.Addr())

	var incr, fail *redis.Cmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k", "\x0e", 0)
		incr = p.Do(ctx, "BITFIELD", "k", "INCRBY", "u8", 0, 1)
		fail = p.Do(ctx, "BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "u4", 4, 1, "GET", "u64", 0)
		return nil
	})
	if err == nil {
		t.Fatalf("EXEC succeeded, want the error of the bad BITFIELD")
	}
	if got, err := incr.Result(); err != nil || !reflect.DeepEqual(got, []any{int64(15)}) {
		t.Errorf("queued BITFIELD = %#v, %v; want [15]", got, err)
	}
	if err := fail.Err(); err == nil || err.Error() != errType {
		t.Errorf("queued bad BITFIELD: error %v, want %q", err, errType)
	}
	if got := getValue(t, rdb, "k"); got != "\x0f" {
		t.Errorf("GET k = %q, want \"\\x0f\"", got)
	}
}

// TestBitfieldAtomic runs concurrent read-modify-writes on one key, half
// from clients and half from scripts. A lost update would leave a counter
// short of its total; the totals stay below 255 so that OVERFLOW SAT cannot
// hide one.
func TestBitfieldAtomic(t *testing.T) {
	const (
		goroutines = 8   // per path
		iterations = 500 // per goroutine
		counters   = 50  // so each counter ends at 2*8*500/50 = 160
	)
	ctx := context.Background()
	m := rbloomtest.NewMiniredis(t)
	rdb := newClient(t, m.Addr())

	incr := map[string]func(i int) error{
		"direct": func(i int) error {
			return rdb.Do(ctx, "BITFIELD", "k", "OVERFLOW", "SAT", "INCRBY", "u8", fmt.Sprintf("#%d", i), 1).Err()
		},
		"script": func(i int) error {
			return rdb.Eval(ctx, `return redis.call('BITFIELD', KEYS[1], 'OVERFLOW', 'SAT', 'INCRBY', 'u8', ARGV[1], 1)`,
				[]string{"k"}, fmt.Sprintf("#%d", i)).Err()
		},
	}
	var wg sync.WaitGroup
	for name, f := range incr {
		for range goroutines {
			wg.Go(func() {
				for i := range iterations {
					if err := f(i % counters); err != nil {
						t.Errorf("%s: %v", name, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()

	args := []any{"BITFIELD_RO", "k"}
	want := []any{}
	for i := range counters {
		args = append(args, "GET", "u8", fmt.Sprintf("#%d", i))
		want = append(want, int64(2*goroutines*iterations/counters))
	}
	got, err := rdb.Do(ctx, args...).Result()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("counters = %v, %v; want all %d", got, err, 2*goroutines*iterations/counters)
	}
}

// TestBitfieldLongCall checks a direct call with more arguments than
// miniredis's Lua stack holds (about 5,000): the subcommands must not go
// through the wrapper script.
func TestBitfieldLongCall(t *testing.T) {
	const n = 3000
	ctx := context.Background()
	m := rbloomtest.NewMiniredis(t)
	rdb := newClient(t, m.Addr())

	args := []any{"BITFIELD", "k"}
	for i := range n {
		args = append(args, "INCRBY", "u8", fmt.Sprintf("#%d", i), i%256)
	}
	got, err := rdb.Do(ctx, args...).Int64Slice()
	if err != nil {
		t.Fatalf("BITFIELD with %d INCRBY: %v", n, err)
	}
	for i, v := range got {
		if v != int64(i%256) {
			t.Fatalf("reply[%d] = %d, want %d", i, v, i%256)
		}
	}
	if len(got) != n {
		t.Errorf("got %d replies, want %d", len(got), n)
	}
	if v, _ := m.Get("k"); len(v) != n {
		t.Errorf("len(k) = %d, want %d", len(v), n)
	}
}
