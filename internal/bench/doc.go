// Package bench measures rbloom against the limits of Redis itself.
//
// Run fills, tests and empties counting and classic filters in one real
// Redis and prints a markdown table: for each row the items per second, the
// round trips per item, the server time per item and the ratio to the row
// it should be compared with. The rows are
//
//   - the seed's ways of adding an item: k SETBIT round trips, or one
//     pipeline of k SETBIT per item;
//   - two naive Lua baselines, written here and used by nothing else: one
//     EVALSHA per item, and one per 200 items, that build BITFIELD
//     arguments in Lua;
//   - the limits: plain pipelined BITFIELD (INCRBY u4, GET u4, SET u1,
//     GET u1) at the library's offsets with no script, on keys of their own;
//   - a bound: AddMany's batching and arguments with a script that checks
//     nothing and only calls BITFIELD, the fastest such an add can be;
//   - the library: AddMany, TestMany and RemoveMany of a Counting filter and
//     AddMany and TestMany of a Classic one, with the same batch size;
//   - a window: TestOrAddMany of new events on a Window whose G past
//     generations (4) were filled first, against two plain rows on keys
//     laid out like its generations: BITFIELD SET u1 with its k, and its
//     reads and write done with plain commands;
//   - single items: Add, Test and Remove one item per call against one plain
//     BITFIELD per call, and Add from several goroutines against one;
//   - only when the server has Redis's cuckoo filter (the CF.* commands of
//     RedisBloom, as in Redis 8): CF.ADD and CF.DEL pipelined, CF.INSERT and
//     CF.MEXISTS of a batch per call, against the counting filter's batch
//     calls. Line 16 then compares memory per item, the false-positive rate
//     and the cost of deleting false positives (cuckoo.go).
//
// Every row runs a slice of its items in each round, one row after the
// other, so that drift of the machine during the run hits all rows alike.
// After the table come latency percentiles of single calls (HdrHistogram),
// the memory of the counting filter's key, of the window per event held
// and of operation records (used_memory and DBSIZE growth over single Add
// and AddOnce calls, measured before the rows), the server's time for the
// library's calls and the slowest of them (INFO commandstats and
// latencystats, SLOWLOG), and the figures of a chart of throughput against
// batch size, when a path is given for it (Config.Chart; the command in
// ./chart draws it with gonum/plot, which this package does not import).
//
// The benchmark runs only against a Redis on the loopback interface. It
// writes keys named rbloom-bench:* and rbloom:{rbloom-bench-*}, deletes them
// at the end, resets the server's statistics (CONFIG RESETSTAT) and changes
// its SLOWLOG and latency-tracking settings while it runs (it puts them
// back): give it a Redis of its own, for instance one started by
// StartServer.
package bench
