package rbloomtest_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// Error texts of Redis 7.0.15, copied from redis-cli.
const (
	errType     = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is."
	errOffset   = "ERR bit offset is not an integer or out of range"
	errOverflow = "ERR Invalid OVERFLOW type specified"
	errSyntax   = "ERR syntax error"
	errInteger  = "ERR value is not an integer or out of range"
	errRO       = "ERR BITFIELD_RO only supports the GET subcommand"
	errWrong    = "WRONGTYPE Operation against a key holding the wrong kind of value"
)

// noKey as a wantValue means the key must not exist afterwards.
const noKey = "<no key>"

var bitfieldCases = []struct {
	name      string
	setup     []any // one command run before, or nil
	cmd       []any
	want      []any  // the reply, when wantErr is ""
	wantErr   string // the exact error reply
	wantValue string // GET k afterwards, or noKey
}{
	// Growth.
	{"SET creates a missing key, zero-filled", nil,
		[]any{"BITFIELD", "k", "SET", "u8", "#2", 255}, []any{int64(0)}, "", "\x00\x00\xff"},
	{"GET on a missing key creates nothing", nil,
		[]any{"BITFIELD", "k", "GET", "u8", 0, "GET", "i64", 1000}, []any{int64(0), int64(0)}, "", noKey},
	{"GET past the end reads zeros, never grows", []any{"SET", "k", "a"},
		[]any{"BITFIELD", "k", "GET", "u8", 100, "GET", "u4", 6}, []any{int64(0), int64(4)}, "", "a"},
	{"INCRBY 0 under FAIL still creates and grows", nil,
		[]any{"BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "u4", 100, 0}, []any{int64(0)}, "", string(make([]byte, 13))},
	{"a failed write still grows the string", []any{"SET", "k", "\xff"},
		[]any{"BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "u8", 0, 1, "INCRBY", "u8", "#3", 0}, []any{nil, int64(0)}, "", "\xff\x00\x00\x00"},
	{"no subcommands: empty reply, no key", nil,
		[]any{"BITFIELD", "k"}, []any{}, "", noKey},
	{"OVERFLOW alone writes nothing", nil,
		[]any{"BITFIELD", "k", "OVERFLOW", "SAT"}, []any{}, "", noKey},

	// Arithmetic and layout.
	{"bit 0 is the high bit of byte 0", []any{"SET", "k", "\x80\x01"},
		[]any{"BITFIELD", "k", "GET", "u1", 0, "GET", "u1", 7, "GET", "u1", 15, "GET", "u4", "#3"}, []any{int64(1), int64(0), int64(1), int64(1)}, "", "\x80\x01"},
	{"works on any string", []any{"SET", "k", "x"},
		[]any{"BITFIELD", "k", "INCRBY", "u8", 0, 1}, []any{int64('y')}, "", "y"},
	{"WRAP is the default", nil,
		[]any{"BITFIELD", "k", "INCRBY", "u8", 0, 257, "INCRBY", "i8", 8, 128}, []any{int64(1), int64(-128)}, "", "\x01\x80"},
	{"SAT clamps both ways", nil,
		[]any{"BITFIELD", "k", "OVERFLOW", "SAT", "INCRBY", "u4", 0, 20, "INCRBY", "u4", 0, -1, "INCRBY", "i4", 4, -100}, []any{int64(15), int64(14), int64(-8)}, "", "\xe8"},
	{"SAT of a negative SET on an unsigned field is the maximum", nil,
		[]any{"BITFIELD", "k", "OVERFLOW", "SAT", "SET", "u8", 0, -1, "GET", "u8", 0}, []any{int64(0), int64(255)}, "", "\xff"},
	{"SAT of SET i8 MinInt64 is 127, as Redis computes it", nil,
		[]any{"BITFIELD", "k", "OVERFLOW", "SAT", "SET", "i8", 0, "-9223372036854775808", "GET", "i8", 0}, []any{int64(0), int64(127)}, "", "\x7f"},
	{"FAIL leaves the field and replies nil", []any{"SET", "k", "\x0f"},
		[]any{"BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "u4", 4, 1, "SET", "i4", 4, 8, "INCRBY", "u4", 4, -15}, []any{nil, nil, int64(0)}, "", "\x00"},
	{"OVERFLOW applies to the following ops only", nil,
		[]any{"BITFIELD", "k", "INCRBY", "u2", 0, 5, "OVERFLOW", "SAT", "INCRBY", "u2", 2, 5}, []any{int64(1), int64(3)}, "", "\x70"},
	{"signed and unsigned views", nil,
		[]any{"BITFIELD", "k", "SET", "i8", 0, -1, "GET", "u8", 0, "GET", "i4", 4}, []any{int64(0), int64(255), int64(-1)}, "", "\xff"},
	{"i64 and u63 are exact", nil,
		[]any{"BITFIELD", "k", "SET", "i64", 0, "9223372036854775807", "GET", "i64", 0, "GET", "u63", 1, "INCRBY", "i64", 0, 1},
		[]any{int64(0), int64(9223372036854775807), int64(9223372036854775807), int64(-9223372036854775808)}, "", "\x80\x00\x00\x00\x00\x00\x00\x00"},
	{"lowercase subcommands", nil,
		[]any{"BITFIELD", "k", "overflow", "sat", "incrby", "u8", "#1", 300, "get", "u8", 8}, []any{int64(255), int64(255)}, "", "\x00\xff"},
	{"#N offset overflowing to 0 is accepted, as in Redis", []any{"SET", "k", "\x07"},
		[]any{"BITFIELD", "k", "GET", "u8", "#2305843009213693952"}, []any{int64(7)}, "", "\x07"},

	// Errors: nothing is written, not even by the valid subcommands before.
	{"bad type", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "GET", "u64", 0}, nil, errType, "abc"},
	{"type letter is case sensitive", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "GET", "U8", 0}, nil, errType, "abc"},
	{"type with a leading zero", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "GET", "u08", 0}, nil, errType, "abc"},
	{"negative offset", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "GET", "u8", -1}, nil, errOffset, "abc"},
	{"offset past 512 MB", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "SET", "u8", 4294967296, 1}, nil, errOffset, "abc"},
	{"#N offset past 512 MB", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "SET", "u8", "#536870912", 1}, nil, errOffset, "abc"},
	{"offset with a leading zero", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "GET", "u8", "01"}, nil, errOffset, "abc"},
	{"bad OVERFLOW", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "OVERFLOW", "CLAMP"}, nil, errOverflow, "abc"},
	{"unknown subcommand", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "DECRBY", "u8", 0, 1}, nil, errSyntax, "abc"},
	{"missing argument", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "INCRBY", "u8", 0}, nil, errSyntax, "abc"},
	{"value not an integer", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "INCRBY", "u8", 0, "1.5"}, nil, errInteger, "abc"},
	{"value with a plus sign", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "INCRBY", "u8", 0, "+1"}, nil, errInteger, "abc"},
	{"value out of int64", []any{"SET", "k", "abc"},
		[]any{"BITFIELD", "k", "SET", "u8", 0, 1, "INCRBY", "u8", 0, "9223372036854775808"}, nil, errInteger, "abc"},
	{"no key", nil,
		[]any{"BITFIELD"}, nil, "ERR wrong number of arguments for 'bitfield' command", noKey},
	{"WRONGTYPE on GET", []any{"HSET", "k", "f", "v"},
		[]any{"BITFIELD", "k", "GET", "u8", 0}, nil, errWrong, errWrong},
	{"WRONGTYPE on INCRBY", []any{"HSET", "k", "f", "v"},
		[]any{"BITFIELD", "k", "INCRBY", "u8", 0, 1}, nil, errWrong, errWrong},
	{"WRONGTYPE with no subcommands", []any{"RPUSH", "k", "v"},
		[]any{"BITFIELD", "k"}, nil, errWrong, errWrong},
	{"syntax errors come before WRONGTYPE", []any{"HSET", "k", "f", "v"},
		[]any{"BITFIELD", "k", "GET", "u64", 0}, nil, errType, errWrong},

	// BITFIELD_RO.
	{"BITFIELD_RO GET", []any{"SET", "k", "\x05"},
		[]any{"BITFIELD_RO", "k", "GET", "u8", 0, "GET", "i3", 5}, []any{int64(5), int64(-3)}, "", "\x05"},
	{"BITFIELD_RO rejects SET", []any{"SET", "k", "abc"},
		[]any{"BITFIELD_RO", "k", "GET", "u8", 0, "SET", "u8", 0, 1}, nil, errRO, "abc"},
	{"BITFIELD_RO rejects INCRBY, creates nothing", nil,
		[]any{"BITFIELD_RO", "k", "INCRBY", "u8", 0, 1}, nil, errRO, noKey},
	{"BITFIELD_RO accepts OVERFLOW", nil,
		[]any{"BITFIELD_RO", "k", "OVERFLOW", "FAIL", "GET", "u8", 0}, []any{int64(0)}, "", noKey},
	{"BITFIELD_RO parses everything first", []any{"SET", "k", "abc"},
		[]any{"BITFIELD_RO", "k", "SET", "u8", 0, 1, "GET", "x8", 0}, nil, errType, "abc"},
	{"BITFIELD_RO checks writes before WRONGTYPE", []any{"HSET", "k", "f", "v"},
		[]any{"BITFIELD_RO", "k", "SET", "u8", 0, 1}, nil, errRO, errWrong},
	{"BITFIELD_RO no key", nil,
		[]any{"BITFIELD_RO"}, nil, "ERR wrong number of arguments for 'bitfield_ro' command", noKey},
}

