// Package memredis adds the commands BITFIELD and BITFIELD_RO to miniredis
// (github.com/alicebob/miniredis/v2), which has neither, so that code that
// keeps counters in Redis with BITFIELD, as rbloom does, runs on an
// in-memory server.
//
// Programs use it when they are given no Redis (cmd/rbloom,
// examples/cacheguard); tests use it through rbloomtest.NewMiniredis. It
// does not import package testing.
package memredis

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

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
// Register fails if m is not running, if the commands are already there, or
// if this version of miniredis keeps its state in fields other than those
// the commands read.
func Register(m *miniredis.Miniredis) error {
	srv := m.Server()
	if srv == nil {
		return errors.New("memredis: Register: miniredis is not running")
	}
	l, err := newLayout(m)
	if err != nil {
		return fmt.Errorf("memredis: Register: %w", err)
	}
	b := &bitfieldCommand{m: m, srv: srv, layout: l, pending: map[string][]string{}}
	if err := srv.Register("BITFIELD", b.serve); err != nil {
		return fmt.Errorf("memredis: Register: %w", err)
	}
	if err := srv.Register("BITFIELD_RO", b.serve, server.ReadOnlyOption()); err != nil {
		return fmt.Errorf("memredis: Register: %w", err)
	}
	return nil
}

// How the commands stay atomic, and fast.
//
// miniredis runs each of its commands under one global lock, taken by the
// command itself unless the connection context says "nested": then the
// command comes from redis.call in a Lua script whose EVAL already holds the
// lock. A registered command gets no such help, and miniredis's own
// accessors (m.Get, m.Set) take the lock, so they would deadlock inside a
// script. So the handler, with the lock held, reads the key's value where
// miniredis keeps it (layout.stringValue: no copy, however long the value)
// and sends miniredis's own commands, with a nested context, for the rest:
// EXISTS first, which expires keys due under ClockTTL and touches the key as
// GET would, and SET ... KEEPTTL last, which stores the new value as it is.
// Sending GET and SETRANGE instead copied the whole value several times per
// call, and made an rbloom demo of 100,000 items take 16 s.
//
//   - Nested (from a script): the script's EVAL holds the lock; the handler
//     uses the script's context.
//   - Direct (from a client): the handler makes the checks miniredis makes
//     of every command (AUTH, SUBSCRIBE mode), takes the lock itself and
//     uses a nested context of its own (layout.newNested).
//   - Direct inside MULTI, where the call must be queued until EXEC: the
//     handler re-issues itself as a one-line EVAL (wrapperScript), which
//     miniredis queues ("+QUEUED" is relayed) and runs at EXEC. Each EVAL
//     makes a new Lua state, about 200 µs, which is why only these go
//     this way (the rbloom demo sends 11,000 BITFIELD_RO).
//
// The wrapper does not pass the subcommands, as a plain "return
// redis.pcall('BITFIELD', KEYS[1], unpack(ARGV))" would: miniredis's Lua
// stack (5,120 slots) makes unpack fail with "registry overflow" past about
// 1,200 subcommands. They stay in Go, under a token in pending, and the
// script passes only the command, the key, queuedMarker and the token. The
// reply at EXEC does go through Lua: nil elements (OVERFLOW FAIL) survive it
// (nil -> false -> nil) and errors too (pcall -> {err=...} -> the same
// error), but integers beyond 2^53 are rounded, Lua's numbers being float64.

// wrapperScript runs ARGV[1] (BITFIELD or BITFIELD_RO) on KEYS[1], passing
// queuedMarker and the token of the subcommands. pcall, not call, so that an
// error reply comes back as the same error reply rather than a script error.
const wrapperScript = "return redis.pcall(ARGV[1], KEYS[1], ARGV[2], ARGV[3])"

// queuedMarker precedes the token in the arguments the wrapper passes. The
// NUL byte keeps it from ever being a real subcommand.
const queuedMarker = "\x00memredis-queued"

// bitfieldCommand is the handler of both commands on one server.
type bitfieldCommand struct {
	m      *miniredis.Miniredis
	srv    *server.Server
	layout *layout

	next    atomic.Uint64
	mu      sync.Mutex
	pending map[string][]string // the subcommands of queued calls, by token

	// Reused by every run, as they all hold miniredis's lock.
	ops   []fieldOp
	out   bytes.Buffer
	outW  *bufio.Writer
	reply *bufio.Reader
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
	switch conn := b.layout.conn(c); {
	case conn.nested:
		b.serveNested(c, conn, cmd, args)
	case conn.multi:
		b.queue(c, cmd, args)
	default:
		b.serveDirect(c, conn, cmd, args)
	}
}

// serveNested serves a call from a script, whose EVAL holds the lock: one
// from the script's own redis.call, or one from wrapperScript at EXEC.
func (b *bitfieldCommand) serveNested(c *server.Peer, conn conn, cmd string, args []string) {
	key, subs := args[0], args[1:]
	if len(subs) == 2 && subs[0] == queuedMarker {
		var ok bool
		if subs, ok = b.take(subs[1]); !ok {
			c.WriteError("ERR memredis: unknown BITFIELD token")
			return
		}
	}
	b.run(c.Ctx, conn.db, cmd, key, subs).write(c)
}

