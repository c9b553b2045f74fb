package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rbloom/rbloom"
)

// config is what every consumer of a group, the producer and the report
// agree on.
type config struct {
	brokers       []string
	input, output string // topics: clicks in, counts out
	group         string // consumer group; also names the journal and the transactional ids
	window        string // name of the rbloom Window in Redis
	windowOptions rbloom.WindowOptions
	maxBatch      int           // records of one batch, at most
	heartbeat     time.Duration // group heartbeat interval; 0: franz-go's default, 3 s
}

// The steps of a transaction at which crash can stop a consumer.
const (
	stepPolled   = "polled"   // records fetched, the transaction begun, nothing written
	stepDeduped  = "deduped"  // every batch through the Window: events added, answers recorded
	stepProduced = "produced" // the counts produced to the output topic, not committed
)

// errCrashed is what run returns when crash stopped the consumer.
var errCrashed = errors.New("consumer stopped by its crash hook")

// dedupMode says how a consumer asks the window. Only dedupOnce is
// correct; the others are how the tests show that the audit catches a
// broken consumer.
type dedupMode int

const (
	dedupOnce    dedupMode = iota // TestOrAddManyOnce under the batch's id
	dedupNoOnce                   // TestOrAddMany: a replayed batch's own events answer "seen"
	dedupNothing                  // no window: every click counts as new
)

// stats count what the consumers did, over all of them.
type stats struct {
	transactions, committed, aborted atomic.Int64
	batches, resumed                 atomic.Int64 // batches run; of them, cut by a transaction that did not commit
	newEvents, seenEvents, bad       atomic.Int64
}

func (s *stats) String() string {
	return fmt.Sprintf("transactions=%d committed=%d aborted=%d batches=%d resumed=%d new=%d seen=%d bad-records=%d",
		s.transactions.Load(), s.committed.Load(), s.aborted.Load(), s.batches.Load(), s.resumed.Load(),
		s.newEvents.Load(), s.seenEvents.Load(), s.bad.Load())
}

// consumer is one member of the group. Each transaction takes what one
// poll returned, cuts each partition's records into batches (journal),
// runs each batch through TestOrAddManyOnce under the id
// "topic/partition/first-last", and produces the new clicks' counts per
// campaign and commits the offsets in one Kafka transaction.
type consumer struct {
	name  string // also its transactional id's suffix: a replacement takes the dead one's name and fences it
	cfg   config
	sess  *kgo.GroupTransactSession
	w     *rbloom.Window
	j     journal
	log   *log.Logger
	stats *stats
	dedup dedupMode
	// moved counts the partitions revoked from or lost by this consumer:
	// a transaction during which it changes aborts without waiting.
	moved atomic.Int64
	// crash, if not nil, is called at each step of each transaction (its
	// number, from 1); when it returns true the consumer stops there,
	// leaving the transaction open, as a process that dies does.
	crash func(step string, txn int) bool
}

// maxExtraPolls bounds the polls a transaction makes to reach the end of
// a batch journaled before; past it the transaction aborts and starts over.
const maxExtraPolls = 50

// newConsumer joins the group (in the background, as franz-go does) and
// does not contact Redis.
func newConsumer(cfg config, name string, w *rbloom.Window, j journal, logger *log.Logger, st *stats) (*consumer, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.brokers...),
		kgo.ConsumerGroup(cfg.group),
		kgo.ConsumeTopics(cfg.input),
		kgo.TransactionalID(cfg.group + "-" + name),
		kgo.TransactionTimeout(10 * time.Second),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(time.Second),
	}
	if cfg.heartbeat > 0 {
		opts = append(opts, kgo.HeartbeatInterval(cfg.heartbeat))
	}
	c := &consumer{name: name, cfg: cfg, w: w, j: j, log: logger, stats: st}
	moved := func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
		for _, p := range ps {
			c.moved.Add(int64(len(p)))
		}
	}
	opts = append(opts, kgo.OnPartitionsRevoked(moved), kgo.OnPartitionsLost(moved))
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w (check -brokers)", name, err)
	}
	c.sess = sess
	return c, nil
}

