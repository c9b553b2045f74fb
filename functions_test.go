package rbloom

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// aclFunctionCommands are aclCommands for a user whose writes call the
// installed functions (Options.UseFunctions): +fcall instead of +evalsha
// and +eval. The README's "Redis functions" section gives the same line.
var aclFunctionCommands = append([]string{"+fcall"}, slices.DeleteFunc(slices.Clone(aclCommands),
	func(c string) bool { return c == "+evalsha" || c == "+eval" })...)

// commandCalls returns the calls of each command in INFO commandstats.
func commandCalls(t testing.TB, info string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^cmdstat_([^:]+):calls=(\d+)`).FindAllStringSubmatch(info, -1) {
		n, err := strconv.Atoi(m[2])
		if err != nil {
			t.Fatal(err)
		}
		out[m[1]] = n
	}
	return out
}

// noEval fails the test if info, INFO commandstats, counts an EVAL or
// EVALSHA, and returns the FCALLs it counts.
func noEval(t testing.TB, where, info string) int {
	t.Helper()
	calls := commandCalls(t, info)
	for _, c := range []string{"eval", "evalsha", "eval_ro", "evalsha_ro"} {
		if calls[c] > 0 {
			t.Errorf("%s: %d calls of %s with UseFunctions", where, calls[c], strings.ToUpper(c))
		}
	}
	return calls["fcall"]
}

// writes are the calls that run a write script, each made with a handle
// of o on filters called name (counting) and name+"-classic".
func writes(rdb redis.UniversalClient, name string, o Options) map[string]func(context.Context) error {
	o.Capacity, o.Partitions = 1000, 2
	c, err := NewCounting(rdb, name, o)
	if err != nil {
		panic(err)
	}
	b, err := NewClassic(rdb, name+"-classic", o)
	if err != nil {
		panic(err)
	}
	return map[string]func(context.Context) error{
		"Add":        func(ctx context.Context) error { _, err := c.Add(ctx, "a"); return err },
		"AddMany":    func(ctx context.Context) error { _, err := c.AddMany(ctx, []string{"a", "b", "c"}); return err },
		"AddOnce":    func(ctx context.Context) error { _, err := c.AddOnce(ctx, "a", "op"); return err },
		"Remove":     func(ctx context.Context) error { _, err := c.Remove(ctx, "a"); return err },
		"RemoveMany": func(ctx context.Context) error { _, err := c.RemoveMany(ctx, []string{"a", "b"}); return err },
		"RemoveOnce": func(ctx context.Context) error { _, err := c.RemoveOnce(ctx, "a", "op"); return err },
		"Create":     func(ctx context.Context) error { return c.Create(ctx) },
		"Rebuild": func(ctx context.Context) error {
			return c.Rebuild(ctx, func(add func([]string) error) error { return add([]string{"a"}) })
		},
		"classic Add": func(ctx context.Context) error { _, err := b.Add(ctx, "a"); return err },
	}
}

// TestFunctionLibrary checks the generated library: a versioned name, one
// function per write script, none declaring no-writes, and the source
// accepted by FUNCTION LOAD.
func TestFunctionLibrary(t *testing.T) {
	name := FunctionLibrary()
	if !regexp.MustCompile(`^rbloom_[0-9a-f]{8}$`).MatchString(name) {
		t.Errorf("FunctionLibrary() = %q, want rbloom_ and 8 hex digits", name)
	}
	if again := newFunctionLibrary(); again.name != name || again.code != library.code {
		t.Errorf("the library is not the same when generated again: %q", again.name)
	}
	if !strings.HasPrefix(library.code, "#!lua name="+name+"\n") {
		t.Errorf("the source starts %q, want the #!lua shebang naming %s", library.code[:40], name)
	}
	want := map[string]bool{}
	for _, s := range []*redis.Script{addScript, removeScript, rebuildScript, cuckooScript, windowScript} {
		fn := library.function(s)
		if !strings.HasPrefix(fn, name+"_") {
			t.Errorf("a write script has the function %q, want one named %s_...", fn, name)
		}
		want[fn] = true
	}
	// A change of the Lua is a new version, with new names.
	if n := strings.Count(librarySource(name), name); n != 6 {
		t.Errorf("the name appears %d times in the source, want 6 (the library and 5 functions)", n)
	}

	rdb := realRedis(t)
	if err := InstallFunctions(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if err := InstallFunctions(ctx, rdb); err != nil {
		t.Fatalf("InstallFunctions a second time: %v", err)
	}
	libs := must(rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: name, WithCode: true}).Result()).on(t)
	if len(libs) != 1 || libs[0].Name != name || libs[0].Code != library.code {
		t.Fatalf("FUNCTION LIST = %+v, want the library %s", libs, name)
	}
	got := map[string]bool{}
	for _, f := range libs[0].Functions {
		got[f.Name] = true
		if len(f.Flags) > 0 {
			t.Errorf("function %s has flags %q: every function writes, none may say no-writes", f.Name, f.Flags)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the library holds %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	// FLUSHALL deletes the data, not the functions.
	must(0, rdb.FlushAll(ctx).Err()).on(t)
	status := must(FunctionsStatus(ctx, rdb)).on(t)
	if len(status) != 1 || !status[0].Loaded || !slices.Equal(status[0].Libraries, []string{name}) {
		t.Errorf("FunctionsStatus after FLUSHALL = %+v, want %s loaded", status, name)
	}
	t.Logf("%s: %d bytes of Lua, functions %v", name, len(library.code), slices.Sorted(maps.Keys(got)))
}

// TestFunctionsMatchScripts makes the same writes with scripts and with
// functions, on filters of the same size: every counter, the item counts
// and every answer must be the same.
func TestFunctionsMatchScripts(t *testing.T) {
	rdb := realRedis(t)
	must(0, InstallFunctions(ctx, rdb)).on(t)
	run := func(name string, fcall bool) ([]int, []bool, *Info) {
		c := created(t, newCounting(t, rdb, name, Options{Slots: 200, Hashes: 3, Partitions: 2, UseFunctions: fcall}))
		var answers []bool
		for round := range 20 {
			items := make([]string, 30)
			for i := range items {
				items[i] = fmt.Sprint("item-", (round*7+i)%45)
			}
			answers = append(answers, must(c.AddMany(ctx, items)).on(t)...)
			answers = append(answers, must(c.RemoveMany(ctx, items[:round%10])).on(t)...)
			for range 2 { // the second is a replay
				answers = append(answers, must(c.AddOnce(ctx, items[0], fmt.Sprint("op-", round))).on(t))
			}
		}
		if err := c.Rebuild(ctx, func(add func([]string) error) error { return add([]string{"item-1", "item-2"}) }); err != nil {
			t.Fatal(err)
		}
		answers = append(answers, must(c.AddMany(ctx, []string{"item-1", "item-3"})).on(t)...)
		return slotValues(t, rdb, c.f), answers, must(c.Info(ctx)).on(t)
	}
	rdb.ConfigResetStat(ctx)
	scriptSlots, scriptAnswers, scriptInfo := run("scripts", false)
	funcSlots, funcAnswers, funcInfo := run("functions", true)
	if !slices.Equal(scriptSlots, funcSlots) || !slices.Equal(scriptAnswers, funcAnswers) || scriptInfo.Items != funcInfo.Items {
		t.Errorf("functions and scripts differ: items %d and %d, answers equal %v, counters equal %v",
			funcInfo.Items, scriptInfo.Items, slices.Equal(scriptAnswers, funcAnswers), slices.Equal(scriptSlots, funcSlots))
	}
	calls := commandCalls(t, rdb.Info(ctx, "commandstats").Val())
	if calls["fcall"] == 0 || calls["fcall"] != calls["evalsha"] {
		t.Errorf("FCALL %d calls, EVALSHA %d: want as many", calls["fcall"], calls["evalsha"])
	}
	t.Logf("%d answers and %d counters equal; %d FCALL, %d EVALSHA", len(funcAnswers), len(funcSlots), calls["fcall"], calls["evalsha"])
}

// TestFunctionsMissing: with UseFunctions, every write on a server without
// this version's functions fails with ErrNoFunctions, saying what to run,
// changes nothing, and never sends EVAL or EVALSHA: before the install, and
// after FUNCTION FLUSH and FUNCTION DELETE. Reads still work.
func TestFunctionsMissing(t *testing.T) {
	rdb := realRedis(t)
	o := Options{UseFunctions: true}
	must(created(t, newCounting(t, rdb, "held", Options{Capacity: 1000, Partitions: 2})).AddMany(ctx, []string{"a", "b"})).on(t)
	held := newCounting(t, rdb, "held", Options{Capacity: 1000, Partitions: 2, UseFunctions: true})
	// The filters writes calls write to exist, made by handles that run
	// the scripts: the writes are refused for want of the functions alone.
	madeByScripts := func(rdb *redis.Client) {
		t.Helper()
		created(t, newCounting(t, rdb, "f", Options{Capacity: 1000, Partitions: 2}))
		created(t, newClassicT(t, rdb, "f-classic", Options{Capacity: 1000, Partitions: 2}))
	}
	madeByScripts(rdb)
	refused := func(when string) {
		t.Helper()
		rdb.ConfigResetStat(ctx)
		before := dump(t, rdb)
		for what, write := range writes(rdb, "f", o) {
			err := write(ctx)
			if !errors.Is(err, ErrNoFunctions) || !strings.Contains(err.Error(), "InstallFunctions") ||
				!strings.Contains(err.Error(), "'rbloom functions install'") {
				t.Errorf("%s: %s = %v, want ErrNoFunctions naming InstallFunctions and 'rbloom functions install'", when, what, err)
			}
		}
		if _, err := held.Add(ctx, "c"); !errors.Is(err, ErrNoFunctions) {
			t.Errorf("%s: Add to an existing filter = %v, want ErrNoFunctions", when, err)
		}
		if ok, err := held.Test(ctx, "a"); !ok || err != nil {
			t.Errorf("%s: Test = %v, %v: reads need no function", when, ok, err)
		}
		if after := dump(t, rdb); !maps.Equal(before, after) {
			t.Errorf("%s: the refused writes changed the database: %d keys before, %d after", when, len(before), len(after))
		}
		noEval(t, when, rdb.Info(ctx, "commandstats").Val())
	}
	refused("before InstallFunctions")
	_, err := held.Add(ctx, "x")
	t.Logf("%v", err)

	must(0, InstallFunctions(ctx, rdb)).on(t)
	for what, write := range writes(rdb, "f", o) {
		if err := write(ctx); err != nil {
			t.Errorf("after InstallFunctions: %s: %v", what, err)
		}
	}
	must(0, rdb.FunctionFlush(ctx).Err()).on(t)
	refused("after FUNCTION FLUSH")
	must(0, InstallFunctions(ctx, rdb)).on(t)
	must(0, rdb.FunctionDelete(ctx, FunctionLibrary()).Err()).on(t)
	refused("after FUNCTION DELETE")
	if s := must(FunctionsStatus(ctx, rdb)).on(t); len(s) != 1 || s[0].Loaded || len(s[0].Libraries) != 0 {
		t.Errorf("FunctionsStatus after FUNCTION DELETE = %+v, want nothing loaded", s)
	}

	// A server without FCALL (miniredis, Redis 6) says so.
	mini := miniRedis(t)
	if err := InstallFunctions(ctx, mini); err == nil || !strings.HasPrefix(err.Error(), "rbloom: install functions: ") {
		t.Errorf("InstallFunctions on miniredis: %v, want an rbloom error", err)
	}
	madeByScripts(mini)
	before := dump(t, mini)
	for what, write := range writes(mini, "f", o) {
		if err := write(ctx); !errors.Is(err, ErrNoFunctions) || !strings.Contains(err.Error(), "Redis 7.0") {
			t.Errorf("on a server without FCALL: %s = %v, want ErrNoFunctions saying Redis 7.0 is needed", what, err)
		}
	}
	if after := dump(t, mini); !maps.Equal(before, after) {
		t.Errorf("refused writes on miniredis changed it: %q, then %q", before, after)
	}
}

// TestFunctionsLeastPrivilegeACL is TestLeastPrivilegeACL for a user whose
// writes call the installed functions: the whole API works with
// aclFunctionCommands, +fcall and no +eval or +evalsha; each of those
// commands is needed; and the user can run no Lua of its own nor change
// the functions.
func TestFunctionsLeastPrivilegeACL(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	must(0, InstallFunctions(ctx, admin)).on(t)
	connect := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: addr, Username: aclUser, Password: aclPassword, MaxRetries: -1})
	}
	run := func(commands []string, name string) ([]string, error) {
		t.Helper()
		for _, cmd := range [][]any{aclSetUser(commands), {"ACL", "LOG", "RESET"}, {"CONFIG", "RESETSTAT"}} {
			if err := admin.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
		}
		app := connect()
		defer app.Close()
		err := exerciseWith(ctx, app, name, true)
		noEval(t, name, admin.Info(ctx, "commandstats").Val())
		return denials(t, admin, aclUser), err
	}

	if denied, err := run(aclFunctionCommands, "acl"); err != nil || len(denied) > 0 {
		t.Fatalf("as the FCALL-only user: %v; ACL LOG: %q", err, denied)
	}
	t.Logf("ACL SETUSER %s reset on >... ~rbloom:* resetchannels -@all %s: the whole API works", aclUser, strings.Join(aclFunctionCommands, " "))
	checkEachNeeded(t, aclFunctionCommands, run)
	// The scripts' user cannot use the functions, nor this one the scripts.
	if _, err := run(aclCommands, "acl-scripts-user"); err == nil {
		t.Error("the scripts' user (+evalsha +eval, no +fcall) ran the API with UseFunctions")
	}
	admin.Do(ctx, aclSetUser(aclFunctionCommands)...)
	app := connect()
	defer app.Close()
	if _, err := newCounting(t, app, "scripts", Options{Capacity: 100}).Add(ctx, "a"); err == nil {
		t.Error("the FCALL-only user ran a script (UseFunctions false)")
	}

	// No Lua of its own, no change to the functions, no key outside
	// rbloom:* even through rbloom's own functions.
	admin.Set(ctx, "secret", "s", 0)
	add := library.function(addScript)
	evil := "#!lua name=" + FunctionLibrary() + "\nredis.register_function('" + add + "', function() return redis.call('FLUSHALL') end)"
	for _, cmd := range [][]any{
		{"EVAL", "return 1", 0},
		{"EVALSHA", addScript.Hash(), 0},
		{"SCRIPT", "LOAD", "return 1"},
		{"FUNCTION", "LOAD", "REPLACE", evil},
		{"FUNCTION", "DELETE", FunctionLibrary()},
		{"FUNCTION", "FLUSH"},
		{"FUNCTION", "RESTORE", "x"},
		{"FCALL", add, 1, "secret", "h"},
		{"FCALL", add, 2, "rbloom:{x}", "secret", "h"},
		{"GET", "secret"},
	} {
		err := app.Do(ctx, cmd...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM ") {
			t.Errorf("%.60q as %s: %v, want an ACL refusal", cmd, aclUser, err)
		}
	}
	if s := must(FunctionsStatus(ctx, admin)).on(t); !s[0].Loaded {
		t.Errorf("the user changed the functions: %+v", s)
	}
	if v := admin.Get(ctx, "secret").Val(); v != "s" {
		t.Errorf("secret = %q: the user reached a key outside rbloom:*", v)
	}
}

// TestFunctionsSurviveRestart kills redis-server (SIGKILL) and starts it
// again: the script cache is empty then, but the functions, saved with the
// data (AOF, or RDB after a SAVE), are there, and writes with UseFunctions
// go on at once.
func TestFunctionsSurviveRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		save bool
	}{
		{"aof", []string{"--appendonly", "yes", "--appendfsync", "always"}, false},
		{"rdb", []string{"--appendonly", "no"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := rbloomtest.StartServer(t, tc.args...)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			must(0, InstallFunctions(ctx, rdb)).on(t)
			c := created(t, newCounting(t, rdb, "durable", Options{Capacity: 1000, Partitions: 2, UseFunctions: true}))
			must(c.AddMany(ctx, []string{"a", "b", "c"})).on(t)
			must(0, rdb.ScriptLoad(ctx, luaConstants+filterLua+addLua).Err()).on(t)
			if tc.save {
				must(0, rdb.Save(ctx).Err()).on(t)
			}
			srv.Restart()
			if cached := must(rdb.ScriptExists(ctx, addScript.Hash()).Result()).on(t); cached[0] {
				t.Error("the script cache survived the restart: this test shows nothing")
			}
			rdb.ConfigResetStat(ctx)
			if _, err := c.AddMany(ctx, []string{"d", "e"}); err != nil {
				t.Fatalf("AddMany right after the restart: %v", err)
			}
			if ok, err := c.Remove(ctx, "a"); err != nil || !ok {
				t.Fatalf("Remove right after the restart: %v, %v", ok, err)
			}
			if got := must(c.TestMany(ctx, []string{"b", "c", "d", "e"})).on(t); slices.Contains(got, false) {
				t.Errorf("TestMany after the restart = %v", got)
			}
			if fcalls := noEval(t, "after the restart", rdb.Info(ctx, "commandstats").Val()); fcalls == 0 {
				t.Error("no FCALL after the restart")
			}
			if s := must(FunctionsStatus(ctx, rdb)).on(t); !s[0].Loaded {
				t.Errorf("FunctionsStatus after the restart = %+v", s)
			}
		})
	}
}

// TestFunctionsReplicated: FUNCTION LOAD on a master reaches its replica
// (SCRIPT LOAD does not), so that after a failover the promoted replica
// runs writes with UseFunctions at once.
func TestFunctionsReplicated(t *testing.T) {
	master, _, rdb, rep := startReplicated(t)
	// Installed after the replica synced: it comes by the replication stream.
	must(0, InstallFunctions(ctx, rdb)).on(t)
	must(0, rdb.ScriptLoad(ctx, luaConstants+filterLua+addLua).Err()).on(t)
	must(created(t, newCounting(t, rdb, "f", Options{Capacity: 1000, UseFunctions: true, WaitReplicas: 1})).AddMany(ctx, []string{"a", "b"})).on(t)
	if s := must(FunctionsStatus(ctx, rep)).on(t); !s[0].Loaded {
		t.Fatalf("FunctionsStatus on the replica = %+v, want the library loaded", s)
	}
	if cached := must(rep.ScriptExists(ctx, addScript.Hash()).Result()).on(t); cached[0] {
		t.Error("SCRIPT LOAD reached the replica: the README says otherwise")
	}
	// Failover: the replica becomes a master.
	must(0, rep.ReplicaOf(ctx, "NO", "ONE").Err()).on(t)
	master.Stop()
	c := newCounting(t, rep, "f", Options{Capacity: 1000, UseFunctions: true})
	if got, err := c.AddMany(ctx, []string{"a", "c"}); err != nil || !slices.Equal(got, []bool{true, false}) {
		t.Errorf("AddMany on the promoted replica = %v, %v; want [true false]", got, err)
	}
}

// TestFunctionsCluster installs the functions through a ClusterClient, on
// every master, and runs the whole API through it as the FCALL-only user.
func TestFunctionsCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := rbloomtest.StartCluster(t, 3)
	admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer admin.Close()
	before := must(FunctionsStatus(ctx, admin)).on(t)
	if len(before) != 3 || slices.ContainsFunc(before, func(s ServerFunctions) bool { return s.Loaded }) {
		t.Fatalf("FunctionsStatus before the install = %+v, want 3 masters without the library", before)
	}
	must(0, InstallFunctions(ctx, admin)).on(t)
	status := must(FunctionsStatus(ctx, admin)).on(t)
	var addrs []string
	for _, s := range status {
		if !s.Loaded {
			t.Errorf("%s: the library is not loaded", s.Addr)
		}
		addrs = append(addrs, s.Addr)
	}
	if want := slices.Sorted(slices.Values(cl.Addrs())); !slices.Equal(addrs, want) {
		t.Errorf("FunctionsStatus covers %v, want every master %v", addrs, want)
	}

	must(cl.DoAll(ctx, aclSetUser(append(slices.Clone(aclFunctionCommands), "+cluster|slots"))...)).on(t)
	must(cl.DoAll(ctx, "CONFIG", "RESETSTAT")).on(t)
	app := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: aclUser, Password: aclPassword})
	defer app.Close()
	if err := exerciseWith(ctx, app, "fn-cluster", true); err != nil {
		t.Fatalf("the whole API through a ClusterClient with UseFunctions: %v", err)
	}
	// The 3 partitions spread over the masters: each ran FCALLs.
	for i, cmd := range must(cl.DoAll(ctx, "INFO", "commandstats")).on(t) {
		if n := noEval(t, cl.Addrs()[i], must(cmd.Text()).on(t)); n == 0 {
			t.Errorf("%s: no FCALL", cl.Addrs()[i])
		} else {
			t.Logf("%s: %d FCALL", cl.Addrs()[i], n)
		}
	}

	// One master loses the functions: the writes it would run fail, and
	// FunctionsStatus says where.
	c := created(t, newCounting(t, admin, "spread", Options{Capacity: 10_000, Partitions: 16, UseFunctions: true}))
	lost := must(cl.SlotOwner(ctx, 0)).on(t)
	one := redis.NewClient(&redis.Options{Addr: lost})
	defer one.Close()
	must(0, one.FunctionFlush(ctx).Err()).on(t)
	if _, err := c.AddMany(ctx, []string{"a", "b", "c", "d", "e", "f", "g", "h"}); !errors.Is(err, ErrNoFunctions) {
		t.Errorf("AddMany with the functions missing on %s: %v, want ErrNoFunctions", lost, err)
	}
	for _, s := range must(FunctionsStatus(ctx, admin)).on(t) {
		if s.Loaded == (s.Addr == lost) {
			t.Errorf("FunctionsStatus: %s loaded %v, after FUNCTION FLUSH on %s", s.Addr, s.Loaded, lost)
		}
	}
	must(0, InstallFunctions(ctx, admin)).on(t)
	if _, err := c.AddMany(ctx, []string{"a", "b"}); err != nil {
		t.Errorf("AddMany after installing again: %v", err)
	}
}

// TestFunctionVersionsCoexist loads the library of another version of
// rbloom next to this one's: neither replaces the other, and each version
// calls its own functions.
func TestFunctionVersionsCoexist(t *testing.T) {
	rdb := realRedis(t)
	// The other version: another name, and an add that answers "may have
	// been present" for every item.
	const other = "rbloom_0123abcd"
	otherCode := strings.Replace(librarySource(other), "local res = table.concat(out)", "local res = string.rep('1', n)", 1)
	if otherCode == librarySource(other) {
		t.Fatal("could not make the other version's add differ")
	}
	must(0, rdb.FunctionLoad(ctx, otherCode).Err()).on(t)
	must(0, InstallFunctions(ctx, rdb)).on(t)
	s := must(FunctionsStatus(ctx, rdb)).on(t)
	both := []string{other, FunctionLibrary()}
	slices.Sort(both) // as FunctionsStatus sorts them: the hash decides
	if len(s) != 1 || !s[0].Loaded || !slices.Equal(s[0].Libraries, both) {
		t.Errorf("FunctionsStatus = %+v, want this version loaded next to %s", s, other)
	}

	// A process of the other version: its FCALLs name its own functions.
	old := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr})
	defer old.Close()
	old.AddHook(renameFunctions{from: FunctionLibrary(), to: other})
	c := created(t, newCounting(t, rdb, "f", Options{Capacity: 1000, UseFunctions: true}))
	o := created(t, newCounting(t, old, "g", Options{Capacity: 1000, UseFunctions: true}))
	check := func(when string) {
		t.Helper()
		if got, err := c.AddMany(ctx, []string{when + "a", when + "a"}); err != nil || !slices.Equal(got, []bool{false, true}) {
			t.Errorf("%s: AddMany = %v, %v; want [false true]", when, got, err)
		}
		if got, err := o.AddMany(ctx, []string{when + "a", when + "a"}); err != nil || !slices.Equal(got, []bool{true, true}) {
			t.Errorf("%s: AddMany by the other version = %v, %v; want its own [true true]", when, got, err)
		}
	}
	check("both loaded")
	// Installing again replaces this version's library only.
	must(0, InstallFunctions(ctx, rdb)).on(t)
	check("installed again")
	if libs := must(FunctionsStatus(ctx, rdb)).on(t)[0].Libraries; !slices.Contains(libs, other) {
		t.Errorf("InstallFunctions removed the other version: %v", libs)
	}
	// Two libraries may not hold a function of the same name: that is why
	// the function names carry the version too.
	clash := strings.Replace(library.code, "#!lua name="+FunctionLibrary(), "#!lua name=rbloom_clash", 1)
	if err := rdb.FunctionLoad(ctx, clash).Err(); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("loading this version's functions under another library name: %v, want already exists", err)
	}
	// A library under this version's name with other code is not Loaded,
	// and InstallFunctions puts this version's code back.
	must(0, rdb.FunctionLoadReplace(ctx, strings.ReplaceAll(otherCode, other, FunctionLibrary())).Err()).on(t)
	if s := must(FunctionsStatus(ctx, rdb)).on(t); s[0].Loaded {
		t.Errorf("FunctionsStatus = %+v: other code under this version's name counts as loaded", s)
	}
	must(0, InstallFunctions(ctx, rdb)).on(t)
	check("code replaced")
}

// renameFunctions is a go-redis hook that makes FCALLs of the functions of
// library from call those of library to instead.
type renameFunctions struct{ from, to string }

func (h renameFunctions) rename(cmd redis.Cmder) {
	args := cmd.Args()
	if !strings.EqualFold(cmd.Name(), "fcall") || len(args) < 2 {
		return
	}
	if fn, ok := args[1].(string); ok {
		if rest, ok := strings.CutPrefix(fn, h.from+"_"); ok {
			args[1] = h.to + "_" + rest
		}
	}
}

func (h renameFunctions) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h renameFunctions) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.rename(cmd)
		return next(ctx, cmd)
	}
}

func (h renameFunctions) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.rename(cmd)
		}
		return next(ctx, cmds)
	}
}

// BenchmarkFunctions compares writes with scripts (EVALSHA) and with
// functions (FCALL) on a real Redis: Add of one item, and AddMany of 1,000
// in one round trip. It reports the server's time per call, from INFO
// commandstats. go test -run '^$' -bench Functions
func BenchmarkFunctions(b *testing.B) {
	rdb := realRedis(b)
	if err := InstallFunctions(ctx, rdb); err != nil {
		b.Fatal(err)
	}
	items := make([]string, 1000)
	for i := range items {
		items[i] = fmt.Sprint("user:", i)
	}
	for _, batch := range []int{1, len(items)} {
		for _, fcall := range []bool{false, true} {
			name, cmd := "scripts", "evalsha"
			if fcall {
				name, cmd = "functions", "fcall"
			}
			b.Run(fmt.Sprintf("%s/items=%d", name, batch), func(b *testing.B) {
				c, err := NewCounting(rdb, "bench-"+name, Options{Capacity: 1_000_000, UseFunctions: fcall})
				if err != nil {
					b.Fatal(err)
				}
				rdb.ConfigResetStat(ctx)
				for b.Loop() {
					if _, err := c.AddMany(ctx, items[:batch]); err != nil {
						b.Fatal(err)
					}
				}
				info := rdb.Info(ctx, "commandstats").Val()
				m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+),usec=(\d+)`).FindStringSubmatch(info)
				if m == nil {
					b.Fatalf("no %s in INFO commandstats", cmd)
				}
				calls, _ := strconv.ParseFloat(m[1], 64)
				usec, _ := strconv.ParseFloat(m[2], 64)
				b.ReportMetric(usec/calls, "server-µs/call")
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "items/s")
			})
		}
	}
}
