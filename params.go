package rbloom

import "math"

// The sizing formulas of a Bloom filter with m slots, k hash functions and n
// items (Bloom 1970; Broder and Mitzenmacher, "Network Applications of Bloom
// Filters: A Survey", 2004). They hold for counting filters too: a counter is
// non-zero exactly when the bit of a classic filter would be set.

// OptimalSlots returns m, the number of slots (counters or bits) that
// holds n items with a false-positive rate of p when k is chosen optimally:
//
//	m = ceil(-n ln p / (ln 2)^2)
//
// It returns 0 when n is 0 or p is not in (0, 1).
func OptimalSlots(n uint64, p float64) uint64 {
	if n == 0 || !(p > 0 && p < 1) {
		return 0
	}
	return uint64(math.Ceil(-float64(n) * math.Log(p) / (math.Ln2 * math.Ln2)))
}

// OptimalHashes returns k, the number of hash functions that minimises the
// false-positive rate of m slots holding n items:
//
//	k = round(m/n ln 2), at least 1
//
// It returns 0 when n or m is 0.
func OptimalHashes(n, m uint64) int {
	if n == 0 || m == 0 {
		return 0
	}
	return max(1, int(math.Round(float64(m)/float64(n)*math.Ln2)))
}

// FalsePositiveRate returns the expected probability that an item never
// added tests as present in m slots with k hash functions after n items:
//
//	p = (1 - e^(-k n / m))^k
//
// It returns 0 when m or k is 0.
func FalsePositiveRate(n, m uint64, k int) float64 {
	if m == 0 || k <= 0 {
		return 0
	}
	return math.Pow(-math.Expm1(-float64(k)*float64(n)/float64(m)), float64(k))
}
