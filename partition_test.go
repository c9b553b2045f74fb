package rbloom

import (
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

func TestKeySlot(t *testing.T) {
	// The CRC16 check value of the XMODEM variant, and keys whose slots
	// were read from a real Redis (CLUSTER KEYSLOT) in TestKeySlotRedis.
	if got := keySlot("123456789"); got != 0x31c3%clusterSlots {
		t.Errorf("keySlot(123456789) = %d, want %d", got, 0x31c3%clusterSlots)
	}
	// CLUSTER KEYSLOT answers on a cluster-enabled server with no slots.
	addr := rbloomtest.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", t.TempDir()+"/nodes.conf")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for _, tag := range []string{"users", "users/0", "a:b", "日本", "\x00\xff"} {
		want, err := rdb.ClusterKeySlot(ctx, "rbloom:{"+tag+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := keySlot(tag); int64(got) != want {
			t.Errorf("keySlot(%q) = %d, want %d (CLUSTER KEYSLOT)", tag, got, want)
		}
	}
}

// TestPartitionKeysSpread checks that partition i falls in the i-th of P
// equal shares of the slot space, and that the name's own key is one of
// them.
func TestPartitionKeysSpread(t *testing.T) {
	for _, p := range []int{1, 2, 3, 6, 12, 100, MaxPartitions} {
		keys := partitionKeys(DefaultKeyPrefix, "users", p)
		if !slices.Contains(keys, keyOf(DefaultKeyPrefix, "users")) {
			t.Errorf("P=%d: no partition is %s", p, keyOf(DefaultKeyPrefix, "users"))
		}
		seen := map[string]bool{}
		for i, k := range keys {
			if seen[k] {
				t.Fatalf("P=%d: key %s twice", p, k)
			}
			seen[k] = true
			slot := int(keySlot(k[len("rbloom:{") : len(k)-1]))
			if lo, hi := i*clusterSlots/p, (i+1)*clusterSlots/p; slot < lo || slot >= hi {
				t.Errorf("P=%d: partition %d (%s) is in slot %d, want [%d, %d)", p, i, k, slot, lo, hi)
			}
		}
	}
}
