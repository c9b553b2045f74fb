package rbloom

import (
	"context"
	"time"

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
// sent again with EVAL, which also loads the script. Calls a cluster refused
// while it moves their slot are sent again too (see unapplied).
func runScripts(ctx context.Context, rdb redis.UniversalClient, script *redis.Script, calls []scriptCall) ([]string, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pending := make([]int, len(calls)) // the calls still to send
	for i := range pending {
		pending[i] = i
	}
	for wait := range backoff(ctx) {
		pipe := rdb.Pipeline()
		for _, i := range pending {
			if wait == 0 || !redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				cmds[i] = script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
			} else {
				cmds[i] = script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
			}
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		pending = pending[:0]
		for i, cmd := range cmds {
			if err := cmd.Err(); redis.HasErrorPrefix(err, "NOSCRIPT") || unapplied(err) {
				pending = append(pending, i)
			}
		}
		if len(pending) == 0 {
			break
		}
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

// unapplied reports whether err is a cluster's refusal to run a command
// now: it did nothing, and the same command can be sent again. go-redis
// follows MOVED and ASK and retries TRYAGAIN itself, but gives up after
// MaxRedirects; while a slot migrates, every script call naming a key that
// is not there yet (each write's fresh operation key) is answered TRYAGAIN
// until the migration ends.
func unapplied(err error) bool {
	for _, code := range []string{"TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, code) {
			return true
		}
	}
	return false
}

// maxRedirectWait bounds how long a call waits for a cluster that keeps
// refusing it, when ctx has no earlier deadline.
const maxRedirectWait = 30 * time.Second

// backoff yields 0 at once, then the time waited so far before each retry,
// sleeping 5ms, 10ms, ... up to 500ms between them, until ctx is done or
// maxRedirectWait has passed.
func backoff(ctx context.Context) func(yield func(time.Duration) bool) {
	return func(yield func(time.Duration) bool) {
		start, pause := time.Now(), 5*time.Millisecond
		for waited := time.Duration(0); waited < maxRedirectWait; waited = time.Since(start) {
			if !yield(waited) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, 500*time.Millisecond)
		}
	}
}
