package main

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestExactlyOnce writes 3,000 clicks with duplicates, from the producer
// (a fifth of them written again) and from the broker (produce requests
// written, then answered REQUEST_TIMED_OUT, so the producer sends them
// again), while consumers join, leave and die in the middle of
// transactions, and checks the committed output against the truth: every
// distinct click counted once, none twice, none lost.
func TestExactlyOnce(t *testing.T) {
	e := newEnv(t, 3000)
	timeouts := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.cfg.input, Err: kerr.RequestTimedOut, Count: 4})
	written := generate(3000, 0.2, 7)
	g := e.group(t, dedupOnce)

	// consumer-0 alone, dying three times: after its window calls
	// (twice) and after producing the counts, never committing.
	g.start(t.Context(), "consumer-0", []crashAt{{step: stepDeduped, txn: 2}, {step: stepProduced, txn: 1}, {step: stepDeduped, txn: 1}})
	e.produce(t, written[:1200])
	// consumer-1 joins: a rebalance.
	g.start(t.Context(), "consumer-1", nil)
	e.waitMembers(t, 2)
	e.produce(t, written[1200:2000])
	// consumer-2 joins, and dies after the window in its first
	// transaction; consumer-1 leaves: more rebalances.
	g.start(t.Context(), "consumer-2", []crashAt{{step: stepDeduped, txn: 1}})
	e.waitMembers(t, 3)
	e.produce(t, written[2000:])
	g.stopSlot("consumer-1")
	out := e.drain(t, g)

	records, err := inputRecords(t.Context(), e.adm, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	truth := distinct(written)
	t.Logf("%d records for %d distinct clicks (%d written twice by the producer, %d by %d produce retries); %d crashes; %s",
		records, len(truth), len(written)-len(truth), records-int64(len(written)), timeouts.Hits(), g.crashed(), e.st)
	for _, p := range check(truth, out) {
		t.Error(p)
	}
	if timeouts.Hits() != 4 {
		t.Errorf("%d produce requests answered REQUEST_TIMED_OUT, want 4", timeouts.Hits())
	}
	if records <= int64(len(written)) {
		t.Errorf("%d records in the input for %d written: the produce retries wrote no duplicates", records, len(written))
	}
	if g.crashed() != 4 {
		t.Errorf("%d consumers died, want the 4 planned", g.crashed())
	}
	if e.st.resumed.Load() == 0 {
		t.Errorf("no batch was run again after a consumer died: the test did not exercise the replay")
	}
}

// TestAuditCatchesBrokenConsumers runs consumers that are wrong on purpose
// and checks that the comparison with the truth finds it: without the
// batch's operation id, a batch run again after its consumer died between
// the window call and the commit answers "seen" to its own clicks, which
// are never counted; without the window, the producer's duplicates are
// counted twice.
func TestAuditCatchesBrokenConsumers(t *testing.T) {
	for _, c := range []struct {
		name string
		mode dedupMode
		want string
	}{
		{"without the operation id", dedupNoOnce, "never counted"},
		{"without the window", dedupNothing, "counted more than once"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 600)
			written := generate(600, 0.2, 11)
			e.produce(t, written)
			g := e.group(t, c.mode)
			g.start(t.Context(), "consumer-0", []crashAt{{step: stepDeduped, txn: 1}, {step: stepDeduped, txn: 2}})
			out := e.drain(t, g)
			problems := check(distinct(written), out)
			t.Logf("%d crashes; %s; problems: %d", g.crashed(), e.st, len(problems))
			found := false
			for _, p := range problems {
				found = found || strings.Contains(p, c.want)
			}
			if !found {
				t.Errorf("check found %q, want a problem %q", problems, c.want)
			}
		})
	}
}

// TestBatchRunAgainAsCut kills a consumer after its window calls on the
// first clicks of the topic, and writes more clicks before it dies: the
// fresh consumer polls more records of each partition than the dead one
// had, and must still run the dead one's batches as they were cut, under
// the same ids, to get the window's first answers. Cut anew, a batch would
// have another id, and the clicks the dead consumer added would answer
// "seen".
func TestBatchRunAgainAsCut(t *testing.T) {
	e := newEnv(t, 400)
	written := generate(400, 0, 13)
	e.produce(t, written[:100])
	g := e.group(t, dedupOnce)
	more := func() {
		if err := produce(t.Context(), e.cfg, written[100:]); err != nil {
			t.Error(err)
		}
	}
	g.start(t.Context(), "consumer-0", []crashAt{{step: stepDeduped, txn: 1, before: more}})
	out := e.drain(t, g)
	t.Logf("%d crashes; %s", g.crashed(), e.st)
	for _, p := range check(distinct(written), out) {
		t.Error(p)
	}
	if g.crashed() != 1 || e.st.resumed.Load() == 0 {
		t.Errorf("%d crashes, %d batches run again from the journal: want 1 and some", g.crashed(), e.st.resumed.Load())
	}
}

// TestJournalKeepsTheFirstEnd checks that a batch cut again, by a
// consumer that polled more or fewer records, ends where it first did.
func TestJournalKeepsTheFirstEnd(t *testing.T) {
	e := newEnv(t, 10)
	j := newJournal(e.rdb, e.cfg.group, time.Minute)
	for _, c := range []struct {
		proposed, want int64
		resumed        bool
	}{{149, 149, false}, {199, 149, true}, {120, 149, true}} {
		end, resumed, err := j.end(t.Context(), "clicks", 3, 100, c.proposed)
		if err != nil {
			t.Fatal(err)
		}
		if end != c.want || resumed != c.resumed {
			t.Errorf("end(100, proposed %d) = %d, %v, want %d, %v", c.proposed, end, resumed, c.want, c.resumed)
		}
	}
}
