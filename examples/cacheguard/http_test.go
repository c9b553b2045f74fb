package main

import (
	"encoding/json"
	"maps"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHTTP(t *testing.T) {
	g := testGuard(t, newTable(t), newMiniredis(t), 1000)
	if _, err := g.warm(t.Context()); err != nil {
		t.Fatal(err)
	}
	h := g.handler()
	tests := []struct {
		method, path, body string
		wantCode           int
		wantBody           string // a part of it
	}{
		{"POST", "/items", `{"id":"a1","value":"hello"}`, 201, `"value":"hello"`},
		{"POST", "/items", `{"id":"a1","value":"again"}`, 409, "id exists"},
		{"POST", "/items", `{"id":"a/1","value":"x"}`, 400, "id:"},
		{"POST", "/items", `{"id":"","value":"x"}`, 400, "id:"},
		{"POST", "/items", `not json`, 400, "JSON"},
		{"GET", "/items/a1", "", 200, `{"id":"a1","value":"hello"}`},
		{"GET", "/items/b2", "", 404, "not found"},
		{"DELETE", "/items/a1", "", 204, ""},
		{"DELETE", "/items/a1", "", 404, "not found"},
		{"GET", "/items/a1", "", 404, "not found"},
		{"PUT", "/items/a1", "", 405, ""},
		{"GET", "/stats", "", 200, `"lookups":3`},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.wantCode || !strings.Contains(rec.Body.String(), tt.wantBody) {
			t.Errorf("%s %s %s = %d %q, want %d and %q", tt.method, tt.path, tt.body, rec.Code, rec.Body.String(), tt.wantCode, tt.wantBody)
		}
	}

	var s statsJSON
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/stats", nil))
	if err := json.NewDecoder(rec.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	want := statsJSON{Lookups: 3, AnsweredByFilter: 2, SentToDatabase: 1, AbsentAnsweredByFilterRatio: 1}
	if s != want {
		t.Errorf("GET /stats = %+v, want %+v", s, want)
	}
	// The names say what each field is: counts of lookups, and a ratio.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/stats", nil))
	var fields map[string]any
	if err := json.NewDecoder(rec.Body).Decode(&fields); err != nil {
		t.Fatal(err)
	}
	wantFields := map[string]any{
		"lookups":                           3.0,
		"lookups_answered_absent_by_filter": 2.0,
		"lookups_sent_to_database":          1.0,
		"lookups_false_positive":            0.0,
		"lookups_filter_unavailable":        0.0,
		"absent_answered_by_filter_ratio":   1.0,
	}
	if !maps.Equal(fields, wantFields) {
		t.Errorf("GET /stats = %v, want %v", fields, wantFields)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/items/zz", nil))
	if got := rec.Header().Get("X-Answered-By"); got != "filter" {
		t.Errorf("GET /items/zz: X-Answered-By = %q, want filter", got)
	}
}
