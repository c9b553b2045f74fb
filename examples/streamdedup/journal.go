package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// journal writes the events of a new batch, id, to its journal, all but
// those whose stream entries already belong to a batch, and returns the
// batch of each event: id for the ones it journaled.
//
// Why: a consumer that dies leaves its entries pending, and whoever claims
// them gets them in other groups than they were read in. The window
// replays a batch's first decisions only for the same id and the same
// events in the same order, so the claimer must find the whole batch
// again: this journal, and the entry-to-batch keys, are how. The check and
// the writes are one script, so that two consumers that journal the same
// entry at once (a slow one, and one that claimed its entries) agree on
// its batch: an entry in two batches would be decided twice. Sent again
// with the same id (go-redis re-sends a script whose reply was lost), it
// answers the same and writes nothing.
func journal(ctx context.Context, rdb redis.Scripter, k keys, id string, events []event, ttl time.Duration) ([]string, error) {
	keys := make([]string, 0, 1+len(events))
	args := make([]any, 0, 2+len(events))
	keys = append(keys, k.journal(id))
	args = append(args, id, ttl.Milliseconds())
	for _, e := range events {
		keys = append(keys, k.entry(e.Entry))
		args = append(args, e.journalRecord())
	}
	owners, err := journalScript.Run(ctx, rdb, keys, args...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("journal batch %s: %w", id, err)
	}
	if len(owners) != len(events) {
		return nil, fmt.Errorf("journal batch %s: %d answers for %d events", id, len(owners), len(events))
	}
	return owners, nil
}

// loadJournals reads the batches ids from their journals, in one round
// trip.
func loadJournals(ctx context.Context, rdb redis.Cmdable, k keys, ids []string) ([]batch, error) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.LRange(ctx, k.journal(id), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("load journals: %w", err)
	}
	out := make([]batch, len(ids))
	for i, cmd := range cmds {
		if len(cmd.Val()) == 0 {
			// Journals live as long as the window's records of batches: an
			// entry pending longer than that cannot be replayed exactly.
			return nil, fmt.Errorf("batch %s: journal missing (expired? entries must be handled within the TTL)", ids[i])
		}
		out[i].id = ids[i]
		for _, rec := range cmd.Val() {
			e, err := fromJournalRecord(rec)
			if err != nil {
				return nil, fmt.Errorf("batch %s: %w", ids[i], err)
			}
			out[i].events = append(out[i].events, e)
		}
	}
	return out, nil
}
