// Command rbloom works with rbloom filters in Redis: it creates them, adds,
// tests, removes and counts items, loads and unloads files of items, lists,
// shows and drops filters, and runs the demo.
//
// Usage:
//
//	rbloom [-u URL] [--cluster] COMMAND [FLAGS] [ARG...]
//
//	create NAME --capacity N [--error-rate P] [--classic|--cuckoo] [--ttl D]
//	create NAME -m M -k K [--classic|--cuckoo] [--ttl D]
//	                      create an empty filter (counting unless --classic or --cuckoo)
//	info NAME [--json]    its parameters, items, memory and expected error rate
//	drop NAME             delete it; none by that name is no error (exit 0,
//	                      "no filter named NAME (nothing to drop)")
//	list [--limit N]      the filters in Redis, one a line: name, mode,
//	                      partitions, items, bytes (tab-separated)
//
//	add NAME [ITEM...]    print "new" or "maybe" (it may have been there already)
//	test NAME [ITEM...]   print "maybe" or "absent"; exit 1 if one is absent
//	remove NAME [ITEM...] print "removed" or "absent" (nothing changed)
//	count NAME [ITEM...]  print the item's count, 0 to 15: an upper bound
//	window NAME --events N --bucket D --span D [ITEM...]
//	                      print "new" (added) or "seen" (within the span), in
//	                      a window of generations; --create makes it first,
//	                      --info lists them
//
//	load NAME [FILE]      add every line of FILE (or stdin) in batches
//	unload NAME [FILE]    remove every line of FILE (or stdin) in batches
//	rebuild NAME [FILE]   refill the filter from every item it should hold,
//	                      while it keeps serving
//
//	dump NAME FILE        write the filter or window to FILE ("-": stdout), a
//	                      portable dump that restore reads into any server
//	restore NAME FILE     make the filter or window from a dump ("-": stdin);
//	                      --replace replaces an existing one
//
//	functions install     load this version's Redis function library (Redis 7,
//	                      FUNCTION LOAD), on every master with --cluster, for
//	                      applications with Options.UseFunctions
//	functions status      per server: ADDR, loaded or missing, the library, the
//	                      other rbloom libraries there; exit 1 if one is missing
//
//	demo [-n N] [-p P]    fill, delete and measure a counting and a classic filter
//	bench [-quick] ...    measure throughput against plain BITFIELD (docs/benchmarks.md)
//	help [COMMAND]        this text, or a command's flags
//
// Items are the arguments after NAME or, when there are none, the lines of
// stdin; empty lines are skipped. add, test, remove and count print one line
// per item, in order: the answer, a tab, the item (quoted as in Go when it
// holds a control character). -q prints nothing. Put -- before items that
// start with "-". load and unload print one summary line; on a terminal they
// draw a progress bar on stderr meanwhile.
//
// A line of stdin or FILE holds at most 1 MiB (1,048,576 bytes), not
// counting its end ("\n" or "\r\n"). A longer line stops the command with
// an error that gives its number; the lines before it are done.
//
// Numbers: counts (--capacity, -m, -k, --partitions, --limit, demo's -n)
// take whole numbers, written 1000000, 1_000_000 or 1e6; rates
// (--error-rate, demo's -p) take 0.01, 1% or 1e-3, above 0 and below 1.
//
// add and load create a missing filter when given the sizing flags of create
// (which must then match an existing filter; `rbloom help create` lists
// them, --partitions among them); the other commands need only the name.
// remove, unload and count work on counting filters only.
//
// list finds the filters with SCAN (MATCH rbloom:{*}, COUNT 1000), on every
// master with --cluster, and stops after --limit keys (default 10000),
// saying so on stderr. A damaged filter shows "damaged" as its mode. list
// reads each filter as info does, which scans all its slots: slow for big
// filters.
//
// Connection: -u redis://[user:pass@]host:port/db (rediss:// for TLS), else
// $REDIS_URL, else an in-memory Redis that lives as long as the command:
// enough for demo, useless otherwise (rbloom says so on stderr, and create
// and restore refuse to run there). --cluster connects to a Redis Cluster through the
// URL's host. A password is never printed; prefer REDIS_URL to -u for one,
// as command lines are visible to other users of the machine.
//
// Exit status: 0 on success (for test: every item may be present), 1 when
// test finds an item definitely absent or functions status a server without
// the library, 2 on error, with one line on stderr starting with "rbloom: ".
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// usage is what `rbloom help` prints; keep it in step with the package
// comment above.
const usage = `usage: rbloom [-u URL] [--cluster] COMMAND [FLAGS] [ARG...]

Filters:
  create NAME --capacity N [--error-rate P] [--classic|--cuckoo] [--ttl D]
  create NAME -m M -k K [--classic|--cuckoo] [--ttl D]
                        create an empty filter (counting unless --classic or --cuckoo)
  info NAME [--json]    its parameters, items, memory and expected error rate
  drop NAME             delete it; none by that name is no error (exit 0,
                        "no filter named NAME (nothing to drop)")
  list [--limit N]      the filters, one a line: NAME, MODE ("damaged" for a
                        damaged one), PARTITIONS, ITEMS, BYTES, tab-separated.
                        SCANs at most N keys (default 10000), on every master
                        with --cluster; reads each filter as info does (slow
                        for big ones)

Items, as arguments or one per line on stdin; one line out per item,
"ANSWER<tab>ITEM" (-q: none):
  add NAME [ITEM...]    new, or maybe (it may have been there already)
  test NAME [ITEM...]   maybe, or absent (definitely); exit 1 if one is absent
  remove NAME [ITEM...] removed, or absent (nothing changed); counting only
  count NAME [ITEM...]  its count, 0 to 15 (an upper bound); counting only
  window NAME --events N --bucket D --span D [--error-rate P] [ITEM...]
                        new (added now), or seen within the span, in a window
                        of one filter per bucket (Go: rbloom.NewWindow); a
                        window stores its settings: give the same every time.
                        --create makes it first (once: a window Redis lost
                        is refused, never made again empty, without it);
                        --info lists its live generations instead: START,
                        ITEMS, BYTES, TTL, tab-separated

Bulk, one item per line of FILE or stdin; a progress bar on a terminal:
  load NAME [FILE]      add them all
  unload NAME [FILE]    remove them all; counting only
  rebuild NAME [FILE]   refill the filter from all the items it should hold,
                        while it keeps serving: clears ghosts and stuck counters;
                        with --capacity N (or -m, -k, --partitions) resizes it

Dumps, portable between servers (Redis, Valkey, a cluster); FILE "-" is
stdout or stdin:
  dump NAME FILE        write the filter or window to FILE, each partition
                        as it was at one moment (COPY), while it keeps serving
  restore NAME FILE     make the filter or window NAME from a dump; nothing
                        is visible until the whole dump is read and checked;
                        --replace replaces an existing one, --ttl D expires
                        a filter

Following a PostgreSQL table (logical replication, each change once):
  sync ...              runs rbloom-sync (module github.com/rbloom/rbloom/pgsync,
                        kept apart so that rbloom links no database driver);
                        'rbloom sync -h' for its flags

Redis functions (Redis 7), for applications with Options.UseFunctions:
  functions install     load this version's library (FUNCTION LOAD), on every
                        master with --cluster; needs an admin user
  functions status      per server: ADDR, loaded or missing, the library, the
                        other rbloom libraries there ("-": none), tab-separated;
                        exit 1 if it is missing on one

  demo [-n N] [-p P]    fill, delete and measure a counting and a classic filter
  bench [-quick] ...    measure throughput against plain BITFIELD (docs/benchmarks.md)
  help [COMMAND]        this text, or a command's flags

add and load create a missing filter when given create's sizing flags
('rbloom help create' lists them all, --partitions among them).

Lines of stdin or FILE: at most 1 MiB (1,048,576 bytes) each, not counting
"\n" or "\r\n"; a longer line is an error naming its number (the lines
before it are done).

Numbers: counts (--capacity, -m, -k, --partitions, --limit, demo's -n) take
1000000, 1_000_000 or 1e6; rates (--error-rate, demo's -p) take 0.01, 1% or
1e-3.

Connection: -u redis://[user:pass@]host:port/db (rediss:// for TLS), else
$REDIS_URL, else an in-memory Redis that lasts one command (enough for demo;
create and restore refuse to run on it). --cluster connects to a Redis Cluster through
the URL's host. Prefer REDIS_URL to -u for a URL with a password: command
lines are visible to other users of the machine.

Exit status: 0 success (test: every item may be present), 1 test found an
item definitely absent (functions status: a server without the library),
2 error (one line on stderr, starting "rbloom: ").
`

