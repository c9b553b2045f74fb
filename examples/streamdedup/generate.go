package main

import (
	"fmt"
	"math/rand/v2"
)

// maxRetryDelay is how many first writes later, at most, a retried produce
// writes its event again: 0 is right after.
const maxRetryDelay = 50

var (
	countries = []string{"DE", "FR", "US", "JP", "BR", "IN", "NG", "AU"}
	campaigns = 20
)

// generate returns what a producer writes for n distinct clicks: each once,
// in order, and a share dupRate of them a second time, as a produce that
// timed out and was retried does, right after or up to maxRetryDelay
// clicks later. The same run and seed give the same stream; run, in every
// event id, keeps separate runs apart in one Redis.
func generate(run string, n int, dupRate float64, seed uint64) []event {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]event, 0, n+int(float64(n)*dupRate)+1)
	retries := map[int][]event{} // by the click after which they are written
	for i := range n {
		e := event{
			ID:       fmt.Sprintf("%s-%d", run, i),
			Country:  countries[rng.IntN(len(countries))],
			Campaign: fmt.Sprintf("c%02d", rng.IntN(campaigns)),
		}
		out = append(out, e)
		if rng.Float64() < dupRate {
			at := i + rng.IntN(maxRetryDelay+1)
			retries[at] = append(retries[at], e)
		}
		out = append(out, retries[i]...)
		delete(retries, i)
	}
	for i := n; len(retries) > 0; i++ {
		out = append(out, retries[i]...)
		delete(retries, i)
	}
	return out
}

// truth is what exactly-once counting of events must give: the counts of
// each dimension over the distinct events, and those events by id.
type truth struct {
	counts map[string]int64
	events map[string]event
}

func truthOf(events []event) truth {
	t := truth{counts: map[string]int64{}, events: map[string]event{}}
	for _, e := range events {
		if _, dup := t.events[e.ID]; dup {
			continue
		}
		t.events[e.ID] = e
		for _, d := range e.dimensions() {
			t.counts[d]++
		}
	}
	return t
}
