package monitor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/golden"
	"github.com/repstream/repstream/internal/stats"
)

var t0 = time.Date(2026, 11, 24, 14, 25, 50, 0, time.UTC)

// comp is a component's growth over a 10 s interval: it starts from zero
// state times in prev and has spent busy/idle/waiting seconds in cur.
type comp struct {
	name                string
	items, bytes, txns  int64
	busy, idle, waiting float64
	counters            map[string]int64
	gauges              map[string]int64
}

// snaps builds two snapshots 10 s apart in which each component did what
// comp says.
func snaps(cs ...comp) (prev, cur stats.Snapshot) {
	prev = stats.Snapshot{Time: t0.Add(-10 * time.Second), Uptime: 100}
	cur = stats.Snapshot{Time: t0, Uptime: 110}
	for _, c := range cs {
		base := stats.ComponentSnapshot{Name: c.name, Items: 1000, Bytes: 1 << 20, Txns: 10,
			BusySeconds: 30, IdleSeconds: 60, WaitingSeconds: 10,
			Counters: map[string]int64{}, Gauges: map[string]int64{}, Info: map[string]string{}}
		prev.Components = append(prev.Components, base)
		n := base
		n.Items += c.items
		n.Bytes += c.bytes
		n.Txns += c.txns
		n.BusySeconds += c.busy
		n.IdleSeconds += c.idle
		n.WaitingSeconds += c.waiting
		n.Counters = c.counters
		if n.Counters == nil {
			n.Counters = map[string]int64{}
		}
		n.Gauges = c.gauges
		if n.Gauges == nil {
			n.Gauges = map[string]int64{}
		}
		n.Info = map[string]string{}
		cur.Components = append(cur.Components, n)
	}
	return prev, cur
}

// capture is never Busy in its own accounting: decoding counts as idle.
func capt(items int64, idle, waiting float64) comp {
	return comp{name: "capture", items: items, bytes: items * 100, idle: idle, waiting: waiting}
}

func queue(memory int64, waiting float64) comp {
	return comp{name: "queue", idle: 10 - waiting, waiting: waiting, gauges: map[string]int64{"memory_bytes": memory}}
}

func worker(name string, items, txns int64, busy, idle, waiting float64) comp {
	return comp{name: name, items: items, bytes: items * 100, txns: txns, busy: busy, idle: idle, waiting: waiting}
}

func TestAdvise(t *testing.T) {
	cases := []struct {
		name       string
		comps      []comp
		th         Thresholds
		bottleneck string
		worker     string
		recs       []string // substrings each found in some recommendation
	}{
		{
			name: "apply busy: the bottleneck, busiest worker named",
			comps: []comp{capt(50000, 9.8, 0), queue(2<<20, 0), {name: "coordinator", busy: 1, idle: 9},
				worker("apply.0", 25000, 2500, 9.5, 0.2, 0.3), worker("apply.1", 25000, 2500, 8.8, 0.2, 1)},
			th: DefaultThresholds(), bottleneck: "apply", worker: "apply.0",
			recs: []string{"2 apply workers were busy 91%", "raise --apply-parallelism (now 2; 4 CPUs here)", "run advise with --target"},
		},
		{
			name:  "apply waiting half the time on commit order: not the bottleneck",
			comps: []comp{capt(50000, 9.8, 0), queue(0, 0), worker("apply.0", 25000, 2500, 4, 0.5, 5.5), worker("apply.1", 25000, 2500, 4, 0.5, 5.5)},
			th:    DefaultThresholds(), bottleneck: "",
			recs: []string{"no component was busy most of the interval"},
		},
		{
			name:  "everything idle: the source is the limit",
			comps: []comp{capt(100, 9.9, 0), queue(0, 0), worker("apply.0", 100, 10, 0.2, 9.8, 0)},
			th:    DefaultThresholds(), bottleneck: "",
			recs: []string{"the source is the limit", "--decoding-work-mem"},
		},
		{
			name:  "queue flow control and spill: --memory",
			comps: []comp{capt(10000, 3, 7), queue(256<<20, 7), {name: "spill", bytes: 5 << 20, counters: map[string]int64{"bytes": 5 << 20}, idle: 10}, worker("apply.0", 10000, 10, 9, 1, 0)},
			th:    DefaultThresholds(), bottleneck: "apply", worker: "apply.0",
			recs: []string{"flow control: capture waited 70%", "5.0M of transactions spilled", "larger --memory"},
		},
		{
			name:  "a lower idle threshold rules apply out",
			comps: []comp{capt(100, 9.9, 0), worker("apply.0", 100, 10, 6, 4, 0)},
			th:    Thresholds{Idle: 0.3, Flow: 0.5}, bottleneck: "",
		},
		{
			name:  "coordinator busiest",
			comps: []comp{capt(100, 9.9, 0), {name: "coordinator", busy: 9, idle: 1}, worker("apply.0", 100, 10, 4, 6, 0)},
			th:    DefaultThresholds(), bottleneck: "coordinator",
			recs: []string{"--group-max-txns"},
		},
		{
			name:  "small source transactions",
			comps: []comp{capt(10000, 9.9, 0), worker("apply.0", 10000, 10000, 9, 1, 0)},
			th:    DefaultThresholds(), bottleneck: "apply", worker: "apply.0",
			recs: []string{"source transactions are small (1.0 changes each)"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prev, cur := snaps(tc.comps...)
			v := Advise(prev, cur, Inputs{Thresholds: tc.th, CPUs: 4})
			if v.Bottleneck != tc.bottleneck || v.Worker != tc.worker {
				t.Fatalf("bottleneck %q worker %q, want %q %q\n%s", v.Bottleneck, v.Worker, tc.bottleneck, tc.worker, strings.Join(v.Recommendations, "\n"))
			}
			all := strings.Join(v.Recommendations, "\n")
			for _, want := range tc.recs {
				if !strings.Contains(all, want) {
					t.Errorf("recommendations lack %q:\n%s", want, all)
				}
			}
		})
	}
}

