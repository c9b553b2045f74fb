package main

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows on a terminal how far load or unload has got: items done
// and their rate, and, when the input's size is known, a bar of the bytes
// read with the time left. A nil *progress shows nothing: rbloom draws no
// bar into a file or a pipe, where it would only be noise.
type progress struct {
	bar   *progressbar.ProgressBar
	label string
	known bool // whether the size is known
	start time.Time
	shown time.Time // when update last drew
}

// redrawEvery spaces the updates that draw. The bar's own throttle would
// drop an update's new figures while keeping its new description.
const redrawEvery = 100 * time.Millisecond

// newProgress returns a progress drawn on w for an input of size bytes, or
// of unknown size when size <= 0.
func newProgress(w io.Writer, label string, size int64) *progress {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(label),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetRenderBlankState(true),
		// The summary line replaces the bar.
		progressbar.OptionClearOnFinish(),
	}
	if size > 0 {
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true))
	} else {
		size = -1 // a spinner
		opts = append(opts, progressbar.OptionSpinnerType(14), progressbar.OptionSetElapsedTime(true))
	}
	return &progress{
		bar:   progressbar.NewOptions64(size, opts...),
		label: label,
		known: size > 0,
		start: time.Now(),
	}
}

// update shows that items items and read bytes of the input are done.
func (p *progress) update(items, read int64) {
	if p == nil || time.Since(p.shown) < redrawEvery {
		return
	}
	p.shown = time.Now()
	p.bar.Describe(fmt.Sprintf("%s: %d items, %s", p.label, items, rate(items, time.Since(p.start))))
	if p.known {
		_ = p.bar.Set64(read) // past the size when the file grew: nothing to tell
	}
}

// finish clears the bar.
func (p *progress) finish() {
	if p == nil {
		return
	}
	_ = p.bar.Finish()
}

// rate formats n items done in d as "12345 items/s".
func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "- items/s"
	}
	return fmt.Sprintf("%.0f items/s", float64(n)/d.Seconds())
}