// run consumes until ctx is done (it then returns nil), crash stops it
// (errCrashed), or an error it cannot go on after. It closes the session
// when it returns: the consumer leaves the group.
func (c *consumer) run(ctx context.Context) error {
	defer c.sess.Close()
	for txn := 0; ; {
		fs := c.sess.PollRecords(ctx, 10*c.cfg.maxBatch)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		for _, fe := range fs.Errors() {
			c.log.Printf("%s: fetch %s/%d: %v", c.name, fe.Topic, fe.Partition, fe.Err)
		}
		if fs.NumRecords() == 0 {
			continue
		}
		txn++
		if err := c.sess.Begin(); err != nil {
			return fmt.Errorf("%s: begin a transaction: %w", c.name, err)
		}
		c.stats.transactions.Add(1)
		commit, err := c.transact(ctx, fs, txn)
		if errors.Is(err, errCrashed) {
			return err
		}
		if err != nil || ctx.Err() != nil {
			// Abort with a context of its own: ctx may be what ended.
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, aerr := c.sess.End(actx, kgo.TryAbort)
			cancel()
			c.stats.aborted.Add(1)
			if ctx.Err() != nil {
				return nil
			}
			return errors.Join(err, aerr)
		}
		committed, err := c.sess.End(ctx, kgo.TransactionEndTry(commit))
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while ending: the transaction may or may not have committed, either is fine
			}
			return fmt.Errorf("%s: end the transaction: %w", c.name, err)
		}
		if committed {
			c.stats.committed.Add(1)
		} else {
			// A rebalance, or batches not complete: the session is back at
			// the committed offsets, and the next poll refetches.
			c.stats.aborted.Add(1)
		}
	}
}

// batch is a run of one partition's records, as journaled.
type batch struct {
	topic      string
	partition  int32
	first, end int64 // offsets of its first and last records
	records    []*kgo.Record
	resumed    bool // cut by an earlier transaction, which did not commit
}

// opID is the batch's operation id for TestOrAddManyOnce.
func (b batch) opID() string {
	return fmt.Sprintf("%s/%d/%d-%d", b.topic, b.partition, b.first, b.end)
}

type topicPartition struct {
	topic     string
	partition int32
}

// transact runs one transaction's work, up to and not including End: it
// returns whether to commit. It returns errCrashed when crash stopped it.
func (c *consumer) transact(ctx context.Context, fs kgo.Fetches, txn int) (bool, error) {
	if c.crash != nil && c.crash(stepPolled, txn) {
		return false, errCrashed
	}
	moved := c.moved.Load()
	recs := map[topicPartition][]*kgo.Record{}
	add := func(fs kgo.Fetches) (ok bool) {
		ok = true
		fs.EachRecord(func(r *kgo.Record) {
			tp := topicPartition{r.Topic, r.Partition}
			if rs := recs[tp]; len(rs) > 0 && r.Offset <= rs[len(rs)-1].Offset {
				ok = false // the client went back to the committed offset: a rebalance
			}
			recs[tp] = append(recs[tp], r)
		})
		return ok
	}
	add(fs)
	mine := map[string]bool{} // batches this transaction journaled
	var batches []batch
	for polls := 0; ; polls++ {
		var short string
		var err error
		if batches, short, err = c.cut(ctx, recs, mine); err != nil {
			return false, err
		}
		if short == "" {
			break
		}
		if polls == maxExtraPolls {
			c.log.Printf("%s: %s: the rest did not arrive in %d polls; aborting to start over", c.name, short, maxExtraPolls)
			return false, nil
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		more := c.sess.PollRecords(pctx, 10*c.cfg.maxBatch)
		cancel()
		if more.IsClientClosed() || ctx.Err() != nil {
			return false, ctx.Err()
		}
		if !add(more) || c.moved.Load() != moved {
			// Partitions moved: End would abort anyway, and the rest of
			// the batch may never come here.
			c.log.Printf("%s: partitions moved while waiting for the rest of %s; aborting", c.name, short)
			return false, nil
		}
	}

	counts := map[string]*campaignCount{}
	for _, b := range batches {
		if err := c.runBatch(ctx, b, counts); err != nil {
			return false, err
		}
	}
	if c.crash != nil && c.crash(stepDeduped, txn) {
		return false, errCrashed
	}

	out := make([]*kgo.Record, 0, len(counts))
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		v, err := json.Marshal(counts[name])
		if err != nil {
			return false, fmt.Errorf("%s: encode the counts: %w", c.name, err)
		}
		out = append(out, &kgo.Record{Topic: c.cfg.output, Key: []byte(name), Value: v})
	}
	if err := c.sess.ProduceSync(ctx, out...).FirstErr(); err != nil {
		c.log.Printf("%s: produce the counts: %v; aborting the transaction", c.name, err)
		return false, nil
	}
	if c.crash != nil && c.crash(stepProduced, txn) {
		return false, errCrashed
	}
	return true, nil
}

