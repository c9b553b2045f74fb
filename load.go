package rbloom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A filter exists only on purpose: Create makes it empty, and a Rebuild
// that finds it missing loads it from its source. A handle given
// Options.Source loads it by itself: a call that finds the filter missing,
// or being loaded with nobody loading it (its loader died), starts a load
// in the background. Reads meanwhile fail with ErrLoading; writes wait
// until the load holds the filter (its claim), and are then applied to it
// as to a rebuild's. One load runs at a time per filter (the rebuild's
// lease): another process's load makes this one fail with ErrRebuilding,
// which is fine, as that one holds the filter.

// loadRetry is the least time between two loads started by one handle, so
// that a source that keeps failing is not hammered by every call.
const loadRetry = time.Second

// loader runs the loads of one handle (and of the handles made from it).
type loader struct {
	source func(add func(items []string) error) error

	mu      sync.Mutex
	claimed chan struct{} // closed once the running load holds the filter or ended
	err     error         // why the last load ended without holding the filter
	running bool
	started time.Time
}

// start starts a load of f unless one runs, or one started less than
// loadRetry ago and now is false (a read's: a write that finds the filter
// missing again needs a load now). It returns a channel closed once the
// load holds the filter or has ended.
func (l *loader) start(f *filter, now bool) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running || (!now && l.claimed != nil && time.Since(l.started) < loadRetry) {
		return l.claimed
	}
	claimed := make(chan struct{})
	l.running, l.started, l.claimed, l.err = true, time.Now(), claimed, nil
	var once sync.Once
	signal := func() { once.Do(func() { close(claimed) }) }
	go func() {
		err := f.rebuildInto(context.Background(), f, l.source, signal)
		l.mu.Lock()
		l.running = false
		if err != nil && !errors.Is(err, ErrRebuilding) {
			l.err = err
		}
		l.mu.Unlock()
		signal()
	}()
	return claimed
}

// lastErr returns why the last load ended without holding the filter.
func (l *loader) lastErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// notFound is the error for a filter none of whose partitions exists.
func (f *filter) notFound() error {
	return failf(ErrNotFound, "%s: no partition exists (%s read): it was never made, or Redis lost it; make it with Create (for an empty source) or load it from its source with Rebuild",
		f.name, f.parts[0].key)
}

// missing is the error of a read that found the filter missing: ErrNotFound,
// or, when f has a Source, ErrLoading, the load just started.
func (f *filter) missing() error {
	if f.loader == nil {
		return f.notFound()
	}
	f.loader.start(f, false)
	return failf(ErrLoading, "%s: the filter was missing, and this handle is loading it from Options.Source: ask the source meanwhile", f.name)
}

// loadingErr is the error of a read of partition p, which is being loaded.
// A handle with a Source starts a load, in case the loader died (another
// process's live load makes it give up at once).
func (f *filter) loadingErr(p int) error {
	if f.loader != nil {
		f.loader.start(f, false)
	}
	return failf(ErrLoading, "%s: %s is being loaded from the filter's source: ask the source until the load is over (Info.Loading)", f.name, f.parts[p].key)
}

// awaitLoad is called by a write that found the filter missing. Without a
// Source it returns ErrNotFound. With one, it starts a load and waits until
// the load holds the filter, so that the write can go again and be kept.
func (f *filter) awaitLoad(ctx context.Context) error {
	if f.loader == nil {
		return f.notFound()
	}
	select {
	case <-f.loader.start(f, true):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := f.loader.lastErr(); err != nil {
		return fmt.Errorf("%w; and loading it from Options.Source failed: %w", f.notFound(), err)
	}
	return nil
}
