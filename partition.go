package rbloom

import (
	"strconv"
)

// A filter is split into P partitions, each its own Redis key with its own
// header and slots, so that a filter can outgrow one Redis string (512 MiB)
// and one server. An item lives in exactly one partition, so every call
// touches one key and every script stays in one cluster hash slot.
//
// The partitions are spread over the 16,384 cluster slots by construction:
// partition i lives in the i-th of P equal shares of the slot space. The
// partition whose share holds the slot of the name itself is the key
// "rbloom:{name}", so that Open finds any filter by its name; every other
// partition i is "rbloom:{name/j}" for the first j = 0, 1, 2, ... whose slot
// falls in share i. Masters that own even, contiguous shares of the slots,
// as redis-cli --cluster create makes them, then hold P/masters partitions
// each.

const (
	// MaxPartitions is the most partitions a filter may have.
	MaxPartitions = 1024
	// defaultPartitionBytes is the size of a partition's string that the
	// library does not exceed when it picks the number of partitions itself:
	// small keys are cheap to replicate, migrate and rewrite.
	defaultPartitionBytes = 64 << 20
	clusterSlots          = 16384
)

// partitionKeys returns the Redis keys of the P partitions of the named
// filter, each starting with prefix.
func partitionKeys(prefix, name string, p int) []string {
	keys := make([]string, p)
	keys[shareOf(keySlot(name), p)] = keyOf(prefix, name)
	for j, left := 0, p-1; left > 0; j++ {
		tag := name + "/" + strconv.Itoa(j)
		if i := shareOf(keySlot(tag), p); keys[i] == "" {
			keys[i] = keyOf(prefix, tag)
			left--
		}
	}
	return keys
}

// witnessKeys returns keys that, for any P from 2 to MaxPartitions, include
// the first two partitions of the named filter other than the one at
// rbloom:{name} (one for P = 2). Open reads them when that key is missing:
// a filter that lost its root partition still has them, and their headers
// state P, so a lost root is told from a filter that does not exist. There
// are only a few: for most names j = 0 and 1 serve every P.
func witnessKeys(prefix, name string) []string {
	var slots []uint16 // the slot of tag name/j, computed as needed
	slotOf := func(j int) uint16 {
		for len(slots) <= j {
			slots = append(slots, keySlot(name+"/"+strconv.Itoa(len(slots))))
		}
		return slots[j]
	}
	root := keySlot(name)
	var keys []string
	seen := map[int]bool{}
	for p := 2; p <= MaxPartitions; p++ {
		taken := map[int]bool{shareOf(root, p): true}
		for j := 0; len(taken) < min(p, 3); j++ {
			if i := shareOf(slotOf(j), p); !taken[i] {
				taken[i] = true
				if !seen[j] {
					seen[j] = true
					keys = append(keys, keyOf(prefix, name+"/"+strconv.Itoa(j)))
				}
			}
		}
	}
	return keys
}

// shareOf returns which of P equal shares of the slot space slot is in.
func shareOf(slot uint16, p int) int {
	return int(slot) * p / clusterSlots
}

// partitionOf returns the partition of an item whose hash is h1, h2. It
// uses the high bits of h2, which the slots within a partition depend on
// only through h2 mod m (Lemire's multiply-shift range reduction).
func partitionOf(h2 uint64, p int) int {
	return int((h2 >> 32) * uint64(p) >> 32)
}

// keySlot is the Redis Cluster hash slot of a hash tag: CRC16 (XMODEM) of
// the tag, mod 16384.
func keySlot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % clusterSlots
}
