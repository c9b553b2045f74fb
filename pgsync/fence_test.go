package pgsync

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// TestFenceRefusesUnknownStep: fenceScript given a step that is neither
// pending nor record refuses it and writes nothing (it would otherwise
// record the group applied).
func TestFenceRefusesUnknownStep(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t)})
	defer rdb.Close()
	ctx := context.Background()
	rdb.HSet(ctx, "rbloom:{items}:pgsync", "lsn", "0/10", "pending", "0/20")
	err := fenceScript.Run(ctx, rdb, []string{"rbloom:{items}:pgsync", "rbloom:{items}"}, "pendng", "0/10", "0/20", "1", "1", "").Err()
	if !redis.HasErrorPrefix(err, "PGSYNC_ARGS") {
		t.Fatalf("step pendng: %v, want PGSYNC_ARGS", err)
	}
	if got := rdb.HGetAll(ctx, "rbloom:{items}:pgsync").Val(); got["lsn"] != "0/10" || got["pending"] != "0/20" {
		t.Errorf("the state after a refused step: %v", got)
	}
}
