package rbloom

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// aclCommands are the commands an rbloom application user needs, and no
// more: the README's "Security" section gives the same list, one reason
// each. Commands that the scripts call are checked against the caller's
// ACL too, so they are here as well as EVALSHA and EVAL.
var aclCommands = []string{
	"+evalsha",      // every write runs add.lua or remove.lua by hash
	"+eval",         // ... and sends the script again after NOSCRIPT
	"+hget",         // scripts: has this call been applied already? (records.go)
	"+hset",         // scripts: record the call's answer
	"+bitfield",     // scripts: increment and decrement slots
	"+setrange",     // add.lua: write the header of a partition it creates
	"+pexpire",      // scripts: give a partition Options.TTL, a record hash its own
	"+getrange",     // reads, Info, Open and scripts: read the header
	"+strlen",       // reads, Info and scripts: check the length
	"+exists",       // reads, Info, Open, scripts: does the partition exist?
	"+bitfield_ro",  // reads, and remove.lua: read slots
	"+pttl",         // Info: the TTL left; scripts: has a record hash a TTL yet?
	"+memory|usage", // Info: the bytes a partition takes
	"+bitcount",     // Info: count the set bits of a classic filter
	"+del",          // Drop, and rebuild.lua: drop an aborted copy
	"+rename",       // rebuild.lua: put the rebuilt copy in place
	"+get",          // rebuild.lua: which rebuild holds the lease?
	"+set",          // rebuild.lua: take the lease
	"+persist",      // rebuild.lua: a switched partition keeps having no TTL; window.lua: a window's root settings never expire
	"+info",         // Info: the server's maxmemory-policy (INFO memory)
	"+hmget",        // windows: the settings, and until when the ring lives (window.lua, TestMany); Once batches: an id's records before a resize
	"+hgetall",      // Once batches: the layouts a resize left (layouts.go)
	"+time",         // windows: Redis's clock picks the bucket (window.lua, TestMany, Info)
	"+bitop",        // window.lua: clear an old generation, 64 KiB at a time
	"+pexpireat",    // window.lua: the ring expires when its settings say
	"+multi",        // reads: a partition's header and slots in one transaction
	"+exec",         // ... (a plain pipeline could see the key change between)
}

const aclUser, aclPassword = "rbloom", "acl-pw-7Tq2"

// aclSetUser is ACL SETUSER for the rbloom user with exactly commands,
// keys under rbloom:* only, and no pub/sub channels.
func aclSetUser(commands []string) []any {
	rule := []any{"ACL", "SETUSER", aclUser, "reset", "on", ">" + aclPassword, "~rbloom:*", "resetchannels", "-@all"}
	for _, c := range commands {
		rule = append(rule, c)
	}
	return rule
}

// exerciseAll uses every part of the API on a counting filter of three
// partitions with a TTL (and a classic one), checking the answers, and
// returns the first failure. It goes through both paths of remove.lua, the
// creation of partitions, AddOnce and RemoveOnce, Info, a Rebuild and an
// aborted one, Open and Drop.
func exerciseAll(ctx context.Context, rdb redis.UniversalClient, name string) error {
	return exerciseWith(ctx, rdb, name, false)
}

