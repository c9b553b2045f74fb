package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// The chart shows what batching buys: throughput against the number of
// items per call (library) or per pipeline flush (limits), for adds and
// tests, each beside its limit at the same batch size. This package only
// measures it; Config.Draw draws it, so that a program that runs the
// benchmark without a chart (cmd/rbloom) links no plotting library.

// Chart is what Run measured for the chart, handed to Config.Draw.
type Chart struct {
	Title  string       // names the server and k
	Series [4]string    // the lines: adds, their limit, tests, their limit
	Points []ChartPoint // by batch size, smallest first
}

// ChartPoint is the throughput of every series at one batch size.
type ChartPoint struct {
	Batch int
	Label string     // Batch as the report writes it ("1,000")
	Rates [4]float64 // items per second, in the order of Chart.Series
}

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

// chart returns the chart of points.
func (b *bench) chart(points []point) Chart {
	c := Chart{
		Title:  fmt.Sprintf("rbloom throughput by batch size (Redis %s, one connection, k = %d)", b.version, b.k),
		Series: series,
	}
	for _, p := range points {
		c.Points = append(c.Points, ChartPoint{Batch: p.batch, Label: count(p.batch), Rates: p.rates})
	}
	return c
}
