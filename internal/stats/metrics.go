package stats

import (
	"bufio"
	"io"
	"slices"
	"strconv"
	"strings"
)

// MetricsContentType is the Content-Type of the Prometheus text format 0.0.4.
const MetricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// metricPrefix prefixes every metric name.
const metricPrefix = "repstream_"

// family is one metric family: a # HELP line, a # TYPE line and its samples.
type family struct {
	name    string
	help    string
	typ     string // "counter" or "gauge"
	samples []sample
}

type sample struct {
	labels string // `{k="v",...}` or ""
	value  string
}

// WriteMetrics writes s in the Prometheus text exposition format 0.0.4:
//
//	repstream_uptime_seconds                               gauge
//	repstream_items_total{component}                       counter
//	repstream_bytes_total{component}                       counter
//	repstream_txns_total{component}                        counter
//	repstream_state_seconds_total{component,state}         counter
//	repstream_state{component,state}                       gauge, 1 for the current state
//	repstream_info{component,key,value}                    gauge, always 1 (SetInfo facts)
//	repstream_<counter>_total{component}                   counter, one family per counter name
//	repstream_<gauge>{component}                           gauge, one family per gauge name
//
// Counter and gauge names are sanitised to [a-zA-Z0-9_] (any other character
// becomes '_', a leading digit gets a '_' prefix, a counter's own "_total"
// suffix is not doubled). A name whose family would clash with a built-in
// family or with a family of the other kind gets a "_counter" or "_gauge"
// suffix; raw names that sanitise to the same series are summed. Families and
// their samples come out in a deterministic order: built-ins first, then
// counters and gauges by name; samples in component order.
func WriteMetrics(w io.Writer, s Snapshot) error {
	bw := bufio.NewWriter(w)
	for _, f := range metricFamilies(s) {
		bw.WriteString("# HELP ")
		bw.WriteString(f.name)
		bw.WriteByte(' ')
		bw.WriteString(escapeHelp(f.help))
		bw.WriteString("\n# TYPE ")
		bw.WriteString(f.name)
		bw.WriteByte(' ')
		bw.WriteString(f.typ)
		bw.WriteByte('\n')
		for _, smp := range f.samples {
			bw.WriteString(f.name)
			bw.WriteString(smp.labels)
			bw.WriteByte(' ')
			bw.WriteString(smp.value)
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

func metricFamilies(s Snapshot) []*family {
	comp := func(c ComponentSnapshot) string { return labels("component", c.Name) }
	newFam := func(name, typ, help string) *family {
		return &family{name: metricPrefix + name, typ: typ, help: help}
	}

	uptime := newFam("uptime_seconds", "gauge", "Seconds since the stats registry was created.")
	uptime.samples = []sample{{value: formatFloat(s.Uptime)}}
	items := newFam("items_total", "counter", "Items (rows, messages or changes, the component's unit) the component processed.")
	byts := newFam("bytes_total", "counter", "Bytes the component processed.")
	txns := newFam("txns_total", "counter", "Transactions the component processed.")
	stateSecs := newFam("state_seconds_total", "counter", "Wall-clock seconds the component spent in each state (busy, idle, waiting).")
	state := newFam("state", "gauge", "1 for the state the component is in now, 0 for the others.")
	info := newFam("info", "gauge", "Text facts about a component (always 1).")

	for _, c := range s.Components {
		cl := comp(c)
		items.samples = append(items.samples, sample{cl, strconv.FormatInt(c.Items, 10)})
		byts.samples = append(byts.samples, sample{cl, strconv.FormatInt(c.Bytes, 10)})
		txns.samples = append(txns.samples, sample{cl, strconv.FormatInt(c.Txns, 10)})
		for _, st := range []State{Busy, Idle, Waiting} {
			l := labels("component", c.Name, "state", st.String())
			stateSecs.samples = append(stateSecs.samples, sample{l, formatFloat(c.Seconds(st))})
			v := "0"
			if c.State == st.String() {
				v = "1"
			}
			state.samples = append(state.samples, sample{l, v})
		}
		for _, k := range sortedKeys(c.Info) {
			info.samples = append(info.samples, sample{labels("component", c.Name, "key", k, "value", c.Info[k]), "1"})
		}
	}
	builtins := []*family{uptime, items, byts, txns, stateSecs, state, info}

	taken := make(map[string]string, len(builtins)) // family name -> kind
	for _, f := range builtins {
		taken[f.name] = "builtin"
	}
	custom := make(map[string]*family)
	// sums[family][component index] accumulates values of raw names that
	// sanitise to the same series.
	sums := make(map[string]map[int]int64)
	order := make(map[string][]int)

	familyFor := func(raw, kind string) *family {
		base := sanitizeName(raw)
		if kind == "counter" {
			base = strings.TrimSuffix(base, "_total")
		}
		name := familyName(base, kind)
		if k, ok := taken[name]; ok && k != kind {
			name = familyName(base+"_"+kind, kind)
			for i := 2; taken[name] != "" && taken[name] != kind; i++ {
				name = familyName(base+"_"+kind+"_"+strconv.Itoa(i), kind)
			}
		}
		if f := custom[name]; f != nil {
			return f
		}
		taken[name] = kind
		f := &family{name: name, typ: kind}
		if kind == "counter" {
			f.help = "Component counter " + strconv.Quote(raw) + "."
		} else {
			f.help = "Component gauge " + strconv.Quote(raw) + "."
		}
		custom[name] = f
		sums[name] = make(map[int]int64)
		return f
	}
	add := func(f *family, ci int, v int64) {
		if _, seen := sums[f.name][ci]; !seen {
			order[f.name] = append(order[f.name], ci)
		}
		sums[f.name][ci] += v
	}

	// Counters first (all components), then gauges, each by raw name, so
	// that collision renaming is deterministic.
	for _, kind := range []string{"counter", "gauge"} {
		names := map[string]bool{}
		for _, c := range s.Components {
			m := c.Counters
			if kind == "gauge" {
				m = c.Gauges
			}
			for k := range m {
				names[k] = true
			}
		}
		for _, raw := range sortedKeys(names) {
			for ci, c := range s.Components {
				m := c.Counters
				if kind == "gauge" {
					m = c.Gauges
				}
				if v, ok := m[raw]; ok {
					add(familyFor(raw, kind), ci, v)
				}
			}
		}
	}

	out := builtins
	for _, name := range sortedKeys(custom) {
		f := custom[name]
		idx := order[name]
		// Samples in component order.
		slices.Sort(idx)
		for _, ci := range idx {
			f.samples = append(f.samples, sample{comp(s.Components[ci]), strconv.FormatInt(sums[name][ci], 10)})
		}
		out = append(out, f)
	}
	return out
}

func familyName(base, kind string) string {
	if kind == "counter" {
		return metricPrefix + base + "_total"
	}
	return metricPrefix + base
}

// sanitizeName maps a free-text counter or gauge name to a valid metric name
// fragment: [a-zA-Z0-9_]+, not starting with a digit.
func sanitizeName(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	b.Grow(len(s) + 1)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
			b.WriteByte(c)
		case c >= '0' && c <= '9':
			if i == 0 {
				b.WriteByte('_')
			}
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// labels renders {k1="v1",k2="v2"} from alternating keys and values.
func labels(kv ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(escapeLabel(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