// exerciseWith is exerciseAll, its writes made with Options.UseFunctions
// set to useFunctions.
func exerciseWith(ctx context.Context, rdb redis.UniversalClient, name string, useFunctions bool) error {
	c, err := NewCounting(rdb, name, Options{Capacity: 10_000, Partitions: 3, TTL: time.Hour, UseFunctions: useFunctions})
	if err != nil {
		return err
	}
	items := make([]string, 300)
	for i := range items {
		items[i] = fmt.Sprint("item-", i)
	}
	if err := c.Create(ctx); err != nil {
		return fmt.Errorf("Create: %w", err)
	}
	if _, err := c.AddMany(ctx, items); err != nil {
		return fmt.Errorf("AddMany: %w", err)
	}
	if _, err := c.Add(ctx, "a"); err != nil {
		return fmt.Errorf("Add: %w", err)
	}
	if ok, err := c.Test(ctx, "a"); err != nil || !ok {
		return fmt.Errorf("Test(a) = %v, %v after Add", ok, err)
	}
	oks, err := c.TestMany(ctx, items)
	if err != nil || slices.Contains(oks, false) {
		return fmt.Errorf("TestMany = %v, %v after AddMany", oks, err)
	}
	if n, err := c.Count(ctx, "a"); err != nil || n < 1 {
		return fmt.Errorf("Count(a) = %d, %v after Add", n, err)
	}
	if ok, err := c.Remove(ctx, "a"); err != nil || !ok {
		return fmt.Errorf("Remove(a) = %v, %v", ok, err)
	}
	// An item never added sends remove.lua down its exact path.
	rs, err := c.RemoveMany(ctx, []string{items[0], "never added"})
	if err != nil || !rs[0] {
		return fmt.Errorf("RemoveMany = %v, %v", rs, err)
	}
	first, err := c.AddOnce(ctx, "b", "op-1")
	if err != nil {
		return fmt.Errorf("AddOnce: %w", err)
	}
	if again, err := c.AddOnce(ctx, "b", "op-1"); err != nil || again != first {
		return fmt.Errorf("AddOnce again = %v, %v; want %v", again, err, first)
	}
	if ok, err := c.RemoveOnce(ctx, "b", "op-2"); err != nil || !ok {
		return fmt.Errorf("RemoveOnce = %v, %v", ok, err)
	}
	in, err := c.Info(ctx)
	if err != nil {
		return fmt.Errorf("Info: %w", err)
	}
	if in.EvictionPolicy == "" {
		return fmt.Errorf("Info: no EvictionPolicy")
	}
	bits, err := NewClassic(rdb, name+"-bits", Options{Capacity: 100, UseFunctions: useFunctions})
	if err != nil {
		return err
	}
	if err := bits.Create(ctx); err != nil {
		return fmt.Errorf("classic Create: %w", err)
	}
	if _, err := bits.Add(ctx, "a"); err != nil {
		return fmt.Errorf("classic Add: %w", err)
	}
	if bin, err := bits.Info(ctx); err != nil || bin.NonZero == 0 {
		return fmt.Errorf("classic Info = %v, %v", bin, err)
	}
	// 300 + a + b - a - item-0 - b; MEMORY USAGE exceeds the length.
	if !in.Exists || len(in.Partitions) != 3 || in.Items != 299 || in.TTL <= 0 || in.Bytes <= 3*c.f.h.size() {
		return fmt.Errorf("Info = %+v: want 3 partitions, 299 items, a TTL, and more bytes than the strings' %d (MEMORY USAGE)", in, 3*c.f.h.size())
	}
	b, err := NewClassic(rdb, name+"-classic", Options{Capacity: 1000, Partitions: 3, UseFunctions: useFunctions})
	if err != nil {
		return err
	}
	if err := b.Create(ctx); err != nil {
		return fmt.Errorf("classic Create: %w", err)
	}
	if _, err := b.AddMany(ctx, items[:50]); err != nil {
		return fmt.Errorf("classic AddMany: %w", err)
	}
	if oks, err := b.TestMany(ctx, items[:50]); err != nil || slices.Contains(oks, false) {
		return fmt.Errorf("classic TestMany = %v, %v", oks, err)
	}
	// A filter with no TTL keeps none through a rebuild.
	if err := b.Rebuild(ctx, func(add func([]string) error) error { return add(items[:50]) }); err != nil {
		return fmt.Errorf("classic Rebuild: %w", err)
	}
	// Rebuild from the items still held (all but item-0), then abort one.
	if err := c.Rebuild(ctx, func(add func([]string) error) error { return add(items[1:]) }); err != nil {
		return fmt.Errorf("Rebuild: %w", err)
	}
	if oks, err := c.TestMany(ctx, items[1:]); err != nil || slices.Contains(oks, false) {
		return fmt.Errorf("TestMany after Rebuild = %v, %v", oks, err)
	}
	stop := errors.New("stop")
	if err := c.Rebuild(ctx, func(func([]string) error) error { return stop }); !errors.Is(err, stop) {
		return fmt.Errorf("aborted Rebuild: %v, want the fill's error", err)
	}
	// A window on Redis's clock, across buckets far enough apart that its
	// first generation is cleared and its ring position reused.
	w, err := NewWindow(rdb, name+"-window", WindowOptions{EventsPerBucket: 100, Bucket: 50 * time.Millisecond, Span: 100 * time.Millisecond,
		Partitions: 2, UseFunctions: useFunctions})
	if err != nil {
		return err
	}
	if err := w.Create(ctx); err != nil {
		return fmt.Errorf("Window.Create: %v", err)
	}
	if seen, err := w.TestOrAddManyOnce(ctx, items[:20], "window-batch"); err != nil || slices.Contains(seen, true) {
		return fmt.Errorf("Window.TestOrAddManyOnce = %v, %v", seen, err)
	}
	if seen, err := w.TestMany(ctx, items[:20]); err != nil || slices.Contains(seen, false) {
		return fmt.Errorf("Window.TestMany = %v, %v", seen, err)
	}
	for i := range 10 { // events all along, so that positions are cleared rather than the ring expiring
		if _, err := w.TestOrAdd(ctx, fmt.Sprint("tick-", i)); err != nil {
			return fmt.Errorf("Window.TestOrAdd: %w", err)
		}
		time.Sleep(40 * time.Millisecond)
	}
	if seen, err := w.TestOrAdd(ctx, items[0]); err != nil || seen {
		return fmt.Errorf("Window.TestOrAdd ten buckets later = %v, %v", seen, err)
	}
	if in, err := w.Info(ctx); err != nil || len(in.Generations) == 0 {
		return fmt.Errorf("Window.Info = %+v, %v", in, err)
	}
	opened, err := Open(ctx, rdb, name, Options{})
	if err != nil {
		return fmt.Errorf("Open: %w", err)
	}
	if ok, err := opened.Test(ctx, items[1]); err != nil || !ok {
		return fmt.Errorf("Test on the opened filter = %v, %v", ok, err)
	}
	for _, f := range []Filter{c, b} {
		if err := f.Drop(ctx); err != nil {
			return fmt.Errorf("Drop: %w", err)
		}
	}
	if _, err := Open(ctx, rdb, name, Options{}); !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("Open after Drop: %v, want ErrNotFound", err)
	}
	return nil
}

