package rbloomtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// NewMiniredis starts a miniredis with BITFIELD and BITFIELD_RO (see
// Register) and stops it when the test ends. t can be a *testing.T, a
// *testing.B or a *rapid.T; a failure to start is fatal.
func NewMiniredis(t miniredis.Tester) *miniredis.Miniredis {
	m := miniredis.RunT(t)
	if err := Register(m); err != nil {
		t.Fatalf("%v", err)
	}
	return m
}

// Register adds the commands BITFIELD and BITFIELD_RO, which miniredis
// lacks, to the running server m. They follow Redis 7.0: subcommands GET,
// SET, INCRBY and OVERFLOW WRAP|SAT|FAIL, types i1..i64 and u1..u63, bit or
// "#N" offsets, Redis's error texts, and nothing is written when any
// subcommand is invalid. Each call is atomic, whether it comes from a client
// or from redis.call in a Lua script.
//
// Two differences remain, both inside MULTI/EXEC: the reply at EXEC goes
// through miniredis's Lua, whose numbers are float64, so values beyond ±2^53
// come back rounded (the stored bits are exact); and a BITFIELD without a
// key is refused but, unlike in Redis, does not make EXEC fail.
//
// Register fails if m is not running or the commands are already there.
func Register(m *miniredis.Miniredis) error {
	srv := m.Server()
	if srv == nil {
		return errors.New("rbloomtest: Register: miniredis is not running")
	}
	b := &bitfieldCommand{srv: srv, pending: map[string]*pendingCall{}}
	if err := srv.Register("BITFIELD", b.serve); err != nil {
		return fmt.Errorf("rbloomtest: Register: %w", err)
	}
	if err := srv.Register("BITFIELD_RO", b.serve, server.ReadOnlyOption()); err != nil {
		return fmt.Errorf("rbloomtest: Register: %w", err)
	}
	return nil
}

// How the commands stay atomic.
//
// miniredis runs each of its commands under one global lock, taken by the
// command itself unless the connection context says "nested": then the
// command comes from redis.call in a Lua script whose EVAL already holds the
// lock. A registered command gets no such help, and calling m.Get or m.Set
// from it would deadlock inside a script. So the handler touches data only by
// dispatching miniredis's own GET and SETRANGE with the caller's context:
//
//   - Nested (from a script): those commands run under the script's lock, so
//     the read-modify-write is atomic, with no lock of ours.
//   - Direct (from a client): the handler re-issues itself as a one-line
//     EVAL (wrapperScript), so miniredis takes its lock once around the whole
//     command, and the nested call above does the work.
//
// Two things keep the direct path from simply relaying the script's reply,
// as a plain "return redis.pcall('BITFIELD', KEYS[1], unpack(ARGV))" would:
// miniredis's Lua turns integers into float64, which rounds i64 and u63
// values beyond 2^53, and its Lua stack (5,120 slots) makes unpack fail with
// "registry overflow" past about 1,200 subcommands. So the subcommands stay
// in Go, in a pendingCall under a token; the script passes only the command,
// the key, exactMarker and the token; the nested call takes its subcommands
// from the pendingCall and leaves its exact reply there; the direct handler
// writes that reply. EVAL runs synchronously on the handler's goroutine, so
// the reply is there when Dispatch returns.
//
// Inside MULTI the EVAL is only queued: "+QUEUED" is relayed, the
// pendingCall stays until EXEC runs the script, and EXEC writes the script's
// reply straight to the client. That reply does go through Lua: nil elements
// (OVERFLOW FAIL) survive it (nil -> false -> nil) and errors too (pcall ->
// {err=...} -> the same error), but integers beyond 2^53 are rounded.

// wrapperScript runs ARGV[1] (BITFIELD or BITFIELD_RO) on KEYS[1], passing
// exactMarker and the token. pcall, not call, so that an error reply comes
// back as the same error reply rather than a script error.
const wrapperScript = "return redis.pcall(ARGV[1], KEYS[1], ARGV[2], ARGV[3])"

// exactMarker precedes the token in the arguments the wrapper passes. The
// NUL byte keeps it from ever being a real subcommand.
const exactMarker = "\x00rbloomtest-exact"

// bitfieldCommand is the handler of both commands on one server.
type bitfieldCommand struct {
	srv *server.Server

	next    atomic.Uint64
	mu      sync.Mutex
	pending map[string]*pendingCall // by token
}

// pendingCall is a direct call between its EVAL and the nested call that
// does the work.
type pendingCall struct {
	subs  []string // the subcommands after the key
	reply bitfieldReply
	done  bool
}

// bitfieldReply is an error or one element per GET, SET or INCRBY.
type bitfieldReply struct {
	err    error
	fields []fieldReply
}

