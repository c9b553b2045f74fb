package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomtest"
)

func TestCreate(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	for _, c := range []struct {
		args []string
		want string // stdout, or the error when it starts with "rbloom: "
	}{
		{[]string{"create", "f", "--capacity", "1000"}, "created f: counting, m=9586 k=7, for 1000 items at error rate 1%, 4.8 KiB in Redis\n"},
		{[]string{"create", "f", "--capacity", "1000", "--error-rate", "0.01"}, "f exists already: counting, m=9586 k=7, for 1000 items at error rate 1%, 4.8 KiB in Redis\n"},
		{[]string{"create", "f", "--capacity", "2000"}, "rbloom: filter parameters differ from the stored ones"},
		{[]string{"create", "f", "--classic", "--capacity", "1000"}, "rbloom: filter parameters differ from the stored ones"},
		{[]string{"create", "g", "--capacity", "1_000_000", "--error-rate", "0.001", "--classic"}, "created g: classic, m=14377588 k=10, for 1000000 items at error rate 0.1%, 1.7 MiB in Redis\n"},
		{[]string{"create", "h", "-m", "1000", "-k", "3"}, "created h: counting, m=1000 k=3, 580 B in Redis\n"},
		{[]string{"create", "i", "--slots=1000", "--hashes=3", "--capacity=100"}, "created i: counting, m=1000 k=3, for 100 items at error rate 1.74%, 580 B in Redis\n"},
		{[]string{"create", "j", "--capacity", "100", "--ttl", "1h"}, "created j: counting, m=959 k=7, for 100 items at error rate 1%, 560 B in Redis, expires in 1h0m0s\n"},
		{[]string{"create", "k"}, "rbloom: create k: give --capacity N (and --error-rate P), or -m M and -k K"},
		{[]string{"create", "k", "--ttl", "1h"}, "rbloom: create k: --ttl needs --capacity N, or -m M and -k K"},
		{[]string{"create", "k", "-m", "1000"}, "rbloom: create k: -m and -k go together, unless --capacity is given to derive the other"},
		{[]string{"create", "k", "--capacity", "100", "--error-rate", "1.5"}, `rbloom: create: --error-rate "1.5": want a rate above 0 and below 1 such as 0.01, 1% or 1e-3`},
		{[]string{"create", "k", "--capacity", "100", "--ttl", "-1s"}, "rbloom: create k: new counting: invalid options: TTL = -1s"},
		{[]string{"create", "k", "--capacity", "1e12"}, "rbloom: create k: new counting: invalid options: Capacity: "},
		{[]string{"create", "k", "--capacity", "1_000_000_000_000"}, "rbloom: create k: new counting: invalid options: Capacity: "},
		{[]string{"create", "k", "--capacity", "100", "--partitions", "2000"}, "rbloom: create k: new counting: invalid options: Partitions = 2000"},
		{[]string{"create", "k", "--partitions", "2"}, "rbloom: create k: --partitions needs --capacity N, or -m M and -k K"},
		{[]string{"create", "p", "--capacity", "1000", "--partitions", "3"}, "created p: counting, m=9588 k=7 in 3 partitions, for 1000 items at error rate 1%, 4.9 KiB in Redis\n"},
	} {
		r := rb(t, u, "", c.args...)
		if want, ok := strings.CutPrefix(c.want, "rbloom: "); ok {
			r.fails(t, want)
		} else {
			r.ok(t, c.want)
		}
	}
}

