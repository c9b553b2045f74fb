package main

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// The CLI builds its TLS configuration from a rediss:// URL with
// redis.ParseURL, which verifies the server against the system's roots.
// Go reads those once per process, from SSL_CERT_FILE or SSL_CERT_DIR when
// set (on Linux), else from /etc/ssl. So trusting a private CA takes
// SSL_CERT_FILE in rbloom's environment. It cannot be shown in this test
// process, whose roots may already be loaded: TestTLSURL runs rbloom as a
// child process, this test binary again, with these variables set.
const (
	childEnv  = "RBLOOM_TEST_CHILD" // set: this process is rbloom, not the tests
	childArgs = "RBLOOM_TEST_ARGS"  // rbloom's arguments, separated by \x1f
)

// TestRbloomChild is rbloom itself when childEnv is set (see TestTLSURL),
// with the real environment; otherwise it does nothing.
func TestRbloomChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		return
	}
	args := strings.Split(os.Getenv(childArgs), "\x1f")
	os.Exit(run(context.Background(), args, &sys{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		getenv: os.Getenv, isTerminal: func(io.Writer) bool { return false },
	}))
}

// child runs rbloom in a new process with env added to a minimal
// environment, and returns what it gave.
func child(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRbloomChild$")
	cmd.Env = append([]string{childEnv + "=1", childArgs + "=" + strings.Join(args, "\x1f"),
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("rbloom %q: %v", args, err)
	}
	return result{code, stdout.String(), stderr.String()}
}

// TestTLSURL runs rbloom against a Redis that speaks TLS only, with
// REDIS_URL=rediss://127.0.0.1:PORT: trusting the server's private CA
// through SSL_CERT_FILE, refusing the server without it, and (insecurely)
// accepting it with ?skip_verify=true.
func TestTLSURL(t *testing.T) {
	s := rbloomtest.StartTLSRedis(t, "--requirepass", "tls-pw")
	u := "rediss://:tls-pw@" + s.Addr
	trusted := []string{"SSL_CERT_FILE=" + s.CAFile, "REDIS_URL=" + u}
	steps := []struct {
		args []string
		code int
		out  string // a regexp stdout must match
	}{
		{[]string{"create", "f", "--capacity", "1000", "--partitions", "3"}, 0, `^created f: counting, m=9588 k=7 in 3 partitions, for 1000 items at error rate 1%, `},
		{[]string{"add", "f", "a", "b"}, 0, "^new\ta\nnew\tb\n$"},
		{[]string{"test", "f", "a", "c"}, 1, "^maybe\ta\nabsent\tc\n$"},
		{[]string{"count", "f", "a"}, 0, "^1\ta\n$"},
		{[]string{"remove", "f", "a"}, 0, "^removed\ta\n$"},
		{[]string{"info", "f"}, 0, `(?m)^items:\s+1 \(`},
		{[]string{"drop", "f"}, 0, ""},
	}
	for _, st := range steps {
		r := child(t, trusted, st.args...)
		if r.code != st.code || r.stderr != "" || !regexp.MustCompile(st.out).MatchString(r.stdout) {
			t.Errorf("rbloom %q over TLS: exit %d, stdout %q, stderr %q; want exit %d, stdout matching %q",
				st.args, r.code, r.stdout, r.stderr, st.code, st.out)
		}
	}

	// Without the CA: the system's roots do not know it.
	r := child(t, []string{"REDIS_URL=" + u}, "test", "f", "a")
	r.fails(t, "connect to Redis at "+s.Addr, "certificate signed by unknown authority")
	// And in this process too, through the usual helper.
	rb(t, u+fastFail, "", "test", "f", "a").fails(t, "certificate signed by unknown authority")
	// skip_verify turns verification off: it works, and trusts anyone.
	rb(t, u+"?skip_verify=true", "", "test", "f", "a").fails(t, `no filter named "f"`)
	// A plain redis:// URL to the TLS port fails rather than hangs.
	rb(t, "redis://:tls-pw@"+s.Addr+"?max_retries=-1&read_timeout=2s", "", "test", "f", "a").fails(t, "connect to Redis at "+s.Addr)
	if strings.Contains(r.stderr, "tls-pw") {
		t.Errorf("the password shows: %q", r.stderr)
	}
}

// cliACL is the rule for an rbloom application user that also runs the
// CLI: the library's commands (see the package's TestLeastPrivilegeACL),
// PING, which the CLI sends once to check the connection, and SCAN, which
// list sends.
var cliACL = []any{"ACL", "SETUSER", "app", "reset", "on", ">app-pw", "~rbloom:*", "resetchannels", "-@all",
	"+evalsha", "+eval", "+hget", "+hset", "+bitfield", "+setrange", "+pexpire",
	"+getrange", "+strlen", "+exists", "+bitfield_ro", "+pttl", "+memory|usage", "+bitcount", "+del", "+rename", "+get", "+set", "+persist", "+info", "+multi", "+exec", "+ping", "+scan"}

// TestLeastPrivilegeUser runs every command of rbloom as a Redis user that
// may run only cliACL on keys under rbloom:*.
func TestLeastPrivilegeUser(t *testing.T) {
	t.Parallel()
	addr := rbloomtest.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Do(ctx, cliACL...).Err(); err != nil {
		t.Fatal(err)
	}
	u := "redis://app:app-pw@" + addr
	if r := rb(t, u, "", "create", "f", "--capacity", "1000", "--partitions", "3", "--ttl", "1h"); r.code != 0 || r.stderr != "" {
		t.Fatalf("create as app: %+v", r)
	}
	rb(t, u, "a\nb\nc\n", "load", "f").summary(t, `loaded 3 items into f `+took+`; 0 may have been present already`)
	rb(t, u, "", "add", "f", "d").ok(t, "new\td\n")
	rb(t, u, "", "test", "f", "a", "d", "zz").want(t, 1, "maybe\ta\nmaybe\td\nabsent\tzz\n")
	rb(t, u, "", "count", "f", "a").ok(t, "1\ta\n")
	rb(t, u, "", "remove", "f", "a", "zz").ok(t, "removed\ta\nabsent\tzz\n")
	rb(t, u, "b\n", "unload", "f").summary(t, `unloaded 1 items from f `+took+`; 1 removed, 0 definitely absent`)
	if r := rb(t, u, "c\nd\n", "rebuild", "f"); r.code != 0 || r.stderr != "" {
		t.Errorf("rebuild as app: %+v", r)
	}
	if r := rb(t, u, "", "info", "f", "--json"); r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, `"items": 2`) {
		t.Errorf("info as app: %+v", r)
	}
	if r := rb(t, u, "", "list"); r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "f\tcounting\t3\t2\t") {
		t.Errorf("list as app: %+v", r)
	}
	must(t, u, "drop", "f")
	rb(t, u, "", "test", "f", "a").fails(t, `no filter named "f"`)
	if r := rb(t, u, "", "demo", "-n", "200"); r.code != 0 || r.stderr != "" {
		t.Errorf("demo as app: %+v", r)
	}
	if entries := admin.ACLLog(ctx, 100).Val(); len(entries) > 0 {
		for _, e := range entries {
			if e.Username == "app" && !strings.HasPrefix(e.Object, "client|") {
				t.Errorf("ACL refused app's %s %s", e.Reason, e.Object)
			}
		}
	}
}