func (b *bitfieldCommand) serve(c *server.Peer, cmd string, args []string) {
	if len(args) == 0 {
		c.WriteError(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(cmd)))
		return
	}
	if !inScript(c) {
		b.serveViaScript(c, cmd, args)
		return
	}
	key, subs := args[0], args[1:]
	var call *pendingCall
	if len(subs) == 2 && subs[0] == exactMarker {
		if call = b.take(subs[1]); call == nil {
			c.WriteError("ERR rbloomtest: unknown BITFIELD token")
			return
		}
		subs = call.subs
	}
	reply := b.run(c, cmd, key, subs)
	if call != nil {
		call.reply, call.done = reply, true
	}
	reply.write(c)
}

// serveViaScript is the direct path: run the command as a script so that
// miniredis holds its lock throughout, then reply with the exact result.
func (b *bitfieldCommand) serveViaScript(c *server.Peer, cmd string, args []string) {
	call := &pendingCall{subs: args[1:]}
	token := strconv.FormatUint(b.next.Add(1), 10)
	b.mu.Lock()
	b.pending[token] = call
	b.mu.Unlock()

	out := b.dispatch(c, []string{"EVAL", wrapperScript, "1", args[0], cmd, exactMarker, token})
	if call.done {
		call.reply.write(c)
		return
	}
	// The script has not run. Inside MULTI it will at EXEC (DISCARD, or an
	// EXEC aborted by WATCH, leaves the small pendingCall behind); otherwise
	// EVAL itself failed (NOAUTH, ...) and it never will. Either way pass the
	// reply on as it is.
	if out.String() != "+QUEUED\r\n" {
		b.take(token)
	}
	c.Block(func(w *server.Writer) { w.WriteRaw(out.String()) })
}

// take removes and returns the pending call of token, or nil.
func (b *bitfieldCommand) take(token string) *pendingCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	call := b.pending[token]
	delete(b.pending, token)
	return call
}

// run parses, reads, applies and writes back; c is a nested peer, so GET and
// SETRANGE run under the lock the script already holds.
func (b *bitfieldCommand) run(c *server.Peer, cmd, key string, subs []string) bitfieldReply {
	ops, err := parseFields(subs)
	if err != nil {
		return bitfieldReply{err: err}
	}
	writes := hasWrites(ops)
	if writes && cmd == "BITFIELD_RO" {
		return bitfieldReply{err: errReadOnlyFields}
	}
	// GET gives WRONGTYPE for non-strings and nil for a missing key, which
	// is exactly what BITFIELD needs to know.
	cur, err := b.call(c, "GET", key)
	if err != nil {
		return bitfieldReply{err: err}
	}
	old, ok := cur.(string)
	if cur != nil && !ok {
		return bitfieldReply{err: fmt.Errorf("ERR rbloomtest: unexpected GET reply %T", cur)}
	}
	value, fields := applyFields([]byte(old), ops)
	if writes {
		// SETRANGE at 0 with the whole (never shorter) value keeps the TTL
		// and creates a missing key, like BITFIELD does.
		if _, err := b.call(c, "SETRANGE", key, "0", string(value)); err != nil {
			return bitfieldReply{err: err}
		}
	}
	return bitfieldReply{fields: fields}
}

// call dispatches one miniredis command as c and parses its reply; error
// replies come back as errors with the reply's text.
func (b *bitfieldCommand) call(c *server.Peer, args ...string) (any, error) {
	return server.ParseReply(bufio.NewReader(b.dispatch(c, args)))
}

// dispatch runs args on a fresh peer that shares c's connection context
// (selected DB, authentication, MULTI state, nesting) and returns the raw
// reply.
func (b *bitfieldCommand) dispatch(c *server.Peer, args []string) *bytes.Buffer {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	p := server.NewPeer(w)
	p.Ctx, p.Resp3 = c.Ctx, c.Resp3
	b.srv.Dispatch(p, args)
	w.Flush() // cannot fail: bytes.Buffer
	return &out
}

func (r bitfieldReply) write(c *server.Peer) {
	c.Block(func(w *server.Writer) {
		if r.err != nil {
			w.WriteError(r.err.Error())
			return
		}
		w.WriteLen(len(r.fields))
		for _, f := range r.fields {
			if f.null {
				w.WriteNull()
			} else {
				w.WriteInt(int(f.value))
			}
		}
	})
}

// inScript reports whether c is the peer miniredis makes for redis.call in a
// Lua script, whose EVAL already holds miniredis's lock. miniredis keeps
// that in the unexported field "nested" of its connection context, so read
// it with reflect; a nil context is a client that has not needed one yet.
// If a miniredis upgrade renames the field, panic: guessing wrong would
// either deadlock or lose atomicity, and the tests must catch it.
func inScript(c *server.Peer) bool {
	if c.Ctx == nil {
		return false
	}
	v := reflect.ValueOf(c.Ctx)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	var f reflect.Value
	if v.Kind() == reflect.Struct {
		f = v.FieldByName("nested")
	}
	if !f.IsValid() || f.Kind() != reflect.Bool {
		panic(fmt.Sprintf("rbloomtest: miniredis connection context %T has no bool field \"nested\": this miniredis version is not supported, update inScript", c.Ctx))
	}
	return f.Bool()
}