func TestInfo(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	must(t, u, "create", "f", "--capacity", "1000", "--error-rate", "0.001")
	must(t, u, "add", "f", "a", "b", "c", "d")
	must(t, u, "remove", "f", "d")
	rb(t, u, "", "info", "f").ok(t, strings.Join([]string{
		"name:           f",
		"partitions:     1, key rbloom:{f}",
		"mode:           counting",
		"slots (m):      14378",
		"hashes (k):     10",
		"sized for:      1000 items at error rate 0.1%",
		"items:          3 (added minus removed, approximate)",
		"memory:         7269 bytes (7.1 KiB)",
		"expires:        never",
		"error rate now: 1.55e-25% expected from the items, 1.56e-25% measured from the slots",
		"slots in use:   30 of 14378 non-zero (0.209%), 0 saturated at 15",
		"damaged:        false",
		"eviction:       unknown (the server does not report its maxmemory-policy)",
		"",
	}, "\n"))

	r := rb(t, u, "", "info", "--json", "f")
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 || r.stderr != "" {
		t.Fatalf("info --json: exit %d, stdout %q, stderr %q: %v", r.code, r.stdout, r.stderr, err)
	}
	want := map[string]any{
		"name": "f", "mode": "counting",
		"slots": 14378.0, "hashes": 10.0, "capacity": 1000.0, "error_rate": 0.001,
		"items": 3.0, "bytes": 7269.0, "ttl_seconds": 0.0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("info --json: %s = %v, want %v", k, got[k], v)
		}
	}
	if fp, ok := got["false_positive_rate"].(float64); !ok || fp <= 0 || fp > 1e-20 {
		t.Errorf("info --json: false_positive_rate = %v, want a tiny positive rate", got["false_positive_rate"])
	}
	parts, ok := got["partitions"].([]any)
	if !ok || len(parts) != 1 {
		t.Fatalf("info --json: partitions = %v, want one", got["partitions"])
	}
	if p, ok := parts[0].(map[string]any); !ok || p["key"] != "rbloom:{f}" || p["exists"] != true || p["items"] != 3.0 || p["bytes"] != 7269.0 || p["ttl_seconds"] != 0.0 {
		t.Errorf("info --json: partitions[0] = %v", parts[0])
	}
	health := []string{"false_positive_rate", "measured_false_positive_rate", "fill", "non_zero_slots",
		"saturated_counters", "damaged", "loading", "rebuilding", "overfull", "eviction_policy", "evicts", "partitions"}
	if len(got) != len(want)+len(health) {
		t.Errorf("info --json has keys %v, want those of %v and %v", got, want, health)
	}

	// Partitions.
	must(t, u, "create", "p", "--capacity", "1000", "--partitions", "3")
	if r := rb(t, u, "", "info", "p"); !regexp.MustCompile(`\npartitions:     3, keys rbloom:\{p\S*\} and 2 more \(info --json lists them\)\n`).MatchString(r.stdout) {
		t.Errorf("info of a filter in 3 partitions: %+v", r)
	}
	if err := json.Unmarshal([]byte(rb(t, u, "", "info", "p", "--json").stdout), &got); err != nil || len(got["partitions"].([]any)) != 3 {
		t.Errorf("info --json of a filter in 3 partitions: %v, %v", got, err)
	}

	// A TTL shows in both forms.
	must(t, u, "create", "t", "--capacity", "10", "--ttl", "90m", "--classic")
	if r := rb(t, u, "", "info", "t"); !strings.Contains(r.stdout, "\nexpires:        in 1h30m0s\n") || !strings.Contains(r.stdout, "\nmode:           classic\n") {
		t.Errorf("info of a classic filter with a TTL: %+v", r)
	}
	if err := json.Unmarshal([]byte(rb(t, u, "", "info", "t", "--json").stdout), &got); err != nil || got["ttl_seconds"] != 5400.0 || got["mode"] != "classic" {
		t.Errorf("info --json of a classic filter with a TTL: %v, %v", got, err)
	}
}

func TestDrop(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	must(t, u, "add", "f", "--capacity", "10", "x")
	rb(t, u, "", "drop", "f").ok(t, "dropped f\n")
	rb(t, u, "", "test", "f", "x").fails(t, `test f: no filter named "f"`)
	// Dropping what is not there is done already, as with DEL.
	rb(t, u, "", "drop", "f").ok(t, "no filter named f (nothing to drop)\n")
	// Once dropped, the name is free for other parameters.
	must(t, u, "create", "f", "--capacity", "20", "--classic")
}

