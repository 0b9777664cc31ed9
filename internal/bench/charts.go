package bench

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff},
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// writeCharts writes the report's PNGs into dir and returns their names.
func writeCharts(rep *Report, dir string) ([]string, error) {
	var names []string
	add := func(name string, err error) error {
		if err != nil {
			return fmt.Errorf("chart %s: %w", name, err)
		}
		names = append(names, name)
		return nil
	}
	if len(rep.Runs) > 0 {
		if err := add("timeline.png", timelineChart(rep, filepath.Join(dir, "timeline.png"))); err != nil {
			return names, err
		}
		if err := add("systems.png", systemsChart(rep, filepath.Join(dir, "systems.png"))); err != nil {
			return names, err
		}
		for i, r := range rep.Runs {
			if (r.System != SystemRepstream && r.System != SystemKafka) || len(r.Components) == 0 {
				continue
			}
			name := fmt.Sprintf("components-%d.png", i+1)
			if err := add(name, componentsChart(r, filepath.Join(dir, name))); err != nil {
				return names, err
			}
		}
		if rep.Settings.Vary != "" {
			if err := add("vary.png", varyChart(rep, filepath.Join(dir, "vary.png"))); err != nil {
				return names, err
			}
		}
	}
	if len(rep.DBL) > 0 {
		if err := add("dbl-rows-per-commit.png", dblChart(rep, "DBL-12", filepath.Join(dir, "dbl-rows-per-commit.png"))); err != nil {
			return names, err
		}
		if err := add("dbl-jobs.png", dblChart(rep, "DBL-11", filepath.Join(dir, "dbl-jobs.png"))); err != nil {
			return names, err
		}
	}
	return names, nil
}

