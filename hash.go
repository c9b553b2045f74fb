package rbloom

import (
	"unsafe"

	"github.com/spaolacci/murmur3"
)

// locate returns the partition of item, of P, and appends its k slot
// indices in that partition to dst. Everything comes from one 128-bit
// MurmurHash3 (x64 variant, seed 0), the slots by enhanced double hashing
// (Dillinger and Manolios, "Bloom Filters in Probabilistic Verification",
// 2004):
//
//	h1, h2    = murmur3_x64_128(item)                   // the two 64-bit halves
//	partition = (h2 >> 32) * P >> 32
//	slot_i    = (h1 + i*h2 + (i^3-i)/6) mod 2^64 mod m  // i = 0 .. k-1
//
// The cubic term keeps the slots apart when h2 mod m is 0, as for the
// empty item (h1 = h2 = 0): plain double hashing would put all k on one
// counter, which three adds would then saturate for good.
//
// This is the on-Redis format: changing it breaks every stored filter (see
// the golden test). It does not allocate when dst has room for k more.
func locate(dst []uint64, item string, k int, m uint64, p int) (int, []uint64) {
	// murmur3 only reads the bytes, so hash the string in place.
	h1, h2 := murmur3.Sum128(unsafe.Slice(unsafe.StringData(item), len(item)))
	for i := range uint64(k) {
		dst = append(dst, (h1+i*h2+(i*i*i-i)/6)%m)
	}
	return partitionOf(h2, p), dst
}
