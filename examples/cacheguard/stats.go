package main

import "sync/atomic"

// stats counts what lookups cost. It is safe for concurrent use.
type stats struct {
	lookups, filterAbsent, dbQueries, falsePositives, filterUnavailable atomic.Int64
}

// statsJSON is what GET /stats answers. Every field but the last is a
// number of lookups (GET /items/{id}) since the service started; the last
// is a ratio. Inserts and deletes are not counted.
type statsJSON struct {
	// Lookups is every lookup.
	Lookups int64 `json:"lookups"`
	// AnsweredByFilter lookups were answered 404 by the filter alone: the
	// database queries saved.
	AnsweredByFilter int64 `json:"lookups_answered_absent_by_filter"`
	// SentToDatabase lookups queried the database: the filter said the id
	// may be present, or could not answer.
	SentToDatabase int64 `json:"lookups_sent_to_database"`
	// FalsePositives lookups were let through by the filter and found no
	// row: false positives of the filter, ghosts, or rows deleted between
	// the filter's answer and the query.
	FalsePositives int64 `json:"lookups_false_positive"`
	// FilterUnavailable lookups went to the database because the filter
	// could not answer: not loaded yet (ErrNotFound, ErrLoading, the
	// sync loading), or Redis failed.
	FilterUnavailable int64 `json:"lookups_filter_unavailable"`
	// AbsentAnsweredByFilterRatio is, of the lookups of absent ids that
	// the filter answered, the fraction (0 to 1) it answered alone:
	// AnsweredByFilter / (AnsweredByFilter + FalsePositives); 0 before
	// the first.
	AbsentAnsweredByFilterRatio float64 `json:"absent_answered_by_filter_ratio"`
}

func (s *stats) snapshot() statsJSON {
	out := statsJSON{
		Lookups:           s.lookups.Load(),
		AnsweredByFilter:  s.filterAbsent.Load(),
		SentToDatabase:    s.dbQueries.Load(),
		FalsePositives:    s.falsePositives.Load(),
		FilterUnavailable: s.filterUnavailable.Load(),
	}
	if absent := out.AnsweredByFilter + out.FalsePositives; absent > 0 {
		out.AbsentAnsweredByFilterRatio = float64(out.AnsweredByFilter) / float64(absent)
	}
	return out
}
