package memredis

import (
	"math/rand/v2"
	"testing"
)

// TestBitsMatchBitByBit checks getBits and setBits, which go a byte at a
// time, against the plain definition, one bit at a time, at every offset
// and width in a few bytes, on random contents.
func TestBitsMatchBitByBit(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for offset := uint64(0); offset < 24; offset++ {
		for bits := uint(1); bits <= 64; bits++ {
			buf := make([]byte, 12)
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			// Reads run off the end of a short copy too.
			for _, b := range [][]byte{buf, buf[:len(buf)/2]} {
				if got, want := getBits(b, offset, bits), getBitsSlow(b, offset, bits); got != want {
					t.Fatalf("getBits(%x, %d, %d) = %#x, want %#x", b, offset, bits, got, want)
				}
			}
			v := r.Uint64()
			got, want := append([]byte(nil), buf...), append([]byte(nil), buf...)
			setBits(got, offset, bits, v)
			setBitsSlow(want, offset, bits, v)
			if string(got) != string(want) {
				t.Fatalf("setBits(%x, %d, %d, %#x) = %x, want %x", buf, offset, bits, v, got, want)
			}
		}
	}
}

func getBitsSlow(buf []byte, offset uint64, bits uint) uint64 {
	var v uint64
	for i := range uint64(bits) {
		o := offset + i
		var bit uint64
		if b := o >> 3; b < uint64(len(buf)) {
			bit = uint64(buf[b]>>(7-o&7)) & 1
		}
		v = v<<1 | bit
	}
	return v
}

func setBitsSlow(buf []byte, offset uint64, bits uint, v uint64) {
	for i := range uint64(bits) {
		o := offset + i
		mask := byte(1) << (7 - o&7)
		if v>>(uint64(bits)-1-i)&1 != 0 {
			buf[o>>3] |= mask
		} else {
			buf[o>>3] &^= mask
		}
	}
}
