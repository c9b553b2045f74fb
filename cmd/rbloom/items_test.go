package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestItemCommands(t *testing.T) {
	backends(t, func(t *testing.T, u string) {
		must(t, u, "create", "users", "--capacity", "1000")
		for _, c := range []struct {
			stdin string
			args  []string
			code  int
			want  string
		}{
			{"", []string{"add", "users", "alice", "bob"}, 0, "new\talice\nnew\tbob\n"},
			{"", []string{"add", "users", "alice"}, 0, "maybe\talice\n"},
			{"", []string{"test", "users", "alice", "bob"}, 0, "maybe\talice\nmaybe\tbob\n"},
			{"", []string{"test", "users", "alice", "carol"}, 1, "maybe\talice\nabsent\tcarol\n"},
			{"", []string{"test", "-q", "users", "carol"}, 1, ""},
			{"", []string{"test", "users", "--quiet", "alice"}, 0, ""},
			{"", []string{"count", "users", "alice", "bob", "carol"}, 0, "2\talice\n1\tbob\n0\tcarol\n"},
			{"", []string{"remove", "users", "alice", "carol"}, 0, "removed\talice\nabsent\tcarol\n"},
			{"", []string{"count", "users", "alice"}, 0, "1\talice\n"},
			{"", []string{"add", "-q", "users", "dave"}, 0, ""},
			{"", []string{"remove", "-q", "users", "dave"}, 0, ""},

			// One item a line on stdin: "\r\n" ends a line too, empty lines
			// are skipped, and the last line needs no "\n".
			{"alice\n\nbob\r\ncarol", []string{"test", "users"}, 1, "maybe\talice\nmaybe\tbob\nabsent\tcarol\n"},
			{"erin\nfrank\n", []string{"add", "users"}, 0, "new\terin\nnew\tfrank\n"},
			{"erin\nfrank\n", []string{"count", "users"}, 0, "1\terin\n1\tfrank\n"},
			{"erin\nzed\n", []string{"remove", "users"}, 0, "removed\terin\nabsent\tzed\n"},
			{"", []string{"test", "users"}, 0, ""},
			// Arguments win over stdin.
			{"erin\n", []string{"test", "users", "frank"}, 0, "maybe\tfrank\n"},

			// Items that look like flags come after "--"; items that would
			// break the one line per item are printed quoted.
			{"", []string{"add", "users", "--", "-x", "--y"}, 0, "new\t-x\nnew\t--y\n"},
			{"", []string{"add", "users", "two\nlines", "tab\there", ""}, 0, "new\t\"two\\nlines\"\nnew\t\"tab\\there\"\nnew\t\n"},
			{"", []string{"test", "users", "--", "-x", "two\nlines"}, 0, "maybe\t-x\nmaybe\t\"two\\nlines\"\n"},
		} {
			r := rb(t, u, c.stdin, c.args...)
			if r.code != c.code || r.stdout != c.want || r.stderr != "" {
				t.Errorf("rbloom %q <<< %q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q",
					c.args, c.stdin, r.code, r.stdout, r.stderr, c.code, c.want)
			}
		}
		rb(t, u, "", "test", "users", "-x").fails(t, "test: unknown shorthand flag: 'x' in -x")
	})
}