func line(p *plot.Plot, name string, c color.Color, pts plotter.XYs) error {
	if len(pts) == 0 {
		return nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

func scatter(p *plot.Plot, name string, c color.Color, pts plotter.XYs) error {
	if len(pts) == 0 {
		return nil
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	s.Color = c
	s.Radius = vg.Points(1.5)
	p.Add(s)
	p.Legend.Add(name, s)
	return nil
}

// timelineChart: throughput (top) and probe latency (below) over time, one
// series per run; with a stopped target (kafka, --kafka-targets 2), the
// source's WAL retained for the slot too.
func timelineChart(rep *Report, path string) error {
	top := plot.New()
	top.Title.Text = fmt.Sprintf("%s (%s): rows applied on the target per second", rep.Workload, rep.Mode)
	top.X.Label.Text = "seconds since the measured interval began"
	top.Y.Label.Text = "rows/s"
	top.Legend.Top = true
	bot := plot.New()
	bot.Title.Text = "latency probe: source commit → visible on the target"
	bot.X.Label.Text = "probe commit time (s)"
	bot.Y.Label.Text = "latency (ms)"
	bot.Legend.Top = true
	ret := plot.New()
	ret.Title.Text = "source WAL retained for the slot (a second target stopped until the load ended)"
	ret.X.Label.Text = "seconds since the measured interval began"
	ret.Y.Label.Text = "MB"
	ret.Legend.Top = true
	stopped := false
	for i, r := range rep.Runs {
		c := palette[i%len(palette)]
		stopped = stopped || r.StoppedTarget != nil
		var tp, lp, rp plotter.XYs
		for _, t := range r.Timeline {
			tp = append(tp, plotter.XY{X: t.T, Y: t.RowsPerSec})
			rp = append(rp, plotter.XY{X: t.T, Y: float64(t.RetainedWALBytes) / 1e6})
		}
		for _, p := range r.Probes {
			if p.LatencyMs >= 0 && p.T >= 0 {
				lp = append(lp, plotter.XY{X: p.T, Y: p.LatencyMs})
			}
		}
		label := r.Label
		if !r.Verified {
			label += " (FAILED)"
		}
		if err := line(top, label, c, tp); err != nil {
			return err
		}
		if err := scatter(bot, label, c, lp); err != nil {
			return err
		}
		if err := line(ret, label, c, rp); err != nil {
			return err
		}
	}
	if stopped {
		return savePanels(path, 900, 1000, top, bot, ret)
	}
	return savePanels(path, 900, 700, top, bot)
}

// componentsChart: repstream's per-component busy share (top) and items/s
// (bottom) over time.
func componentsChart(r *RunResult, path string) error {
	top := plot.New()
	top.Title.Text = r.Label + ": share of each second spent busy, per component"
	top.X.Label.Text = "seconds"
	top.Y.Label.Text = "busy %"
	top.Y.Min, top.Y.Max = 0, 100
	top.Legend.Top = true
	bot := plot.New()
	bot.Title.Text = "items per second (capture: messages, queue/apply: changes)"
	bot.X.Label.Text = "seconds"
	bot.Y.Label.Text = "items/s"
	bot.Legend.Top = true
	busy := map[string]plotter.XYs{}
	items := map[string]plotter.XYs{}
	var order []string
	for _, s := range r.Components {
		for _, rt := range s.Rates {
			if _, ok := busy[rt.Name]; !ok {
				order = append(order, rt.Name)
			}
			busy[rt.Name] = append(busy[rt.Name], plotter.XY{X: s.T, Y: rt.Busy * 100})
			items[rt.Name] = append(items[rt.Name], plotter.XY{X: s.T, Y: rt.ItemsPerSec})
		}
	}
	for i, name := range order {
		c := palette[i%len(palette)]
		if err := line(top, name, c, busy[name]); err != nil {
			return err
		}
		if err := line(bot, name, c, items[name]); err != nil {
			return err
		}
	}
	return savePanels(path, 900, 700, top, bot)
}

// varyChart: replication time and rows/s against the varied setting.
func varyChart(rep *Report, path string) error {
	name, _, _ := strings.Cut(rep.Settings.Vary, "=")
	top := plot.New()
	top.Title.Text = fmt.Sprintf("%s: replication time against %s", rep.Workload, name)
	top.X.Label.Text = name
	top.Y.Label.Text = "seconds"
	top.Legend.Top = true
	bot := plot.New()
	bot.Title.Text = "rows/s"
	bot.X.Label.Text = name
	bot.Y.Label.Text = "rows/s"
	bot.Legend.Top = true
	var secs, rate plotter.XYs
	var labels []string
	var native *RunResult
	for _, r := range rep.Runs {
		if r.System == SystemNative {
			native = r
			continue
		}
		if !r.Verified {
			continue
		}
		x, err := strconv.ParseFloat(strings.TrimRight(r.VaryValue, "kKmMgGB"), 64)
		if err != nil {
			x = float64(len(secs) + 1) // non-numeric values: by position
		}
		labels = append(labels, r.VaryValue)
		secs = append(secs, plotter.XY{X: x, Y: r.Replication.Seconds})
		rate = append(rate, plotter.XY{X: x, Y: r.Replication.RowsPerSec})
	}
	_ = labels
	if err := line(top, "repstream", palette[0], secs); err != nil {
		return err
	}
	if err := line(bot, "repstream", palette[0], rate); err != nil {
		return err
	}
	if native != nil && native.Verified && len(secs) > 0 {
		lo, hi := secs[0].X, secs[len(secs)-1].X
		if err := line(top, "native", palette[1], plotter.XYs{{X: lo, Y: native.Replication.Seconds}, {X: hi, Y: native.Replication.Seconds}}); err != nil {
			return err
		}
		if err := line(bot, "native", palette[1], plotter.XYs{{X: lo, Y: native.Replication.RowsPerSec}, {X: hi, Y: native.Replication.RowsPerSec}}); err != nil {
			return err
		}
	}
	return savePanels(path, 800, 600, top, bot)
}

// dblChart: rows/s against rows per commit (DBL-12) or jobs (DBL-11), one
// series per replication setting.
func dblChart(rep *Report, test, path string) error {
	p := plot.New()
	p.Legend.Top = true
	p.Y.Label.Text = "rows/s"
	if test == "DBL-12" {
		p.Title.Text = "DBL-12: single job, rows/s against rows per commit"
		p.X.Label.Text = "rows per commit"
	} else {
		p.Title.Text = "DBL-11: 2 rows per commit, rows/s against parallel jobs"
		p.X.Label.Text = "jobs"
	}
	series := map[string]plotter.XYs{}
	var order []string
	for _, d := range rep.DBL {
		if d.Test != test {
			continue
		}
		if _, ok := series[d.Replication]; !ok {
			order = append(order, d.Replication)
		}
		x := float64(d.Jobs)
		if test == "DBL-12" {
			x = float64(d.RowsPerCommit)
		}
		series[d.Replication] = append(series[d.Replication], plotter.XY{X: x, Y: d.RowsPerSec})
	}
	for i, name := range order {
		if err := line(p, "replication: "+name, palette[i%len(palette)], series[name]); err != nil {
			return err
		}
	}
	return savePanels(path, 800, 450, p)
}

// savePanels draws the plots stacked vertically into one PNG.
func savePanels(path string, w, h float64, plots ...*plot.Plot) error {
	img := vgimg.New(vg.Points(w), vg.Points(h))
	dc := draw.New(img)
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4),
		PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(12)}
	canvases := plot.Align(rows, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i][0])
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
