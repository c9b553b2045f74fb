package rbloom

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// actedOn are the error prefixes go-redis retries or redirects on. An error
// reply of our scripts must never start with one, and neither may an error
// the library returns (a caller's own retry logic may look at them too).
var actedOn = []string{"NOSCRIPT", "READONLY", "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MOVED", "ASK", "BUSY"}

// checkPrefix fails the test if err starts with one of actedOn, or does
// not start with "rbloom: ", or repeats it, or takes more than one line.
func checkPrefix(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	msg := err.Error()
	for _, code := range actedOn {
		if strings.HasPrefix(msg, code) || strings.HasPrefix(msg, "ERR "+code) {
			t.Errorf("%s: error %q starts with %s", what, msg, code)
		}
	}
	if !strings.HasPrefix(msg, "rbloom: ") || strings.Count(msg, "rbloom: ") != 1 || strings.Contains(msg, "\n") {
		t.Errorf("%s: error %q does not start with \"rbloom: \", once, on one line", what, msg)
	}
}

// allCalls returns every call of a counting filter's API, by name.
func allCalls(rdb redis.UniversalClient, c *Counting) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"Add":        func(ctx context.Context) error { _, err := c.Add(ctx, "a"); return err },
		"AddMany":    func(ctx context.Context) error { _, err := c.AddMany(ctx, []string{"a", "b"}); return err },
		"AddOnce":    func(ctx context.Context) error { _, err := c.AddOnce(ctx, "a", "id-1"); return err },
		"Remove":     func(ctx context.Context) error { _, err := c.Remove(ctx, "a"); return err },
		"RemoveMany": func(ctx context.Context) error { _, err := c.RemoveMany(ctx, []string{"a", "b"}); return err },
		"RemoveOnce": func(ctx context.Context) error { _, err := c.RemoveOnce(ctx, "a", "id-2"); return err },
		"Test":       func(ctx context.Context) error { _, err := c.Test(ctx, "a"); return err },
		"TestMany":   func(ctx context.Context) error { _, err := c.TestMany(ctx, []string{"a", "b"}); return err },
		"Count":      func(ctx context.Context) error { _, err := c.Count(ctx, "a"); return err },
		"Create":     func(ctx context.Context) error { return c.Create(ctx) },
		"Info":       func(ctx context.Context) error { _, err := c.Info(ctx); return err },
		"Open":       func(ctx context.Context) error { _, err := Open(ctx, rdb, c.Name(), Options{}); return err },
	}
}

