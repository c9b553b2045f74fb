// Package rbloomtest is test support for code that keeps counters in Redis
// with BITFIELD, as rbloom does.
//
// It gives four kinds of server to test against, and a way to break the
// network between them and a client:
//
//   - NewMiniredis starts an in-process miniredis with BITFIELD and
//     BITFIELD_RO added (miniredis has neither), behaving like Redis 7.0:
//     same replies, same error texts, atomic both when called directly and
//     from a Lua script.
//   - StartRedis starts a real redis-server for the test, and skips the test
//     when it is not installed (fails it instead when $CI is set).
//   - StartTLSRedis starts a real redis-server that speaks TLS only, with a
//     certificate from a CA made for the test.
//   - StartCluster starts a real Redis Cluster of masters on loopback, and
//     can move a slot between masters while clients keep working.
//   - NewProxy puts a TCP proxy between a client and a server that drops
//     requests or replies, delays or resets connections, on demand or at
//     random from a seed.
//
// Use miniredis for fast unit tests and the real servers for anything that
// depends on timing, memory, clustering or Redis's own Lua.
package rbloomtest
