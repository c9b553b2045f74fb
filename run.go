package rbloom

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// scriptCall is one call of a script.
type scriptCall struct {
	keys []string
	args []any
}

// runScripts makes the calls in one round trip and returns their string
// replies in order. Inside a pipeline go-redis does not fall back from
// EVALSHA to EVAL, so calls answered NOSCRIPT (the script cache is empty
// after a restart, a failover or SCRIPT FLUSH; such a call did nothing) are
// sent again with EVAL, which also loads the script.
func runScripts(ctx context.Context, rdb redis.UniversalClient, script *redis.Script, calls []scriptCall) ([]string, error) {
	if len(calls) == 1 {
		s, err := script.Run(ctx, rdb, calls[0].keys, calls[0].args...).Text()
		return []string{s}, err
	}
	cmds := make([]*redis.Cmd, len(calls))
	pipe := rdb.Pipeline()
	for i, c := range calls {
		cmds[i] = script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe = rdb.Pipeline()
		for _, i := range again {
			cmds[i] = script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	out := make([]string, len(cmds))
	for i, cmd := range cmds {
		s, err := cmd.Text()
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}