func main() {
	// go-redis logs dial failures itself; the one-line error run prints says it.
	redis.SetLogger(quiet{})
	os.Exit(run(context.Background(), os.Args[1:], &sys{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		getenv: os.Getenv, isTerminal: isTerminal,
	}))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// sys is what run takes from the process, so that tests can run it in
// process with their own input, output and environment.
type sys struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// isTerminal reports whether w is a terminal: progress bars are drawn
	// only there, never into a file or a pipe.
	isTerminal func(w io.Writer) bool
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Exit statuses.
const (
	exitOK     = 0
	exitAbsent = 1 // test: some item is definitely absent
	exitError  = 2
)

// errAbsent makes run exit with exitAbsent and no message.
var errAbsent = errors.New("some items are definitely absent")

// exitStatus makes run exit with that status and no message: another
// command's (sync), which has said what went wrong itself.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// run runs rbloom with args (without the program name) and returns the exit
// status. Errors are written to s.stderr as one line.
func run(ctx context.Context, args []string, s *sys) int {
	c := &cli{sys: s, out: bufio.NewWriter(s.stdout)}
	err := c.main(ctx, args)
	if ferr := c.out.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write output: %w", ferr)
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errAbsent):
		return exitAbsent
	}
	var status exitStatus
	if errors.As(err, &status) {
		return int(status)
	}
	fmt.Fprintln(s.stderr, c.errorLine(err))
	return exitError
}

