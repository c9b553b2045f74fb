package main

import (
	"fmt"
	"sync/atomic"
)

// stats counts a consumer's work. It is safe for concurrent use.
type stats struct {
	batches, replays, claimed, counted, duplicates, alreadyApplied atomic.Int64
}

// record counts a batch run: counted by this run (applied), or found
// counted already.
func (s *stats) record(applied bool, seen []bool) {
	s.batches.Add(1)
	if !applied {
		s.alreadyApplied.Add(1)
		return
	}
	for _, dup := range seen {
		if dup {
			s.duplicates.Add(1)
		} else {
			s.counted.Add(1)
		}
	}
}

// add adds o's counts to s.
func (s *stats) add(o *stats) {
	s.batches.Add(o.batches.Load())
	s.replays.Add(o.replays.Load())
	s.claimed.Add(o.claimed.Load())
	s.counted.Add(o.counted.Load())
	s.duplicates.Add(o.duplicates.Load())
	s.alreadyApplied.Add(o.alreadyApplied.Load())
}

func (s *stats) String() string {
	return fmt.Sprintf("batches=%d replays=%d claimed=%d new=%d duplicates=%d already-counted=%d",
		s.batches.Load(), s.replays.Load(), s.claimed.Load(), s.counted.Load(), s.duplicates.Load(), s.alreadyApplied.Load())
}