// denials returns the ACL LOG entries of user, but for the CLIENT
// subcommands go-redis tries when it connects (SETINFO, MAINT_NOTIFICATIONS)
// and whose refusal it ignores.
func denials(t *testing.T, admin *redis.Client, user string) []string {
	t.Helper()
	entries, err := admin.ACLLog(ctx, 1000).Result()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	var out []string
	for _, e := range entries {
		if e.Username == user && !strings.HasPrefix(e.Object, "client|") {
			out = append(out, fmt.Sprintf("%s %s (%s, %d times)", e.Reason, e.Object, e.Context, e.Count))
		}
	}
	return out
}

// checkEachNeeded runs the API, through run, as a user without each of
// commands in turn: something must fail every time.
func checkEachNeeded(t *testing.T, commands []string, run func(commands []string, name string) ([]string, error)) {
	t.Helper()
	for i, drop := range commands {
		fewer := slices.Delete(slices.Clone(commands), i, i+1)
		denied, err := run(fewer, "acl-"+strconv.Itoa(i))
		if err == nil && len(denied) == 0 {
			t.Errorf("without %s, the whole API still works: the rule is not minimal", drop)
			continue
		}
		t.Logf("without %-13s: %.110v", drop, err)
	}
}

// TestLeastPrivilegeACL runs the whole API as a Redis user that may run
// only aclCommands on keys under rbloom:*, shows that each of those
// commands is needed, and that the user can reach nothing else.
func TestLeastPrivilegeACL(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	connect := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: addr, Username: aclUser, Password: aclPassword, MaxRetries: -1})
	}
	// run sets the user's rule, empties the script cache (so that EVAL is
	// used too) and the ACL log, and exercises the API on a new connection.
	run := func(commands []string, name string) ([]string, error) {
		t.Helper()
		for _, cmd := range [][]any{aclSetUser(commands), {"SCRIPT", "FLUSH"}, {"ACL", "LOG", "RESET"}} {
			if err := admin.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
		}
		app := connect()
		defer app.Close()
		err := exerciseAll(ctx, app, name)
		return denials(t, admin, aclUser), err
	}

	if denied, err := run(aclCommands, "acl"); err != nil || len(denied) > 0 {
		t.Fatalf("as the least-privilege user: %v; ACL LOG: %q", err, denied)
	}
	t.Logf("ACL SETUSER %s reset on >... ~rbloom:* resetchannels -@all %s: the whole API works", aclUser, strings.Join(aclCommands, " "))

	// Each command is needed: without it, something fails.
	checkEachNeeded(t, aclCommands, run)

	// And nothing else is reachable.
	admin.Do(ctx, aclSetUser(aclCommands)...)
	admin.Set(ctx, "secret", "s", 0)
	app := connect()
	defer app.Close()
	for _, cmd := range [][]any{
		{"GET", "secret"},
		{"SET", "secret", "x"},
		{"SET", "other", "x"},
		{"DEL", "secret"},
		{"GETRANGE", "secret", 0, -1},
		{"BITFIELD", "secret", "SET", "u8", 0, 1},
		{"KEYS", "*"},
		{"SCAN", 0},
		{"FLUSHALL"},
		{"FLUSHDB"},
		{"CONFIG", "GET", "*"},
		{"CONFIG", "SET", "maxmemory", "1"},
		{"SCRIPT", "FLUSH"},
		{"ACL", "LIST"},
		{"SHUTDOWN"},
		{"CLIENT", "LIST"},
		{"REPLICAOF", "NO", "ONE"},
		{"MEMORY", "DOCTOR"},
		{"PUBLISH", "ch", "x"},
		{"EVAL", "return 1", 1, "secret"},
		// Scripts run as the user: redis.call is checked too.
		{"EVAL", "return redis.call('GET', 'secret')", 0},
		{"EVAL", "return redis.call('FLUSHALL')", 1, "rbloom:x"},
		{"EVAL", "return redis.call('SET', 'secret', 'x')", 1, "rbloom:x"},
		{"EVAL", "return redis.call('KEYS', '*')", 0},
	} {
		// Refusals from inside a script are ERR, not NOPERM: "ERR The user
		// executing the script can't ..." in Redis 7.0, "ERR ACL failure in
		// script: ..." in Valkey 8.0 and Redis 8.0.
		err := app.Do(ctx, cmd...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM ") &&
			!strings.HasPrefix(err.Error(), "ERR The user executing the script can't") &&
			!strings.HasPrefix(err.Error(), "ERR ACL failure in script: ") {
			t.Errorf("%q as %s: %v, want an ACL refusal", cmd, aclUser, err)
		}
	}
	if v := admin.Get(ctx, "secret").Val(); v != "s" || admin.Exists(ctx, "other").Val() != 0 {
		t.Errorf("the user changed keys outside rbloom:*: secret = %q", v)
	}
}

