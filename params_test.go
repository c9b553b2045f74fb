package rbloom

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spaolacci/murmur3"
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
		if got := OptimalCounters(tt.n, tt.p); got != tt.m {
			t.Errorf("OptimalCounters(%d, %v) = %d, want %d", tt.n, tt.p, got, tt.m)
		}
		if got := OptimalHashes(tt.n, tt.m); got != tt.k {
			t.Errorf("OptimalHashes(%d, %d) = %d, want %d", tt.n, tt.m, got, tt.k)
		}
		if got := FalsePositiveRate(tt.n, tt.m, tt.k); math.Abs(got-tt.rate) > tt.rate*1e-3 {
			t.Errorf("FalsePositiveRate(%d, %d, %d) = %.6g, want %.6g", tt.n, tt.m, tt.k, got, tt.rate)
		}
	}
	for _, p := range []float64{0, -1, 1, math.NaN()} {
		if got := OptimalCounters(10, p); got != 0 {
			t.Errorf("OptimalCounters(10, %v) = %d, want 0", p, got)
		}
	}
	if got := OptimalHashes(0, 10); got != 0 {
		t.Errorf("OptimalHashes(0, 10) = %d, want 0", got)
	}
}

func TestOptions(t *testing.T) {
	tests := []struct {
		o     Options
		mode  Mode
		m     uint64 // per partition
		k     int
		p     uint32 // partitions; 0 means 1
		field string // in the error; "" means valid
	}{
		{o: Options{Capacity: 1_000_000}, mode: ModeCounting, m: 9_585_059, k: 7},
		{o: Options{Capacity: 1_000_000, ErrorRate: 0.001}, mode: ModeCounting, m: 14_377_588, k: 10},
		{o: Options{Counters: 1000, Hashes: 3}, mode: ModeCounting, m: 1000, k: 3},
		{o: Options{Capacity: 100, Counters: 1000}, mode: ModeClassic, m: 1000, k: 7},
		{o: Options{Counters: 1 << 30}, mode: ModeCounting, field: "Hashes"},
		{o: Options{Capacity: 10, ErrorRate: -0.1}, mode: ModeCounting, field: "ErrorRate"},
		{o: Options{Capacity: 10, ErrorRate: 1}, mode: ModeCounting, field: "ErrorRate"},
		{o: Options{Capacity: 10, ErrorRate: math.NaN()}, mode: ModeCounting, field: "ErrorRate"},
		{o: Options{}, mode: ModeCounting, field: "Capacity"},
		{o: Options{Capacity: 10, Hashes: -1}, mode: ModeCounting, field: "Hashes"},
		{o: Options{Capacity: 10, Hashes: MaxHashes + 1}, mode: ModeCounting, field: "Hashes"},
		{o: Options{Capacity: 10, TTL: -time.Second}, mode: ModeCounting, field: "TTL"},
		{o: Options{Capacity: 10, TTL: time.Microsecond}, mode: ModeCounting, field: "TTL"},
		{o: Options{Capacity: 1_000_000_000, Partitions: 1}, mode: ModeCounting, field: "Partitions"},
		{o: Options{Counters: 1<<30 - 127, Hashes: 1, Partitions: 1}, mode: ModeCounting, field: "Partitions"},
		{o: Options{Counters: 1<<30 - 128, Hashes: 1, Partitions: 1}, mode: ModeCounting, m: 1<<30 - 128, k: 1, p: 1},
		{o: Options{Counters: 1<<32 - 511, Hashes: 1, Partitions: 1}, mode: ModeClassic, field: "Partitions"},
		{o: Options{Capacity: 10, Partitions: -1}, mode: ModeCounting, field: "Partitions"},
		{o: Options{Capacity: 10, Partitions: MaxPartitions + 1}, mode: ModeCounting, field: "Partitions"},
		// Left to itself the library keeps partitions within 64 MiB.
		{o: Options{Capacity: 1_000_000_000}, mode: ModeCounting, m: 133_125_811, k: 7, p: 72},
		{o: Options{Capacity: 1_000_000_000}, mode: ModeClassic, m: 532_503_244, k: 7, p: 18},
		{o: Options{Counters: 1 << 30, Hashes: 1}, mode: ModeCounting, m: 1 << 27, k: 1, p: 8},
		{o: Options{Capacity: 100, Partitions: 3}, mode: ModeCounting, m: 320, k: 7, p: 3},
		{o: Options{Capacity: 1 << 50}, mode: ModeCounting, field: "Capacity"},
		{o: Options{Capacity: 1, Counters: 10_000}, mode: ModeClassic, field: "Hashes"}, // k would be 6931
	}
	for _, tt := range tests {
		h, err := tt.o.resolve(tt.mode)
		if tt.field == "" {
			if tt.p == 0 {
				tt.p = 1
			}
			if err != nil || h.m != tt.m || h.k != tt.k || h.partitions != tt.p {
				t.Errorf("%+v.resolve(%v) = m %d k %d P %d, %v; want m %d k %d P %d",
					tt.o, tt.mode, h.m, h.k, h.partitions, err, tt.m, tt.k, tt.p)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%+v.resolve(%v) error = %v, want ErrInvalidOptions naming %s", tt.o, tt.mode, err, tt.field)
		}
	}
}

func TestNames(t *testing.T) {
	for _, name := range []string{"", "a{b", "a}b", "tab\there", "nl\n", string(make([]byte, 257))} {
		if _, err := NewCounting(nil, name, Options{Capacity: 1}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("NewCounting(%q) error = %v, want ErrInvalidOptions", name, err)
		}
	}
}

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
