package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

func TestFunctionsCommand(t *testing.T) {
	t.Parallel()
	addr := rbloomtest.StartRedis(t)
	u, lib := "redis://"+addr, rbloom.FunctionLibrary()
	rb(t, u, "", "functions", "status").want(t, 1, addr+"\tmissing\t"+lib+"\t-\n")
	rb(t, u, "", "functions", "install").ok(t, "installed "+lib+" on "+addr+"\n")
	rb(t, u, "", "functions", "status").ok(t, addr+"\tloaded\t"+lib+"\t-\n")
	rb(t, u, "", "functions", "install").ok(t, "installed "+lib+" on "+addr+"\n")

	// The library works: a filter with UseFunctions writes.
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := rbloom.NewCounting(rdb, "f", rbloom.Options{Capacity: 100, UseFunctions: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(context.Background(), "a"); err != nil {
		t.Errorf("Add with UseFunctions after 'functions install': %v", err)
	}
	rb(t, u, "", "test", "f", "a").ok(t, "maybe\ta\n")

	// Another version's library is listed, not touched.
	other := strings.NewReplacer(lib, "rbloom_0123abcd").Replace(libraryCode(t, rdb))
	if err := rdb.FunctionLoad(context.Background(), other).Err(); err != nil {
		t.Fatal(err)
	}
	rb(t, u, "", "functions", "status").ok(t, addr+"\tloaded\t"+lib+"\trbloom_0123abcd\n")

	rb(t, u, "", "functions").fails(t, "functions: want functions install|status, got 0 arguments")
	rb(t, u, "", "functions", "load").fails(t, "functions load: want install or status")
	// Without a URL, after connect's warning about the in-memory Redis.
	if r := rb(t, "", "", "functions", "install"); r.code != exitError || !strings.HasSuffix(r.stderr, "\nrbloom: functions install: needs a Redis 7 server: give -u or set REDIS_URL\n") {
		t.Errorf("functions install without a URL: %+v", r)
	}
	// A user without FUNCTION LOAD: the refusal, in one line.
	for _, cmd := range [][]any{
		{"ACL", "SETUSER", "app", "on", ">pw", "~rbloom:*", "+@all", "-function"},
	} {
		if err := rdb.Do(context.Background(), cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rb(t, "redis://app:pw@"+addr, "", "functions", "install").fails(t, "functions install: install functions: "+lib+": "+addr+": NOPERM")
}

// libraryCode returns the code of this version's library, as loaded.
func libraryCode(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	libs, err := rdb.FunctionList(context.Background(), redis.FunctionListQuery{LibraryNamePattern: rbloom.FunctionLibrary(), WithCode: true}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("FUNCTION LIST: %v, %v", libs, err)
	}
	return libs[0].Code
}

// TestFunctionsCommandCluster installs the library on every master of a
// cluster with --cluster.
func TestFunctionsCommandCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := rbloomtest.StartCluster(t, 3)
	u, lib := "redis://"+cl.Addrs()[0], rbloom.FunctionLibrary()
	if r := rb(t, u, "", "--cluster", "functions", "status"); r.code != 1 || strings.Count(r.stdout, "\tmissing\t"+lib+"\t-\n") != 3 {
		t.Errorf("status before the install: %+v, want 3 servers missing", r)
	}
	out := must(t, u, "--cluster", "functions", "install")
	for _, addr := range cl.Addrs() {
		if !strings.Contains(out, fmt.Sprintf("installed %s on %s\n", lib, addr)) {
			t.Errorf("install printed %q, want a line for %s", out, addr)
		}
	}
	if out := must(t, u, "--cluster", "functions", "status"); strings.Count(out, "\tloaded\t"+lib+"\t-\n") != 3 {
		t.Errorf("status after the install: %q, want 3 servers loaded", out)
	}
}