// TestBitfield runs the table on miniredis and, to keep the table honest,
// on a real Redis when one is installed.
func TestBitfield(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		m := rbloomtest.NewMiniredis(t)
		testBitfieldCases(t, newClient(t, m.Addr()))
	})
	t.Run("redis", func(t *testing.T) {
		testBitfieldCases(t, newClient(t, rbloomtest.StartRedis(t)))
	})
}

func testBitfieldCases(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	for _, tc := range bitfieldCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				if err := rdb.Do(ctx, tc.setup...).Err(); err != nil {
					t.Fatalf("setup %v: %v", tc.setup, err)
				}
			}
			got, err := rdb.Do(ctx, tc.cmd...).Result()
			switch {
			case tc.wantErr != "":
				if err == nil || err.Error() != tc.wantErr {
					t.Errorf("%v = %#v, %v; want error %q", tc.cmd, got, err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("%v: %v", tc.cmd, err)
			case !reflect.DeepEqual(got, tc.want):
				t.Errorf("%v = %#v, want %#v", tc.cmd, got, tc.want)
			}
			if value := getValue(t, rdb, "k"); value != tc.wantValue {
				t.Errorf("GET k = %q, want %q", value, tc.wantValue)
			}
		})
	}
}

// getValue returns GET key, noKey when it is missing, or the error text
// (WRONGTYPE).
func getValue(t interface {
	Helper()
	Fatalf(string, ...any)
}, rdb *redis.Client, key string) string {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Result()
	var rerr redis.Error
	switch {
	case errors.Is(err, redis.Nil):
		return noKey
	case errors.As(err, &rerr):
		return rerr.Error()
	case err != nil:
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}
