package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSyncRunsRbloomSync: 'rbloom sync' runs rbloom-sync from PATH with its
// arguments and exit status, and says how to install it when it is not
// there.
func TestSyncRunsRbloomSync(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PATH", dir)
	r := rb(t, miniURL(t), "", "sync", "-table", "items")
	if r.code != exitError || !strings.Contains(r.stderr, "go install ./pgsync/cmd/rbloom-sync") {
		t.Errorf("without rbloom-sync: exit %d, %q", r.code, r.stderr)
	}
	script := "#!/bin/sh\necho \"args: $*\"\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "rbloom-sync"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r = rb(t, miniURL(t), "", "sync", "-table", "items")
	if r.code != 3 || r.stdout != "args: -table items\n" {
		t.Errorf("with rbloom-sync: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
