package main

import (
	"encoding/json"
	"errors"
	"log"
	"net/http"
)

// item is a row, as JSON.
type item struct {
	ID    string `json:"id"`
	Value string `json:"value"`
}

// handler serves
//
//	GET    /items/{id}  200 and the item, or 404
//	POST   /items       {"id": ..., "value": ...}: 201, or 409 if the id exists
//	DELETE /items/{id}  204, or 404
//	GET    /stats       what the filter saved
//
// Lookups answer with the header X-Answered-By: filter when the database
// was not asked, database otherwise.
func (g *guard) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", g.serveGet)
	mux.HandleFunc("POST /items", g.servePost)
	mux.HandleFunc("DELETE /items/{id}", g.serveDelete)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, g.stats.snapshot())
	})
	return mux
}

func (g *guard) serveGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	value, by, err := g.get(r.Context(), id)
	w.Header().Set("X-Answered-By", string(by))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, item{ID: id, Value: value})
}

func (g *guard) servePost(w http.ResponseWriter, r *http.Request) {
	var it item
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&it); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want a JSON body {\"id\": ..., \"value\": ...}"})
		return
	}
	if !validID(it.ID) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "id: 1 to 128 letters, digits, '-', '_' or '.'"})
		return
	}
	if err := g.insert(r.Context(), it.ID, it.Value); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, it)
}

func (g *guard) serveDelete(w http.ResponseWriter, r *http.Request) {
	if err := g.delete(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// validID reports whether id is 1 to 128 characters from [A-Za-z0-9._-]:
// ids that a URL path carries as they are. The filter and the table must
// see the same bytes for the same row; an id column of another type (an
// integer, say, where "7" and "07" are one row) needs the key in its
// canonical form before it goes to the filter.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return false
		}
	}
	return true
}

func writeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errNotFound):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
	case errors.Is(err, errExists):
		writeJSON(w, http.StatusConflict, map[string]string{"error": "id exists"})
	default:
		log.Printf("request failed: %v", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "try again later"})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("write response: %v", err)
	}
}
