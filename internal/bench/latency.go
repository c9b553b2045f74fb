package bench

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Single-item rows time every call into an HdrHistogram, from which the
// report takes the median, the 99th percentile and the maximum. Values are
// recorded in nanoseconds, from 1 ns to 1 minute, to 3 significant digits.

// latencies are the histograms of the single-item rows.
type latencies struct {
	add, test, remove   *latency // Counting.Add, Test, Remove
	plainIncr, plainGet *latency // one plain BITFIELD per round trip
}

func newLatencies() *latencies {
	return &latencies{
		add:       newLatency("Counting.Add"),
		test:      newLatency("Counting.Test"),
		remove:    newLatency("Counting.Remove"),
		plainIncr: newLatency("plain BITFIELD INCRBY u4"),
		plainGet:  newLatency("plain BITFIELD_RO GET u4"),
	}
}

// latency is the histogram of one kind of call.
type latency struct {
	name string
	h    *hdrhistogram.Histogram
}

func newLatency(name string) *latency {
	return &latency{name: name, h: hdrhistogram.New(1, int64(time.Minute), 3)}
}

// each calls fn for every item, one call at a time, records the time each
// call took, and stops at the first error.
func (l *latency) each(items []string, fn func(item string) error) error {
	for _, item := range items {
		start := time.Now()
		err := fn(item)
		if rerr := l.h.RecordValue(time.Since(start).Nanoseconds()); rerr != nil {
			return rerr // a call of more than a minute
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// percentile returns the q-th percentile (0 to 100) of the calls.
func (l *latency) percentile(q float64) time.Duration {
	return time.Duration(l.h.ValueAtQuantile(q))
}

// concurrently calls fn for every item from g goroutines, each taking a
// contiguous part of items, and returns the first error. A goroutine stops
// at its first error.
func concurrently(items []string, g int, fn func(item string) error) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for i := range g {
		part := items[len(items)*i/g : len(items)*(i+1)/g]
		wg.Go(func() {
			for _, item := range part {
				if err := fn(item); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
