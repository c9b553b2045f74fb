package rbloom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// runOnMasters runs the calls as runScripts does, on a Redis Cluster: the
// calls go, grouped by the master that owns their key, through that
// master's own client, the masters in parallel, each group's pipeline
// ending with its WAIT when WaitReplicas asks for one (WAIT counts the
// writes of its own connection, and the cluster client's pipelines would
// send it to any node).
//
// The cluster client's own pipeline is not used for scripts: while a slot
// migrates, two of its goroutines wrote one call's reply at once (a data
// race the race detector caught in TestClusterReshardWindow). In go-redis
// v9.23.0's code, a node's first command refused with a code it retries
// (TRYAGAIN, as script calls are while their slot migrates) queues all of
// that node's commands again, those it already queued for another node
// after a MOVED or ASK included.
//
// A master that answers MOVED or ASK (its slot is moving), or whose
// connection fails (as the cluster client does, at most MaxRedirects
// times), has its group sent again on the cluster's new state: the calls
// it did apply are not applied twice, since each call's record returns its
// first answer.
func runOnMasters(ctx context.Context, cc *redis.ClusterClient, script *redis.Script, fcall bool, calls []scriptCall, repl replication) ([]string, error) {
	out := make([]string, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	var wait backoff
	var failed *partialError             // the first group that failed, and what the others answered
	resends := cc.Options().MaxRedirects // of a group whose connection failed
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
		var again error // why some groups go again
		var moved []int // the calls of groups a cluster sent elsewhere
		lost := false
		for _, r := range results {
			switch {
			case redirected(r.err):
				pending, again, moved = append(pending, r.at...), r.err, append(moved, r.at...)
			case connectionLost(r.err) && resends > 0 && ctx.Err() == nil:
				pending, again, lost = append(pending, r.at...), r.err, true
			case r.err != nil:
				if connectionLost(r.err) {
					// The master may be gone: the next call should find
					// its successor, whether or not this one is sent again.
					cc.ReloadState(ctx)
				}
				if failed == nil {
					failed = &partialError{replies: out, refused: make([]bool, len(calls)), err: r.err}
				}
				var pe *partialError
				if errors.As(r.err, &pe) {
					for j, i := range r.at {
						out[i], failed.refused[i] = pe.replies[j], pe.refused[j]
					}
				}
			default:
				for j, i := range r.at {
					out[i] = r.replies[j]
				}
			}
		}
		if failed != nil {
			for _, i := range moved {
				failed.refused[i] = true // refused by the cluster: it did not run
			}
			return nil, failed
		}
		if lost {
			resends--
		}
		if again != nil {
			cc.ReloadState(ctx)
			if err := wait.next(ctx); err != nil {
				return nil, fmt.Errorf("%w (the cluster kept refusing the call: %v)", err, again)
			}
		}
	}
	return out, nil
}

// connectionLost reports whether err is a connection's failure rather than
// an answer: the call may or may not have run.
func connectionLost(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// defaultWaitTimeout is Options.WaitTimeout's default.
const defaultWaitTimeout = time.Second

// checkWaitTimeout refuses a WaitTimeout that rdb cannot wait for. WAIT
// ends the pipeline of the writes it waits for (it counts its own
// connection's writes), and go-redis reads a pipeline's replies within the
// client's ReadTimeout whatever WAIT's own timeout: a longer wait fails
// with "i/o timeout" and go-redis sends the whole pipeline again. Half the
// read timeout is left to the scripts before WAIT and to the network. A
// client with no read timeout takes any WaitTimeout; one of another type
// than *redis.Client and *redis.ClusterClient is not checked.
func checkWaitTimeout(rdb Client, replicas int, timeout time.Duration) error {
	if replicas <= 0 {
		return nil
	}
	var read time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	}
	wait, given := timeout, fmt.Sprint(timeout)
	if wait == 0 {
		wait, given = defaultWaitTimeout, fmt.Sprintf("0 (the default, %v)", defaultWaitTimeout)
	}
	if read > 0 && wait > read/2 {
		return failf(ErrInvalidOptions, "WaitTimeout = %s is more than half the client's ReadTimeout (%v), within which go-redis reads a write's replies, WAIT's included: set ReadTimeout to at least %v, or lower WaitTimeout", given, read, 2*wait)
	}
	return nil
}
