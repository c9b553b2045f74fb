package main

import (
	"errors"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/rbloom/rbloom/internal/bench"
)

// drawPNG writes c as a PNG to path, making its directory if needed: adds
// in one colour and tests in another, each library line solid beside its
// limit dashed.
func drawPNG(path string, c bench.Chart) error {
	points := c.Points
	if len(points) == 0 {
		return errors.New("no batch sizes to draw")
	}
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = "items per call (library) or per pipeline flush (limit)"
	p.Y.Label.Text = "items per second"
	// x is log10 of the batch size on a linear axis, labelled with the
	// sizes: plot.LogScale would place the axis label off centre.
	x := func(batch int) float64 { return math.Log10(float64(batch)) }
	var ticks []plot.Tick
	for _, pt := range points {
		ticks = append(ticks, plot.Tick{Value: x(pt.Batch), Label: pt.Label})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min = x(points[0].Batch) - 0.2
	p.X.Max = x(points[len(points)-1].Batch) + 0.2
	p.Y.Min = 0
	p.Y.Tick.Marker = kiloTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true

	adds := color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	tests := color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	for i, name := range c.Series {
		xys := make(plotter.XYs, len(points))
		for j, pt := range points {
			xys[j] = plotter.XY{X: x(pt.Batch), Y: pt.Rates[i]}
			p.Y.Max = max(p.Y.Max, pt.Rates[i]*1.15)
		}
		line, dots, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		col := adds
		if i >= 2 {
			col = tests
		}
		line.Color, dots.Color = col, col
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
