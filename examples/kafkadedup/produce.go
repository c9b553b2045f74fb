package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produce writes the clicks to the input topic, keyed by id, in order.
// Idempotent writes are off, as in a producer that predates them or a
// service that resends after a timeout: a retried request that the broker
// had written is written again, at new offsets. With idempotence on, the
// broker drops those retries itself, but not a resend by the application.
func produce(ctx context.Context, cfg config, written []event) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...), kgo.DefaultProduceTopic(cfg.input),
		kgo.DisableIdempotentWrite(), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		return fmt.Errorf("producer: %w (check -brokers)", err)
	}
	defer cl.Close()
	const chunk = 500
	for lo := 0; lo < len(written); lo += chunk {
		recs := make([]*kgo.Record, 0, chunk)
		for _, e := range written[lo:min(lo+chunk, len(written))] {
			v, err := json.Marshal(e)
			if err != nil {
				return fmt.Errorf("producer: encode %s: %w", e.ID, err)
			}
			recs = append(recs, &kgo.Record{Key: []byte(e.ID), Value: v})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return fmt.Errorf("producer: write to %s: %w", cfg.input, err)
		}
	}
	return nil
}

// createTopics creates the input and output topics with partitions each,
// at the cluster's default replication; topics that exist are kept.
func createTopics(ctx context.Context, cfg config, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...))
	if err != nil {
		return fmt.Errorf("create topics: %w (check -brokers)", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopics(ctx, partitions, -1, nil, cfg.input, cfg.output)
	if err != nil {
		return fmt.Errorf("create topics %s and %s: %w", cfg.input, cfg.output, err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w %s", r.Topic, r.Err, r.ErrMessage)
		}
	}
	return nil
}
