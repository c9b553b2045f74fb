//go:build unix

package pgsync

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rbloom/rbloom"
)

// childEnv carries the arguments of the sync process that TestEndToEnd
// starts by running the test binary again: TestMain runs Command instead
// of the tests.
const childEnv = "PGSYNC_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := Command(ctx, strings.Split(args, "\n"), os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "sync process:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// syncProcess is the sync, run as a separate process that the test kills.
type syncProcess struct {
	t    *testing.T
	args []string
	log  string
	cmd  *exec.Cmd
	runs int
}

func (p *syncProcess) start() {
	p.t.Helper()
	log, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer log.Close()
	fmt.Fprintf(log, "--- start %d\n", p.runs)
	p.runs++
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(p.args, "\n"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd = cmd
}

func (p *syncProcess) kill() {
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// writer changes its own rows (id % writers == w) through its own
// connection: inserts of new ids, deletes, key changes and other updates,
// alone or several in a transaction. Ids are never used twice, so a key
// deleted is gone for good.
type writer struct {
	w, writers int
	next       int64
	rows       []int64
	deleted    []int64
	rng        *rand.Rand
}

func (wr *writer) newID() int64 {
	wr.next += int64(wr.writers)
	return wr.next
}

func (wr *writer) take() (int64, bool) {
	if len(wr.rows) < 100 {
		return 0, false
	}
	i := wr.rng.IntN(len(wr.rows))
	id := wr.rows[i]
	wr.rows[i] = wr.rows[len(wr.rows)-1]
	wr.rows = wr.rows[:len(wr.rows)-1]
	return id, true
}

// step runs one transaction; its effects on wr are kept only if it commits.
func (wr *writer) step(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	rows, deleted, next := append([]int64(nil), wr.rows...), len(wr.deleted), wr.next
	undo := func() { wr.rows, wr.deleted, wr.next = rows, wr.deleted[:deleted], next }
	for range 1 + wr.rng.IntN(3) {
		var err error
		switch r := wr.rng.IntN(10); {
		case r < 4:
			id := wr.newID()
			_, err = tx.Exec(ctx, `INSERT INTO items VALUES ($1, 'w')`, id)
			wr.rows = append(wr.rows, id)
		case r < 7:
			if id, ok := wr.take(); ok {
				_, err = tx.Exec(ctx, `DELETE FROM items WHERE id = $1`, id)
				wr.deleted = append(wr.deleted, id)
			}
		case r < 9:
			if id, ok := wr.take(); ok {
				nid := wr.newID()
				_, err = tx.Exec(ctx, `UPDATE items SET id = $2 WHERE id = $1`, id, nid)
				wr.rows, wr.deleted = append(wr.rows, nid), append(wr.deleted, id)
			}
		default:
			if len(wr.rows) > 0 {
				_, err = tx.Exec(ctx, `UPDATE items SET v = 'u' WHERE id = $1`, wr.rows[wr.rng.IntN(len(wr.rows))])
			}
		}
		if err != nil {
			undo()
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		undo()
		return err
	}
	return nil
}

// TestEndToEnd: writers change the table from several connections and
// through psql while the sync runs as its own process, SIGKILLed at random
// moments and started again, and PostgreSQL restarts once. Keys that no
// writer touches must never test absent; at each quiet point Info.Items
// equals the row count and every row's key is present; deleted keys test
// present no more often than the false-positive rate.
func TestEndToEnd(t *testing.T) {
	e := newEnv(t)
	const stable, initial, writers = 2000, 20000, 3
	e.pg.exec(t, fmt.Sprintf(`INSERT INTO items SELECT g, 'x' FROM generate_series(1, %d) g`, initial))
	psql := filepath.Join(e.pg.bin, "psql")
	if _, err := os.Stat(psql); err != nil {
		if psql, err = exec.LookPath("psql"); err != nil {
			skipOrFail(t, "psql not found (next to initdb or on PATH)")
		}
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	p := &syncProcess{t: t, log: filepath.Join(t.TempDir(), "sync.log"), args: []string{
		"-db", e.pg.URL, "-table", "items", "-key", "id", "-filter", "items", "-slot", "items_slot",
		"-publication", "items_pub", "-redis", e.rdb.Options().Addr, "-capacity", "100000", "-slot-wait", "30s", "-stats", "50ms"}}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			log, _ := os.ReadFile(p.log)
			t.Logf("sync process log:\n%s", log)
		}
	})
	p.start()
	e.caughtUp(t, "items")
	f, err := rbloom.OpenCounting(t.Context(), e.rdb, "items", rbloom.Options{})
	if err != nil {
		t.Fatal(err)
	}

	// Keys no writer touches, checked all along.
	stableKeys := make([]string, stable)
	for i := range stableKeys {
		stableKeys[i] = fmt.Sprint(i + 1)
	}
	var absent, checks atomic.Int64
	watchCtx, stopWatch := context.WithCancel(t.Context())
	var watch sync.WaitGroup
	watch.Go(func() {
		for watchCtx.Err() == nil {
			present, err := f.TestMany(watchCtx, stableKeys)
			if err == nil {
				checks.Add(1)
				for i, ok := range present {
					if !ok {
						absent.Add(1)
						t.Errorf("stable key %s tested absent", stableKeys[i])
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	ws := make([]*writer, writers)
	for w := range ws {
		ws[w] = &writer{w: w, writers: writers, next: int64(10_000_000 + w), rng: rand.New(rand.NewPCG(seed, uint64(w+2)))}
		for id := int64(stable + 1); id <= initial; id++ {
			if int(id%writers) == w {
				ws[w].rows = append(ws[w].rows, id)
			}
		}
	}
	var psqlDeleted []int64
	psqlID := int64(900_000_000)

	const phases = 5
	kills := 0
	for phase := range phases {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		var wg sync.WaitGroup
		var steps atomic.Int64
		for _, wr := range ws {
			wg.Go(func() {
				conn, err := pgx.Connect(t.Context(), e.pg.URL)
				if err != nil {
					t.Errorf("writer %d: %v", wr.w, err)
					return
				}
				defer conn.Close(context.Background())
				for ctx.Err() == nil {
					// Not ctx: a commit cut by its deadline may have landed.
					if err := wr.step(t.Context(), conn); err != nil {
						t.Errorf("writer %d: %v", wr.w, err)
						return
					}
					steps.Add(1)
					time.Sleep(time.Duration(wr.rng.IntN(2000)) * time.Microsecond)
				}
			})
		}
		// One writer through psql: three rows in, one out, one renamed.
		a, b, c := psqlID+1, psqlID+2, psqlID+3
		psqlID += 10
		sql := fmt.Sprintf(`BEGIN; INSERT INTO items VALUES (%d, 'p'), (%d, 'p'), (%d, 'p'); DELETE FROM items WHERE id = %d; UPDATE items SET id = %d WHERE id = %d; COMMIT;`, a, b, c, a, psqlID+4, b)
		if out, err := exec.Command(psql, "-X", "-v", "ON_ERROR_STOP=1", "-d", e.pg.URL, "-c", sql).CombinedOutput(); err != nil {
			t.Fatalf("psql: %v\n%s", err, out)
		}
		psqlDeleted = append(psqlDeleted, a, b)

		// Kill the sync at random moments while the writers write.
		for ctx.Err() == nil {
			time.Sleep(time.Duration(100+rng.IntN(700)) * time.Millisecond)
			if ctx.Err() != nil {
				break
			}
			p.kill()
			kills++
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			p.start()
		}
		wg.Wait()
		cancel()
		if phase == 2 {
			// PostgreSQL restarts under the running sync, between writes.
			e.pg.restart()
		}
		e.caughtUp(t, "items")
		e.checkEqual(t, "items")
		var deleted []string
		for _, wr := range ws {
			for _, id := range wr.deleted {
				deleted = append(deleted, fmt.Sprint(id))
			}
		}
		for _, id := range psqlDeleted {
			deleted = append(deleted, fmt.Sprint(id))
		}
		present, err := f.TestMany(t.Context(), deleted)
		if err != nil {
			t.Fatal(err)
		}
		ghosts := 0
		for _, ok := range present {
			if ok {
				ghosts++
			}
		}
		in, _ := f.Info(t.Context())
		expected := in.FalsePositiveRate * float64(len(deleted))
		t.Logf("phase %d: %d transactions, %d rows, %d deleted keys, %d test present (%.1f expected at p=%.2g), %d kills so far",
			phase, steps.Load(), in.Items, len(deleted), ghosts, expected, in.FalsePositiveRate, kills)
		if float64(ghosts) > 3*expected+5 {
			t.Errorf("%d of %d deleted keys test present, want about %.1f (the false-positive rate)", ghosts, len(deleted), expected)
		}
		if t.Failed() {
			break
		}
	}
	stopWatch()
	watch.Wait()
	log, _ := os.ReadFile(p.log)
	replays := 0
	for _, run := range strings.Split(string(log), "--- start") {
		if i := strings.LastIndex(run, "replayed="); i >= 0 {
			n := 0
			fmt.Sscan(run[i+len("replayed="):], &n)
			replays += n
		}
	}
	t.Logf("%d starts of the sync process, %d retries after a lost connection (PostgreSQL's restart), %d pending groups replayed (at least: stats every 50 ms)",
		p.runs, strings.Count(string(log), "retrying in"), replays)
	if checks.Load() < 50 || absent.Load() != 0 {
		t.Errorf("stable keys: %d checks, %d absences; want many checks and no absence", checks.Load(), absent.Load())
	}
}