// TestInfoCuckoo: info on a cuckoo filter (made with the library: the
// command cannot create one) shows its fingerprints and load, and warns
// when it is near its planned load.
func TestInfoCuckoo(t *testing.T) {
	t.Parallel()
	addr := rbloomtest.NewMiniredis(t).Addr()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	c, err := rbloom.NewCuckoo(rdb, "ck", rbloom.Options{Slots: 10, Hashes: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddMany(ctx, []string{"a", "b", "c", "d", "e", "f", "g", "h"}); err != nil {
		t.Fatal(err)
	}
	r := rb(t, "redis://"+addr, "", "info", "ck")
	for _, want := range []string{"mode:           cuckoo\n", "slots in use:   8 fingerprints in 10 buckets of 4 (20%), 8-bit fingerprints\n", "load:           0.200 of the slots"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("info: no %q in\n%s", want, r.stdout)
		}
	}
	if r.stderr != "" {
		t.Errorf("info at load 0.2 warns: %s", r.stderr)
	}
	var more []string
	for i := range 23 {
		more = append(more, fmt.Sprint("more-", i))
	}
	if _, err := c.AddMany(ctx, more); err != nil {
		t.Fatal(err)
	}
	if r := rb(t, "redis://"+addr, "", "info", "ck"); !strings.Contains(r.stderr, "warning: cuckoo filter ck is at load 0.775") {
		t.Errorf("info at load 0.775: stderr %q, want a warning", r.stderr)
	}
}

// TestCuckooCommands: create --cuckoo makes a cuckoo filter, and add,
// test, remove, count and info work on it; --classic with --cuckoo is
// refused.
func TestCuckooCommands(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	rb(t, u, "", "create", "ck", "--cuckoo", "--capacity", "1000").ok(t, "created ck: cuckoo, m=313 k=10, for 1000 items at error rate 1%, 1.6 KiB in Redis\n")
	rb(t, u, "", "create", "x", "--cuckoo", "--classic", "--capacity", "1000").fails(t, "--classic and --cuckoo")
	must(t, u, "add", "ck", "a", "b", "b")
	if out := must(t, u, "count", "ck", "a", "b", "c"); out != "1\ta\n2\tb\n0\tc\n" {
		t.Errorf("count = %q", out)
	}
	must(t, u, "remove", "ck", "b")
	if out := must(t, u, "count", "ck", "b"); out != "1\tb\n" {
		t.Errorf("count after a remove = %q", out)
	}
	if out := must(t, u, "info", "ck"); !strings.Contains(out, "mode:           cuckoo\n") || !strings.Contains(out, "2 fingerprints in 313 buckets") {
		t.Errorf("info = %q", out)
	}
}

// TestCuckooRebuildCommand: a full cuckoo filter is resized by 'rbloom
// rebuild --capacity', as 'rbloom info' advises.
func TestCuckooRebuildCommand(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	must(t, u, "create", "ck", "--cuckoo", "-m", "4", "-k", "8")
	var items []string
	for i := range 12 {
		items = append(items, fmt.Sprint("item-", i))
	}
	must(t, u, append([]string{"add", "ck"}, items...)...)
	rb(t, u, "", "add", "ck", "one-more").fails(t, "filter full")
	if r := rb(t, u, strings.Join(items, "\n")+"\n", "rebuild", "ck", "--capacity", "100"); r.code != 0 || !strings.HasPrefix(r.stdout, "resized ck from 12 items") {
		t.Errorf("rebuild --capacity: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	must(t, u, "add", "ck", "one-more")
	if out := must(t, u, "info", "ck"); !strings.Contains(out, "13 fingerprints in 32 buckets") {
		t.Errorf("info after the resize = %q", out)
	}
	rb(t, u, "", "rebuild", "ck", "--cuckoo").fails(t, "--cuckoo: a rebuild keeps the filter's mode and TTL")
}
