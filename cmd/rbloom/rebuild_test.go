package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRebuildCommand(t *testing.T) {
	backends(t, func(t *testing.T, u string) {
		must(t, u, "create", "rows", "--capacity", "1000", "--partitions", "2")
		must(t, u, "add", "rows", "a", "b", "ghost")
		truth := filepath.Join(t.TempDir(), "rows.txt")
		if err := os.WriteFile(truth, []byte("a\nb\nc\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out := must(t, u, "rebuild", "rows", truth); !strings.HasPrefix(out, "rebuilt rows from 3 items") {
			t.Errorf("rebuild printed %q", out)
		}
		rb(t, u, "", "test", "rows", "a", "b", "c").want(t, 0, "maybe\ta\nmaybe\tb\nmaybe\tc\n")
		rb(t, u, "", "test", "rows", "ghost").want(t, 1, "absent\tghost\n")
		rb(t, u, "", "rebuild", "nosuch", truth).fails(t, "nosuch")
	})
}
