package main

import (
	"bytes"
	"context"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbloom/rbloom/internal/bench"
	"github.com/rbloom/rbloom/rbloomtest"
)

// TestDrawPNG draws a chart of fixed figures and reads it back as a PNG.
func TestDrawPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docs", "throughput.png")
	c := bench.Chart{
		Title:  "test chart",
		Series: [4]string{"adds", "adds limit", "tests", "tests limit"},
		Points: []bench.ChartPoint{
			{Batch: 1, Label: "1", Rates: [4]float64{5e3, 6e3, 7e3, 8e3}},
			{Batch: 1000, Label: "1,000", Rates: [4]float64{2e5, 2.5e5, 3e5, 3.2e5}},
		},
	}
	if err := drawPNG(path, c); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err := png.Decode(f); err != nil || img.Bounds().Dx() < 600 {
		t.Errorf("chart %s: not a PNG of some size (%v)", path, err)
	}
	if err := drawPNG(path, bench.Chart{}); err == nil {
		t.Error("drawPNG of no points: no error")
	}
}

// TestRunQuick runs the command's benchmark, quick, on a redis-server of
// its own, and checks that it writes the PNG.
func TestRunQuick(t *testing.T) {
	addr := rbloomtest.StartRedis(t)
	path := filepath.Join(t.TempDir(), "throughput.png")
	t.Setenv("REDIS_URL", "")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-addr", addr, "-quick", "-chart", path}, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "(chart: "+path+")") {
		t.Errorf("report names no chart:\n%s", out.String())
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() < 1000 {
		t.Errorf("chart %s: %v, want a PNG", path, err)
	}
	if err := run(context.Background(), []string{"-addr", addr, "-quick"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-chart") {
		t.Errorf("run without -chart = %v, want an error naming -chart", err)
	}
}
