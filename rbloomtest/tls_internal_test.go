package rbloomtest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStartTLSRedisWithoutTLS runs StartTLSRedis with a redis-server that
// links no OpenSSL and refuses --tls-port, as a build without TLS does:
// the test is skipped with a message saying so, CI or not, since this
// server is not Debian's.
func TestStartTLSRedisWithoutTLS(t *testing.T) {
	dir := t.TempDir()
	fake := "#!/bin/sh\necho \"*** FATAL CONFIG FILE ERROR *** 'tls-port' Bad directive or wrong number of arguments\"\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "redis-server"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	t.Setenv("CI", "true")
	var reached bool
	t.Run("start", func(t *testing.T) {
		StartTLSRedis(t)
		reached = true
	})
	if reached {
		t.Error("StartTLSRedis returned with a server that cannot start with TLS")
	}
	if isDebianServer(filepath.Join(dir, "redis-server")) {
		t.Errorf("isDebianServer(%s) = true", dir)
	}
	if !hasOpenSSL("/nonexistent/redis-server") {
		t.Error("hasOpenSSL of a file it cannot read = false, want true (a failure, not a skip)")
	}
}
