package rbloom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
// sent again with EVAL, which also loads the script. With fcall
// (Options.UseFunctions), each call is an FCALL of the script's function
// instead, never an EVAL: a missing function is ErrNoFunctions (see
// functions.go). Calls a cluster refused while it moves their slot are sent
// again too (see unapplied). On a cluster the calls go through each
// master's own client (runOnMasters), never through the cluster client's
// pipeline.
func runScripts(ctx context.Context, rdb Client, script *redis.Script, fcall bool, calls []scriptCall, repl replication) ([]string, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return runOnMasters(ctx, cc, script, fcall, calls, repl)
	}
	return runPipelined(ctx, rdb, script, fcall, calls, repl)
}

// runPipelined is runScripts in one pipeline of rdb. A node's own client
// (runOnMasters) does not follow MOVED and ASK: those come back as errors.
func runPipelined(ctx context.Context, rdb Client, script *redis.Script, fcall bool, calls []scriptCall, repl replication) ([]string, error) {
	cmds, notReplicated := pipelineScripts(ctx, rdb, script, fcall, calls, repl)
	if cmds == nil {
		return nil, notReplicated
	}
	out := make([]string, len(cmds))
	var failed *partialError
	for i, cmd := range cmds {
		s, err := cmd.Text()
		if err != nil {
			if fcall {
				err = functionError(script, err)
			}
			if failed == nil {
				failed = &partialError{replies: out, refused: make([]bool, len(cmds)), err: err}
			}
			failed.refused[i] = refusal(err)
			continue
		}
		out[i] = s
	}
	switch {
	case failed != nil:
		return nil, failed
	case notReplicated != nil:
		return nil, &partialError{replies: out, refused: make([]bool, len(cmds)), err: notReplicated}
	}
	return out, nil
}

// partialError is runScripts's error when some of its calls failed: the
// replies of the others ("" for the failed ones), which calls one of our
// scripts refused (refusal), and the first failure.
type partialError struct {
	replies []string
	refused []bool
	err     error
}

func (e *partialError) Error() string { return e.err.Error() }

func (e *partialError) Unwrap() error { return e.err }

// refusal reports whether err is one of our scripts' error replies, which
// they give only before their first write: the call wrote nothing (but
// perhaps the record of its refusal).
func refusal(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "RBLOOM_")
}

// pipelineScripts makes the calls as runPipelined does and returns them,
// each with its reply or its own error (a script's error reply).
func pipelineScripts(ctx context.Context, rdb Client, script *redis.Script, fcall bool, calls []scriptCall, repl replication) ([]*redis.Cmd, error) {
	_, follows := rdb.(*redis.ClusterClient)
	cmds := make([]*redis.Cmd, len(calls))
	pending := make([]int, len(calls)) // the calls still to send
	for i := range pending {
		pending[i] = i
	}
	var wait backoff
	var replicated error // the last WAIT's verdict on writes that ran
	start := time.Now()
	for first := true; len(pending) > 0; first = false {
		pipe := rdb.Pipeline()
		for _, i := range pending {
			switch {
			case fcall:
				cmds[i] = pipe.FCall(ctx, library.function(script), calls[i].keys, calls[i].args...)
			case first || !redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT"):
				cmds[i] = script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
			default:
				cmds[i] = script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
			}
		}
		// The rounds' WAITs share one WaitTimeout: a WAIT after calls
		// answered NOSCRIPT may have waited it out already.
		waited := repl.queue(ctx, pipe, repl.timeout-time.Since(start))
		// Errors are read per command below, but a pipeline that failed to
		// set up its connection (a wrong password, say) reports it only
		// here, leaving the commands with no reply and no error.
		if _, err := pipe.Exec(ctx); err != nil && cmds[pending[0]].Err() == nil && cmds[pending[0]].Val() == nil {
			return nil, err
		}
		// A call answered NOSCRIPT or refused by the cluster did not run:
		// the WAIT after it says nothing of it, and a round in which no
		// call ran has no verdict to give. The verdict of a later round's
		// WAIT, which follows all the earlier rounds' writes, replaces it.
		if slices.ContainsFunc(pending, func(i int) bool { return ran(cmds[i].Err()) }) {
			replicated = repl.check(waited)
		}
		var refused, moved error
		pending = pending[:0]
		for i, cmd := range cmds {
			switch err := cmd.Err(); {
			case redis.HasErrorPrefix(err, "NOSCRIPT"):
				pending = append(pending, i) // again at once, with EVAL
			case unapplied(err) && (follows || !redirected(err)):
				pending, refused = append(pending, i), err
			case redirected(err):
				moved = err
			}
		}
		// A node that answered MOVED is no longer the master of the slot
		// (a failover): its WAIT fails ("WAIT cannot be used with replica
		// instances"), and the caller must follow the MOVED, not give up.
		if moved != nil {
			return nil, moved
		}
		if refused != nil {
			if err := wait.next(ctx); err != nil {
				return nil, fmt.Errorf("%w (the cluster kept refusing the call: %v)", err, refused)
			}
		}
	}
	// Not replicated: the replies say what ran (a call that wrote nothing
	// was not lost by the replicas).
	return cmds, replicated
}

// ran reports whether a call whose reply or error is err may have run: it
// was not answered NOSCRIPT nor refused by a cluster.
func ran(err error) bool {
	return !redis.HasErrorPrefix(err, "NOSCRIPT") && !unapplied(err)
}

// replication asks, when replicas is positive, that the writes of a
// pipeline reach that many replicas within timeout before it returns.
// WAIT counts the writes of its own connection only, so it must end the
// same pipeline.
type replication struct {
	replicas int
	timeout  time.Duration
}

// queue adds to pipe a WAIT of at most timeout, and at least 1 ms (WAIT 0
// would wait for ever).
func (r replication) queue(ctx context.Context, pipe redis.Pipeliner, timeout time.Duration) *redis.IntCmd {
	if r.replicas <= 0 {
		return nil
	}
	cmd := redis.NewIntCmd(ctx, "WAIT", r.replicas, max(timeout.Milliseconds(), 1))
	_ = pipe.Process(ctx, cmd)
	return cmd
}

func (r replication) check(cmd *redis.IntCmd) error {
	if cmd == nil {
		return nil
	}
	n, err := cmd.Result()
	if err != nil {
		return fmt.Errorf("WAIT: %w", err)
	}
	if n < int64(r.replicas) {
		return failf(ErrNotReplicated, "%d of %d replicas acknowledged within %v", n, r.replicas, r.timeout)
	}
	return nil
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

// redirected reports whether err sends the command to another node.
func redirected(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")
}

// maxRedirectWait bounds how long a call waits for a cluster that keeps
// refusing it, when ctx has no earlier deadline.
const maxRedirectWait = 30 * time.Second

// backoff paces retries of calls a cluster refused: 5ms, 10ms, ... up to
// 500ms apart, for at most maxRedirectWait in all. Its zero value is ready.
type backoff struct {
	start time.Time
	pause time.Duration
}

// next sleeps before the next retry. It returns ctx's error when ctx is
// done first, and an error when the retries have taken too long.
func (b *backoff) next(ctx context.Context) error {
	if b.start.IsZero() {
		b.start, b.pause = time.Now(), 5*time.Millisecond
	}
	if time.Since(b.start) > maxRedirectWait {
		return fmt.Errorf("the cluster kept refusing the call for %v", maxRedirectWait)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.pause):
	}
	b.pause = min(2*b.pause, 500*time.Millisecond)
	return nil
}
