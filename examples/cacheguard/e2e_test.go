package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom/rbloomtest"
)

// event is one request of the end-to-end test, between two ticks of a
// clock shared by all clients: it ran entirely within [start, end].
type event struct {
	method, id string
	start, end int64
	status     int
	by         string // X-Answered-By
}

// The service, on a real redis-server and SQLite, under concurrent clients
// that insert, delete and look up random ids: no row that surely existed
// during a lookup is answered 404, and most lookups of absent ids never
// reach the database.
func TestEndToEnd(t *testing.T) {
	endToEnd(t, newTable(t))
}

// endToEnd runs the end-to-end test on tbl, which must be empty.
func endToEnd(t *testing.T, tbl *table) {
	const (
		universe = 2000 // ids k0 .. k1999
		seeded   = 600  // rows in the table before the service starts
		clients  = 8
		requests = 500 // per client
	)
	ids := make([]string, universe)
	for i := range ids {
		ids[i] = fmt.Sprintf("k%d", i)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	seed(t, tbl, ids[:seeded])

	rdb := redis.NewClient(&redis.Options{Addr: rbloomtest.StartRedis(t)})
	defer rdb.Close()
	g := testGuard(t, tbl, rdb, universe) // sized for every id at 1%
	if n, err := g.warm(t.Context()); err != nil || n != seeded {
		t.Fatalf("warm = %d, %v; want %d keys", n, err, seeded)
	}
	srv := httptest.NewServer(g.handler())
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()

	var clock atomic.Int64
	do := func(method, id string, body []byte) event {
		url := srv.URL + "/items/" + id
		if method == http.MethodPost {
			url = srv.URL + "/items"
		}
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			panic(err)
		}
		e := event{method: method, id: id, start: clock.Add(1)}
		resp, err := client.Do(req)
		e.end = clock.Add(1)
		if err != nil {
			t.Errorf("%s %s: %v", method, id, err)
			return e
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		e.status, e.by = resp.StatusCode, resp.Header.Get("X-Answered-By")
		return e
	}

	events := make([][]event, clients)
	var wg sync.WaitGroup
	for c := range clients {
		rng := rand.New(rand.NewPCG(uint64(c), 1))
		wg.Go(func() {
			for range requests {
				id := ids[rng.IntN(universe)]
				if rng.IntN(4) == 0 { // a quarter of requests on 40 hot ids, to race on the same rows
					id = ids[rng.IntN(40)]
				}
				var e event
				switch r := rng.IntN(100); {
				case r < 60:
					e = do(http.MethodGet, id, nil)
				case r < 85:
					body, _ := json.Marshal(item{ID: id, Value: "v"})
					e = do(http.MethodPost, id, body)
				default:
					e = do(http.MethodDelete, id, nil)
				}
				events[c] = append(events[c], e)
			}
		})
	}
	wg.Wait()

	// The seeded rows were inserted before the first tick.
	byID := map[string][]event{}
	for _, id := range ids[:seeded] {
		byID[id] = append(byID[id], event{method: http.MethodPost, id: id, status: http.StatusCreated})
	}
	var lookups, absent, absentByFilter, racing, falsePositives int
	for _, es := range events {
		for _, e := range es {
			byID[e.id] = append(byID[e.id], e)
		}
	}
	for _, es := range events {
		for _, e := range es {
			if !wantStatus(e) {
				t.Errorf("%s %s answered %d", e.method, e.id, e.status)
			}
			if e.method != http.MethodGet {
				continue
			}
			lookups++
			if e.status != http.StatusNotFound {
				continue
			}
			absent++
			if e.by == string(byFilter) {
				absentByFilter++
			}
			if e.by == string(byDatabase) {
				if overlapsWrite(byID[e.id], e) {
					racing++ // the row was being inserted or deleted
				} else {
					falsePositives++
				}
			}
			if surelyPresent(byID[e.id], e) {
				t.Errorf("GET %s [%d, %d] answered 404 by the %s, but its row existed throughout", e.id, e.start, e.end, e.by)
			}
		}
	}

	falseNegatives, ghosts := audit(t, g, ids)
	if len(falseNegatives) > 0 {
		t.Errorf("%d rows test absent in the filter: %q", len(falseNegatives), falseNegatives)
	}
	s := g.stats.snapshot()
	if absent == 0 {
		t.Fatal("no lookup of an absent id")
	}
	share := float64(absentByFilter) / float64(absent)
	t.Logf("%d requests from %d clients, %d lookups: %d for absent ids, %d of them (%.1f%%) answered by the filter without a database query",
		clients*requests, clients, lookups, absent, absentByFilter, 100*share)
	t.Logf("the %d others: %d false positives of the filter, %d raced with an insert or delete of the same id",
		absent-absentByFilter, falsePositives, racing)
	t.Logf("/stats: %+v", s)
	t.Logf("afterwards: %d rows, %d ghosts, %d false negatives", len(rows(t, tbl)), len(ghosts), len(falseNegatives))
	if s.AnsweredByFilter != int64(absentByFilter) || s.Lookups != int64(lookups) {
		t.Errorf("stats = %+v, but clients saw %d lookups, %d answered by the filter", s, lookups, absentByFilter)
	}
	if share < 0.9 {
		t.Errorf("the filter answered %.1f%% of lookups of absent ids, want > 90%%", 100*share)
	}
}

// wantStatus reports whether e's status is one its method may answer.
func wantStatus(e event) bool {
	switch e.method {
	case http.MethodGet:
		return e.status == http.StatusOK || e.status == http.StatusNotFound
	case http.MethodPost:
		return e.status == http.StatusCreated || e.status == http.StatusConflict
	default:
		return e.status == http.StatusNoContent || e.status == http.StatusNotFound
	}
}

// surelyPresent reports whether, judging by the requests on its id, a row
// existed during all of lookup: some insert had committed before the lookup
// started, and no delete that removed a row overlapped the time from the
// start of that insert to the end of the lookup.
func surelyPresent(es []event, lookup event) bool {
	for _, ins := range es {
		if ins.method != http.MethodPost || ins.status != http.StatusCreated || ins.end >= lookup.start {
			continue
		}
		deleted := false
		for _, del := range es {
			if del.method == http.MethodDelete && del.status == http.StatusNoContent &&
				del.end > ins.start && del.start < lookup.end {
				deleted = true
				break
			}
		}
		if !deleted {
			return true
		}
	}
	return false
}

// overlapsWrite reports whether an insert (whose add is in the filter
// before its row, or until it is taken back after a conflict) or a delete
// of a row overlapped lookup.
func overlapsWrite(es []event, lookup event) bool {
	for _, w := range es {
		write := w.method == http.MethodPost ||
			w.method == http.MethodDelete && w.status == http.StatusNoContent
		if write && w.start < lookup.end && w.end > lookup.start {
			return true
		}
	}
	return false
}
