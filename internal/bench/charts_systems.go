package bench

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// systemsChart: every verified run side by side, time (top) and CPU seconds
// by process group (bottom: engine, walsender, source backends, target
// backends, the kafka system's broker).
func systemsChart(rep *Report, path string) error {
	var runs []*RunResult
	for _, r := range rep.Runs {
		if r.Verified {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return nil
	}
	labels := make([]string, len(runs))
	for i, r := range runs {
		labels[i] = r.Label
	}
	top := plot.New()
	top.Title.Text = fmt.Sprintf("%s (%s): time per system", rep.Workload, rep.Mode)
	if isCopyReport(rep) {
		top.Title.Text = rep.Workload + ": copy time per system"
	}
	top.Y.Label.Text = "seconds"
	secs := make(plotter.Values, len(runs))
	for i, r := range runs {
		secs[i] = r.Replication.Seconds
	}
	w := vg.Points(18)
	b, err := plotter.NewBarChart(secs, w)
	if err != nil {
		return err
	}
	b.Color = palette[0]
	top.Add(b)
	top.NominalX(labels...)

	bot := plot.New()
	bot.Title.Text = "CPU seconds by process group"
	bot.Y.Label.Text = "CPU s"
	bot.Legend.Top = true
	groups := []struct {
		name string
		get  func(*RunResult) float64
	}{
		{"engine process", func(r *RunResult) float64 { return r.Resources.EngineCPUSeconds }},
		{"walsender", func(r *RunResult) float64 { return r.Resources.WalsenderCPUSeconds }},
		{"source backends", func(r *RunResult) float64 { return r.Resources.SourceBackendsCPUSeconds }},
		{"target backends", func(r *RunResult) float64 { return r.Resources.TargetBackendsCPUSeconds }},
		{"Kafka broker", func(r *RunResult) float64 { return r.Resources.BrokerCPUSeconds }},
	}
	var most float64
	for gi, g := range groups {
		vals := make(plotter.Values, len(runs))
		for i, r := range runs {
			vals[i] = g.get(r)
			most = max(most, vals[i])
		}
		bc, err := plotter.NewBarChart(vals, vg.Points(10))
		if err != nil {
			return err
		}
		bc.Color = palette[(gi+1)%len(palette)]
		bc.Offset = vg.Points(float64(gi)*10 - 5*float64(len(groups)-1))
		bot.Add(bc)
		bot.Legend.Add(g.name, bc)
	}
	bot.Y.Min, bot.Y.Max = 0, most*1.4+0.01 // room for the legend
	bot.NominalX(labels...)
	return savePanels(path, 900, 700, top, bot)
}