// cli is one run of the command.
type cli struct {
	*sys
	out *bufio.Writer // stdout, flushed after each batch and at the end

	// Global flags, accepted before or after the command.
	url     string
	cluster bool
	help    bool

	rdb        redis.UniversalClient // set by connect
	where      string                // where rdb points, without a password
	stopServer func()                // stops the in-memory Redis, if any
}

// A command is one subcommand. setup registers its flags and returns the
// function that runs it once the flags are parsed and rdb is connected.
type command struct {
	name     string
	args     string // the positional arguments, for messages
	min, max int    // how many positional arguments it takes; max -1: any
	setup    func(c *cli, fs *pflag.FlagSet) func(ctx context.Context, args []string) error
}

// commands are the subcommands, in the order of the usage text. demo and
// bench are not among them: they parse their own flags (see cli.main).
var commands = []command{
	{"create", "NAME", 1, 1, setupCreate},
	{"info", "NAME", 1, 1, setupInfo},
	{"drop", "NAME", 1, 1, setupDrop},
	{"list", "", 0, 0, setupList},
	{"add", "NAME [ITEM...]", 1, -1, setupAdd},
	{"test", "NAME [ITEM...]", 1, -1, setupTest},
	{"remove", "NAME [ITEM...]", 1, -1, setupRemove},
	{"count", "NAME [ITEM...]", 1, -1, setupCount},
	{"window", "NAME [ITEM...]", 1, -1, setupWindow},
	{"load", "NAME [FILE]", 1, 2, setupLoad},
	{"unload", "NAME [FILE]", 1, 2, setupUnload},
	{"rebuild", "NAME [FILE]", 1, 2, setupRebuild},
	{"dump", "NAME FILE", 2, 2, setupDump},
	{"restore", "NAME FILE", 2, 2, setupRestore},
	{"functions", "install|status", 1, 1, setupFunctions},
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func (c *cli) globalFlags() *pflag.FlagSet {
	fs := newFlagSet("rbloom")
	fs.StringVarP(&c.url, "url", "u", "", "redis://[user:pass@]host:port/db or rediss://... (default $REDIS_URL)")
	fs.BoolVar(&c.cluster, "cluster", false, "connect to a Redis Cluster through the URL's host")
	fs.BoolVarP(&c.help, "help", "h", false, "print help")
	return fs
}

// newFlagSet returns a flag set that reports errors only by returning them,
// so that they reach stderr as one line.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	return fs
}

