package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// journal keeps where each batch of a partition ends, so that a batch run
// again (its transaction aborted: a consumer died, the group rebalanced)
// holds the same records as the first time. TestOrAddManyOnce replays its
// first answers only for the same id with the same events in the same
// order; a fetch after a restart may return more records, or fewer, than
// the fetch before it, so a batch's end cannot come from the fetch.
type journal struct {
	rdb    redis.UniversalClient
	prefix string        // "kafkadedup:{group}:": one hash tag, one slot
	ttl    time.Duration // as long as the window remembers operation ids
}

func newJournal(rdb redis.UniversalClient, group string, ttl time.Duration) journal {
	return journal{rdb: rdb, prefix: "kafkadedup:{" + group + "}:", ttl: ttl}
}

// end returns the last offset of the batch of topic/partition that starts
// at start: the one stored if a consumer cut that batch before, else
// proposed, which it stores. SET NX decides between two consumers cutting
// it at once (a zombie and its successor): both get the same end.
func (j journal) end(ctx context.Context, topic string, partition int32, start, proposed int64) (end int64, resumed bool, err error) {
	key := fmt.Sprintf("%sbatch:%s/%d/%d", j.prefix, topic, partition, start)
	old, err := j.rdb.SetArgs(ctx, key, proposed, redis.SetArgs{Mode: "NX", Get: true, TTL: j.ttl}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return proposed, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("journal the batch at %s/%d/%d in Redis: %w", topic, partition, start, err)
	}
	end, err = strconv.ParseInt(old, 10, 64)
	if err != nil || end < start {
		return 0, false, fmt.Errorf("journal key %s holds %q, not an offset at or after %d: another program writes under the prefix %q; give this group another name", key, old, start, j.prefix)
	}
	return end, true, nil
}