// TestLeastPrivilegeACLCluster runs the whole API through a ClusterClient
// as the least-privilege user on a 3-master cluster, where go-redis also
// needs CLUSTER SLOTS to learn which node holds which slot.
func TestLeastPrivilegeACLCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := rbloomtest.StartCluster(t, 3)
	for _, commands := range [][]string{aclCommands, append(slices.Clone(aclCommands), "+cluster|slots")} {
		if _, err := cl.DoAll(ctx, aclSetUser(commands)...); err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: aclUser, Password: aclPassword})
		err := exerciseAll(ctx, rdb, "acl-cluster")
		rdb.Close()
		if slices.Contains(commands, "+cluster|slots") {
			if err != nil {
				t.Errorf("with +cluster|slots: %v", err)
			}
		} else if err == nil {
			t.Errorf("a ClusterClient worked without +cluster|slots: the README need not ask for it")
		} else {
			t.Logf("without +cluster|slots: %v", err)
		}
	}
}

// TestScriptErrorIsNotWrongType: the scripts read a partition's header with
// redis.pcall('GETRANGE'); only WRONGTYPE may say the key is not a filter
// (an ACL refusal was once taken for it).
func TestScriptErrorIsNotWrongType(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	must(created(t, newCounting(t, admin, "healthy", Options{Capacity: 100})).Add(ctx, "a")).on(t)
	without := slices.DeleteFunc(slices.Clone(aclCommands), func(c string) bool { return c == "+getrange" })
	if err := admin.Do(ctx, aclSetUser(without)...).Err(); err != nil {
		t.Fatal(err)
	}
	app := redis.NewClient(&redis.Options{Addr: addr, Username: aclUser, Password: aclPassword})
	defer app.Close()
	_, err := newCounting(t, app, "healthy", Options{Capacity: 100}).Add(ctx, "b")
	if err == nil || errors.Is(err, ErrNotFilter) {
		t.Errorf("Add on a healthy filter by a user without GETRANGE: %v, want the ACL refusal, not ErrNotFilter", err)
	}
	// Info, likewise, fails: a refusal says nothing of what the key holds.
	if in, err := newCounting(t, app, "healthy", Options{Capacity: 100}).Info(ctx); err == nil {
		t.Errorf("Info by a user without GETRANGE = damaged %v, no error; want the ACL refusal", in.Damaged)
	}
}

