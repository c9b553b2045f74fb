package rbloomtest

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// A Loss is one way a Redis loses its data.
type Loss struct {
	What string // "FLUSHALL", say
	Do   func()
}

// Losses returns the ways the server can lose every key, which rdb
// reaches: a restart without persistence, FLUSHALL, and the eviction of
// every key (DEL, one at a time). A program whose promise must survive
// them runs through each.
func (s *Server) Losses(rdb redis.UniversalClient) []Loss {
	ctx := context.Background()
	return []Loss{
		{"a restart without persistence", s.Restart},
		{"FLUSHALL", func() { rdb.FlushAll(ctx) }},
		{"the eviction of every key", func() {
			for _, key := range rdb.Keys(ctx, "*").Val() {
				rdb.Del(ctx, key)
			}
		}},
	}
}