// TestErrorPrefixes drives every error path it can reach and checks that
// each error starts with "rbloom: " and never with a code go-redis acts on,
// even where the cause is such a code from Redis (READONLY from a replica,
// MOVED from a cluster node, CLUSTERDOWN, MASTERDOWN).
func TestErrorPrefixes(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()

	t.Run("invalid options", func(t *testing.T) {
		for _, o := range []Options{
			{}, {Capacity: 10, ErrorRate: 1}, {Capacity: 10, ErrorRate: -0.5}, {Capacity: 10, Hashes: 65},
			{Capacity: 10, Partitions: MaxPartitions + 1}, {Capacity: 10, TTL: time.Microsecond},
			{Capacity: 10, IDLifetime: -time.Second}, {Slots: 10}, {Hashes: 3},
			{Slots: 1 << 40, Hashes: 3, Partitions: 1},
		} {
			_, err := NewCounting(rdb, "x", o)
			checkPrefix(t, "NewCounting", err)
			_, err = NewClassic(rdb, "x", o)
			checkPrefix(t, "NewClassic", err)
		}
		for _, name := range []string{"", "{x}", "a}", "a\nb", "a\x00b", "\x7f", strings.Repeat("n", 257)} {
			_, err := NewCounting(rdb, name, Options{Capacity: 10})
			checkPrefix(t, "NewCounting(name)", err)
			_, err = Open(ctx, rdb, name, Options{})
			checkPrefix(t, "Open(name)", err)
		}
		_, err := NewCounting(nil, "x", Options{Capacity: 10})
		checkPrefix(t, "NewCounting(nil)", err)
		_, err = Open(ctx, nil, "x", Options{})
		checkPrefix(t, "Open(nil)", err)
		c := newCounting(t, rdb, "x", Options{Capacity: 10})
		for _, id := range []string{"", strings.Repeat("i", 257)} {
			_, err = c.AddOnce(ctx, "a", id)
			checkPrefix(t, "AddOnce(id)", err)
			_, err = c.RemoveOnce(ctx, "a", id)
			checkPrefix(t, "RemoveOnce(id)", err)
		}
	})

	t.Run("stored state", func(t *testing.T) {
		must(created(t, newCounting(t, rdb, "stored", Options{Capacity: 100, Partitions: 2})).Add(ctx, "a")).on(t)
		must(created(t, newClassicT(t, rdb, "bits", Options{Capacity: 100})).Add(ctx, "a")).on(t)
		rdb.Set(ctx, keyOf(DefaultKeyPrefix, "plain"), "hello", 0)
		rdb.Set(ctx, keyOf(DefaultKeyPrefix, "empty"), "", 0)
		rdb.RPush(ctx, keyOf(DefaultKeyPrefix, "list"), "x")
		long := created(t, newCounting(t, rdb, "long", Options{Capacity: 100}))
		must(long.Add(ctx, "a")).on(t)
		rdb.Append(ctx, long.f.parts[0].key, "\x00")
		for _, tt := range []struct {
			name string
			o    Options
		}{
			{"stored", Options{Capacity: 200, Partitions: 2}}, // ErrParamsMismatch
			{"stored", Options{Capacity: 100, Partitions: 3}}, // other partitions
			{"bits", Options{Capacity: 100}},                  // classic opened as counting
			{"plain", Options{Capacity: 100}},                 // ErrNotFilter
			{"empty", Options{Capacity: 100}},
			{"list", Options{Capacity: 100}}, // WRONGTYPE
			{"long", Options{Capacity: 100}}, // ErrDamaged
		} {
			c := newCounting(t, rdb, tt.name, tt.o)
			calls := allCalls(rdb, c)
			for _, op := range sortedKeys(calls) {
				err := calls[op](ctx)
				if err == nil && op == "Open" && (tt.name == "stored" || tt.name == "long" || tt.name == "bits") {
					continue // Open takes the stored parameters; a long string has a good header
				}
				checkPrefix(t, op+" on "+tt.name, err)
			}
		}
		_, err := Open(ctx, rdb, "missing", Options{})
		checkPrefix(t, "Open(missing)", err)
	})

	t.Run("client", func(t *testing.T) {
		c := newCounting(t, rdb, "client", Options{Capacity: 100})
		done, cancel := context.WithCancel(ctx)
		cancel()
		calls := allCalls(rdb, c)
		for _, op := range sortedKeys(calls) {
			checkPrefix(t, op+" cancelled", calls[op](done))
		}
		closed := rbloomtest.ClosedAddr(t)
		for name, o := range map[string]*redis.Options{
			"refused": {Addr: closed, MaxRetries: -1, DialerRetries: 1},
			"closed":  {Addr: addr},
		} {
			other := redis.NewClient(o)
			if name == "closed" {
				other.Close()
			}
			calls := allCalls(other, newCounting(t, other, "client", Options{Capacity: 100}))
			for _, op := range sortedKeys(calls) {
				checkPrefix(t, op+" "+name, calls[op](ctx))
			}
			other.Close()
		}
	})

	t.Run("script cache flushed", func(t *testing.T) {
		// NOSCRIPT is handled inside: after SCRIPT FLUSH, a batch of many
		// pipelined calls (each answered NOSCRIPT) succeeds.
		c := created(t, newCounting(t, rdb, "flushed", Options{Capacity: 100_000}))
		items := make([]string, 20_000)
		for i := range items {
			items[i] = "item-" + strconv.Itoa(i)
		}
		for _, op := range []func() error{
			func() error { _, err := c.AddMany(ctx, items); return err },
			func() error { _, err := c.RemoveMany(ctx, items); return err },
			func() error { _, err := c.AddOnce(ctx, "x", "flushed-op"); return err },
		} {
			rdb.ScriptFlush(ctx)
			if err := op(); err != nil {
				t.Errorf("after SCRIPT FLUSH: %v", err)
			}
		}
	})

	t.Run("replica", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(addr)
		rdb.ConfigSet(ctx, "repl-diskless-sync-delay", "0") // default 5 s
		// MaxRetries -1: go-redis would retry READONLY three times, slowly.
		replica := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t, "--replicaof", "127.0.0.1", port), MaxRetries: -1})
		defer replica.Close()
		must(created(t, newCounting(t, rdb, "replicated", Options{Capacity: 100})).Add(ctx, "a")).on(t)
		waitFor(t, "the replica to hold the filter", func() bool { return replica.Exists(ctx, keyOf(DefaultKeyPrefix, "replicated")).Val() == 1 })
		c := newCounting(t, replica, "replicated", Options{Capacity: 100})
		calls := allCalls(replica, c)
		for _, op := range sortedKeys(calls) {
			err := calls[op](ctx)
			switch op {
			// Create of a filter that exists writes nothing: it only
			// checks the parameters, which a replica can answer.
			case "Test", "TestMany", "Count", "Info", "Open", "Create":
				if err != nil {
					t.Errorf("%s on a replica: %v", op, err)
				}
			default:
				checkPrefix(t, op+" on a replica", err)
				if op == "Add" {
					t.Logf("Add on a replica: %v", err)
				}
			}
		}
	})

	t.Run("stale replica", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		stale := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t, "--replicaof", "127.0.0.1", port,
			"--replica-serve-stale-data", "no"), MaxRetries: 1})
		defer stale.Close()
		calls := allCalls(stale, newCounting(t, stale, "stale", Options{Capacity: 100}))
		for _, op := range sortedKeys(calls) {
			err := calls[op](ctx)
			checkPrefix(t, op+" on a stale replica", err)
			if op == "Test" {
				t.Logf("Test on a stale replica: %v", err)
			}
		}
	})

	t.Run("cluster", func(t *testing.T) {
		// A plain client of one node of a cluster: the partitions on the
		// other node are answered MOVED, which the library resends until
		// its context ends; a node with no slots answers CLUSTERDOWN.
		cl := rbloomtest.StartCluster(t, 2)
		node := redis.NewClient(&redis.Options{Addr: cl.Addrs()[0]})
		defer node.Close()
		down := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t, "--cluster-enabled", "yes")})
		defer down.Close()
		for name, rdb := range map[string]*redis.Client{"MOVED": node, "CLUSTERDOWN": down} {
			calls := allCalls(rdb, newCounting(t, rdb, "spread", Options{Capacity: 100, Partitions: 2}))
			for _, op := range sortedKeys(calls) {
				short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				err := calls[op](short)
				cancel()
				if err == nil && op == "Open" && name == "MOVED" {
					continue // the partition named like the filter is on this node
				}
				checkPrefix(t, op+" answered "+name, err)
				if op == "Add" || op == "Info" {
					t.Logf("%s answered %s: %v", op, name, err)
				}
			}
		}
	})
}

