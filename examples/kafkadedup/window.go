package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rbloom/rbloom"
)

// openWindow returns the pipeline's dedup window, and makes it while the
// consumer group has committed no offset: that is where the stream
// starts. No call makes a window, so once offsets are committed a window
// Redis lost fails every call with rbloom.ErrNotFound, and the consumers
// stop rather than count again the events it held; making it then (the
// same Create) is an operator's choice, taking those duplicates.
func openWindow(ctx context.Context, rdb redis.UniversalClient, adm *kadm.Client, cfg config) (*rbloom.Window, error) {
	win, err := rbloom.NewWindow(rdb, cfg.window, cfg.windowOptions)
	if err != nil {
		return nil, err
	}
	offsets, err := adm.FetchOffsets(kadm.RequireStable(ctx), cfg.group)
	if err == nil {
		err = offsets.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) { // a group never joined committed nothing
		return nil, fmt.Errorf("the offsets group %s committed: %w", cfg.group, err)
	}
	committed := 0
	offsets.Each(func(o kadm.OffsetResponse) {
		if o.At >= 0 {
			committed++
		}
	})
	if committed == 0 {
		if err := win.Create(ctx); err != nil {
			return nil, err
		}
	}
	return win, nil
}