func TestAddCreatesWithSizing(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	rb(t, u, "", "add", "f", "x").fails(t, `add f: no filter named "f": create it with 'rbloom create f --capacity N', or give --capacity N here`)
	rb(t, u, "", "add", "f", "--classic", "x").fails(t, "add f: --classic needs --capacity N, or -m M and -k K")
	rb(t, u, "", "add", "f", "--capacity", "100", "x").ok(t, "new\tx\n")
	rb(t, u, "", "add", "f", "--capacity", "100", "y").ok(t, "new\ty\n")
	rb(t, u, "", "add", "f", "z").ok(t, "new\tz\n")
	rb(t, u, "", "add", "f", "--capacity", "200", "x").fails(t,
		"add f: ", "filter parameters differ from the stored ones", "leave out the sizing flags to use the stored filter")
	rb(t, u, "", "add", "f", "--classic", "--capacity", "100", "x").fails(t, "filter parameters differ")
	rb(t, u, "", "add", "c", "--classic", "-m", "1000", "-k", "3", "x").ok(t, "new\tx\n")
	rb(t, u, "", "info", "c").ok(t, strings.Join([]string{
		"name:           c",
		"partitions:     1, key rbloom:{c}",
		"mode:           classic",
		"slots (m):      1000",
		"hashes (k):     3",
		"sized for:      unknown (sized by m and k)",
		"items:          1 (added minus removed, approximate)",
		"memory:         205 bytes (205 B)",
		"expires:        never",
		"error rate now: 2.69e-06% expected from the items, 2.7e-06% measured from the slots",
		"slots in use:   3 of 1000 non-zero (0.3%), 0 saturated at 15",
		"damaged:        false",
		"eviction:       unknown (the server does not report its maxmemory-policy)",
		"",
	}, "\n"))
}

func TestCountingOnly(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	must(t, u, "create", "c", "--classic", "--capacity", "100")
	must(t, u, "add", "c", "x")
	rb(t, u, "", "remove", "c", "x").fails(t, "remove c: c is a classic filter, which cannot remove items: only counting and cuckoo filters can")
	rb(t, u, "", "count", "c", "x").fails(t, "count c: c is a classic filter, which cannot count items")
	rb(t, u, "x\n", "unload", "c").fails(t, "unload c: c is a classic filter, which cannot remove items")
	rb(t, u, "", "test", "c", "x").ok(t, "maybe\tx\n")
}

func TestMissingOrForeignFilter(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	for _, args := range [][]string{
		{"test", "nope", "x"}, {"remove", "nope", "x"}, {"count", "nope", "x"},
		{"info", "nope"}, {"unload", "nope"},
	} {
		rb(t, u, "x\n", args...).fails(t, args[0]+` nope: no filter named "nope" (create it with: rbloom create nope --capacity N)`)
	}

	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "rbloom:{str}", "not a filter", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"test", "str", "x"}, {"add", "str", "x"}, {"info", "str"}, {"drop", "str"}, {"load", "str"},
	} {
		rb(t, u, "x\n", args...).fails(t, args[0]+" str: ", "key does not hold an rbloom filter")
	}
	rb(t, u, "", "add", "str", "--capacity", "10", "x").fails(t, "add str: ", "key does not hold an rbloom filter")
	if v, err := rdb.Get(ctx, "rbloom:{str}").Result(); err != nil || v != "not a filter" {
		t.Errorf("after the failed commands, the key holds %q, %v; want it untouched", v, err)
	}
	rb(t, u, "", "test", "bad{name", "x").fails(t, "test bad{name: ", "invalid options: name")
}

// TestWindowCommand test-or-adds items in a window that --create made,
// refuses one that does not exist, and lists its generations.
func TestWindowCommand(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	flags := []string{"--events", "1e3", "--bucket", "1h", "--span", "24h"}
	rb(t, u, "", append([]string{"window", "w"}, append(flags, "a")...)...).fails(t, "no window", "Create makes it, empty (here: --create)")
	rb(t, u, "", append([]string{"window", "w", "--create"}, append(flags, "a", "b", "a")...)...).ok(t, "new\ta\nnew\tb\nseen\ta\n")
	rb(t, u, "b\nc\n", append([]string{"window", "w"}, flags...)...).ok(t, "seen\tb\nnew\tc\n")
	r := rb(t, u, "", append([]string{"window", "w", "--info"}, flags...)...)
	if r.code != 0 || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:00:00Z\t3\t\d+\t(24h\d+m\d+s|25h0m0s)\n$`).MatchString(r.stdout) {
		t.Errorf("window --info: %+v, want one generation of 3 items, left in the span for 24 to 25 hours (the span and the rest of its bucket)", r)
	}
	rb(t, u, "", "window", "w", "a").fails(t, "give --events N, --bucket D and --span D")
}
