package rbloom

import (
	"context"
	"time"
)

// every calls fn each period until ctx is done or fn reports that it is
// done: the renewal of a lease or of keys that expire unless renewed.
func every(ctx context.Context, period time.Duration, fn func() (done bool)) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if fn() {
			return
		}
	}
}
