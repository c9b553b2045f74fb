// Package rbloomtest is test support for code that keeps counters in Redis
// with BITFIELD, as rbloom does.
//
// It gives two servers to test against:
//
//   - NewMiniredis starts an in-process miniredis with BITFIELD and
//     BITFIELD_RO added (miniredis has neither), behaving like Redis 7.0:
//     same replies, same error texts, atomic both when called directly and
//     from a Lua script.
//   - StartRedis starts a real redis-server for the test, and skips the test
//     when it is not installed (fails it instead when $CI is set).
//
// Use miniredis for fast unit tests and the real server for anything that
// depends on timing, memory or Redis's own Lua.
package rbloomtest