// TestScriptErrorCodes calls the scripts directly with forged arguments and
// on keys in every refused state: each error reply the scripts make
// themselves starts with "RBLOOM_" and a code scriptError maps to a
// sentinel; the only others are BITFIELD's own refusals of offsets Lua's
// tonumber reads but BITFIELD does not, which start with "ERR".
func TestScriptErrorCodes(t *testing.T) {
	rdb := realRedis(t)
	c := created(t, newCounting(t, rdb, "codes", Options{Slots: 100, Hashes: 2}))
	must(c.Add(ctx, "a")).on(t)
	rdb.Set(ctx, keyOf(DefaultKeyPrefix, "plain"), "hello", 0)
	rdb.RPush(ctx, keyOf(DefaultKeyPrefix, "list"), "x")
	rdb.Set(ctx, keyOf(DefaultKeyPrefix, "long"), c.f.parts[0].head+strings.Repeat("\x00", 51), 0)
	mismatched := newCounting(t, rdb, "codes", Options{Slots: 200, Hashes: 2})

	addPrefix := c.f.call(c.f.addOp(), 0, 0, placement{}, nil).wire().args
	removePrefix := c.f.call(c.f.removeOp(), 0, 0, placement{}, nil).wire().args
	offsets := []any{headerBits, headerBits + 4} // k = 2: one item, for add and remove alike
	type call struct {
		script *redis.Script
		key    string
		args   []any
	}
	with := func(prefix []any, i int, v any, slots ...any) []any {
		args := append(slices.Clone(prefix), slots...)
		args[i] = v
		return args
	}
	calls := map[string]call{
		"bad header":          {addScript, c.f.parts[0].key, with(addPrefix, 0, "x", offsets...)},
		"bad TTL":             {addScript, c.f.parts[0].key, with(addPrefix, 1, "-1", offsets...)},
		"bad keep":            {addScript, c.f.parts[0].key, with(addPrefix, 2, "0", offsets...)},
		"bad offset":          {addScript, c.f.parts[0].key, append(slices.Clone(addPrefix), 8, offsets[1])},
		"half an item":        {addScript, c.f.parts[0].key, append(slices.Clone(addPrefix), offsets[0])},
		"hex offset":          {addScript, c.f.parts[0].key, append(slices.Clone(addPrefix), "0x200", offsets[1])},
		"not a number":        {addScript, c.f.parts[0].key, append(slices.Clone(addPrefix), offsets[0], "abc")},
		"mismatch":            {addScript, c.f.parts[0].key, append(mismatched.f.call(mismatched.f.addOp(), 0, 0, placement{}, nil).wire().args, offsets...)},
		"not a filter":        {addScript, keyOf(DefaultKeyPrefix, "plain"), append(slices.Clone(addPrefix), offsets...)},
		"wrong type":          {addScript, keyOf(DefaultKeyPrefix, "list"), append(slices.Clone(addPrefix), offsets...)},
		"damaged":             {addScript, keyOf(DefaultKeyPrefix, "long"), append(slices.Clone(addPrefix), offsets...)},
		"remove classic":      {removeScript, c.f.parts[0].key, with(removePrefix, 0, header{mode: ModeClassic, k: 2, m: 100, partitions: 1}.encode(), offsets...)},
		"remove bad keep":     {removeScript, c.f.parts[0].key, with(removePrefix, 1, "x", offsets...)},
		"remove offset":       {removeScript, c.f.parts[0].key, append(slices.Clone(removePrefix), 1<<20, offsets[1])},
		"remove misaligned":   {removeScript, c.f.parts[0].key, append(slices.Clone(removePrefix), headerBits+2, offsets[1])},
		"remove not a number": {removeScript, c.f.parts[0].key, append(slices.Clone(removePrefix), "", offsets[1])},
		"remove mismatch":     {removeScript, c.f.parts[0].key, append(mismatched.f.call(mismatched.f.removeOp(), 0, 0, placement{}, nil).wire().args, offsets...)},
		"remove on list":      {removeScript, keyOf(DefaultKeyPrefix, "list"), append(slices.Clone(removePrefix), offsets...)},
	}
	before := dump(t, rdb)
	code := regexp.MustCompile(`^RBLOOM_[A-Z]+ `)
	for _, name := range sortedKeys(calls) {
		cl := calls[name]
		keys := forgedKeys(cl.key)
		if cl.script == removeScript {
			keys = forgedRemoveKeys(cl.key)
		}
		err := cl.script.Run(ctx, rdb, keys, cl.args...).Err()
		var rerr redis.Error
		switch {
		case err == nil:
			t.Errorf("%s: no error", name)
		case !errors.As(err, &rerr):
			t.Errorf("%s: %v is not an error reply", name, err)
		case name == "hex offset":
			if !strings.HasPrefix(err.Error(), "ERR ") {
				t.Errorf("%s: %q, want BITFIELD's ERR", name, err)
			}
		case !code.MatchString(err.Error()):
			t.Errorf("%s: %q does not start with RBLOOM_<CODE>", name, err)
		default:
			c, _, _ := strings.Cut(err.Error(), " ")
			if scriptErrors[c] == nil {
				t.Errorf("%s: %q: code %s is not in scriptErrors", name, err, c)
			}
		}
	}
	if after := dump(t, rdb); !maps.Equal(before, after) {
		t.Errorf("forged calls changed Redis:\nbefore %q\nafter  %q", before, after)
	}

	// And every code the Lua sources can send is one scriptError knows.
	files, err := filepath.Glob("lua/*.lua")
	if err != nil || len(files) < 4 {
		t.Fatalf("lua/*.lua: %v, %v", files, err)
	}
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`reject\('([A-Z_]+)'`).FindAllStringSubmatch(string(src), -1) {
			if scriptErrors["RBLOOM_"+m[1]] == nil {
				t.Errorf("%s rejects with %s, which scriptErrors does not map", file, m[1])
			}
		}
		if strings.Contains(string(src), "error_reply(") && !strings.Contains(string(src), "error_reply('RBLOOM_'") {
			t.Errorf("%s builds an error reply without the RBLOOM_ prefix", file)
		}
	}
}