// serveDirect serves a call from a client, outside MULTI, under
// miniredis's lock, after the checks miniredis makes of every command.
func (b *bitfieldCommand) serveDirect(c *server.Peer, conn conn, cmd string, args []string) {
	if conn.subscribed {
		c.WriteError(fmt.Sprintf("ERR Can't execute '%s': only (P)SUBSCRIBE / (P)UNSUBSCRIBE / PING / QUIT are allowed in this context", strings.ToLower(cmd)))
		return
	}
	b.m.Lock()
	var reply bitfieldReply
	if !conn.authenticated && b.layout.requiresAuth(b.m) {
		reply.err = errNoAuth
	} else {
		reply = b.run(b.layout.newNested(conn.db), conn.db, cmd, args[0], args[1:])
	}
	b.m.Unlock()
	reply.write(c)
}

// queue sends a call made inside MULTI as a script, which miniredis queues
// until EXEC, and relays miniredis's answer ("+QUEUED", or an error).
func (b *bitfieldCommand) queue(c *server.Peer, cmd string, args []string) {
	token := strconv.FormatUint(b.next.Add(1), 10)
	b.mu.Lock()
	b.pending[token] = args[1:]
	b.mu.Unlock()

	out := b.dispatch(c.Ctx, c.Resp3, []string{"EVAL", wrapperScript, "1", args[0], cmd, queuedMarker, token})
	// A queued call keeps its subcommands until EXEC runs the script
	// (DISCARD, or an EXEC aborted by WATCH, leaves them behind); one that
	// was not queued never runs.
	if out.String() != "+QUEUED\r\n" {
		b.take(token)
	}
	c.WriteRaw(out.String())
}

// take removes and returns the subcommands queued under token.
func (b *bitfieldCommand) take(token string) ([]string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	subs, ok := b.pending[token]
	delete(b.pending, token)
	return subs, ok
}

// run parses, reads, applies and writes back, with miniredis's lock held;
// ctx is a nested connection context on database db.
func (b *bitfieldCommand) run(ctx any, db int, cmd, key string, subs []string) bitfieldReply {
	ops, err := parseFields(b.ops[:0], subs)
	b.ops = ops[:0]
	if err != nil {
		return bitfieldReply{err: err}
	}
	writes := hasWrites(ops)
	if writes && cmd == "BITFIELD_RO" {
		return bitfieldReply{err: errReadOnlyFields}
	}
	// EXISTS does what every command's first look at a key does: it
	// expires the keys due under ClockTTL, and touches the key.
	n, err := b.call(ctx, "EXISTS", key)
	if err != nil {
		return bitfieldReply{err: err}
	}
	exists, ok := n.(int)
	if !ok {
		return bitfieldReply{err: fmt.Errorf("ERR memredis: EXISTS replied %T", n)}
	}
	old, isString := b.layout.stringValue(b.m, db, key)
	if exists != 0 && !isString {
		return bitfieldReply{err: errWrongType}
	}
	value, fields := applyFields(old, ops)
	if writes {
		// The new value is the old one, grown or not, with the writes
		// applied: storing it whole with its TTL kept, and creating a
		// missing key, is what BITFIELD does.
		if _, err := b.call(ctx, "SET", key, value, "KEEPTTL"); err != nil {
			return bitfieldReply{err: err}
		}
	}
	return bitfieldReply{fields: fields}
}

// call sends one miniredis command with the nested context ctx and parses
// its reply; error replies come back as errors with the reply's text. Like
// run, it needs miniredis's lock.
func (b *bitfieldCommand) call(ctx any, args ...string) (any, error) {
	if b.outW == nil {
		b.outW, b.reply = bufio.NewWriter(&b.out), bufio.NewReader(&b.out)
	}
	b.out.Reset()
	b.reply.Reset(&b.out)
	p := server.NewPeer(b.outW)
	p.Ctx = ctx
	b.srv.Dispatch(p, args)
	b.outW.Flush() // cannot fail: bytes.Buffer
	return server.ParseReply(b.reply)
}

// dispatch runs args on a fresh peer with the connection context ctx (the
// selected DB, authentication, MULTI state) and returns the raw reply; it
// takes no lock of its own.
func (b *bitfieldCommand) dispatch(ctx any, resp3 bool, args []string) *bytes.Buffer {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	p := server.NewPeer(w)
	p.Ctx, p.Resp3 = ctx, resp3
	b.srv.Dispatch(p, args)
	w.Flush() // cannot fail: bytes.Buffer
	return &out
}

// write sends the reply to c. It encodes the array itself: miniredis's
// Writer formats every element with fmt, which cost more than the whole
// rest of a BITFIELD_RO of 250 fields.
func (r bitfieldReply) write(c *server.Peer) {
	if r.err != nil {
		c.WriteError(r.err.Error())
		return
	}
	null := "$-1\r\n"
	if c.Resp3 {
		null = "_\r\n"
	}
	buf := make([]byte, 0, 16+8*len(r.fields))
	buf = append(strconv.AppendInt(append(buf, '*'), int64(len(r.fields)), 10), "\r\n"...)
	for _, f := range r.fields {
		if f.null {
			buf = append(buf, null...)
			continue
		}
		buf = append(strconv.AppendInt(append(buf, ':'), f.value, 10), "\r\n"...)
	}
	c.WriteRaw(string(buf))
}