// TestErrorsHideRealPasswords is TestErrorsHidePasswords on a real
// redis-server: a password refused, a user without permission, a server
// that speaks TLS with an unknown CA, one that does not speak TLS, and one
// that is down. No output holds the password, raw or escaped.
func TestErrorsHideRealPasswords(t *testing.T) {
	t.Parallel()
	const secret = "Rl-s3cr3t/pw:x@y"
	esc := url.QueryEscape(secret)
	addr := rbloomtest.StartRedis(t, "--requirepass", "right")
	admin := redis.NewClient(&redis.Options{Addr: addr, Password: "right"})
	defer admin.Close()
	admin.Do(context.Background(), "ACL", "SETUSER", "weak", "on", ">"+secret, "~*", "+ping")
	tlsAddr := rbloomtest.StartTLSRedis(t, "--requirepass", secret).Addr
	for _, c := range []struct{ url, want string }{
		{"redis://:" + esc + "@" + addr, "WRONGPASS"},
		{"redis://other:" + esc + "@" + addr, "WRONGPASS"},
		{"redis://weak:" + esc + "@" + addr, "NOPERM"},
		{"rediss://:" + esc + "@" + tlsAddr + fastFail, "certificate signed by unknown authority"},
		// TLS to a plain port: Redis waits for the end of a line that the
		// ClientHello never sends, so each of go-redis's 5 dials waits out
		// its dial_timeout (5 s by default: 25 s in all).
		{"rediss://:" + esc + "@" + addr + fastFail + "&dial_timeout=100ms", "connect to Redis"},
		{"redis://:" + esc + "@" + tlsAddr + fastFail + "&read_timeout=2s", "connect to Redis"},
		{"redis://:" + esc + "@" + rbloomtest.ClosedAddr(t) + fastFail, "connection refused"},
	} {
		commands := [][]string{
			{"test", "f", "x"},
			{"add", "f", "x", "--capacity", "100"},
			{"info", "f"},
			{"create", "f", "--capacity", "100"},
		}
		if strings.Contains(c.url, fastFail) {
			commands = commands[:1] // the connection fails before the command runs, and slowly
		}
		for _, args := range commands {
			for i, r := range []result{rb(t, c.url, "", args...), rb(t, "", "", append([]string{"-u", c.url}, args...)...)} {
				r.fails(t, c.want)
				for _, s := range []string{secret, esc, "s3cr3t"} {
					if strings.Contains(r.stdout+r.stderr, s) {
						t.Errorf("%q (%d) with %q: output %q shows the password", args, i, c.url, r.stderr)
					}
				}
			}
		}
	}
}
