//go:build unix

package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The end-to-end test again, on PostgreSQL through pgx: skipped when the
// PostgreSQL server is not installed (failed under CI, which installs it).
func TestEndToEndPostgres(t *testing.T) {
	tbl, err := openPostgres(t.Context(), startPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	endToEnd(t, tbl)
}

// startPostgres starts a PostgreSQL server for this test on 127.0.0.1 and a
// free port, with a new data directory, no fsync and the server options
// args (-c name=value ...), and returns its URL, of the user postgres
// without a password. It skips the test when initdb is not found (fails it
// under CI). As root it runs the server as the user postgres, since
// PostgreSQL refuses to run as root.
func startPostgres(t *testing.T, args ...string) string {
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		if len(found) == 0 {
			skipOrFail(t, "PostgreSQL server not installed (no initdb; apt-get install -y postgresql)")
		}
		initdb = found[len(found)-1]
	}
	// Not t.TempDir(): the user postgres must be able to reach it.
	dir, err := os.MkdirTemp("", "cacheguard-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	attr := &syscall.SysProcAttr{}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			skipOrFail(t, "running as root, and no user postgres to run PostgreSQL as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	cmd.SysProcAttr = attr
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	server := exec.Command(filepath.Join(filepath.Dir(initdb), "postgres"),
		append([]string{"-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", dir, "-F"}, args...)...)
	server.SysProcAttr = attr
	server.Stdout, server.Stderr = logFile, logFile
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = server.Process.Signal(syscall.SIGINT) // fast shutdown
		_ = server.Wait()
	})

	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return url
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("PostgreSQL did not start: %v\n%s", err, log)
		}
	}
}

// skipOrFail skips the test with msg, or fails it under CI (env CI set),
// where a missing server means a broken setup.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " ($CI is set, so this is a failure, not a skip)")
	}
	t.Skip(msg + ": skipping")
}