// TestTLS runs the whole API over TLS to a server that has no plain port,
// and checks that a client that does not trust the server's CA, or that
// does not speak TLS, gets an error rather than a connection.
func TestTLS(t *testing.T) {
	s := rbloomtest.StartTLSRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: &tls.Config{RootCAs: s.RootCAs, MinVersion: tls.VersionTLS12}})
	defer rdb.Close()
	if err := exerciseAll(ctx, rdb, "over-tls"); err != nil {
		t.Fatalf("over TLS: %v", err)
	}
	if err := rdb.Do(ctx, "CONFIG", "GET", "port").Err(); err != nil {
		t.Fatal(err)
	}
	if port := rdb.ConfigGet(ctx, "port").Val()["port"]; port != "0" {
		t.Errorf("the server also listens on plain port %s", port)
	}

	for name, o := range map[string]*redis.Options{
		"untrusted CA": {Addr: s.Addr, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}},
		"wrong name":   {Addr: s.Addr, TLSConfig: &tls.Config{RootCAs: s.RootCAs, ServerName: "redis.example"}},
		"no TLS":       {Addr: s.Addr, ReadTimeout: time.Second},
	} {
		o.MaxRetries, o.DialerRetries = -1, 1
		bad := redis.NewClient(o)
		c := newCounting(t, bad, "over-tls", Options{Capacity: 100})
		_, err := c.Add(ctx, "x")
		if err == nil || !strings.HasPrefix(err.Error(), "rbloom: ") {
			t.Errorf("%s: Add = %v, want an rbloom error", name, err)
		}
		t.Logf("%s: %v", name, err)
		bad.Close()
	}
}

// TestErrorsHideSecrets makes every call with clients whose password is
// wrong, refused, or never sent (the server is unreachable, or its TLS
// certificate is not trusted), and checks that no error shows the password,
// raw or URL-escaped.
func TestErrorsHideSecrets(t *testing.T) {
	const secret = "Pw-4x!sEcReT/9:@"
	addr := rbloomtest.StartRedis(t, "--requirepass", "default-right")
	admin := redis.NewClient(&redis.Options{Addr: addr, Password: "default-right"})
	defer admin.Close()
	// "limited" knows the secret but may only PING; "app" has another password.
	for _, rule := range [][]any{
		{"ACL", "SETUSER", "limited", "on", ">" + secret, "~*", "+ping"},
		{"ACL", "SETUSER", "app", "on", ">other-password", "~*", "+@all"},
	} {
		if err := admin.Do(ctx, rule...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	tlsAddr := rbloomtest.StartTLSRedis(t, "--requirepass", secret).Addr
	closed := rbloomtest.ClosedAddr(t)

	clients := []struct {
		name string
		o    redis.Options
	}{
		{"wrong default password", redis.Options{Addr: addr, Password: secret}},
		{"wrong user password", redis.Options{Addr: addr, Username: "app", Password: secret}},
		{"unknown user", redis.Options{Addr: addr, Username: "nobody", Password: secret}},
		{"right password, no permission", redis.Options{Addr: addr, Username: "limited", Password: secret}},
		{"connection refused", redis.Options{Addr: closed, Password: secret, DialerRetries: 1}},
		{"untrusted TLS certificate", redis.Options{Addr: tlsAddr, Password: secret, TLSConfig: &tls.Config{}, DialerRetries: 1}},
		{"plain to a TLS port", redis.Options{Addr: tlsAddr, Password: secret, ReadTimeout: time.Second}},
	}
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret), strconv.Quote(secret), "sEcReT"}
	for _, cl := range clients {
		cl.o.MaxRetries = -1
		rdb := redis.NewClient(&cl.o)
		c := newCounting(t, rdb, "f", Options{Capacity: 100, Partitions: 2})
		calls := map[string]func() error{
			"Add":        func() error { _, err := c.Add(ctx, "a"); return err },
			"AddMany":    func() error { _, err := c.AddMany(ctx, []string{"a", "b"}); return err },
			"AddOnce":    func() error { _, err := c.AddOnce(ctx, "a", "id"); return err },
			"Remove":     func() error { _, err := c.Remove(ctx, "a"); return err },
			"RemoveMany": func() error { _, err := c.RemoveMany(ctx, []string{"a"}); return err },
			"Test":       func() error { _, err := c.Test(ctx, "a"); return err },
			"Count":      func() error { _, err := c.Count(ctx, "a"); return err },
			"Create":     func() error { return c.Create(ctx) },
			"Info":       func() error { _, err := c.Info(ctx); return err },
			"Drop":       func() error { return c.Drop(ctx) },
			"Open":       func() error { _, err := Open(ctx, rdb, "f", Options{}); return err },
		}
		for _, name := range sortedKeys(calls) {
			err := calls[name]()
			if err == nil {
				t.Errorf("%s: %s succeeded", cl.name, name)
				continue
			}
			for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err)} {
				for _, form := range forms {
					if strings.Contains(text, form) {
						t.Errorf("%s: %s error shows the password (%q): %s", cl.name, name, form, text)
					}
				}
			}
			if name == "Add" {
				t.Logf("%s: %v", cl.name, err)
			}
		}
		rdb.Close()
	}
}

