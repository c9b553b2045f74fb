package pgsync

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestReloadInPlace: -reload rebuilds the filter in place: a reader of
// the keys that stay in the table never sees one absent meanwhile, and
// the filter ends equal to the table.
func TestReloadInPlace(t *testing.T) {
	e, stop := following(t, 20_000)
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	whileReading(t, e, func() {
		cfg := e.config()
		cfg.Reload = true
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.crash = func(at string) error {
			if at == "load-batch" {
				time.Sleep(200 * time.Millisecond) // time for the reader to look
			}
			return nil
		}
		stop := runSync(t, s)
		for deadline := time.Now().Add(30 * time.Second); s.Stats().Phase != "streaming"; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the reload did not finish within 30s: %+v", s.Stats())
			}
		}
		if n := s.Stats().Loaded; n != 20_000 {
			t.Errorf("the reload loaded %d keys, want 20000", n)
		}
		e.caughtUp(t, "items")
		if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	})
}
