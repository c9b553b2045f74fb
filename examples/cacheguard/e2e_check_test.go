package main

import (
	"net/http"
	"testing"
)

// surelyPresent, which the end-to-end test trusts to find 404s that should
// not be, on histories of one id.
func TestSurelyPresent(t *testing.T) {
	ins := func(start, end int64) event {
		return event{method: http.MethodPost, start: start, end: end, status: http.StatusCreated}
	}
	del := func(start, end int64, status int) event {
		return event{method: http.MethodDelete, start: start, end: end, status: status}
	}
	get := event{method: http.MethodGet, start: 10, end: 11}
	tests := []struct {
		name    string
		history []event
		want    bool
	}{
		{"inserted before", []event{ins(1, 2)}, true},
		{"insert ends during the lookup", []event{ins(9, 10)}, false},
		{"conflicting insert", []event{{method: http.MethodPost, start: 1, end: 2, status: http.StatusConflict}}, false},
		{"deleted before", []event{ins(1, 2), del(3, 4, http.StatusNoContent)}, false},
		{"deleted during", []event{ins(1, 2), del(10, 12, http.StatusNoContent)}, false},
		{"delete started before the insert ended", []event{ins(1, 4), del(3, 5, http.StatusNoContent)}, false},
		{"delete found no row", []event{ins(1, 2), del(3, 4, http.StatusNotFound)}, true},
		{"deleted after", []event{ins(1, 2), del(12, 13, http.StatusNoContent)}, true},
		{"deleted, then inserted again", []event{ins(1, 2), del(3, 4, http.StatusNoContent), ins(5, 6)}, true},
		{"delete of an earlier row", []event{del(1, 2, http.StatusNoContent), ins(3, 4)}, true},
	}
	for _, tt := range tests {
		if got := surelyPresent(tt.history, get); got != tt.want {
			t.Errorf("%s: surelyPresent = %v, want %v", tt.name, got, tt.want)
		}
	}
}
