package main

import (
	"flag"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rbloom/rbloom"
)

// settings are what every process of one stream must agree on: its name,
// the window's sizing (a window stores no settings), and how long batches
// are remembered.
type settings struct {
	name            string
	eventsPerBucket uint64
	errorRate       float64
	bucket, span    time.Duration
	// ttl is how long the window remembers a batch id, and how long
	// journals and applied markers live: an entry must be handled within
	// it for its batch to be replayed exactly.
	ttl time.Duration
}

func (s *settings) register(fs *flag.FlagSet, name string) {
	fs.StringVar(&s.name, "name", name, "name of the stream, its keys and its window")
	fs.Uint64Var(&s.eventsPerBucket, "events-per-bucket", 1_000_000, "distinct events of one bucket of the window")
	fs.Float64Var(&s.errorRate, "error-rate", 0.01, "false-positive rate wanted over the window")
	fs.DurationVar(&s.bucket, "bucket", 15*time.Minute, "time of one generation of the window")
	fs.DurationVar(&s.span, "span", time.Hour, "how long an event is remembered, at least")
	fs.DurationVar(&s.ttl, "ttl", time.Hour, "how long batches can be replayed: pending entries must be handled within it")
}

func (s settings) keys() keys { return newKeys(s.name) }

// window returns the stream's dedup window; it does not contact Redis.
func (s settings) window(rdb redis.UniversalClient) (*rbloom.Window, error) {
	return rbloom.NewWindow(rdb, s.name, rbloom.WindowOptions{
		EventsPerBucket: s.eventsPerBucket, ErrorRate: s.errorRate,
		Bucket: s.bucket, Span: s.span, IDLifetime: s.ttl,
	})
}