// TestInfoFailsWithoutAuth: when a connection cannot authenticate, go-redis
// returns the error from Exec but leaves each command of the pipeline
// without one (it stamps only errors that are not Redis replies). Info
// used to read only the commands' errors, and answered that the filter did
// not exist.
func TestInfoFailsWithoutAuth(t *testing.T) {
	addr := rbloomtest.StartRedis(t, "--requirepass", "right")
	admin := redis.NewClient(&redis.Options{Addr: addr, Password: "right"})
	defer admin.Close()
	must(created(t, newCounting(t, admin, "f", Options{Capacity: 100})).Add(ctx, "a")).on(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: "wrong", MaxRetries: -1})
	defer rdb.Close()
	in, err := newCounting(t, rdb, "f", Options{Capacity: 100}).Info(ctx)
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("Info with a refused password = %+v, nil error; want the WRONGPASS error", in)
	}
}

// TestWriteErrorKeepsCause: runScripts used to ignore the error of
// pipe.Exec too, so a write on a connection that could not authenticate
// failed with "unexpected type=<nil> for String" instead of the reason.
func TestWriteErrorKeepsCause(t *testing.T) {
	addr := rbloomtest.StartRedis(t, "--requirepass", "right")
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: "wrong", MaxRetries: -1})
	defer rdb.Close()
	c := newCounting(t, rdb, "f", Options{Capacity: 100})
	for name, call := range map[string]func() error{
		"Add":        func() error { _, err := c.Add(ctx, "a"); return err },
		"AddMany":    func() error { _, err := c.AddMany(ctx, []string{"a", "b"}); return err },
		"AddOnce":    func() error { _, err := c.AddOnce(ctx, "a", "id"); return err },
		"Remove":     func() error { _, err := c.Remove(ctx, "a"); return err },
		"RemoveMany": func() error { _, err := c.RemoveMany(ctx, []string{"a", "b"}); return err },
		"Create":     func() error { return c.Create(ctx) },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("%s with a refused password: %v, want the WRONGPASS error", name, err)
		}
	}
}

// TestACLDocumented: the ACL rules docs/operations.md gives are the ones
// the least-privilege tests run the whole API under, and its count of
// commands is theirs.
func TestACLDocumented(t *testing.T) {
	doc, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{aclCommands, aclFunctionCommands} {
		line := "ACL SETUSER rbloom reset on >PASSWORD ~rbloom:* resetchannels -@all " + strings.Join(want, " ")
		if !strings.Contains(string(doc), line+"\n") {
			t.Errorf("docs/operations.md does not give the rule the tests use:\n%s", line)
		}
	}
	if n := fmt.Sprintf("rbloom needs %d commands", len(aclCommands)); !strings.Contains(strings.Join(strings.Fields(string(doc)), " "), n) {
		t.Errorf("docs/operations.md does not say %q", n)
	}
}