// cut cuts each partition's records into batches, each ending where the
// journal says: short, when not "", names a batch journaled before that
// ends past the records polled so far.
func (c *consumer) cut(ctx context.Context, recs map[topicPartition][]*kgo.Record, mine map[string]bool) (batches []batch, short string, err error) {
	tps := slices.SortedFunc(maps.Keys(recs), func(a, b topicPartition) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	for _, tp := range tps {
		rs := recs[tp]
		for i := 0; i < len(rs); {
			first := rs[i].Offset
			proposed := rs[min(len(rs), i+c.cfg.maxBatch)-1].Offset
			end, resumed, err := c.j.end(ctx, tp.topic, tp.partition, first, proposed)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", c.name, err)
			}
			b := batch{topic: tp.topic, partition: tp.partition, first: first, end: end}
			if !resumed {
				mine[b.opID()] = true
			}
			if end > rs[len(rs)-1].Offset {
				short = fmt.Sprintf("batch %s, polled up to offset %d", b.opID(), rs[len(rs)-1].Offset)
				break
			}
			k := i
			for k < len(rs) && rs[k].Offset <= end {
				k++
			}
			b.records, b.resumed = rs[i:k], resumed && !mine[b.opID()]
			batches = append(batches, b)
			i = k
		}
	}
	return batches, short, nil
}

// campaignCount is one output record: the clicks of one campaign that a
// transaction found new, and their ids (for the audit; a production
// consumer would send the count alone).
type campaignCount struct {
	Campaign string   `json:"campaign"` // the campaign
	New      int      `json:"new"`      // its clicks the transaction found new
	Events   []string `json:"events"`   // their ids
}

// runBatch dedups one batch and adds its new clicks to counts.
func (c *consumer) runBatch(ctx context.Context, b batch, counts map[string]*campaignCount) error {
	c.stats.batches.Add(1)
	if b.resumed {
		c.stats.resumed.Add(1)
	}
	events := make([]event, 0, len(b.records))
	for _, r := range b.records {
		e, err := decodeEvent(r.Value)
		if err != nil {
			// Skipped the same way every time the batch runs.
			c.stats.bad.Add(1)
			c.log.Printf("%s: %s/%d@%d skipped: %v", c.name, r.Topic, r.Partition, r.Offset, err)
			continue
		}
		events = append(events, e)
	}
	ids := make([]string, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	var seen []bool
	var err error
	switch c.dedup {
	case dedupOnce:
		seen, err = c.w.TestOrAddManyOnce(ctx, ids, b.opID())
	case dedupNoOnce:
		seen, err = c.w.TestOrAddMany(ctx, ids)
	case dedupNothing:
		seen = make([]bool, len(ids))
	}
	if err != nil {
		return fmt.Errorf("%s: batch %s: %w", c.name, b.opID(), err)
	}
	for i, e := range events {
		if seen[i] {
			c.stats.seenEvents.Add(1)
			continue
		}
		c.stats.newEvents.Add(1)
		cc := counts[e.Campaign]
		if cc == nil {
			cc = &campaignCount{Campaign: e.Campaign}
			counts[e.Campaign] = cc
		}
		cc.New++
		cc.Events = append(cc.Events, e.ID)
	}
	return nil
}
