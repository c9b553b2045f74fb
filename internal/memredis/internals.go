package memredis

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// miniredis keeps what the commands need in unexported fields: in its
// connection context, whether a command comes from redis.call in a script
// (and so runs under the lock that the script's EVAL holds), the selected
// database, authentication, MULTI and SUBSCRIBE state; in the server, the
// passwords and the string values themselves. layout finds those fields by
// name and type once, when Register runs, so that a miniredis upgrade that
// renames or retypes one makes Register fail with an error that names it,
// rather than the commands guessing wrong (a deadlock, or lost atomicity).
//
// Everything here only reads miniredis's state, except newNested, which
// fills in a connection context of its own making.

// layout locates the fields: indices into the structs named.
type layout struct {
	ctxType reflect.Type // *connCtx, miniredis's connection context

	// In connCtx.
	nested, selectedDB, authenticated, transaction, subscriber int
	// In Miniredis.
	dbs, passwords int
	// In RedisDB, the element of Miniredis.dbs.
	stringKeys int
}

// newLayout finds the fields in m, which must be running: it learns the
// type of the connection context by sending a command (ECHO, which changes
// nothing) as a new connection.
func newLayout(m *miniredis.Miniredis) (*layout, error) {
	p := server.NewPeer(bufio.NewWriter(new(bytes.Buffer)))
	m.Server().Dispatch(p, []string{"ECHO", "memredis"})
	if p.Ctx == nil {
		return nil, errors.New("ECHO on a new connection left no connection context: is an error set (Miniredis.SetError)?")
	}
	return layoutOf(reflect.TypeOf(p.Ctx), reflect.TypeOf(m))
}

// layoutOf finds the fields in the connection context type ctxType and the
// server type serverType (*miniredis.Miniredis).
func layoutOf(ctxType, serverType reflect.Type) (*layout, error) {
	l := &layout{ctxType: ctxType}
	if ctxType.Kind() != reflect.Pointer || ctxType.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("miniredis's connection context is a %v, not a pointer to a struct: this miniredis version is not supported", ctxType)
	}
	var errs []error
	find := func(t reflect.Type, name string, kind reflect.Kind) int {
		f, ok := t.FieldByName(name)
		if !ok || len(f.Index) != 1 || f.Type.Kind() != kind {
			errs = append(errs, fmt.Errorf("%v has no %v field %q", t, kind, name))
			return -1
		}
		return f.Index[0]
	}
	ctx := ctxType.Elem()
	l.nested = find(ctx, "nested", reflect.Bool)
	l.selectedDB = find(ctx, "selectedDB", reflect.Int)
	l.authenticated = find(ctx, "authenticated", reflect.Bool)
	l.transaction = find(ctx, "transaction", reflect.Slice)
	l.subscriber = find(ctx, "subscriber", reflect.Pointer)

	srv := serverType.Elem()
	l.dbs = find(srv, "dbs", reflect.Map)
	l.passwords = find(srv, "passwords", reflect.Map)
	if l.dbs >= 0 {
		dbs := srv.Field(l.dbs).Type
		if dbs.Key().Kind() != reflect.Int || dbs.Elem().Kind() != reflect.Pointer || dbs.Elem().Elem().Kind() != reflect.Struct {
			errs = append(errs, fmt.Errorf("%v.dbs is a %v, want a map from int to a pointer to a struct", srv, dbs))
		} else {
			db := dbs.Elem().Elem()
			if l.stringKeys = find(db, "stringKeys", reflect.Map); l.stringKeys >= 0 && db.Field(l.stringKeys).Type != reflect.TypeFor[map[string]string]() {
				errs = append(errs, fmt.Errorf("%v.stringKeys is a %v, want map[string]string", db, db.Field(l.stringKeys).Type))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("this miniredis version is not supported: %w", err)
	}
	return l, nil
}

// conn is what a handler needs to know of the connection it serves.
type conn struct {
	nested        bool // redis.call in a script, whose EVAL holds miniredis's lock
	db            int  // the selected database
	authenticated bool // AUTH succeeded
	multi         bool // between MULTI and EXEC: commands are queued
	subscribed    bool // in (P)SUBSCRIBE mode
}

// conn reads the connection context of c. A nil context is a connection
// that no command has needed one for yet: database 0, nothing else set. A
// context of another type cannot come from the miniredis Register checked,
// so it panics rather than guess.
func (l *layout) conn(c *server.Peer) conn {
	if c.Ctx == nil {
		return conn{}
	}
	v := reflect.ValueOf(c.Ctx)
	if v.Type() != l.ctxType {
		panic(fmt.Sprintf("memredis: connection context %T, want %v: this miniredis version is not supported", c.Ctx, l.ctxType))
	}
	s := v.Elem()
	return conn{
		nested:        s.Field(l.nested).Bool(),
		db:            int(s.Field(l.selectedDB).Int()),
		authenticated: s.Field(l.authenticated).Bool(),
		multi:         !s.Field(l.transaction).IsNil(),
		subscribed:    !s.Field(l.subscriber).IsNil(),
	}
}

// newNested returns a new connection context like the one miniredis makes
// for the redis.call of a script: nested, on database db. Commands sent
// with it skip authentication and take no lock, so the caller must hold
// miniredis's.
func (l *layout) newNested(db int) any {
	p := reflect.New(l.ctxType.Elem())
	s := p.Elem()
	writable(s.Field(l.nested)).SetBool(true)
	writable(s.Field(l.selectedDB)).SetInt(int64(db))
	return p.Interface()
}

// writable returns the unexported field f, of a struct this package
// allocated, as a value that can be set.
func writable(f reflect.Value) reflect.Value {
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// requiresAuth reports whether m has a password; the caller holds m's lock.
func (l *layout) requiresAuth(m *miniredis.Miniredis) bool {
	return reflect.ValueOf(m).Elem().Field(l.passwords).Len() > 0
}

// stringValue returns the string value of key in database db, without
// copying it, and whether there is one: false for a missing key and for a
// key of another type. The caller holds m's lock.
func (l *layout) stringValue(m *miniredis.Miniredis, db int, key string) (string, bool) {
	d := reflect.ValueOf(m).Elem().Field(l.dbs).MapIndex(reflect.ValueOf(db))
	if !d.IsValid() {
		return "", false
	}
	v := d.Elem().Field(l.stringKeys).MapIndex(reflect.ValueOf(key))
	if !v.IsValid() {
		return "", false
	}
	return v.String(), true
}
