//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/pgsync"
	"github.com/rbloom/rbloom/rbloomtest"
)

// Rows inserted, deleted and re-keyed by psql, behind the service's back,
// while the service runs in the sync mode: after the sync's lag each
// inserted row is found and each deleted one answered 404 (by the filter,
// but for false positives); and no lookup of a row that exists throughout
// is ever answered 404, from before the sync has loaded the filter to the
// end. TestRowsInsertedBehindTheService is the dual-write mode, where such
// rows are answered 404 by the filter.
func TestRowsInsertedBehindTheServiceSynced(t *testing.T) {
	psql := lookPsql(t)
	url := startPostgres(t, "-c", "wal_level=logical", "-c", "max_replication_slots=4", "-c", "max_wal_senders=4")
	rdb := newRedis(t)
	ctx := t.Context()
	tbl, err := openPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	sql := func(stmts ...string) {
		t.Helper()
		runPsql(t, psql, url, stmts...)
	}
	// Rows there before the service: enough that the load takes a moment.
	const stable = 20_000
	sql(fmt.Sprintf(`INSERT INTO items SELECT 's' || i, 'old' FROM generate_series(0, %d) i`, stable-1))

	opts := rbloom.Options{Capacity: 100_000, ErrorRate: 0.01}
	filter, err := rbloom.NewCounting(rdb, "items", opts)
	if err != nil {
		t.Fatal(err)
	}
	g := &guard{table: tbl, filter: filter, rdb: rdb, record: recordKey("items"), follow: &follower{}}
	if err := tbl.ensurePublication(ctx, "cacheguard_items"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.handler())
	defer srv.Close()
	client := srv.Client()
	get := func(id string) (int, string) {
		resp, err := client.Get(srv.URL + "/items/" + id)
		if err != nil {
			t.Errorf("GET %s: %v", id, err)
			return 0, ""
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Answered-By")
	}

	// Before the sync runs, the filter's "absent" is no answer.
	if code, by := get("s1"); code != http.StatusOK || by != string(byDatabase) {
		t.Errorf("GET s1 before the sync = %d by the %s, want 200 by the database", code, by)
	}

	// A prober looks up rows that exist throughout, from before the sync
	// starts to the end of the test: none may be answered 404.
	var probes, probesBeforeLoaded atomic.Int64
	stopProbe := make(chan struct{})
	var probing sync.WaitGroup
	probing.Go(func() {
		rng := rand.New(rand.NewPCG(3, 4))
		for range 1_000_000 { // bounded; stopped long before
			select {
			case <-stopProbe:
				return
			default:
			}
			loaded := g.follow.loaded()
			id := fmt.Sprintf("s%d", rng.IntN(stable))
			if code, by := get(id); code != http.StatusOK {
				t.Errorf("GET %s, a row that exists throughout = %d by the %s, want 200", id, code, by)
			}
			probes.Add(1)
			if !loaded {
				probesBeforeLoaded.Add(1)
			}
		}
	})
	defer func() {
		close(stopProbe)
		probing.Wait()
		t.Logf("prober: %d lookups of rows that exist throughout, %d of them before the sync had loaded the filter; none answered 404",
			probes.Load(), probesBeforeLoaded.Load())
	}()

	syncCtx, stopSync := context.WithCancel(ctx)
	syncDone := make(chan error, 1)
	go func() {
		syncDone <- g.follow.run(syncCtx, syncConfig(url, "cacheguard_items", "cacheguard_items", rdb, "items", opts))
	}()
	defer func() {
		stopSync()
		if err := <-syncDone; err != nil {
			t.Errorf("sync: %v", err)
		}
	}()
	start := time.Now()
	eventually(t, 20*time.Second, "the sync to load the filter", func() bool {
		select {
		case err := <-syncDone:
			syncDone <- err
			t.Fatalf("sync stopped: %v", err)
		default:
		}
		return g.follow.loaded()
	})
	t.Logf("sync loaded %d keys after %v", mustStats(t, g).Loaded, time.Since(start).Round(time.Millisecond))

	// Inserted by psql: 300 rows in one transaction, 20 in one each.
	inserts := []string{`INSERT INTO items SELECT 'p' || i, 'psql' FROM generate_series(0, 299) i`}
	for i := 300; i < 320; i++ {
		inserts = append(inserts, fmt.Sprintf(`INSERT INTO items VALUES ('p%d', 'psql')`, i))
	}
	sql(inserts...)
	var inserted []string
	for i := range 320 {
		inserted = append(inserted, fmt.Sprintf("p%d", i))
	}
	start = time.Now()
	waitStatus(t, get, inserted, http.StatusOK)
	t.Logf("%d rows inserted by psql: all found %v after psql returned", len(inserted), time.Since(start).Round(time.Millisecond))

	// Deleted by psql: 150 rows in one transaction, 10 in one each, and
	// one key changed by an UPDATE.
	deletes := []string{`DELETE FROM items WHERE id IN (SELECT 'p' || i FROM generate_series(0, 149) i)`}
	for i := 300; i < 310; i++ {
		deletes = append(deletes, fmt.Sprintf(`DELETE FROM items WHERE id = 'p%d'`, i))
	}
	deletes = append(deletes, `UPDATE items SET id = 'q310' WHERE id = 'p310'`)
	sql(deletes...)
	var deleted []string
	for _, id := range inserted {
		var n int
		if _, err := fmt.Sscanf(id, "p%d", &n); err != nil {
			t.Fatal(err)
		}
		if n < 150 || n >= 300 && n <= 310 {
			deleted = append(deleted, id)
		}
	}
	start = time.Now()
	waitStatus(t, get, deleted, http.StatusNotFound)
	t.Logf("%d rows deleted by psql: all answered 404 %v after psql returned", len(deleted), time.Since(start).Round(time.Millisecond))
	// And the filter follows the deletes: but for its false positives,
	// their 404s come to be the filter's, without a database query.
	var byFilter404 int
	eventually(t, 10*time.Second, "the deleted rows to be answered 404 by the filter", func() bool {
		byFilter404 = waitStatus(t, get, deleted, http.StatusNotFound)
		return byFilter404 >= len(deleted)*9/10
	})
	t.Logf("%d of them answered 404 by the filter %v after psql returned", byFilter404, time.Since(start).Round(time.Millisecond))
	// The UPDATE that re-keyed p310 is psql's last transaction: 90% of
	// the deletes answered by the filter may come from the first alone, so
	// q310 is waited for as the inserts were (README: a row another tool
	// wrote can answer 404 during the sync's lag).
	start = time.Now()
	waitStatus(t, get, []string{"q310"}, http.StatusOK)
	t.Logf("q310, the key an UPDATE gave a row, found %v after", time.Since(start).Round(time.Millisecond))
	for _, id := range inserted {
		if code, by := get(id); code != http.StatusOK && !slices.Contains(deleted, id) && id != "p310" {
			t.Errorf("GET %s, inserted and not deleted = %d by the %s, want 200", id, code, by)
		}
	}

	// The service's own writes: the filter is the sync's alone, and an
	// insert returns once the sync has applied it.
	resp, err := client.Post(srv.URL+"/items", "application/json", bytes.NewReader([]byte(`{"id":"mine","value":"v"}`)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, by := get("mine"); resp.StatusCode != http.StatusCreated || code != http.StatusOK {
		t.Errorf("POST mine = %d, then GET mine = %d by the %s; want 201, 200", resp.StatusCode, code, by)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/items/mine", nil)
	if resp, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE mine = %d, want 204", resp.StatusCode)
	}
	// The sync removes the key: one add, one remove, both the sync's.
	eventually(t, 10*time.Second, "the sync to remove mine", func() bool {
		n, err := g.filter.Count(ctx, "mine")
		return err == nil && n == 0
	})
	if code, by := get("mine"); code != http.StatusNotFound || by != string(byFilter) {
		t.Errorf("GET mine after its delete = %d by the %s, want 404 by the filter", code, by)
	}

	st := mustStats(t, g)
	if st.RemoveMisses != 0 {
		t.Errorf("sync stats = %+v: %d removes found their key absent, want 0", st, st.RemoveMisses)
	}
	if s := g.stats.snapshot(); s.FilterUnavailable == 0 {
		t.Errorf("stats = %+v, want lookups sent to the database before the sync had loaded the filter", s)
	}
	t.Logf("sync: %d changes in %d transactions applied, last commit-to-filter %v; /stats %+v",
		st.Applied, st.Transactions, st.LastApplyLag, g.stats.snapshot())
}

// waitStatus looks up ids until each has answered want once, for at most
// 10 s, and returns how many of the answers want were the filter's.
func waitStatus(t *testing.T, get func(string) (int, string), ids []string, want int) (byFilterCount int) {
	t.Helper()
	left := slices.Clone(ids)
	last := map[string]string{} // the last answer of each id left
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left = slices.DeleteFunc(left, func(id string) bool {
			code, by := get(id)
			if code == want && by == string(byFilter) {
				byFilterCount++
			}
			last[id] = fmt.Sprintf("%s: %d by the %s", id, code, by)
			return code == want
		})
		if len(left) == 0 {
			return byFilterCount
		}
		if time.Now().After(deadline) {
			var answers []string
			for _, id := range left[:min(len(left), 5)] {
				answers = append(answers, last[id])
			}
			t.Fatalf("after 10s, %d of %d lookups do not answer %d: %q ...", len(left), len(ids), want, answers)
		}
	}
}

// eventually calls cond every 20 ms until it reports true, and fails the
// test if that takes longer than within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
	}
}

