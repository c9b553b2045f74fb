package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

func TestMain(m *testing.M) {
	// As main does: go-redis would log every failed dial of the error tests.
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

// result is what one run of rbloom gave.
type result struct {
	code           int
	stdout, stderr string
}

// runOpts are what a test gives rbloom besides its arguments.
type runOpts struct {
	redisURL string    // $REDIS_URL
	stdin    io.Reader // default: empty
	terminal bool      // whether stderr is a terminal
}

// rb runs rbloom in process with $REDIS_URL set to redisURL and
// stdin holding in.
func rb(t *testing.T, redisURL, in string, args ...string) result {
	t.Helper()
	return rbloomWith(t, runOpts{redisURL: redisURL, stdin: strings.NewReader(in)}, args...)
}

func rbloomWith(t *testing.T, o runOpts, args ...string) result {
	t.Helper()
	if o.stdin == nil {
		o.stdin = strings.NewReader("")
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, args, &sys{
		stdin:  o.stdin,
		stdout: &stdout, stderr: &stderr,
		getenv: func(name string) string {
			if name == "REDIS_URL" {
				return o.redisURL
			}
			return ""
		},
		isTerminal: func(io.Writer) bool { return o.terminal },
	})
	return result{code, stdout.String(), stderr.String()}
}

// must runs rbloom with no input, fails the test unless it exits 0 with
// nothing on stderr, and returns its output.
func must(t *testing.T, redisURL string, args ...string) string {
	t.Helper()
	r := rb(t, redisURL, "", args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("rbloom %q: exit %d, stderr %q", args, r.code, r.stderr)
	}
	return r.stdout
}

// ok checks that r succeeded with exactly stdout and nothing on stderr.
func (r result) ok(t *testing.T, stdout string) {
	t.Helper()
	r.want(t, 0, stdout)
}

// want checks the exit status and stdout of a run that wrote no error.
func (r result) want(t *testing.T, code int, stdout string) {
	t.Helper()
	if r.code != code || r.stdout != stdout || r.stderr != "" {
		t.Errorf("got exit %d, stdout %q, stderr %q; want exit %d, stdout %q, no stderr", r.code, r.stdout, r.stderr, code, stdout)
	}
}

// fails checks that r failed with exit status 2, nothing on stdout, and one
// line on stderr that starts with "rbloom: " and holds every part.
func (r result) fails(t *testing.T, parts ...string) {
	t.Helper()
	if r.code != exitError || r.stdout != "" {
		t.Errorf("got exit %d, stdout %q; want exit 2, no stdout", r.code, r.stdout)
	}
	line, ok := strings.CutSuffix(r.stderr, "\n")
	if !ok || strings.Contains(line, "\n") || !strings.HasPrefix(line, "rbloom: ") || strings.HasPrefix(line, "rbloom: rbloom:") {
		t.Errorf("stderr = %q, want one line starting with \"rbloom: \"", r.stderr)
	}
	for _, p := range parts {
		if !strings.Contains(line, p) {
			t.Errorf("stderr = %q, want it to contain %q", r.stderr, p)
		}
	}
}

// miniURL starts a miniredis for the test and returns its URL.
func miniURL(t *testing.T) string {
	return "redis://" + rbloomtest.NewMiniredis(t).Addr()
}

// backends runs fn against miniredis and against a real redis-server.
func backends(t *testing.T, fn func(t *testing.T, redisURL string)) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		fn(t, miniURL(t))
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		fn(t, "redis://"+rbloomtest.StartRedis(t))
	})
}

// fastFail, in a URL, makes go-redis give up on a server that does not
// answer after its dial retries (0.5 s), without retrying the command too
// (1.7 s in all).
const fastFail = "?max_retries=-1"

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}, {"-u", "redis://x", "help"}} {
		rb(t, "", "", args...).ok(t, usage)
	}
	addHelp := rb(t, "", "", "help", "add")
	for _, want := range []string{"usage: rbloom [-u URL] [--cluster] add [FLAGS] NAME [ITEM...]\n", "--capacity N", "-q, --quiet"} {
		if addHelp.code != 0 || !strings.Contains(addHelp.stdout, want) {
			t.Errorf("help add: exit %d, stdout %q; want it to contain %q", addHelp.code, addHelp.stdout, want)
		}
	}
	rb(t, "", "", "add", "-h").ok(t, addHelp.stdout)
	rb(t, "", "", "-h", "add").ok(t, addHelp.stdout)
	rb(t, "", "", "add", "NAME", "--help").ok(t, addHelp.stdout)
	if r := rb(t, "", "", "help", "demo"); r.code != 0 || !strings.HasPrefix(r.stdout, "usage: rbloom [-u URL] [--cluster] demo") {
		t.Errorf("help demo: exit %d, stdout %q", r.code, r.stdout)
	}
	rb(t, "", "", "help", "frob").fails(t, `unknown command "frob"`)

	// The usage and the package comment list every command.
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "package main")
	for _, c := range append(commands, command{name: "demo"}, command{name: "help"}) {
		if !strings.Contains(usage, "\n  "+c.name+" ") {
			t.Errorf("usage does not list %s", c.name)
		}
		if !strings.Contains(doc, "\n//\t"+c.name+" ") {
			t.Errorf("the package comment does not list %s", c.name)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no command given"},
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"--frob", "test"}, "unknown flag: --frob"},
		{[]string{"test", "--frob"}, "test: unknown flag: --frob"},
		{[]string{"test"}, "test: want test NAME [ITEM...], got 0 arguments"},
		{[]string{"info", "a", "b"}, "info: want info NAME, got 2 arguments"},
		{[]string{"load", "a", "b", "c"}, "load: want load NAME [FILE], got 3 arguments"},
		{[]string{"create", "f", "--capacity", "many"}, `create: --capacity "many": want a whole number such as 1000000, 1_000_000 or 1e6`},
		{[]string{"create", "f", "--ttl", "1y", "--capacity", "1"}, `create: --ttl "1y": time: unknown unit "y" in duration "1y" (run 'rbloom help create')`},
		{[]string{"create", "f", "--classic=maybe", "--capacity", "1"}, `create: --classic "maybe": `},
		{[]string{"-u"}, "flag needs an argument"},
	} {
		rb(t, u, "", c.args...).fails(t, c.want)
	}
}

