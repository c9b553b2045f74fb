package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// itemsFile writes n items, one a line, to a file and returns its name and
// its contents.
func itemsFile(t *testing.T, n int) (string, string) {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "item:%d\n", i)
	}
	name := filepath.Join(t.TempDir(), "items.txt")
	if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return name, b.String()
}

// summary checks that r succeeded with the summary line that matches re
// on stdout and nothing on stderr.
func (r result) summary(t *testing.T, re string) {
	t.Helper()
	if r.code != 0 || r.stderr != "" || !regexp.MustCompile(`^`+re+`\n$`).MatchString(r.stdout) {
		t.Errorf("got exit %d, stdout %q, stderr %q; want exit 0, stdout matching %q, no stderr", r.code, r.stdout, r.stderr, re)
	}
}

const took = `in [0-9.]+(ms|s|µs) \([0-9]+ items/s\)`

func TestLoadUnload(t *testing.T) {
	backends(t, func(t *testing.T, u string) {
		const n = 3000
		file, lines := itemsFile(t, n)
		must(t, u, "create", "f", "--capacity", "20000", "--partitions", "3")

		rb(t, u, "", "load", "f", file).summary(t, `loaded 3000 items into f `+took+`; [0-9] may have been present already`)
		r := rb(t, u, lines, "test", "f")
		if r.code != 0 || strings.Count(r.stdout, "maybe\titem:") != n {
			t.Errorf("test after load: exit %d, %d maybe, stderr %q", r.code, strings.Count(r.stdout, "maybe\t"), r.stderr)
		}
		var info infoJSON
		if err := json.Unmarshal([]byte(must(t, u, "info", "f", "--json")), &info); err != nil || info.Items != n {
			t.Errorf("info after load: items %d, %v; want %d", info.Items, err, n)
		}

		rb(t, u, "", "unload", "f", file).summary(t, `unloaded 3000 items from f `+took+`; 3000 removed, 0 definitely absent`)
		r = rb(t, u, lines, "test", "f")
		if r.code != 1 || strings.Count(r.stdout, "absent\titem:") != n {
			t.Errorf("test after unload: exit %d, %d absent, stderr %q", r.code, strings.Count(r.stdout, "absent\t"), r.stderr)
		}
		rb(t, u, "item:1\nitem:2\n", "unload", "f").summary(t, `unloaded 2 items from f `+took+`; 0 removed, 2 definitely absent`)
	})
}

func TestLoadInputs(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	file, lines := itemsFile(t, 2000)

	// From stdin, as a pipe (size unknown) and as a file (size known), and
	// from "-": no progress bar, since stderr is not a terminal.
	rb(t, u, lines, "load", "--capacity", "10000", "f").summary(t, `loaded 2000 items into f `+took+`; [0-9] may have been present already`)
	rb(t, u, lines, "load", "f", "-").summary(t, `loaded 2000 items into f `+took+`; 2000 may have been present already`)
	stdin, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	rbloomWith(t, runOpts{redisURL: u, stdin: stdin}, "unload", "f").summary(t, `unloaded 2000 items from f `+took+`; 2000 removed, 0 definitely absent`)

	// Empty input.
	rb(t, u, "", "load", "f").summary(t, `loaded 0 items into f `+took+`; 0 may have been present already`)
	rb(t, u, "\n\n", "unload", "f").summary(t, `unloaded 0 items from f `+took+`; 0 removed, 0 definitely absent`)

	// Errors.
	rb(t, u, "", "load", "g", file).fails(t, `load g: no filter named "g": create it with 'rbloom create g --capacity N', or give --capacity N here`)
	rb(t, u, "", "load", "f", filepath.Join(t.TempDir(), "nope.txt")).fails(t, "load f: open ", "nope.txt: no such file or directory")
	long := "short\n" + strings.Repeat("x", maxLine+1) + "\n"
	rb(t, u, long, "load", "f").fails(t, "load f: stopped after 1 items: line 2 is longer than 1048576 bytes")
	rb(t, u, "", "load", "f", "--capacity", "5", file).fails(t,
		"load f: stopped after 0 items: ", "filter parameters differ from the stored ones", "leave out the sizing flags")
}

func TestProgress(t *testing.T) {
	t.Parallel()
	u := miniURL(t)
	file, lines := itemsFile(t, 2000)
	must(t, u, "create", "f", "--capacity", "10000")
	terminal := func(stdin string) runOpts {
		return runOpts{redisURL: u, stdin: strings.NewReader(stdin), terminal: true}
	}

	// Size known: a bar with the bytes, their rate and the time left.
	r := rbloomWith(t, terminal(""), "load", "f", file)
	if r.code != 0 || !regexp.MustCompile(`^loaded 2000 items into f `+took+`; [0-9] may have been present already\n$`).MatchString(r.stdout) {
		t.Errorf("load on a terminal: exit %d, stdout %q", r.code, r.stdout)
	}
	for _, want := range []string{"load f: 2000 items, ", " items/s", "%", "/19 kB"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("load on a terminal: stderr %q, want it to contain %q", r.stderr, want)
		}
	}
	// Size unknown: a spinner with the items and their rate.
	r = rbloomWith(t, terminal(lines), "unload", "f")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "unloaded 2000 items from f ") || !strings.Contains(r.stderr, "unload f: 2000 items, ") {
		t.Errorf("unload from a pipe on a terminal: %+v", r)
	}
	// --no-progress: nothing.
	rbloomWith(t, terminal(""), "load", "--no-progress", "f", file).summary(t, `loaded 2000 items into f `+took+`; [0-9] may have been present already`)
}
