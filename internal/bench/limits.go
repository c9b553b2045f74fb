package bench

import (
	"context"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"github.com/spaolacci/murmur3"
)

// The limits are what Redis can do for a filter with no script at all: one
// plain BITFIELD command per item, touching the item's k slots at the very
// offsets rbloom uses, pipelined like the library's batches. No atomic
// counting filter can beat them on one connection, so the library's rows are
// reported as a fraction of them.

// headerBits is where slot 0 starts in an rbloom filter: after its 64-byte
// header (see header.go in rbloom).
const headerBits = 64 * 8

// locate appends the k slot indices of item to dst, exactly as rbloom does
// (hash.go): h1, h2 = murmur3_x64_128(item) with seed 0, and
// slot_i = (h1 + i*h2 + (i^3-i)/6) mod 2^64 mod m. TestLocateMatchesLibrary checks it
// against a filter written by the library.
func locate(dst []uint64, item string, k int, m uint64) []uint64 {
	h1, h2 := murmur3.Sum128(unsafe.Slice(unsafe.StringData(item), len(item)))
	for i := range uint64(k) {
		dst = append(dst, (h1+i*h2+(i*i*i-i)/6)%m)
	}
	return dst
}

// Constant arguments, boxed once rather than per slot, as the library does.
var (
	argBitfield, argBitfieldRO any = "BITFIELD", "BITFIELD_RO"
	argOverflow, argSat        any = "OVERFLOW", "SAT"
	argIncrby, argSet, argGet  any = "INCRBY", "SET", "GET"
	argU4, argU1               any = "u4", "u1"
	argOne                     any = "1"
)

// plain builds the plain BITFIELD commands of one key laid out like a
// filter of k slots out of m, each width bits wide (4: u4, 1: u1).
type plain struct {
	key   string
	k     int
	m     uint64
	width uint64
}

func (p plain) typ() any {
	if p.width == 4 {
		return argU4
	}
	return argU1
}

// size is the length of the key's string, as rbloom sizes a filter.
func (p plain) size() int64 { return int64(headerBits/8 + (p.m*p.width+7)/8) }

// offsets appends the bit offsets of item's k slots to dst.
func (p plain) offsets(dst []uint64, item string) []uint64 {
	n := len(dst)
	dst = locate(dst, item, p.k, p.m)
	for i := n; i < len(dst); i++ {
		dst[i] = headerBits + dst[i]*p.width
	}
	return dst
}

// incrArgs returns BITFIELD key OVERFLOW SAT INCRBY <typ> <off> 1 ... for
// item: what an add does to a counting filter.
func (p plain) incrArgs(item string) []any {
	return p.writeArgs(item, argIncrby, argOverflow, argSat)
}

// setArgs returns BITFIELD key SET <typ> <off> 1 ... for item: what an add
// does to a classic filter.
func (p plain) setArgs(item string) []any { return p.writeArgs(item, argSet) }

func (p plain) writeArgs(item string, op any, prefix ...any) []any {
	var buf [64]uint64
	args := make([]any, 0, 2+len(prefix)+4*p.k)
	args = append(append(args, argBitfield, p.key), prefix...)
	for _, off := range p.offsets(buf[:0], item) {
		args = append(args, op, p.typ(), off, argOne)
	}
	return args
}

// getArgs returns BITFIELD_RO key GET <typ> <off> ... for item: what a test
// reads.
func (p plain) getArgs(item string) []any {
	var buf [64]uint64
	args := make([]any, 0, 2+3*p.k)
	args = append(args, argBitfieldRO, p.key)
	for _, off := range p.offsets(buf[:0], item) {
		args = append(args, argGet, p.typ(), off)
	}
	return args
}

// pipelined sends one command per item, built by args, batch commands per
// pipeline flush, and returns the first error.
func pipelined(ctx context.Context, rdb *redis.Client, items []string, batch int, args func(string) []any) error {
	return chunks(items, batch, func(part []string) error {
		pipe := rdb.Pipeline()
		for _, item := range part {
			_ = pipe.Process(ctx, redis.NewIntSliceCmd(ctx, args(item)...))
		}
		_, err := pipe.Exec(ctx)
		return err
	})
}

// chunks calls fn for consecutive parts of items of at most size items,
// stopping at the first error.
func chunks(items []string, size int, fn func(part []string) error) error {
	for len(items) > 0 {
		n := min(size, len(items))
		if err := fn(items[:n]); err != nil {
			return err
		}
		items = items[n:]
	}
	return nil
}