func TestConnection(t *testing.T) {
	t.Parallel()
	good := miniURL(t)
	bad := "redis://" + rbloomtest.ClosedAddr(t) + fastFail
	must(t, good, "create", "f", "--capacity", "100")
	for _, o := range []struct {
		env  string
		args []string
	}{
		{good, []string{"test", "f", "x"}},
		{"", []string{"-u", good, "test", "f", "x"}},
		{"", []string{"test", "f", "x", "-u", good}},
		{"", []string{"test", "--url=" + good, "f", "x"}},
		{bad, []string{"-u", good, "test", "f", "x"}}, // -u wins over REDIS_URL
	} {
		rb(t, o.env, "", o.args...).want(t, 1, "absent\tx\n")
	}
	rb(t, bad, "", "test", "f", "x").fails(t, "connect to Redis at 127.0.0.1:", "connection refused")
	rb(t, "", "", "--cluster", "test", "f", "x").fails(t, "--cluster needs a URL")

	// Without a URL: an in-memory Redis, and a word on stderr but for demo.
	r := rb(t, "", "", "add", "f", "--capacity", "100", "x")
	if r.code != 0 || r.stdout != "new\tx\n" ||
		r.stderr != "rbloom: no -u or REDIS_URL: using an empty in-memory Redis that is gone when rbloom exits (only useful for demo)\n" {
		t.Errorf("add without a URL: %+v", r)
	}
	// create refuses: its filter would be gone as soon as it is made.
	rb(t, "", "", "create", "f", "--capacity", "100").fails(t,
		"create: no -u or REDIS_URL: it would be made in an in-memory Redis and vanish when rbloom exits",
		"point rbloom at a real Redis with -u redis://host:port or REDIS_URL")
	rb(t, "", "", "window", "w", "--create", "--events", "10", "--bucket", "1h", "--span", "1h", "x").fails(t,
		"window --create: no -u or REDIS_URL: it would be made in an in-memory Redis")
	rb(t, good, "", "create", "f", "--capacity", "100").ok(t, "f exists already: counting, m=959 k=7, for 100 items at error rate 1%, 560 B in Redis\n")
	r = rb(t, "", "", "demo", "-n", "500")
	if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "rbloom demo on in-memory Redis (set REDIS_URL to use a real one): 500 items") {
		t.Errorf("demo without a URL: %+v", r)
	}
}

// TestErrorsHidePasswords gives rbloom URLs with passwords that fail in
// every way a URL can, through -u and through REDIS_URL, and checks that
// the error is one line without the password.
func TestErrorsHidePasswords(t *testing.T) {
	t.Parallel()
	m := rbloomtest.NewMiniredis(t)
	m.RequireAuth("right-password")
	closed := rbloomtest.ClosedAddr(t)
	const secret = "s3cr/t:p@ss"
	esc := url.QueryEscape(secret) // s3cr%2Ft%3Ap%40ss
	for _, c := range []struct {
		url, want string
	}{
		{"redis://user:" + esc + "@" + closed + "/0" + fastFail, "connection refused"},
		{"redis://:" + esc + "@" + m.Addr(), "WRONGPASS"},
		{"redis://user:" + esc + "@" + m.Addr() + "/x", "invalid database number"},
		{"http://user:" + esc + "@" + m.Addr(), "invalid URL scheme"},
		{"redis://user:" + esc + "@127.0.0.1:port/0", "not a valid URL"},
		// Unescaped, the password breaks the URL: url.Parse then quotes
		// it whole in its error.
		{"redis://user:" + secret + "@" + m.Addr(), "not a valid URL"},
		{"redis://user:" + secret + " @" + m.Addr(), "not a valid URL"},
	} {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			for i, r := range []result{
				rb(t, "", "", "-u", c.url, "test", "f", "x"),
				rb(t, c.url, "", "test", "f", "x"),
				rb(t, "", "", "--cluster", "-u", c.url, "test", "f", "x"),
			} {
				if i < 2 {
					r.fails(t, c.want)
				} else {
					r.fails(t) // a cluster URL has no database to be wrong
				}
				for _, s := range []string{secret, esc, "s3cr", "p%40ss"} {
					if strings.Contains(r.stderr+r.stdout, s) {
						t.Errorf("URL %q: output %q shows the password (%q)", c.url, r.stderr, s)
					}
				}
			}
		})
	}
	// And the right password works.
	rb(t, "redis://:right-password@"+m.Addr(), "", "test", "f", "x").fails(t, `no filter named "f"`)
}

