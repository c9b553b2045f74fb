//go:build unix

package pgsync

import (
	"context"
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

	"github.com/jackc/pgx/v5"
	"github.com/rbloom/rbloom/rbloomtest"
	"github.com/redis/go-redis/v9"
)

// postgres is a PostgreSQL server started for one test, with wal_level
// logical, on 127.0.0.1 and a free port, its data in a temporary
// directory. It can be restarted on the same port and data.
type postgres struct {
	t    testing.TB
	bin  string // the directory of initdb, postgres and psql
	dir  string
	port int
	attr *syscall.SysProcAttr
	cmd  *exec.Cmd
	URL  string
}

// skipOrFail skips the test, or fails it under CI (env CI set), where a
// missing server means a broken setup.
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " ($CI is set, so this is a failure, not a skip)")
	}
	t.Skip(msg)
}

// startPostgres starts a PostgreSQL server for this test and returns it
// once it answers; it is stopped when the test ends. Without PostgreSQL's
// binaries the test is skipped (failed under CI). As root it runs the
// server as the user postgres, since PostgreSQL refuses to run as root.
func startPostgres(t testing.TB) *postgres {
	t.Helper()
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		if len(found) == 0 {
			skipOrFail(t, "PostgreSQL server not installed (no initdb; apt-get install -y postgresql)")
		}
		initdb = found[len(found)-1]
	}
	// Not t.TempDir(): the user postgres must be able to reach it.
	dir, err := os.MkdirTemp("", "pgsync-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &postgres{t: t, bin: filepath.Dir(initdb), dir: dir, attr: &syscall.SysProcAttr{}}
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
		p.attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	cmd := exec.Command(initdb, "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	cmd.SysProcAttr = p.attr
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
	p.start()
	t.Cleanup(p.stop)
	return p
}

// start starts the server and waits until it answers.
func (p *postgres) start() {
	t := p.t
	t.Helper()
	logFile, err := os.OpenFile(filepath.Join(p.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	p.cmd = exec.Command(filepath.Join(p.bin, "postgres"), "-D", filepath.Join(p.dir, "data"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(p.port), "-k", p.dir, "-F",
		"-c", "wal_level=logical", "-c", "max_replication_slots=10", "-c", "max_wal_senders=10",
		"-c", "max_connections=50", "-c", "shared_buffers=32MB")
	p.cmd.SysProcAttr = p.attr
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, p.URL)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("PostgreSQL did not start: %v\n%s", err, log)
		}
	}
}

// stop stops the server (fast shutdown) and waits for it.
func (p *postgres) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	_ = p.cmd.Wait()
	p.cmd = nil
}

// restart stops the server and starts it again on the same port and data.
func (p *postgres) restart() {
	p.stop()
	p.start()
}

// conn opens a connection closed when the test ends.
func (p *postgres) conn(t testing.TB) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), p.URL) // not t.Context(): cleanups use it too
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// exec runs SQL statements, failing the test on error.
func (p *postgres) exec(t testing.TB, sqls ...string) {
	t.Helper()
	c := p.conn(t)
	for _, sql := range sqls {
		if _, err := c.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	c.Close(context.Background())
}

// env is a PostgreSQL and a Redis for one test, with a table items (id
// bigint primary key, v text) published by items_pub.
type env struct {
	pg  *postgres
	rdb *redis.Client
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pg := startPostgres(t)
	addr := rbloomtest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	pg.exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, v text)`, `CREATE PUBLICATION items_pub FOR TABLE items`)
	return &env{pg: pg, rdb: rdb}
}

// config is a Config for the env's table, filter "items" and slot
// items_slot.
func (e *env) config() Config {
	return Config{DatabaseURL: e.pg.URL, Table: "items", KeyColumn: "id", Publication: "items_pub",
		Slot: "items_slot", Redis: e.rdb, Filter: "items", Capacity: 100_000, SlotWait: 10 * time.Second}
}
