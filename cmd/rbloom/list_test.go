package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// filterKeys returns the keys of the partitions of the filter name, from
// info --json.
func filterKeys(t *testing.T, u, name string) []string {
	t.Helper()
	out := must(t, u, "info", name, "--json")
	var keys []string
	for _, m := range regexp.MustCompile(`"key": "([^"]+)"`).FindAllStringSubmatch(out, -1) {
		keys = append(keys, m[1])
	}
	return keys
}

func TestList(t *testing.T) {
	backends(t, func(t *testing.T, u string) {
		opt, err := redis.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		ctx := context.Background()

		// Nothing yet.
		rb(t, u, "", "list").ok(t, "")

		must(t, u, "add", "users", "--capacity", "1000", "a", "b") // leaves :op: records
		must(t, u, "create", "big", "--capacity", "1000", "--partitions", "4", "--classic")
		must(t, u, "add", "big", "x")
		// No filter may be named like a partition ("users/1").
		rb(t, u, "", "create", "users/1", "-m", "100", "-k", "3").fails(t, "ends in /<number>")
		// Keys that are not filters: a string, a rebuild's copy.
		rdb.Set(ctx, "rbloom:{str}", "not a filter", 0)
		rdb.Set(ctx, "rbloom:{users}:next", "a copy", 0)
		rdb.Set(ctx, "other", "x", 0)

		wantBig := regexp.MustCompile(`^big\tclassic\t4\t1\t[0-9]+$`)
		lines := func(r result) []string {
			t.Helper()
			if r.code != 0 || r.stderr != "" {
				t.Errorf("list: exit %d, stderr %q", r.code, r.stderr)
			}
			return strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		}
		got := lines(rb(t, u, "", "list"))
		if len(got) != 2 || !wantBig.MatchString(got[0]) ||
			!regexp.MustCompile(`^users\tcounting\t1\t2\t[0-9]+$`).MatchString(got[1]) {
			t.Errorf("list = %q, want big and users, one a line", got)
		}

		// Damaged: a partition lost (Info says so), the root partition
		// lost (Open says so, having found others).
		keys := filterKeys(t, u, "big")
		must(t, u, "create", "lost", "--capacity", "1000", "--partitions", "3")
		lost := filterKeys(t, u, "lost")
		if len(keys) != 4 || len(lost) != 3 {
			t.Fatalf("partition keys %q and %q, want 4 and 3", keys, lost)
		}
		other := keys[0]
		if other == "rbloom:{big}" {
			other = keys[1]
		}
		for _, k := range []string{other, "rbloom:{lost}"} {
			if err := rdb.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		got = lines(rb(t, u, "", "list"))
		want := []string{`^big\tdamaged\t4\t[0-9]+\t[0-9]+$`, `^lost\tdamaged\t-\t-\t-$`, `^users\t`}
		if len(got) != len(want) {
			t.Fatalf("list with damaged filters = %q, want lines matching %q", got, want)
		}
		for i := range want {
			if !regexp.MustCompile(want[i]).MatchString(got[i]) {
				t.Errorf("list line %d = %q, want it to match %q", i, got[i], want[i])
			}
		}

		// --limit bounds the keys it looks at, and it says so.
		r := rb(t, u, "", "list", "--limit", "2")
		if n := strings.Count(r.stdout, "\n"); r.code != 0 || n < 1 || n > 2 ||
			r.stderr != "rbloom: warning: list stopped after 2 keys (--limit 2): there may be more filters\n" {
			t.Errorf("list --limit 2: %+v", r)
		}
		rb(t, u, "", "list", "--limit", "0").fails(t, `list: --limit "0": want at least 1`)
		rb(t, u, "", "list", "x").fails(t, "list: want list, got 1 arguments")
	})
}

// TestListCluster lists the filters of a Redis Cluster of three masters,
// whose partitions are spread over them all.
func TestListCluster(t *testing.T) {
	t.Parallel()
	c := rbloomtest.StartCluster(t, 3)
	u := "redis://" + c.Addrs()[0]
	var want []string
	for i := range 5 {
		name := fmt.Sprint("f", i)
		must(t, u, "--cluster", "create", name, "--capacity", "1000", "--partitions", "6")
		want = append(want, name+"\tcounting\t6\t0\t")
	}
	r := rb(t, u, "", "--cluster", "list")
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || r.stderr != "" || len(got) != len(want) {
		t.Fatalf("list on a cluster: %+v, want %d filters", r, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("list on a cluster: line %d = %q, want it to start with %q", i, got[i], want[i])
		}
	}
}