func TestBottleneckRule(t *testing.T) {
	th := DefaultThresholds()
	cases := []struct {
		name  string
		loads []Load
		want  string
	}{
		{"busiest qualifying wins", []Load{{Name: "a", Busy: 0.6, Idle: 0.4}, {Name: "b", Busy: 0.8, Idle: 0.1, Waiting: 0.1}}, "b"},
		{"busiest disqualified by flow control", []Load{{Name: "a", Busy: 0.4, Idle: 0.4, Waiting: 0.2}, {Name: "b", Busy: 0.45, Waiting: 0.55}}, "a"},
		{"idle at the threshold does not qualify", []Load{{Name: "a", Busy: 0.5, Idle: 0.5}}, ""},
		{"never busy is not a bottleneck", []Load{{Name: "a", Idle: 0.1, Waiting: 0.1}}, ""},
		{"nothing", nil, ""},
	}
	for _, tc := range cases {
		b, ok := Bottleneck(tc.loads, th)
		if got := b.Name; got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: got %q (%v), want %q", tc.name, got, ok, tc.want)
		}
	}
}

func TestAdviseTargetFacts(t *testing.T) {
	prev, cur := snaps(capt(100, 9.9, 0), worker("apply.0", 1000, 100, 9, 1, 0))
	cur.CommitLatency = []stats.StageLatency{ // printed in pipeline order, the recent figures; durable: none lately
		{Stage: stats.StageVisible, Count: 900, P50: 3, RecentCount: 90, RecentP50: 2.84, RecentP99: 9.79},
		{Stage: stats.StageDurable, Count: 900, P50: 70},
		{Stage: stats.StageReceived, Count: 900, P50: 2, RecentCount: 90, RecentP50: 1.95, RecentP99: 6.27},
	}
	v := Advise(prev, cur, Inputs{Thresholds: DefaultThresholds(), CPUs: 1,
		Target: &TargetFacts{Triggers: []string{"public.t slow"}, IndexHeavy: []string{"public.u (7 indexes)"}}})
	var buf bytes.Buffer
	if err := WriteVerdict(&buf, v); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "verdict.txt", buf.String())
}

