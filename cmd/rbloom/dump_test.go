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

	// A missing filter is not found.
	rb(t, url, "", "dump", "nothing", filepath.Join(dir, "nothing.dump")).fails(t, "filter not found")
	if _, err := os.Stat(filepath.Join(dir, "nothing.dump")); err == nil {
		t.Error("a failed dump left its file")
	}
}

// TestDumpRestoreWindow: a window is dumped and restored by name, its
// events seen after; --replace replaces a window, --ttl is refused.
func TestDumpRestoreWindow(t *testing.T) {
	url := "redis://" + rbloomtest.StartRedis(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "w.dump")
	flags := []string{"--events", "100", "--bucket", "1h", "--span", "2h"}
	window := func(name string, events ...string) []string {
		return append(append([]string{"window", name}, flags...), events...)
	}
	must(t, url, window("w", "--create", "a", "b")...)
	out := must(t, url, "dump", "w", file)
	if !strings.HasPrefix(out, "dumped w to "+file+": ") {
		t.Errorf("dump printed %q", out)
	}
	out = must(t, url, "restore", "w2", file)
	if !strings.HasPrefix(out, "restored w2 (window) from "+file+": ") {
		t.Errorf("restore printed %q", out)
	}
	rb(t, url, "", window("w2", "a", "b", "c")...).ok(t, "seen\ta\nseen\tb\nnew\tc\n")

	rb(t, url, "", "restore", "w2", file).fails(t, "already exists", "--replace")
	must(t, url, "restore", "w2", file, "--replace")
	rb(t, url, "", window("w2", "a", "c")...).ok(t, "seen\ta\nnew\tc\n")
	rb(t, url, "", "restore", "w3", file, "--ttl", "1h").fails(t, "--ttl", "holds a window")

	// Through stdout and stdin.
	dumped := rb(t, url, "", "dump", "w", "-")
	if dumped.code != 0 || dumped.stderr != "" {
		t.Fatalf("dump to stdout: %+v", dumped)
	}
	if r := rb(t, url, dumped.stdout, "restore", "piped", "-"); r.code != 0 {
		t.Fatalf("restore from stdin: %+v", r)
	}
	rb(t, url, "", window("piped", "b")...).ok(t, "seen\tb\n")

	// A damaged window dump is refused, nothing made.
	b, _ := os.ReadFile(file)
	b[len(b)/2] ^= 1
	os.WriteFile(file, b, 0o600)
	rb(t, url, "", "restore", "broken", file).fails(t, "not a sound rbloom dump", "checksum")
	rb(t, url, "", window("broken", "a")...).fails(t, "no window")
}
