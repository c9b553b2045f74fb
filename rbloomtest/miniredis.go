package rbloomtest

import (
	"github.com/alicebob/miniredis/v2"

	"github.com/rbloom/rbloom/internal/memredis"
)

// NewMiniredis starts a miniredis with BITFIELD and BITFIELD_RO (see
// Register) and stops it when the test ends. t can be a *testing.T, a
// *testing.B or a *rapid.T; a failure to start is fatal.
func NewMiniredis(t miniredis.Tester) *miniredis.Miniredis {
	m := miniredis.RunT(t)
	if err := Register(m); err != nil {
		t.Fatalf("%v", err)
	}
	return m
}

// Register adds the commands BITFIELD and BITFIELD_RO, which miniredis
// lacks, to the running server m. They follow Redis 7.0: subcommands GET,
// SET, INCRBY and OVERFLOW WRAP|SAT|FAIL, types i1..i64 and u1..u63, bit or
// "#N" offsets, Redis's error texts, and nothing is written when any
// subcommand is invalid. Each call is atomic, whether it comes from a client
// or from redis.call in a Lua script.
//
// Two differences remain, both inside MULTI/EXEC: the reply at EXEC goes
// through miniredis's Lua, whose numbers are float64, so values beyond ±2^53
// come back rounded (the stored bits are exact); and a BITFIELD without a
// key is refused but, unlike in Redis, does not make EXEC fail.
//
// Register fails if m is not running, if the commands are already there, or
// if this version of miniredis is not supported.
func Register(m *miniredis.Miniredis) error {
	return memredis.Register(m)
}
