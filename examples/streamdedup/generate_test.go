package main

import (
	"math"
	"slices"
	"testing"
)

// The producer's stream: the same seed gives the same clicks, about dupRate
// of them written twice, the second time identical, right after or up to
// maxRetryDelay clicks later.
func TestGenerate(t *testing.T) {
	const n, dupRate = 10_000, 0.15
	written := generate("g", n, dupRate, 1)
	if again := generate("g", n, dupRate, 1); !slices.Equal(written, again) {
		t.Fatal("the same seed gave another stream")
	}
	dups := len(written) - n
	if sd := math.Sqrt(n * dupRate * (1 - dupRate)); math.Abs(float64(dups)-n*dupRate) > 5*sd {
		t.Errorf("%d duplicates, want about %.0f", dups, n*dupRate)
	}

	type firstWrite struct {
		e      event
		before int // clicks first written before it
	}
	first := map[string]firstWrite{}
	var rightAfter, late, firsts int
	for i, e := range written {
		f, seen := first[e.ID]
		if !seen {
			first[e.ID] = firstWrite{e, firsts}
			firsts++
			continue
		}
		if e != f.e {
			t.Fatalf("entry %d: retry %+v differs from the first write %+v", i, e, f.e)
		}
		switch d := firsts - 1 - f.before; {
		case d > maxRetryDelay:
			t.Fatalf("entry %d: %s written again %d clicks later, want at most %d", i, e.ID, d, maxRetryDelay)
		case d == 0:
			rightAfter++
		case d > 10:
			late++
		}
	}
	if rightAfter == 0 || late == 0 {
		t.Errorf("retries right after: %d, more than 10 clicks later: %d; want both", rightAfter, late)
	}
	tr := truthOf(written)
	var byCountry int64
	for _, c := range countries {
		byCountry += tr.counts["country="+c]
	}
	if len(tr.events) != n || byCountry != n {
		t.Errorf("truth: %d events, country counts sum to %d; want %d", len(tr.events), byCountry, n)
	}
}
