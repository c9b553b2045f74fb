package rbloom

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

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
		{o: Options{Slots: 1000, Hashes: 3}, mode: ModeCounting, m: 1000, k: 3},
		{o: Options{Capacity: 100, Slots: 1000}, mode: ModeClassic, m: 1000, k: 7},
		{o: Options{Slots: 1 << 30}, mode: ModeCounting, field: "Hashes"},
		{o: Options{Capacity: 10, ErrorRate: -0.1}, mode: ModeCounting, field: "ErrorRate"},
		{o: Options{Capacity: 10, ErrorRate: 1}, mode: ModeCounting, field: "ErrorRate"},
		{o: Options{Capacity: 10, ErrorRate: math.NaN()}, mode: ModeCounting, field: "ErrorRate"},
		{o: Options{}, mode: ModeCounting, field: "Capacity"},
		{o: Options{Capacity: 10, Hashes: -1}, mode: ModeCounting, field: "Hashes"},
		{o: Options{Capacity: 10, Hashes: MaxHashes + 1}, mode: ModeCounting, field: "Hashes"},
		{o: Options{Capacity: 10, TTL: -time.Second}, mode: ModeCounting, field: "TTL"},
		{o: Options{Capacity: 10, TTL: time.Microsecond}, mode: ModeCounting, field: "TTL"},
		{o: Options{Capacity: 1_000_000_000, Partitions: 1}, mode: ModeCounting, field: "Partitions"},
		{o: Options{Slots: 1<<30 - 127, Hashes: 1, Partitions: 1}, mode: ModeCounting, field: "Partitions"},
		{o: Options{Slots: 1<<30 - 128, Hashes: 1, Partitions: 1}, mode: ModeCounting, m: 1<<30 - 128, k: 1, p: 1},
		{o: Options{Slots: 1<<32 - 511, Hashes: 1, Partitions: 1}, mode: ModeClassic, field: "Partitions"},
		{o: Options{Capacity: 10, Partitions: -1}, mode: ModeCounting, field: "Partitions"},
		{o: Options{Capacity: 10, Partitions: MaxPartitions + 1}, mode: ModeCounting, field: "Partitions"},
		// Left to itself the library keeps partitions within 64 MiB.
		{o: Options{Capacity: 1_000_000_000}, mode: ModeCounting, m: 133_125_811, k: 7, p: 72},
		{o: Options{Capacity: 1_000_000_000}, mode: ModeClassic, m: 532_503_244, k: 7, p: 18},
		{o: Options{Slots: 1 << 30, Hashes: 1}, mode: ModeCounting, m: 1 << 27, k: 1, p: 8},
		{o: Options{Capacity: 100, Partitions: 3}, mode: ModeCounting, m: 320, k: 7, p: 3},
		{o: Options{Capacity: 1 << 50}, mode: ModeCounting, field: "Capacity"},
		{o: Options{Capacity: 1, Slots: 10_000}, mode: ModeClassic, field: "Hashes"}, // k would be 6931
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
