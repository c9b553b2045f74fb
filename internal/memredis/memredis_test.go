package memredis

import (
	"bufio"
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
)

// The commands themselves are tested through rbloomtest, against a real
// redis-server too; these tests cover what Register's handler does around
// them with miniredis's state.

// start starts a miniredis with the commands and a client of it.
func start(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	if err := Register(m); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return m, rdb
}

func TestRegisterErrors(t *testing.T) {
	if err := Register(miniredis.NewMiniRedis()); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("Register of a miniredis not started: %v, want an error that says so", err)
	}
	m := miniredis.RunT(t)
	if err := Register(m); err != nil {
		t.Fatal(err)
	}
	if err := Register(m); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("second Register: %v, want an error that says so", err)
	}
}

// TestLayoutUnsupported checks that another miniredis, with its state in
// other fields, makes Register fail with an error that names the fields,
// rather than the commands guessing.
func TestLayoutUnsupported(t *testing.T) {
	srv := reflect.TypeFor[*miniredis.Miniredis]()
	tests := []struct {
		name      string
		ctx, srv  reflect.Type
		wantTexts []string
	}{
		{"context without the fields", reflect.TypeFor[*struct{ nested bool }](), srv,
			[]string{`"selectedDB"`, `"authenticated"`, `"transaction"`, `"subscriber"`}},
		{"nested not a bool", reflect.TypeFor[*struct {
			nested        int
			selectedDB    int
			authenticated bool
			transaction   []func()
			subscriber    *int
		}](), srv, []string{`bool field "nested"`}},
		{"context not a pointer to a struct", reflect.TypeFor[*int](), srv, []string{"not a pointer to a struct"}},
		{"server without the fields", reflect.TypeFor[*struct {
			nested        bool
			selectedDB    int
			authenticated bool
			transaction   []func()
			subscriber    *int
		}](), reflect.TypeFor[*struct{ dbs map[int]int }](), []string{`"passwords"`, "want a map from int to a pointer"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := layoutOf(tc.ctx, tc.srv)
			if err == nil {
				t.Fatal("layoutOf succeeded, want an error")
			}
			for _, want := range append(tc.wantTexts, "not supported") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("layoutOf: %v\nwant it to mention %s", err, want)
				}
			}
		})
	}
}

// TestConnOtherContext checks that a connection context of a type Register
// did not see makes the handler panic rather than guess.
func TestConnOtherContext(t *testing.T) {
	m := miniredis.RunT(t)
	l, err := newLayout(m)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if msg, _ := recover().(string); !strings.Contains(msg, "not supported") {
			t.Errorf("conn panicked with %q, want a message that this miniredis is not supported", msg)
		}
	}()
	p := server.NewPeer(nil)
	p.Ctx = &struct{ nested bool }{nested: true}
	l.conn(p)
}

// TestAuth checks that a client must AUTH first, as for miniredis's own
// commands.
func TestAuth(t *testing.T) {
	m, rdb := start(t)
	m.RequireAuth("pw")
	ctx := context.Background()
	err := rdb.Do(ctx, "BITFIELD", "k", "INCRBY", "u8", 0, 1).Err()
	if err == nil || err.Error() != "NOAUTH Authentication required." {
		t.Errorf("BITFIELD before AUTH: %v, want NOAUTH", err)
	}
	if m.Exists("k") {
		t.Errorf("BITFIELD before AUTH created k")
	}
	authed := redis.NewClient(&redis.Options{Addr: m.Addr(), Password: "pw", MaxRetries: -1})
	defer authed.Close()
	if got, err := authed.Do(ctx, "BITFIELD", "k", "INCRBY", "u8", 0, 1).Int64Slice(); err != nil || !reflect.DeepEqual(got, []int64{1}) {
		t.Errorf("BITFIELD after AUTH = %v, %v; want [1]", got, err)
	}
}

