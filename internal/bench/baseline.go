package bench

import (
	"context"
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The baselines are the ways of adding an item that rbloom replaced: the
// seed's SETBIT per slot, and naive Lua scripts that build BITFIELD
// arguments in Lua. They are measured so that the table shows what the
// library's design buys; nothing outside this package uses them.

var (
	//go:embed lua/naive_add.lua
	naiveAddLua    string
	naiveAddScript = redis.NewScript(naiveAddLua)

	//go:embed lua/naive_add_batch.lua
	naiveBatchLua    string
	naiveBatchScript = redis.NewScript(naiveBatchLua)

	//go:embed lua/relay.lua
	relayLua    string
	relayScript = redis.NewScript(relayLua)
)

// relaySlots is the number of slots per relay.lua call: as many as rbloom
// puts in one script call (maxCallSlots in rbloom's filter.go).
const relaySlots = 256

// seedSetbit adds each item as the seed did: k SETBIT commands, each its
// own round trip. p is a classic (1-bit) layout.
func seedSetbit(ctx context.Context, rdb *redis.Client, p plain, items []string) error {
	var buf [64]uint64
	for _, item := range items {
		for _, off := range p.offsets(buf[:0], item) {
			if err := rdb.SetBit(ctx, p.key, int64(off), 1).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// seedPipelined adds each item with its k SETBIT commands in one pipeline:
// one round trip per item.
func seedPipelined(ctx context.Context, rdb *redis.Client, p plain, items []string) error {
	var buf [64]uint64
	for _, item := range items {
		pipe := rdb.Pipeline()
		for _, off := range p.offsets(buf[:0], item) {
			pipe.SetBit(ctx, p.key, int64(off), 1)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// slotArgs returns the k slot indices of item as script arguments.
func slotArgs(args []any, p plain, item string) []any {
	var buf [64]uint64
	for _, slot := range locate(buf[:0], item, p.k, p.m) {
		args = append(args, slot)
	}
	return args
}

// naiveAdd runs naive_add.lua once per item: one EVALSHA round trip each.
func naiveAdd(ctx context.Context, rdb *redis.Client, p plain, items []string) error {
	keys := []string{p.key}
	for _, item := range items {
		if err := naiveAddScript.Run(ctx, rdb, keys, slotArgs(make([]any, 0, p.k), p, item)...).Err(); err != nil {
			return err
		}
	}
	return nil
}

// naiveBatch runs naive_add_batch.lua once per batch items, one round trip
// per call.
func naiveBatch(ctx context.Context, rdb *redis.Client, p plain, items []string, batch int) error {
	keys := []string{p.key}
	return chunks(items, batch, func(part []string) error {
		args := make([]any, 0, 1+len(part)*p.k)
		args = append(args, p.k)
		for _, item := range part {
			args = slotArgs(args, p, item)
		}
		return naiveBatchScript.Run(ctx, rdb, keys, args...).Err()
	})
}

// relayEach adds each item with its own relay.lua call and round trip: the
// least a script can do for a single add, the bound of Counting.Add.
func relayEach(ctx context.Context, rdb *redis.Client, p plain, items []string) error {
	keys := []string{p.key}
	for _, item := range items {
		offsets := p.offsets(make([]uint64, 0, p.k), item)
		args := make([]any, len(offsets))
		for i := range offsets {
			args[i] = &offsets[i]
		}
		if err := relayScript.Run(ctx, rdb, keys, args...).Err(); err != nil {
			return err
		}
	}
	return nil
}

// relay adds the items through relay.lua, relaySlots slots per call, the
// calls of batch items in one pipeline: the library's batching and
// arguments, with a script that does nothing but call BITFIELD.
func relay(ctx context.Context, rdb *redis.Client, p plain, items []string, batch int) error {
	keys := []string{p.key}
	perCall := max(relaySlots/p.k, 1)
	return chunks(items, batch, func(part []string) error {
		pipe := rdb.Pipeline()
		_ = chunks(part, perCall, func(call []string) error {
			// As rbloom's offsetArgs: one array of offsets, arguments
			// pointing into it.
			offsets := make([]uint64, 0, p.k*len(call))
			for _, item := range call {
				offsets = p.offsets(offsets, item)
			}
			args := make([]any, len(offsets))
			for i := range offsets {
				args[i] = &offsets[i]
			}
			relayScript.EvalSha(ctx, pipe, keys, args...)
			return nil
		})
		_, err := pipe.Exec(ctx)
		return err
	})
}
