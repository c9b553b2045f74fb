package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// drained reports whether the group has committed every partition of the
// input topic up to its end: every click was counted by a committed
// transaction.
func drained(ctx context.Context, adm *kadm.Client, cfg config) (bool, error) {
	ends, err := adm.ListEndOffsets(ctx, cfg.input)
	if err != nil {
		return false, fmt.Errorf("list the end offsets of %s: %w", cfg.input, err)
	}
	if err := ends.Error(); err != nil {
		return false, fmt.Errorf("list the end offsets of %s: %w", cfg.input, err)
	}
	committed, err := adm.FetchOffsets(ctx, cfg.group)
	if err != nil {
		return false, nil // a transaction of the group still open (UNSTABLE_OFFSET_COMMIT) or a coordinator moving
	}
	done := true
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(o.Topic, o.Partition)
		if o.Offset > 0 && (!ok || c.Err != nil || c.At < o.Offset) {
			done = false
		}
	})
	return done, nil
}

// waitDrained polls drained every 100 ms until it is true or ctx is done.
func waitDrained(ctx context.Context, adm *kadm.Client, cfg config) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := drained(ctx, adm, cfg)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the group %s did not commit every click of %s: %w", cfg.group, cfg.input, ctx.Err())
		case <-t.C:
		}
	}
}

// output is what the committed transactions wrote to the output topic.
type output struct {
	counts  map[string]int // new clicks per campaign, summed
	times   map[string]int // how many times each click id was counted
	records int
}

// readOutput reads the output topic's committed records, from the start to
// the last stable offset of each partition (read_committed: the records of
// aborted transactions are never seen). Control records are kept, so that
// the reader knows when it reached that offset even when a commit marker
// is the last record before it.
func readOutput(ctx context.Context, adm *kadm.Client, cfg config) (*output, error) {
	stable, err := adm.ListCommittedOffsets(ctx, cfg.output)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list the stable offsets of %s: %w", cfg.output, err)
	}
	want := map[int32]int64{} // partition: offset of its last record before the stable offset
	stable.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset - 1
		}
	})
	out := &output{counts: map[string]int{}, times: map[string]int{}}
	if len(want) == 0 {
		return out, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...),
		kgo.ConsumeTopics(cfg.output), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", cfg.output, err)
	}
	defer cl.Close()
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: partitions %v not read to their stable offsets: %w", cfg.output, slices.Sorted(maps.Keys(want)), err)
		}
		if err := fs.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", cfg.output, err)
		}
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			if last, ok := want[r.Partition]; ok && r.Offset >= last {
				delete(want, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			var cc campaignCount
			if err := json.Unmarshal(r.Value, &cc); err != nil {
				bad = fmt.Errorf("read %s: record %d/%d: %w", cfg.output, r.Partition, r.Offset, err)
				return
			}
			out.records++
			out.counts[cc.Campaign] += cc.New
			for _, id := range cc.Events {
				out.times[id]++
			}
		})
		if bad != nil {
			return nil, bad
		}
	}
	return out, nil
}

// check compares the output with the truth and returns every difference:
// a click counted twice, a click counted that was never written, a click
// not counted, a campaign whose count is not its number of distinct
// clicks. A run counted exactly once when there are none.
func check(truth map[string]event, out *output) []string {
	var problems []string
	twice, unknown, lost := 0, 0, 0
	for _, id := range slices.Sorted(maps.Keys(out.times)) {
		n := out.times[id]
		if _, ok := truth[id]; !ok {
			unknown++
			problems = append(problems, fmt.Sprintf("click %s counted but never written", id))
		} else if n > 1 {
			twice++
			if twice <= 5 {
				problems = append(problems, fmt.Sprintf("click %s counted %d times", id, n))
			}
		}
	}
	want := map[string]int{}
	for _, id := range slices.Sorted(maps.Keys(truth)) {
		want[truth[id].Campaign]++
		if out.times[id] == 0 {
			lost++
			if lost <= 5 {
				problems = append(problems, fmt.Sprintf("click %s never counted", id))
			}
		}
	}
	if twice > 0 {
		problems = append(problems, fmt.Sprintf("%d clicks counted more than once", twice))
	}
	if lost > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d clicks never counted", lost, len(truth)))
	}
	for _, c := range slices.Sorted(maps.Keys(want)) {
		if out.counts[c] != want[c] {
			problems = append(problems, fmt.Sprintf("campaign %s counted %d, truth %d", c, out.counts[c], want[c]))
		}
	}
	for c := range out.counts {
		if _, ok := want[c]; !ok {
			problems = append(problems, fmt.Sprintf("campaign %s counted %d, but no click of it was written", c, out.counts[c]))
		}
	}
	return problems
}