// TestErrorStyle: an error of one kind reads the same whichever path found
// it, a read (no script) or a write (a script):
// "rbloom: <op>: <kind>: <detail>".
func TestErrorStyle(t *testing.T) {
	rdb := realRedis(t)
	must(created(t, newCounting(t, rdb, "stored", Options{Capacity: 100})).Add(ctx, "a")).on(t)
	rdb.RPush(ctx, keyOf(DefaultKeyPrefix, "list"), "x")
	long := created(t, newCounting(t, rdb, "long", Options{Capacity: 100}))
	must(long.Add(ctx, "a")).on(t)
	rdb.Append(ctx, long.f.parts[0].key, "\x00")
	for _, tt := range []struct {
		name string
		o    Options
		want string // after "rbloom: <op>: "
	}{
		{"stored", Options{Capacity: 200}, `filter parameters differ from the stored ones: rbloom:\{stored\} is counting m=959 k=7 ids=3600s partition 0 of 1, caller wants counting m=1918 k=7 ids=3600s partition 0 of 1$`},
		{"list", Options{Capacity: 100}, `key does not hold an rbloom filter: rbloom:\{list\} holds another type$`},
		{"long", Options{Capacity: 100}, `filter damaged: rbloom:\{long\} is 545 bytes long, want 544$`},
		{"missing", Options{Capacity: 100}, `filter not found: missing: no partition exists \(rbloom:\{missing\} read\): it was never made, or Redis lost it; make it with Create \(for an empty source\) or load it from its source with Rebuild$`},
	} {
		c := newCounting(t, rdb, tt.name, tt.o)
		for op, call := range map[string]func() error{
			"test":   func() error { _, err := c.Test(ctx, "a"); return err },
			"remove": func() error { _, err := c.Remove(ctx, "a"); return err },
			"add":    func() error { _, err := c.Add(ctx, "a"); return err },
			"count":  func() error { _, err := c.Count(ctx, "a"); return err },
		} {
			err := call()
			re := regexp.MustCompile("^rbloom: " + op + ": " + tt.want)
			if err == nil || !re.MatchString(err.Error()) {
				t.Errorf("%s on %s: %v, want to match %s", op, tt.name, err, re)
			}
		}
	}
}
