package rbloom

import (
	"math"
	"testing"
)

func TestSizing(t *testing.T) {
	tests := []struct {
		n    uint64
		p    float64
		m    uint64
		k    int
		rate float64 // FalsePositiveRate(n, m, k)
	}{
		{n: 1_000_000, p: 0.01, m: 9_585_059, k: 7, rate: 0.010039},
		{n: 1_000_000, p: 0.001, m: 14_377_588, k: 10, rate: 0.0010000},
		{n: 100_000, p: 0.01, m: 958_506, k: 7, rate: 0.010039},
		{n: 1, p: 0.5, m: 2, k: 1, rate: 0.393469},
		{n: 1_000_000_000, p: 1e-9, m: 43_132_762_699, k: 30, rate: 1.0e-9},
	}
	for _, tt := range tests {
		if got := OptimalSlots(tt.n, tt.p); got != tt.m {
			t.Errorf("OptimalSlots(%d, %v) = %d, want %d", tt.n, tt.p, got, tt.m)
		}
		if got := OptimalHashes(tt.n, tt.m); got != tt.k {
			t.Errorf("OptimalHashes(%d, %d) = %d, want %d", tt.n, tt.m, got, tt.k)
		}
		if got := FalsePositiveRate(tt.n, tt.m, tt.k); math.Abs(got-tt.rate) > tt.rate*1e-3 {
			t.Errorf("FalsePositiveRate(%d, %d, %d) = %.6g, want %.6g", tt.n, tt.m, tt.k, got, tt.rate)
		}
	}
	for _, p := range []float64{0, -1, 1, math.NaN()} {
		if got := OptimalSlots(10, p); got != 0 {
			t.Errorf("OptimalSlots(10, %v) = %d, want 0", p, got)
		}
	}
	if got := OptimalHashes(0, 10); got != 0 {
		t.Errorf("OptimalHashes(0, 10) = %d, want 0", got)
	}
}
