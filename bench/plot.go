package bench

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writePlots draws, per case: latency and throughput against threads
// (when the case has more than one thread count), and a latency histogram
// per path (when the suite kept samples). It returns the files by case.
func (r *Report) writePlots(dir string) (map[string][]string, error) {
	out := map[string][]string{}
	var errs []error
	for _, cs := range r.cases() {
		if len(r.threads(cs)) > 1 {
			for _, kind := range []string{"latency", "throughput"} {
				name := kind + "-" + fileSafe(cs) + ".png"
				p := r.vsThreads(cs, kind == "latency")
				if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, name)); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					continue
				}
				out[cs] = append(out[cs], name)
			}
		}
		name := "hist-" + fileSafe(cs) + ".png"
		ok, err := r.histogram(cs, filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		} else if ok {
			out[cs] = append(out[cs], name)
		}
	}
	return out, errors.Join(errs...)
}

// positive keeps values usable on a log axis.
func positive(v float64) float64 { return math.Max(v, 1e-3) }

func (r *Report) vsThreads(cs string, latency bool) *plot.Plot {
	p := plot.New()
	ths := r.threads(cs)
	p.X.Label.Text = r.ThreadsLabel
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, t := range ths {
		ticks = append(ticks, plot.Tick{Value: float64(t), Label: strconv.Itoa(t)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	if latency {
		p.Title.Text = fmt.Sprintf("%s %s: latency (solid p50, dashed p99)", r.Suite, cs)
		p.Y.Label.Text = "µs"
	} else {
		p.Title.Text = fmt.Sprintf("%s %s: throughput", r.Suite, cs)
		p.Y.Label.Text = r.ThroughputUnit
	}
	for i, path := range r.paths(cs) {
		var p50, p99 plotter.XYs
		for _, th := range ths {
			res, ok := r.find(cs, path, th)
			if !ok {
				continue
			}
			if latency {
				p50 = append(p50, plotter.XY{X: float64(th), Y: positive(res.P50US)})
				p99 = append(p99, plotter.XY{X: float64(th), Y: positive(res.P99US)})
			} else {
				p50 = append(p50, plotter.XY{X: float64(th), Y: positive(res.Throughput)})
			}
		}
		if len(p50) == 0 {
			continue
		}
		c := plotutil.Color(i)
		l, pts, err := plotter.NewLinePoints(p50)
		if err != nil {
			continue
		}
		l.Color, pts.Color, pts.Shape = c, c, plotutil.Shape(i)
		l.Width = vg.Points(1.5)
		p.Add(l, pts)
		p.Legend.Add(path, l, pts)
		if latency {
			if l99, err := plotter.NewLine(p99); err == nil {
				l99.Color = c
				l99.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				p.Add(l99)
			}
		}
	}
	p.Add(plotter.NewGrid())
	p.Legend.Left = true
	if p.Y.Min > 0 && p.Y.Max > p.Y.Min { // room for the legend above the lines (log axis)
		p.Y.Max *= math.Pow(p.Y.Max/p.Y.Min, 0.12*float64(len(r.paths(cs))))
	}
	return p
}

// histogram draws one panel per path of case cs: the share of operations
// per latency bin, on log-spaced bins shared by the panels.
func (r *Report) histogram(cs, file string) (bool, error) {
	var keys []sampleKey
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, k := range r.sorder {
		s := r.samples[k]
		if k.cs != cs || len(s) == 0 {
			continue
		}
		keys = append(keys, k)
		for _, d := range s {
			v := positive(float64(d) / float64(time.Microsecond))
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if len(keys) == 0 {
		return false, nil
	}
	if hi <= lo {
		hi = lo * 1.1
	}
	const nbins = 48
	llo, lhi := math.Log10(lo), math.Log10(hi)
	step := (lhi - llo) / nbins
	var plots [][]*plot.Plot
	for i, k := range keys {
		s := r.samples[k]
		bins := make([]plotter.HistogramBin, nbins)
		for b := range bins {
			bins[b].Min = math.Pow(10, llo+float64(b)*step)
			bins[b].Max = math.Pow(10, llo+float64(b+1)*step)
		}
		for _, d := range s {
			v := positive(float64(d) / float64(time.Microsecond))
			b := int((math.Log10(v) - llo) / step)
			b = min(max(b, 0), nbins-1)
			bins[b].Weight++
		}
		for b := range bins {
			bins[b].Weight /= float64(len(s))
		}
		h := &plotter.Histogram{Bins: bins, FillColor: plotutil.Color(i), LineStyle: draw.LineStyle{Color: color.Gray{Y: 60}, Width: vg.Points(0.5)}}
		p := plot.New()
		p.Title.Text = r.histTitle(k)
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.X.Min, p.X.Max = lo, hi
		p.Y.Label.Text = "share"
		if i == len(keys)-1 {
			p.X.Label.Text = "latency (µs)"
		}
		p.Add(h)
		p.X.Min, p.X.Max = lo, hi
		plots = append(plots, []*plot.Plot{p})
	}
	w, hgt := 8*vg.Inch, vg.Length(len(keys))*2*vg.Inch
	img := vgimg.New(w, hgt)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(keys), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(8)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(file)
	if err != nil {
		return false, err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return false, err
	}
	return true, f.Close()
}

// histTitle is the title of k's histogram panel. Its percentiles are of
// the operations pooled from every run, as the panel draws them, which
// is not the tables' p50 (the median of the runs' p50s): where runs
// differ, the fast ones pool more operations, so the title says which.
func (r *Report) histTitle(k sampleKey) string {
	s := sorted(r.samples[k])
	ops := fmt.Sprintf("%d ops", len(s))
	if res, ok := r.find(k.cs, k.path, k.threads); ok && res.Runs > 1 {
		ops = fmt.Sprintf("%d ops of %d runs pooled", len(s), res.Runs)
	}
	label := r.ThreadsLabel
	if k.threads == 1 {
		label = strings.TrimSuffix(label, "s") // 1 client, 1 thread
	}
	return fmt.Sprintf("%s %s: %s, %d %s; %s: p50 %s µs, p99 %s µs", r.Suite, k.cs, k.path, k.threads, label,
		ops, fmtUS(float64(Percentile(s, 50))/1e3), fmtUS(float64(Percentile(s, 99))/1e3))
}

// sorted returns a sorted copy of s (samples pooled from several runs are
// not sorted as a whole).
func sorted(s []time.Duration) []time.Duration {
	c := append([]time.Duration(nil), s...)
	slices.Sort(c)
	return c
}
