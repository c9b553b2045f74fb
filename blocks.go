package rbloom

import (
	"math"
	"unsafe"

	"github.com/spaolacci/murmur3"
)

// A window's slots in blocks. At the seed's size (7.4 GB of rings) much
// of an event's cost is the k words it reads and writes at random: each
// is a cache miss and, on a virtual machine, a walk of the page tables.
// Windows put an event's k slots in blocks of blockSlots slots, at most
// groupSlots of them in each, so that its words share a few pages.
//
// A block takes a random number of groups, so a generation holds less for
// the same slots than a plain Bloom filter: it gets more slots
// (blockedSlots, 0.53% at the seed's settings).
const (
	blockSlots = 1024 // slots of a block (its words: 3,328 bytes at W = 26)
	groupSlots = 3    // the slots of an event in one block, at most
)

// blockGroups is the number of blocks an event of k slots uses.
func blockGroups(k int) int { return (k + groupSlots - 1) / groupSlots }

// groupOf is the group of an event's i-th slot, of g: the groups' sizes
// differ by one at most.
func groupOf(i, k, g int) int { return i * g / k }

// blocksOf returns the number of blocks of a partition of m slots and the
// slots of each (the last m mod n slots are not used).
func blocksOf(m uint64) (n, size uint64) {
	n = max(1, m/blockSlots)
	return n, m / n
}

// locateBlocked is locate for a window's blocks: the same 128-bit hash and
// the same k numbers v_i = h1 + i*h2 + (i^3-i)/6 (mod 2^64), and
//
//	block_j = (v_f >> 32) * n >> 32   // f the first slot of group j, n blocks
//	slot_i  = block_j * size + v_i mod size
//
// for slot i of group j. It does not allocate when dst has room for k more.
func locateBlocked(dst []uint64, item string, k int, m uint64, p int) (int, []uint64) {
	h1, h2 := murmur3.Sum128(unsafe.Slice(unsafe.StringData(item), len(item)))
	n, size := blocksOf(m)
	g := blockGroups(k)
	var block uint64
	for i := range k {
		u := uint64(i)
		v := h1 + u*h2 + (u*u*u-u)/6
		if i == 0 || groupOf(i, k, g) != groupOf(i-1, k, g) {
			block = (v >> 32) * n >> 32
		}
		dst = append(dst, block*size+v%size)
	}
	return partitionOf(h2, p), dst
}

// blockedRate is the false-positive rate of a generation of n events in m
// slots (over every partition) with k hashes in blocks: each of an event's
// g groups lands in one of the m/size blocks at random, so a block takes a
// Poisson number of groups, of k/g slots on average, and a new event is
// held when each of its groups finds its slots set in its block.
func blockedRate(n, m uint64, k int) float64 {
	blocks, size := blocksOf(m)
	g := blockGroups(k)
	lambda := float64(n) * float64(g) / float64(blocks)
	unset := math.Log1p(-1 / float64(size)) // ln of a slot's chance to miss one write
	perVisit := float64(k) / float64(g)
	// E[fill^s] for the group sizes s = k/g rounded down and up.
	expect := func(s int) float64 {
		sd := math.Sqrt(lambda)
		lo := max(0, int(lambda-12*sd-5))
		hi := int(lambda+12*sd) + 10
		sum := 0.0
		for l := lo; l <= hi; l++ {
			lg, _ := math.Lgamma(float64(l) + 1)
			pl := math.Exp(-lambda + float64(l)*math.Log(lambda) - lg) // n >= 1: lambda > 0
			fill := -math.Expm1(perVisit * float64(l) * unset)
			sum += pl * math.Pow(fill, float64(s))
		}
		return sum
	}
	rate := 1.0
	small := k / g
	bigger := k - small*g // groups of small+1 slots
	if bigger > 0 {
		rate *= math.Pow(expect(small+1), float64(bigger))
	}
	return rate * math.Pow(expect(small), float64(g-bigger))
}

// blockedSlots returns the fewest slots, from m up, at which a generation
// of n events in blocks meets p with k hashes.
func blockedSlots(n, m uint64, k int, p float64) uint64 {
	hi := m
	for blockedRate(n, hi, k) > p {
		hi += hi/8 + 1
	}
	lo := m
	for lo < hi {
		mid := lo + (hi-lo)/2
		if blockedRate(n, mid, k) <= p {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}
