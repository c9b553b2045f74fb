package rbloomtest_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestBitfieldMatchesRedis sends the same random BITFIELD and BITFIELD_RO
// calls to miniredis and to a real redis-server and requires the same
// replies (values, nils, error texts) and the same value of the key after
// every call.
func TestBitfieldMatchesRedis(t *testing.T) {
	ctx := context.Background()
	redisClient := newClient(t, rbloomtest.StartRedis(t))
	miniClient := newClient(t, rbloomtest.NewMiniredis(t).Addr())
	servers := []*redis.Client{redisClient, miniClient}

	var cases, calls, errorReplies, nils int
	rapid.Check(t, func(rt *rapid.T) {
		cases++
		// k starts missing, as a string, or (less often) as a hash.
		var initial []any
		switch rapid.IntRange(0, 5).Draw(rt, "initial") {
		case 0, 1:
		case 5:
			initial = []any{"HSET", "k", "f", "v"}
		default:
			initial = []any{"SET", "k", string(rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(rt, "value"))}
		}
		for _, rdb := range servers {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				rt.Fatal(err)
			}
			if initial != nil {
				if err := rdb.Do(ctx, initial...).Err(); err != nil {
					rt.Fatal(err)
				}
			}
		}

		n := rapid.IntRange(1, 30).Draw(rt, "calls")
		for i := range n {
			cmd := bitfieldCall().Draw(rt, fmt.Sprintf("call%d", i))
			calls++
			want, wantErr := redisClient.Do(ctx, cmd...).Result()
			got, gotErr := miniClient.Do(ctx, cmd...).Result()
			if errText(gotErr) != errText(wantErr) || !reflect.DeepEqual(got, want) {
				rt.Fatalf("%v:\nminiredis %#v, error %q\nredis     %#v, error %q",
					cmd, got, errText(gotErr), want, errText(wantErr))
			}
			if wantErr != nil {
				errorReplies++
			}
			if a, ok := want.([]any); ok {
				for _, v := range a {
					if v == nil {
						nils++
					}
				}
			}
			if got, want := getValue(rt, miniClient, "k"), getValue(rt, redisClient, "k"); got != want {
				rt.Fatalf("after %v: GET k on miniredis %q, on redis %q", cmd, got, want)
			}
		}
	})
	t.Logf("%d cases, %d calls (%d error replies, %d nil elements), all identical", cases, calls, errorReplies, nils)
}

// errText is the error reply's text, "" for none.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// bitfieldCall draws a BITFIELD or BITFIELD_RO on k with up to 6
// subcommands, offsets below ~512 bits so values stay small.
func bitfieldCall() *rapid.Generator[[]any] {
	return rapid.Custom(func(t *rapid.T) []any {
		cmd := []any{rapid.SampledFrom([]string{"BITFIELD", "BITFIELD", "BITFIELD", "BITFIELD", "BITFIELD_RO", "bitfield"}).Draw(t, "cmd"), "k"}
		for range rapid.IntRange(0, 6).Draw(t, "subcommands") {
			cmd = append(cmd, subcommand().Draw(t, "subcommand")...)
		}
		return cmd
	})
}

var (
	fieldTypes = []string{
		"u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8", "u16", "u32", "u63",
		"i1", "i2", "i3", "i4", "i8", "i16", "i32", "i64",
	}
	// extremes are the values where overflow checks and float64 rounding
	// could go wrong.
	extremes = []int64{
		math.MinInt64, math.MinInt64 + 1, math.MinInt64 + 127, math.MinInt64 + 128,
		math.MaxInt64, math.MaxInt64 - 1, 1 << 53, 1<<53 + 1, -(1<<53 + 1), 1 << 62,
		-1 << 62, 1<<63 - 1<<10, 127, 128, -128, -129, 255, 256, 65535, 1 << 31, -1 << 31,
	}
	// invalid are subcommands Redis rejects, or accepts in surprising ways.
	invalid = [][]any{
		{"GET", "u64", 0}, {"GET", "i65", 0}, {"GET", "i0", 0}, {"GET", "x8", 0},
		{"GET", "U8", 0}, {"GET", "u08", 0}, {"GET", "u", 0}, {"GET", "", 0},
		{"GET", "u8", -1}, {"GET", "u8", "#-1"}, {"GET", "u8", "#"}, {"GET", "u8", "abc"},
		{"GET", "u8", "01"}, {"GET", "u8", "-0"}, {"GET", "u8", 4294967296}, {"GET", "u8", 4294967288},
		{"GET", "u8", "#2305843009213693952"}, {"SET", "u8", "#2305843009213693952", 1},
		{"SET", "u8", "#536870912", 1}, {"SET", "u8", 0, "1.5"}, {"SET", "u8", 0, "+1"},
		{"SET", "u8", 0, "-0"}, {"INCRBY", "u8", 0, "9223372036854775808"}, {"INCRBY", "u8", 0, ""},
		{"OVERFLOW", "foo"}, {"OVERFLOW"}, {"FOO"}, {"GET", "u8"}, {"SET", "u8", 0}, {"INCRBY"},
	}
)

func subcommand() *rapid.Generator[[]any] {
	return rapid.Custom(func(t *rapid.T) []any {
		typ := rapid.SampledFrom(fieldTypes).Draw(t, "type")
		bits, _ := strconv.Atoi(typ[1:])
		var offset any
		if rapid.Bool().Draw(t, "hash") {
			offset = "#" + strconv.Itoa(rapid.IntRange(0, 511/bits).Draw(t, "index"))
		} else {
			offset = rapid.IntRange(0, 511).Draw(t, "offset")
		}
		value := rapid.OneOf(
			rapid.Int64Range(-300, 300),
			rapid.SampledFrom(extremes),
			rapid.Int64(),
		).Draw(t, "value")
		word := func(w string) string {
			return rapid.SampledFrom([]string{w, w, w, lower(w)}).Draw(t, "case")
		}
		switch kind := rapid.IntRange(0, 39).Draw(t, "kind"); {
		case kind < 12:
			return []any{word("GET"), typ, offset}
		case kind < 20:
			return []any{word("SET"), typ, offset, value}
		case kind < 32:
			return []any{word("INCRBY"), typ, offset, value}
		case kind < 39:
			return []any{word("OVERFLOW"), word(rapid.SampledFrom([]string{"WRAP", "SAT", "FAIL"}).Draw(t, "overflow"))}
		default:
			return rapid.SampledFrom(invalid).Draw(t, "invalid")
		}
	})
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
