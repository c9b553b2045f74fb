package bench

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// tripCounter is a go-redis hook that counts round trips: every command
// sent on its own (Process) and every pipeline (ProcessPipeline) is one.
// Script.Run's fallback from EVALSHA to EVAL makes two calls and counts two.
// go-redis retries below the hooks, so a retried command would count once;
// on the loopback interface nothing is retried. go-redis sets up each new
// connection through the hooks too (HELLO, then CLIENT SETINFO in a
// pipeline): those are not counted.
//
// It also counts the commands sent on their own, by name: a transaction
// counts as its MULTI and EXEC, the commands in it run by the EXEC.
type tripCounter struct {
	n    atomic.Int64
	mu   sync.Mutex
	sent map[string]int64
}

// note counts the commands of one round trip.
func (c *tripCounter) note(cmds []redis.Cmder) {
	tx := len(cmds) > 0 && cmds[0].Name() == "multi"
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sent == nil {
		c.sent = make(map[string]int64)
	}
	for _, cmd := range cmds {
		if name := cmd.Name(); !setup[name] && (!tx || name == "multi" || name == "exec") {
			c.sent[name]++
		}
	}
}

// sentSoFar returns how many commands of each name were sent so far.
func (c *tripCounter) sentSoFar() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.sent)
}

var _ redis.Hook = (*tripCounter)(nil)

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setup[cmd.Name()] {
			c.n.Add(1)
		}
		c.note([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if !setup[cmd.Name()] {
				c.n.Add(1)
				break
			}
		}
		c.note(cmds)
		return next(ctx, cmds)
	}
}

// setup are the commands go-redis sends to set up a connection. The
// benchmark sends none of them itself.
var setup = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

// count returns the round trips made so far.
func (c *tripCounter) count() int64 { return c.n.Load() }