func TestDemo(t *testing.T) {
	backends(t, func(t *testing.T, u string) {
		r := rb(t, u, "", "demo", "-n", "1000", "-p", "0.01")
		addr := strings.TrimPrefix(u, "redis://")
		for _, want := range []string{
			"rbloom demo on Redis at " + addr + ": 1000 items, target false-positive rate 0.01\n",
			"\ncounting filter (m=9586, k=7, ",
			"\nclassic filter (m=9586, k=7, ",
			"  false negatives:    0 of 500 kept items (must be 0)\n",
			"  deleted still seen: 500 of 500 (100.00%)\n",
		} {
			if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, want) {
				t.Errorf("demo: exit %d, stderr %q, stdout %q; want it to contain %q", r.code, r.stderr, r.stdout, want)
			}
		}
		rb(t, u, "", "demo", "-n", "1").fails(t, "demo: -n 1: want at least 2 items")
		rb(t, u, "", "demo", "-x").fails(t, "demo: flag provided but not defined: -x")
	})
}

// TestCluster runs rbloom with --cluster on a one-node Redis Cluster.
func TestCluster(t *testing.T) {
	t.Parallel()
	addr := rbloomtest.StartRedis(t, "--cluster-enabled", "yes")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.ClusterAddSlotsRange(ctx, 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ok after 10s: %q, %v", info, err)
		}
	}

	u := "redis://" + addr
	if r := rb(t, "", "", "--cluster", "-u", u, "create", "f", "--capacity", "1000"); r.code != 0 ||
		!strings.HasPrefix(r.stdout, "created f: counting, m=9586 k=7, for 1000 items at error rate 1%, ") {
		t.Errorf("create on a cluster: %+v", r)
	}
	rb(t, u, "", "--cluster", "add", "f", "a", "b").ok(t, "new\ta\nnew\tb\n")
	rb(t, u, "", "test", "f", "a", "c", "--cluster").want(t, 1, "maybe\ta\nabsent\tc\n")
	rb(t, u, "a\nb\n", "unload", "f", "--cluster").summary(t, `unloaded 2 items from f `+took+`; 2 removed, 0 definitely absent`)
	// demo parses its own flags: global flags go before it.
	rb(t, u, "", "demo", "--cluster").fails(t, "demo: flag provided but not defined: -cluster")
	r := rb(t, u, "", "--cluster", "demo", "-n", "200")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "rbloom demo on Redis Cluster at "+addr+": 200 items") {
		t.Errorf("demo on a cluster: %+v", r)
	}
}

// TestErrorLine checks that every error is printed as one line, whatever
// lines its text has.
func TestErrorLine(t *testing.T) {
	t.Parallel()
	c := &cli{sys: &sys{getenv: func(string) string { return "" }}}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("plain"), "rbloom: plain"},
		{errors.New("rbloom: from the library"), "rbloom: from the library"},
		{fmt.Errorf("load f: %w", errors.New("rbloom: filter damaged")), "rbloom: load f: filter damaged"},
		{errors.Join(errors.New("first"), errors.New("second")), "rbloom: first; second"},
		{errors.Join(errors.New("rbloom: first"), errors.New("rbloom: second")), "rbloom: first; second"},
		{fmt.Errorf("drop f: %w", errors.Join(errors.New("a"), nil, errors.New("b\nc"))), "rbloom: drop f: a; b; c"},
		{errors.New("heading:\n  detail one\n  detail two\n"), "rbloom: heading: detail one; detail two"},
		{errors.New("windows\r\nlines\r\n\r\n"), "rbloom: windows; lines"},
		{errors.New("a tab\there, a bell\a"), "rbloom: a tab here, a bell "},
	} {
		if got := c.errorLine(tc.err); got != tc.want {
			t.Errorf("errorLine(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}

	// End to end: a name with a line break, quoted in the error's prefix.
	rb(t, miniURL(t), "", "test", "two\nlines", "x").fails(t, `test "two\nlines": `, "invalid options: name")
}