func TestTopGolden(t *testing.T) {
	prev, cur := snaps(capt(123000, 9.5, 0.5), queue(2200<<10, 0.5), comp{name: "spill", idle: 10, counters: map[string]int64{"bytes": 3 << 20}},
		comp{name: "coordinator", busy: 1, idle: 9}, worker("apply.0", 60000, 600, 9, 1, 0), worker("apply.1", 61000, 610, 9, 0.5, 0.5),
		worker("apply.2", 0, 0, 0, 10, 0), worker("apply.3", 0, 0, 0, 10, 0))
	ps := Sample{Stats: prev}
	cs := Sample{Stats: cur, Status: stats.LiveStatus{Slot: "repstream", ReceivedLSN: "1/12345678", AppliedLow: "1/12000000"}}
	iv := Measure(ps, cs)
	var out strings.Builder
	out.WriteString(Header + "\n")
	out.WriteString(FormatLine(iv) + "\n")
	noSpill := iv
	noSpill.SpilledBytes = 0
	out.WriteString(FormatLine(noSpill) + "\n")
	out.WriteString(FormatLine(Measure(Sample{Stats: prev}, Sample{Stats: prev})) + "\n") // no time passed, no positions
	for _, l := range strings.Split(out.String(), "\n") {
		if len(l) > 80 && !strings.Contains(l, " SP ") {
			t.Errorf("line longer than 80 columns (%d): %s", len(l), l)
		}
	}
	prevCopy, curCopy := snaps(capt(0, 10, 0), comp{name: "snapshot", items: 500000, bytes: 50 << 20, busy: 10})
	out.WriteString(FormatLine(Measure(Sample{Stats: prevCopy}, Sample{Stats: curCopy})) + "\n")
	// The halves joined by Kafka: a capture's lag is what the brokers
	// have not acknowledged; an apply adds the topic's records unread.
	captureStatus := cs.Status
	captureStatus.Role = "capture"
	out.WriteString(FormatLine(Measure(ps, Sample{Stats: cur, Status: captureStatus})) + "\n")
	applyStatus := cs.Status
	applyStatus.Role, applyStatus.KafkaOffset, applyStatus.KafkaEnd = "apply", 1200, 4700
	out.WriteString(FormatLine(Measure(ps, Sample{Stats: cur, Status: applyStatus})) + "\n")
	golden.Check(t, "top.txt", out.String())
	b, err := json.Marshal(iv)
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "top.json", string(b)+"\n")
}

func TestStatusURL(t *testing.T) {
	for in, want := range map[string]string{
		":9187":                        "http://127.0.0.1:9187/status",
		"host:9187":                    "http://host:9187/status",
		"http://host:9187/":            "http://host:9187/status",
		"https://host/x/status":        "https://host/x/status",
		" http://127.0.0.1:1/status  ": "http://127.0.0.1:1/status",
	} {
		if got := StatusURL(in); got != want {
			t.Errorf("StatusURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFormatNumbers(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{count(0), "0"}, {count(999), "999"}, {count(999.6), "1.0k"}, {count(12345), "12.3k"}, {count(123456), "123k"}, {count(2.5e6), "2.5M"},
		{size(512), "512B"}, {size(2048), "2.0K"}, {size(256 << 20), "256M"}, {size(3 << 30), "3.0G"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// TestAdviseKafka: the halves joined by Kafka get their own
// recommendations: a capture waiting for the brokers, an apply retrying
// its reads and behind the topic.
func TestAdviseKafka(t *testing.T) {
	prevCapture, curCapture := snaps(capt(1000, 2, 8), comp{name: "kafka", counters: map[string]int64{"waits_ns": 0}, gauges: map[string]int64{"unacked_bytes": 0}})
	k, _ := curCapture.Component("kafka")
	k.Counters["waits_ns"] = 8e9
	for i := range curCapture.Components {
		if curCapture.Components[i].Name == "kafka" {
			curCapture.Components[i] = k
		}
	}
	v := Advise(prevCapture, curCapture, Inputs{Thresholds: DefaultThresholds(), CPUs: 2})
	if got := strings.Join(v.Recommendations, "\n"); !strings.Contains(got, "the brokers are the limit") {
		t.Errorf("capture waiting for acknowledgements: recommendations lack the brokers:\n%s", got)
	}
	prevApply, curApply := snaps(capt(1000, 2, 0), comp{name: "kafka", counters: map[string]int64{"fetch_errors": 0}, gauges: map[string]int64{"lag_records": 5000}})
	for i := range curApply.Components {
		if curApply.Components[i].Name == "kafka" {
			curApply.Components[i].Counters = map[string]int64{"fetch_errors": 3}
		}
	}
	v = Advise(prevApply, curApply, Inputs{Thresholds: DefaultThresholds(), CPUs: 2})
	got := strings.Join(v.Recommendations, "\n")
	for _, want := range []string{"retried reading the topic 3 time(s)", "5000 records behind the topic's end"} {
		if !strings.Contains(got, want) {
			t.Errorf("apply: recommendations lack %q:\n%s", want, got)
		}
	}
}