func (c *cli) main(ctx context.Context, args []string) error {
	global := c.globalFlags()
	// Stop at the command name: the command's own flags come after it.
	global.SetInterspersed(false)
	if err := global.Parse(args); err != nil {
		return fmt.Errorf("%w (run 'rbloom help')", err)
	}
	rest := global.Args()
	switch {
	case len(rest) > 0 && rest[0] == "help":
		return c.printHelp(rest[1:])
	case c.help: // rbloom -h [COMMAND]
		return c.printHelp(rest)
	case len(rest) == 0:
		return errors.New("no command given (run 'rbloom help' for the list)")
	}
	name, rest := rest[0], rest[1:]
	if name == "bench" {
		return c.runBench(ctx, rest)
	}
	if name == "sync" {
		return c.runSync(ctx, rest)
	}
	if name == "demo" {
		// demo parses its own flags, as it always has; global flags go
		// before it.
		defer c.disconnect()
		if err := c.connect(ctx, name); err != nil {
			return err
		}
		return demo(ctx, c.rdb, c.where, rest, c.out)
	}
	cmd := lookup(name)
	if cmd == nil {
		return fmt.Errorf("unknown command %q (run 'rbloom help' for the list)", name)
	}
	fs := newFlagSet("rbloom " + name)
	do := cmd.setup(c, fs)
	fs.AddFlagSet(global)
	if err := fs.Parse(rest); err != nil {
		var bad *pflag.InvalidValueError
		if errors.As(err, &bad) && bad.GetFlag() != nil {
			err = fmt.Errorf("%s %q: %w", flagName(bad.GetFlag()), bad.GetValue(), errors.Unwrap(bad))
			if _, ok := bad.GetFlag().Value.(explainer); ok {
				return fmt.Errorf("%s: %w", name, err) // it says what would do
			}
		}
		return fmt.Errorf("%s: %w (run 'rbloom help %s')", name, err, name)
	}
	if c.help {
		return c.printHelp([]string{name})
	}
	pos := fs.Args()
	if len(pos) < cmd.min || cmd.max >= 0 && len(pos) > cmd.max {
		return fmt.Errorf("%s: want %s, got %d arguments (run 'rbloom help %s')", name, strings.TrimSpace(name+" "+cmd.args), len(pos), name)
	}
	defer c.disconnect()
	command := name
	if f := fs.Lookup("create"); f != nil && f.Changed {
		command += " --create" // makes a window, as create makes a filter
	}
	if err := c.connect(ctx, command); err != nil {
		return err
	}
	if err := do(ctx, pos); err != nil {
		if len(pos) == 0 {
			return fmt.Errorf("%s: %w", name, err)
		}
		return fmt.Errorf("%s %s: %w", name, printable(pos[0]), err)
	}
	return nil
}

// flagName names f as the usage text does: "--capacity", "-m/--slots".
func flagName(f *pflag.Flag) string {
	if f.Shorthand != "" {
		return "-" + f.Shorthand + "/--" + f.Name
	}
	return "--" + f.Name
}

// printHelp prints the usage, or with args [COMMAND] that command's
// arguments and flags.
func (c *cli) printHelp(args []string) error {
	if len(args) == 0 {
		_, err := io.WriteString(c.out, usage)
		return err
	}
	name := args[0]
	if name == "bench" {
		benchHelp(c.out)
		return nil
	}
	if name == "demo" {
		fmt.Fprint(c.out, "usage: rbloom [-u URL] [--cluster] demo [-n items] [-p error-rate]\n\n"+
			"Fills a counting and a classic filter with n items (default 100000) sized\n"+
			"for error rate p (default 0.01), removes half from the counting filter, and\n"+
			"measures false negatives, deleted items still seen and false positives.\n"+
			"n takes 100000, 100_000 or 1e5; p takes 0.01, 1% or 1e-2.\n")
		return nil
	}
	cmd := lookup(name)
	if cmd == nil {
		return fmt.Errorf("help: unknown command %q (run 'rbloom help' for the list)", name)
	}
	fs := newFlagSet(name)
	cmd.setup(c, fs)
	fmt.Fprintf(c.out, "usage: rbloom [-u URL] [--cluster] %s\n", strings.TrimSpace(name+" [FLAGS] "+cmd.args))
	if fs.HasFlags() {
		fmt.Fprintf(c.out, "\nFlags:\n%s", fs.FlagUsages())
	}
	return nil
}

// errorLine turns err into the one line rbloom prints: prefixed with
// "rbloom: " once, without the prefixes the library puts on its own errors,
// on one line (the lines of errors.Join and of multi-line texts joined
// with "; "), and without any password from -u or REDIS_URL (an error may
// quote what Redis or the URL parser saw).
func (c *cli) errorLine(err error) string {
	msg := err.Error()
	// Passwords first, before joining lines can change what they touch.
	for _, raw := range []string{c.url, c.getenv("REDIS_URL")} {
		for _, secret := range passwords(raw) {
			msg = strings.ReplaceAll(msg, secret, "xxxxx")
		}
	}
	msg = joinLines(msg)
	for _, sep := range []string{": ", "; ", "("} {
		msg = strings.ReplaceAll(msg, sep+"rbloom: ", sep)
	}
	msg = strings.TrimPrefix(msg, "rbloom: ")
	msg = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, msg)
	return "rbloom: " + msg
}

// joinLines joins the non-blank lines of msg, trimmed, with "; ", or with
// a space after a line that ends in ":" (a heading for what follows).
func joinLines(msg string) string {
	var b strings.Builder
	for line := range strings.Lines(msg) {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case b.Len() == 0:
		case strings.HasSuffix(b.String(), ":"):
			b.WriteByte(' ')
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
	}
	return b.String()
}
