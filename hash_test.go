package rbloom

import (
	"slices"
	"strings"
	"testing"

	"github.com/spaolacci/murmur3"
)

// TestGolden pins the slots of fixed items. If it fails, the hashing has
// changed and every filter already stored in Redis would read wrong.
func TestGolden(t *testing.T) {
	// The reference MurmurHash3_x64_128("hello", seed 0).
	if h1, h2 := murmur3.Sum128([]byte("hello")); h1 != 0xcbd8a7b341bd9b02 || h2 != 0x5b1e906a48ae1d19 {
		t.Fatalf("murmur3(hello) = %x %x, want the reference cbd8a7b341bd9b02 5b1e906a48ae1d19", h1, h2)
	}
	tests := []struct {
		item  string
		m     uint64
		slots []uint64
	}{
		// Computed outside Go from murmur3's h1, h2 and the formula of locate.
		{"", 1000, []uint64{0, 0, 1, 4, 10}},
		{"user:42", 9_585_059, []uint64{4868083, 1395090, 6326950, 2853960, 7785825}},
		{"hello", 1 << 20, []uint64{891650, 768027, 644405, 520785, 397168}},
		{"\x00\xff binary", 7, []uint64{1, 3, 6, 4, 3}},
	}
	for _, tt := range tests {
		if _, got := locate(nil, tt.item, 5, tt.m, 1); !slices.Equal(got, tt.slots) {
			t.Errorf("locate(%q, k=5, m=%d) = %v, want %v", tt.item, tt.m, got, tt.slots)
		}
	}
}

func TestLocateDoesNotAllocate(t *testing.T) {
	buf := make([]uint64, 0, MaxHashes)
	item := strings.Repeat("x", 100)
	if n := testing.AllocsPerRun(100, func() { locate(buf[:0], item, 7, 1e6, 12) }); n != 0 {
		t.Errorf("locate allocates %v times, want 0", n)
	}
}
