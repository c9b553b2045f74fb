package main

import "sync/atomic"

// stats counts what lookups cost. It is safe for concurrent use.
type stats struct {
	lookups, filterAbsent, dbQueries, falsePositives, filterUnavailable atomic.Int64
}

// statsJSON is what GET /stats answers.
type statsJSON struct {
	Lookups int64 `json:"lookups"`
	// FilterAbsent lookups were answered 404 by the filter alone: the
	// database queries saved.
	FilterAbsent int64 `json:"filter_said_absent"`
	// DBQueries lookups asked the database.
	DBQueries int64 `json:"db_queries"`
	// FalsePositives lookups were let through by the filter and found no
	// row: false positives of the filter, ghosts, or rows deleted between
	// the filter's answer and the query.
	FalsePositives int64 `json:"false_positives"`
	// FilterUnavailable lookups asked the database because the filter
	// could not answer: not warmed yet, or Redis failed.
	FilterUnavailable int64 `json:"filter_unavailable"`
	// SavedShare is, of the lookups of absent ids that the filter answered,
	// the share it answered alone: FilterAbsent / (FilterAbsent +
	// FalsePositives).
	SavedShare float64 `json:"absent_answered_by_filter"`
}

func (s *stats) snapshot() statsJSON {
	out := statsJSON{
		Lookups:           s.lookups.Load(),
		FilterAbsent:      s.filterAbsent.Load(),
		DBQueries:         s.dbQueries.Load(),
		FalsePositives:    s.falsePositives.Load(),
		FilterUnavailable: s.filterUnavailable.Load(),
	}
	if absent := out.FilterAbsent + out.FalsePositives; absent > 0 {
		out.SavedShare = float64(out.FilterAbsent) / float64(absent)
	}
	return out
}
