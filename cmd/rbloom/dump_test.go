package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbloom/rbloom/rbloomtest"
)

func TestDumpRestore(t *testing.T) {
	url := "redis://" + rbloomtest.StartRedis(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "users.dump")
	must(t, url, "create", "users", "--capacity", "1000", "--partitions", "2")
	must(t, url, "add", "users", "alice", "bob", "bob")

	out := must(t, url, "dump", "users", file)
	if !strings.HasPrefix(out, "dumped users to "+file+": ") {
		t.Errorf("dump printed %q", out)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	out = must(t, url, "restore", "copy", file)
	if !strings.HasPrefix(out, "restored copy (counting) from "+file+": ") {
		t.Errorf("restore printed %q", out)
	}
	rb(t, url, "", "count", "copy", "alice", "bob", "carol").ok(t, "1\talice\n2\tbob\n0\tcarol\n")

	// An existing filter is refused, unless --replace.
	rb(t, url, "", "restore", "copy", file).fails(t, "restore copy: ", "filter already exists", "--replace")
	must(t, url, "add", "copy", "dave")
	must(t, url, "restore", "copy", file, "--replace")
	rb(t, url, "", "test", "copy", "dave").want(t, exitAbsent, "absent\tdave\n")

	// Through stdout and stdin.
	dumped := rb(t, url, "", "dump", "users", "-")
	if dumped.code != 0 || dumped.stderr != "" {
		t.Fatalf("dump to stdout: %+v", dumped)
	}
	if want, _ := os.ReadFile(file); len(dumped.stdout) != len(want) {
		t.Errorf("dump to stdout: %d bytes, the file has %d", len(dumped.stdout), len(want))
	}
	if r := rb(t, url, dumped.stdout, "restore", "piped", "-"); r.code != 0 {
		t.Fatalf("restore from stdin: %+v", r)
	}
	rb(t, url, "", "count", "piped", "bob").ok(t, "2\tbob\n")

	// A damaged dump, a truncated one: refused, nothing made.
	b, _ := os.ReadFile(file)
	b[len(b)/2] ^= 1
	os.WriteFile(file, b, 0o600)
	rb(t, url, "", "restore", "broken", file).fails(t, "not a sound rbloom dump", "checksum")
	os.WriteFile(file, b[:len(b)/2], 0o600)
	rb(t, url, "", "restore", "broken", file).fails(t, "not a sound rbloom dump", "truncated")
	rb(t, url, "", "test", "broken", "bob").fails(t, `no filter named "broken"`)

	// Not into a Redis that vanishes with the command.
	rb(t, "", "", "restore", "copy", file).fails(t, "restore: no -u or REDIS_URL")

	// Windows are not dumped; a missing filter is not found.
	must(t, url, "window", "w", "--create", "--events", "100", "--bucket", "1h", "--span", "2h", "x")
	rb(t, url, "", "dump", "w", file).fails(t, "w is a window")
	rb(t, url, "", "dump", "nothing", filepath.Join(dir, "nothing.dump")).fails(t, "filter not found")
	if _, err := os.Stat(filepath.Join(dir, "nothing.dump")); err == nil {
		t.Error("a failed dump left its file")
	}
}