// mustStats returns the running sync's progress.
func mustStats(t *testing.T, g *guard) pgsync.Stats {
	t.Helper()
	st, ok := g.follow.stats()
	if !ok {
		t.Fatal("the sync is not running")
	}
	return st
}

// main's wiring of the sync mode: run with -sync creates the publication,
// starts the sync, serves lookups from the filter once it is loaded, sees
// rows psql inserts, and returns nil when its context is done.
func TestRunSyncMode(t *testing.T) {
	psql := lookPsql(t)
	url := startPostgres(t, "-c", "wal_level=logical")
	t.Setenv("DATABASE_URL", url)
	t.Setenv("REDIS_URL", "redis://"+rbloomtest.StartRedis(t))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, addr, "", "items", rbloom.Options{Capacity: 10_000, ErrorRate: 0.01},
			syncFlags{url: url, publication: "cacheguard_items", slot: "cacheguard_items"})
	}()
	get := func(id string) (int, string) {
		resp, err := http.Get("http://" + addr + "/items/" + id)
		if err != nil {
			return 0, err.Error()
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Answered-By")
	}
	eventually(t, 20*time.Second, "the service to answer 404 by the filter", func() bool {
		select {
		case err := <-done:
			t.Fatalf("run returned %v", err)
		default:
		}
		code, by := get("x1")
		return code == http.StatusNotFound && by == string(byFilter)
	})
	runPsql(t, psql, url, `INSERT INTO items VALUES ('x1', 'psql')`)
	waitStatus(t, get, []string{"x1"}, http.StatusOK)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run after its context was cancelled = %v, want nil", err)
	}

	// A filter the dual-write mode loaded is not the sync's: the service
	// stops with the sync's error, rather than serve from it.
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(os.Getenv("REDIS_URL"), "redis://")})
	defer rdb.Close()
	dual, err := rbloom.NewCounting(rdb, "dual", rbloom.Options{Capacity: 10_000, ErrorRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if err := dual.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := dual.Add(t.Context(), "item:x1"); err != nil {
		t.Fatal(err)
	}
	err = run(t.Context(), addr, "", "dual", rbloom.Options{Capacity: 10_000, ErrorRate: 0.01},
		syncFlags{url: url, publication: "cacheguard_items", slot: "dual"})
	if !errors.Is(err, pgsync.ErrFilter) {
		t.Errorf("run on a filter the sync did not load = %v, want %v", err, pgsync.ErrFilter)
	}
}

// runPsql runs SQL statements with the psql client, each in a transaction
// of its own, failing the test on error.
func runPsql(t *testing.T, psql, url string, stmts ...string) {
	t.Helper()
	args := []string{url, "-v", "ON_ERROR_STOP=1", "-q"}
	for _, s := range stmts {
		args = append(args, "-c", s)
	}
	if out, err := exec.CommandContext(t.Context(), psql, args...).CombinedOutput(); err != nil {
		t.Fatalf("psql %q: %v\n%s", stmts, err, out)
	}
}

// lookPsql returns the path of psql, or skips the test (fails it under CI).
func lookPsql(t *testing.T) string {
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	if len(found) == 0 {
		skipOrFail(t, "psql not installed (apt-get install -y postgresql-client)")
	}
	return found[len(found)-1]
}
