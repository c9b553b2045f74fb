package rbloom

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrUnsupported is returned by Create and the Open functions when the
// server lacks a command rbloom needs: Lua scripting (EVALSHA and EVAL, or
// FCALL with Options.UseFunctions), which every write runs, disabled or
// renamed by its operator; or BITFIELD_RO (Redis 6.0 and later), which
// every read runs. Its message names what is missing. Nothing is written.
// A server with all but FCALL gives ErrNoFunctions instead, as writes do.
var ErrUnsupported = newKind("the server cannot run rbloom")

// serverCheck asks the server, in a pipeline a call sends anyway, whether
// it knows the commands rbloom's writes and reads send. Each is sent with
// no arguments: a server that knows it answers "wrong number of arguments"
// before it looks at ACLs or runs anything, one that does not (a command
// renamed away, scripting left out) answers "unknown command".
type serverCheck struct {
	names []string
	cmds  []*redis.Cmd
}

// queueServerCheck adds the check to pipe, for a handle whose writes call
// functions when fcall is set and send scripts otherwise.
func queueServerCheck(ctx context.Context, pipe redis.Pipeliner, fcall bool) serverCheck {
	c := serverCheck{names: []string{"EVALSHA", "EVAL", "BITFIELD_RO"}}
	if fcall {
		c.names = []string{"FCALL", "BITFIELD_RO"}
	}
	for _, name := range c.names {
		cmd := redis.NewCmd(ctx, name)
		_ = pipe.Process(ctx, cmd)
		c.cmds = append(c.cmds, cmd)
	}
	return c
}

// err returns, once the pipeline has run with Exec's error execErr,
// ErrUnsupported naming the commands the server does not know, or the
// pipeline's own failure: a lost connection, or one that could not be set
// up (a wrong password), which go-redis reports only from Exec, leaving
// the commands with neither reply nor error. Any other answer (an ACL
// refusal from a server that checks ACLs first) leaves the question open:
// the calls will tell.
func (c serverCheck) err(execErr error) error {
	var unknown []string
	for i, cmd := range c.cmds {
		err := cmd.Err()
		var reply redis.Error
		switch {
		case err == nil && cmd.Val() == nil && execErr != nil:
			return execErr
		case err == nil:
		case !errors.As(err, &reply):
			return err
		case strings.HasPrefix(err.Error(), "ERR unknown command"):
			unknown = append(unknown, c.names[i])
		}
	}
	if slices.Equal(unknown, []string{"FCALL"}) {
		// As a write would say (functionError): ErrNoFunctions is what
		// callers of UseFunctions look for.
		return failf(ErrNoFunctions, "the server has no FCALL: Options.UseFunctions needs Redis 7.0 or later")
	}
	var missing []string
	if scripts := slices.DeleteFunc(slices.Clone(unknown), func(name string) bool { return name == "BITFIELD_RO" }); len(scripts) > 0 {
		missing = append(missing, "Lua scripting, which every write runs ("+strings.Join(scripts, " and ")+" unknown: disabled or renamed)")
	}
	if slices.Contains(unknown, "BITFIELD_RO") {
		missing = append(missing, "BITFIELD_RO (Redis 6.0 or later), which every read runs")
	}
	if len(missing) == 0 {
		return nil
	}
	return failf(ErrUnsupported, "no %s", strings.Join(missing, ", and no "))
}

// checkServer is serverCheck in a round trip of its own, for Create.
func (f *filter) checkServer(ctx context.Context) error {
	pipe := f.rdb.Pipeline()
	c := queueServerCheck(ctx, pipe, f.fcall)
	_, err := pipe.Exec(ctx) // the first reply's error, by design
	return c.err(err)
}
