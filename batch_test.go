package rbloom

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBatchErrorDeadline: an AddMany cut by its deadline says, per item,
// what it did: every item it calls applied is in the filter with its
// answer, every item it calls not applied is not, and the three outcomes
// cover the batch.
func TestBatchErrorDeadline(t *testing.T) {
	rdb := realRedis(t)
	c := newCounting(t, rdb, "deadline", Options{Capacity: 1_000_000, ErrorRate: 1e-6})
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	batch := events("d-", 100_000)
	var be *BatchError
	for _, timeout := range []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond} {
		short, cancel := context.WithTimeout(ctx, timeout)
		_, err := c.AddMany(short, batch)
		cancel()
		if err == nil {
			t.Fatalf("AddMany of %d items within %v: no error", len(batch), timeout)
		}
		if !errors.As(err, &be) {
			t.Fatalf("AddMany cut by its deadline: %v, want a *BatchError", err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("BatchError %v does not wrap context.DeadlineExceeded", err)
		}
		if n := count(be.Outcomes, Applied); n > 0 {
			t.Logf("within %v: %v", timeout, err)
			break
		}
		must(0, c.Drop(ctx)).on(t)
		if err := c.Create(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(be.Outcomes) != len(batch) || len(be.Answers) != len(batch) {
		t.Fatalf("%d outcomes and %d answers for %d items", len(be.Outcomes), len(be.Answers), len(batch))
	}
	time.Sleep(100 * time.Millisecond) // the calls still on the wire land
	counts := must(c.CountMany(ctx, batch)).on(t)
	for i, o := range be.Outcomes {
		switch {
		case o == Applied && counts[i] == 0:
			t.Fatalf("%s: Applied, but its count is 0", batch[i])
		case o == NotApplied && counts[i] != 0:
			t.Fatalf("%s: NotApplied, but its count is %d", batch[i], counts[i])
		case o == Applied && be.Answers[i]:
			t.Fatalf("%s: Applied to an empty filter, answered 'may have been present'", batch[i])
		}
	}
}

// TestBatchErrorFull: a cuckoo AddMany past the filter's capacity fails
// with ErrFull in a BatchError whose applied items hold and whose others
// do not.
func TestBatchErrorFull(t *testing.T) {
	rdb := realRedis(t)
	ck := must(NewCuckoo(rdb, "full-batch", Options{Capacity: 1000})).on(t)
	if err := ck.Create(ctx); err != nil {
		t.Fatal(err)
	}
	batch := events("f-", 3000)
	_, err := ck.AddMany(ctx, batch)
	var be *BatchError
	if !errors.As(err, &be) || !errors.Is(err, ErrFull) {
		t.Fatalf("AddMany of %d items into a cuckoo filter of 1000: %v, want a BatchError of ErrFull", len(batch), err)
	}
	t.Log(err)
	present := must(ck.CountMany(ctx, batch)).on(t)
	for i, o := range be.Outcomes {
		if o == Applied && present[i] == 0 {
			t.Fatalf("%s: Applied, but absent", batch[i])
		}
	}
	if count(be.Outcomes, Applied) == 0 {
		t.Error("no item applied: the filter had room for about 800")
	}
}

// TestBatchErrorNotSent: a write refused before anything was written (the
// filter does not exist) is its cause alone, not a BatchError.
func TestBatchErrorNotSent(t *testing.T) {
	rdb := realRedis(t)
	c := newCounting(t, rdb, "never-made", Options{Capacity: 100})
	_, err := c.AddMany(ctx, events("n-", 10))
	var be *BatchError
	if errors.As(err, &be) || !errors.Is(err, ErrNotFound) {
		t.Errorf("AddMany on a missing filter: %v, want ErrNotFound and no BatchError", err)
	}
}

func count(outcomes []Outcome, o Outcome) int {
	n := 0
	for _, x := range outcomes {
		if x == o {
			n++
		}
	}
	return n
}
