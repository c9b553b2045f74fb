package main

import (
	"encoding/json"
	"fmt"
)

// event is one click: ID is unique per real click, and a producer that
// retries writes the same ID again. Entry is the id of the stream entry
// that carried it (a retried click has two entries).
type event struct {
	Entry    string `json:"entry,omitempty"`
	ID       string `json:"id"`
	Country  string `json:"country"`
	Campaign string `json:"campaign"`
}

// dimensions are the fields the consumers count by, as "name=value".
func (e event) dimensions() []string {
	return []string{"country=" + e.Country, "campaign=" + e.Campaign}
}

// fields are the stream entry's fields for e.
func (e event) fields() []any {
	return []any{"event", e.ID, "country", e.Country, "campaign", e.Campaign}
}

// fromEntry decodes a stream entry written by the producer.
func fromEntry(entry string, values map[string]any) (event, error) {
	e := event{Entry: entry}
	for name, dst := range map[string]*string{"event": &e.ID, "country": &e.Country, "campaign": &e.Campaign} {
		s, ok := values[name].(string)
		if !ok || s == "" {
			return event{}, fmt.Errorf("stream entry %s: field %q missing", entry, name)
		}
		*dst = s
	}
	return e, nil
}

// The journal keeps each event as JSON, entry id included.
func (e event) journalRecord() string {
	b, _ := json.Marshal(e) // strings only: cannot fail
	return string(b)
}

func fromJournalRecord(s string) (event, error) {
	var e event
	if err := json.Unmarshal([]byte(s), &e); err != nil || e.Entry == "" || e.ID == "" {
		return event{}, fmt.Errorf("journal record %q: not an event", s)
	}
	return e, nil
}
