package rbloom

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// runOnMasters runs the calls as runScripts does, on a Redis Cluster, with
// WaitReplicas. WAIT counts the writes of its own connection, and the
// cluster client's pipelines would send it to any node: so the calls go,
// grouped by the master that owns their key, through that master's own
// client, each group's pipeline ending with its WAIT, the masters in
// parallel. A master that answers MOVED or ASK (its slot is moving) has its
// group sent again on the cluster's new state: the calls it did apply are
// not applied twice, since each call's record returns its first answer.
func runOnMasters(ctx context.Context, cc *redis.ClusterClient, script *redis.Script, fcall bool, calls []scriptCall, repl replication) ([]string, error) {
	out := make([]string, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	var wait backoff
	for len(pending) > 0 {
		groups := map[*redis.Client][]int{}
		for _, i := range pending {
			node, err := cc.MasterForKey(ctx, calls[i].keys[0])
			if err != nil {
				return nil, err
			}
			groups[node] = append(groups[node], i)
		}
		type result struct {
			at      []int
			replies []string
			err     error
		}
		results := make([]result, 0, len(groups))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for node, at := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				group := make([]scriptCall, len(at))
				for j, i := range at {
					group[j] = calls[i]
				}
				replies, err := runPipelined(ctx, node, script, fcall, group, repl)
				mu.Lock()
				results = append(results, result{at, replies, err})
				mu.Unlock()
			}()
		}
		wg.Wait()
		pending = pending[:0]
		var moved error
		for _, r := range results {
			switch {
			case redirected(r.err):
				pending, moved = append(pending, r.at...), r.err
			case r.err != nil:
				return nil, r.err
			default:
				for j, i := range r.at {
					out[i] = r.replies[j]
				}
			}
		}
		if moved != nil {
			cc.ReloadState(ctx)
			if err := wait.next(ctx); err != nil {
				return nil, fmt.Errorf("%w (the cluster kept moving the call: %v)", err, moved)
			}
		}
	}
	return out, nil
}
