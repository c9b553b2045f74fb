package bench

import (
	"context"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The chart shows what batching buys: throughput against the number of
// items per call (library) or per pipeline flush (limits), for adds and
// tests, each beside its limit at the same batch size.

// series are the lines of the chart, in the order a point measures them:
// an add before the test that reads it.
var series = [4]string{
	"Counting.AddMany",
	"limit: BITFIELD INCRBY u4, pipelined",
	"Counting.TestMany",
	"limit: BITFIELD_RO GET u4, pipelined",
}

// point is the throughput of every series at one batch size.
type point struct {
	batch int
	items int        // items measured per series
	rates [4]float64 // items per second, in the order of series
}

// sweep measures every series at every batch size of the configuration,
// on fresh items: ChartItems items per series and point at most, at least
// one whole batch. Like the table's rows, the points take turns: each round
// measures a slice of every point's items.
func (b *bench) sweep(ctx context.Context) ([]point, error) {
	points := make([]point, len(b.cfg.ChartBatches))
	elapsed := make([][4]time.Duration, len(points))
	for i, batch := range b.cfg.ChartBatches {
		points[i] = point{batch: batch, items: max(min(b.cfg.ChartItems, max(100*batch, 2_000)), batch)}
	}
	rounds := b.cfg.Rounds
	for round := range rounds {
		for i, p := range points {
			// Whole batches per round, but for the last of all.
			batch, n := p.batch, p.items
			batches := (n + batch - 1) / batch
			lo, hi := min(n, batch*(batches*round/rounds)), min(n, batch*(batches*(round+1)/rounds))
			if hi == lo {
				continue
			}
			prefix := "chart-" + strconv.Itoa(batch)
			lib, lim := names(prefix+"-counting", lo, hi), names(prefix+"-u4", lo, hi)
			ops := [4]func() error{
				func() error {
					return chunks(lib, batch, func(part []string) error {
						_, err := b.counting.AddMany(ctx, part)
						return err
					})
				},
				func() error { return pipelined(ctx, b.rdb, lim, batch, b.u4.incrArgs) },
				func() error {
					return chunks(lib, batch, func(part []string) error {
						return allTrue("TestMany", part)(b.counting.TestMany(ctx, part))
					})
				},
				func() error { return pipelined(ctx, b.rdb, lim, batch, b.u4.getArgs) },
			}
			for j, op := range ops {
				start := time.Now()
				if err := op(); err != nil {
					return nil, fmt.Errorf("bench: chart, %s, batch %d: %w", series[j], batch, err)
				}
				elapsed[i][j] += time.Since(start)
			}
			if b.cfg.Progress != nil {
				fmt.Fprintf(b.cfg.Progress, "round %d/%d  chart, batch %s: %s items per series\n",
					round+1, rounds, count(batch), count(hi-lo))
			}
		}
	}
	for i := range points {
		for j, d := range elapsed[i] {
			points[i].rates[j] = float64(points[i].items) / d.Seconds()
		}
	}
	return points, nil
}

// names returns prefix:lo .. prefix:hi-1.
func names(prefix string, lo, hi int) []string {
	items := make([]string, 0, hi-lo)
	for i := lo; i < hi; i++ {
		items = append(items, prefix+":"+strconv.Itoa(i))
	}
	return items
}

// drawChart writes the chart of points as a PNG to path, making its
// directory if needed.
func (b *bench) drawChart(path string, points []point) error {
	if len(points) == 0 {
		return fmt.Errorf("no batch sizes to draw")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("rbloom throughput by batch size (Redis %s, one connection, k = %d)", b.version, b.k)
	p.X.Label.Text = "items per call (library) or per pipeline flush (limit)"
	p.Y.Label.Text = "items per second"
	// x is log10 of the batch size on a linear axis, labelled with the
	// sizes: plot.LogScale would place the axis label off centre.
	x := func(batch int) float64 { return math.Log10(float64(batch)) }
	var ticks []plot.Tick
	for _, pt := range points {
		ticks = append(ticks, plot.Tick{Value: x(pt.batch), Label: count(pt.batch)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min = x(points[0].batch) - 0.2
	p.X.Max = x(points[len(points)-1].batch) + 0.2
	p.Y.Min = 0
	p.Y.Tick.Marker = kiloTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true

	adds := color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	tests := color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	for i, name := range series {
		xys := make(plotter.XYs, len(points))
		for j, pt := range points {
			xys[j] = plotter.XY{X: x(pt.batch), Y: pt.rates[i]}
			p.Y.Max = max(p.Y.Max, pt.rates[i]*1.15)
		}
		line, dots, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		c := adds
		if i >= 2 {
			c = tests
		}
		line.Color, dots.Color = c, c
		line.Width = vg.Points(2)
		dots.Shape = draw.CircleGlyph{}
		if i%2 == 1 { // the limits: dashed, hollow points
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
			dots.Shape = draw.RingGlyph{}
		}
		p.Add(line, dots)
		p.Legend.Add(name, line, dots)
	}

	img := vgimg.New(9*vg.Inch, 5.5*vg.Inch)
	margin := vg.Points(8)
	p.Draw(draw.Crop(draw.New(img), margin, -2*margin, margin, -margin))
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// kiloTicks are about six ticks at round numbers, labelled in thousands:
// "150k".
type kiloTicks struct{}

func (kiloTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return nil
	}
	decade := math.Pow(10, math.Floor(math.Log10((hi-lo)/6)))
	var step float64
	for _, f := range []float64{1, 2, 5, 10} {
		if step = decade * f; (hi-lo)/step <= 6 {
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi && len(ticks) < 100; v += step {
		label := "0"
		if v != 0 {
			label = strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}