// TestSubscribed checks that a connection in SUBSCRIBE mode is refused, as
// for miniredis's own commands.
func TestSubscribed(t *testing.T) {
	m, _ := start(t)
	conn, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n")); err != nil {
		t.Fatal(err)
	}
	for range 6 { // *3 $9 subscribe $2 ch :1
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Write([]byte("*6\r\n$8\r\nBITFIELD\r\n$1\r\nk\r\n$6\r\nINCRBY\r\n$2\r\nu8\r\n$1\r\n0\r\n$1\r\n1\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if want := "-ERR Can't execute 'bitfield': only (P)SUBSCRIBE / (P)UNSUBSCRIBE / PING / QUIT are allowed in this context\r\n"; line != want {
		t.Errorf("BITFIELD while subscribed: %q, want %q", line, want)
	}
	if m.Exists("k") {
		t.Errorf("BITFIELD while subscribed created k")
	}
}

// TestSelectInScript checks that a script's BITFIELD acts on the database
// the script has selected.
func TestSelectInScript(t *testing.T) {
	m, rdb := start(t)
	err := rdb.Eval(context.Background(), `redis.call('SELECT', 2); return redis.call('BITFIELD', KEYS[1], 'INCRBY', 'u8', 0, 7)`, []string{"k"}).Err()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.DB(2).Get("k"); err != nil || got != "\x07" {
		t.Errorf("DB 2 k = %q, %v; want \"\\x07\"", got, err)
	}
	if m.Exists("k") {
		t.Errorf("DB 0 has k, want it only in DB 2")
	}
}

// TestExpiry checks that BITFIELD sees a key expired by the clock
// (ClockTTL) as missing, as miniredis's own commands do.
func TestExpiry(t *testing.T) {
	m, rdb := start(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	m.ClockTTL(true)
	if err := rdb.Set(ctx, "k", "\xff", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	m.SetTime(now.Add(2 * time.Second))
	if got, err := rdb.Do(ctx, "BITFIELD_RO", "k", "GET", "u8", 0).Int64Slice(); err != nil || !reflect.DeepEqual(got, []int64{0}) {
		t.Errorf("BITFIELD_RO of an expired key = %v, %v; want [0]", got, err)
	}
	if got, err := rdb.Do(ctx, "BITFIELD", "k", "INCRBY", "u8", 0, 1).Int64Slice(); err != nil || !reflect.DeepEqual(got, []int64{1}) {
		t.Errorf("BITFIELD INCRBY of an expired key = %v, %v; want [1]", got, err)
	}
	if ttl := m.TTL("k"); ttl != 0 {
		t.Errorf("TTL of the new k = %v, want none", ttl)
	}
}

// TestWatch checks that a BITFIELD write makes a transaction that watched
// the key fail, as any write does.
func TestWatch(t *testing.T) {
	_, rdb := start(t)
	ctx := context.Background()
	other := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, MaxRetries: -1})
	defer other.Close()
	err := rdb.Watch(ctx, func(tx *redis.Tx) error {
		if err := other.Do(ctx, "BITFIELD", "k", "INCRBY", "u8", 0, 1).Err(); err != nil {
			return err
		}
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "k", "x", 0)
			return nil
		})
		return err
	}, "k")
	if !errors.Is(err, redis.TxFailedErr) {
		t.Errorf("EXEC after a BITFIELD on the watched key: %v, want %v", err, redis.TxFailedErr)
	}
}

// TestValueNotShared checks that a write makes a new value: a string read
// before it (here with Get, which returns miniredis's own) does not change.
func TestValueNotShared(t *testing.T) {
	m, rdb := start(t)
	if err := m.Set("k", "\x01\x02"); err != nil {
		t.Fatal(err)
	}
	// One write to own the value, one to change it.
	for range 2 {
		if err := rdb.Do(context.Background(), "BITFIELD", "k", "INCRBY", "u8", 0, 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := m.Get("k")
	if err := rdb.Do(context.Background(), "BITFIELD", "k", "INCRBY", "u8", 0, 1).Err(); err != nil {
		t.Fatal(err)
	}
	after, _ := m.Get("k")
	if before != "\x03\x02" || after != "\x04\x02" {
		t.Errorf("k read before a write %q, after it %q; want \"\\x03\\x02\", \"\\x04\\x02\"", before, after)
	}
}
