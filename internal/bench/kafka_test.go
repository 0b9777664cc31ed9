package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/stats"
)

// TestKafkaSystemParse: kafka is a known system, neither a peer nor native.
func TestKafkaSystemParse(t *testing.T) {
	var l Systems
	if err := l.Set("repstream,kafka,native"); err != nil {
		t.Fatal(err)
	}
	if got := l.String(); got != "repstream,kafka,native" {
		t.Errorf("Systems = %s", got)
	}
	if SystemKafka.IsPeer() {
		t.Error("kafka.IsPeer() = true")
	}
	if peerSettings([]System{SystemKafka}) != nil {
		t.Error("kafka described as a peer")
	}
}

// TestSelectKafka: without the cached Kafka the kafka system is skipped
// with `make kafka`; it never runs the initial-copy workload.
func TestSelectKafka(t *testing.T) {
	old := kafkaAvailable
	defer func() { kafkaAvailable = old }()
	sr, _ := Lookup("single-row")
	ic, _ := Lookup("initial-copy")

	kafkaAvailable = func() error { return fmt.Errorf("%w: Kafka is not cached", kafkatest.ErrUnavailable) }
	o := Options{Systems: []System{SystemRepstream, SystemKafka, SystemNative}}
	skipped := selectSystems(&o, sr)
	if Systems(o.Systems).String() != "repstream,native" {
		t.Errorf("kept %s", Systems(o.Systems))
	}
	if why := skipped["kafka"]; !strings.Contains(why, "not cached") || !strings.Contains(why, "install: make kafka") {
		t.Errorf("kafka: %q", why)
	}

	kafkaAvailable = func() error { return nil }
	o = Options{Systems: []System{SystemRepstream, SystemKafka, SystemNative}}
	if skipped = selectSystems(&o, sr); len(skipped) != 0 || Systems(o.Systems).String() != "repstream,kafka,native" {
		t.Errorf("kept %s, skipped %v", Systems(o.Systems), skipped)
	}
	o = Options{Systems: []System{SystemRepstream, SystemKafka}}
	if skipped = selectSystems(&o, ic); !strings.Contains(skipped["kafka"], "initial-copy") {
		t.Errorf("initial-copy: kept %s, skipped %v", Systems(o.Systems), skipped)
	}
}

// TestKafkaMarkdown: kafka runs sit beside repstream and native with their
// ratio to native, the broker's CPU has its row, and a section compares
// the kafka runs with the repstream runs of their rounds.
func TestKafkaMarkdown(t *testing.T) {
	mk := func(sys System, round int, secs, broker float64) *RunResult {
		r := &RunResult{System: sys, Label: fmt.Sprintf("%s #%d", sys, round), Round: round, Verified: true}
		r.Replication = ReplFigures{Seconds: secs, RowsPerSec: 1000 / secs}
		r.Resources = Resources{EngineCPUSeconds: 1, BrokerCPUSeconds: broker, TotalCPUSeconds: 1 + broker}
		return r
	}
	rep := sampleReport()
	rep.Settings.Repeat = 2
	rep.Settings.Kafka = kafkaSettings(1, 1, DefaultKafkaHeapMB)
	rep.Runs = []*RunResult{
		mk(SystemRepstream, 1, 2, 0), mk(SystemKafka, 1, 3, 0.5), mk(SystemNative, 1, 4, 0),
		mk(SystemNative, 2, 5, 0), mk(SystemKafka, 2, 2, 0.25), mk(SystemRepstream, 2, 2, 0),
	}
	rep.Runs[1].Bottleneck, rep.Runs[1].CaptureBottleneck = "apply", "none"
	var b bytes.Buffer
	WriteMarkdown(&b, rep, nil)
	md := b.String()
	for _, want := range []string{
		"| figure | repstream #1 | kafka #1 | native #1 | native #2 | kafka #2 | repstream #2 | repstream #1 / native | kafka #1 / native | kafka #2 / native | repstream #2 / native |",
		"| replication time (s) | 2.00 | 3.00 | 4.00 | 5.00 | 2.00 | 2.00 | 0.50 | 0.75 | 0.40 | 0.40 |",
		"| broker CPU (kafka) (s) | 0 | 0.500 | 0 | 0 | 0.250 | 0 |",
		"| figure | median kafka / native | min | max | per round |",
		"## Kafka path against direct mode",
		"| figure | median kafka / repstream | min | max | per round |",
		"| replication time (s) | **1.25** | 1.00 | 1.50 | 1.50, 1.00 |",
		"- kafka: repstream capture and repstream apply",
		"kafka #1: **apply** in the apply, **none** in the capture",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestKafkaTotalCPU: the broker's CPU is part of the total.
func TestKafkaTotalCPU(t *testing.T) {
	s := &sampler{meter: newCPUMeter(), waits: newRunDelayMeter()}
	res := &RunResult{System: SystemKafka}
	res.Resources.EngineCPUSeconds, res.Resources.BrokerCPUSeconds = 2, 1.5
	s.fillResources(res)
	if res.Resources.TotalCPUSeconds != 3.5 {
		t.Errorf("total CPU %v, want 3.5", res.Resources.TotalCPUSeconds)
	}
}

// testKafkaWarmUp: the tests' brokers serve a second before the runs
// instead of kafkaWarmUp's five: they measure nothing.
const testKafkaWarmUp = time.Second

// TestKafkaBench runs the kafka system beside repstream and native on a
// tiny single-row backlog and a tiny live fly against real clusters and a
// real broker (skipped without the cached Kafka, failed with
// REPSTREAM_REQUIRE_KAFKA): every run verifies, the kafka runs count the
// broker's CPU, no topic is left after a kafka run, and the broker is
// started once and gone when Run returns.
func TestKafkaBench(t *testing.T) {
	if err := kafkaAvailable(); err != nil {
		if v := os.Getenv(kafkatest.EnvRequire); v != "" && v != "0" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	src, tgt := servers(t)
	cases := []struct {
		workload string
		mode     Mode
		params   Params
	}{
		{"single-row", ModeBacklog, Params{Rows: 300}},
		{"fly", ModeLive, Params{Rows: 7 * 200, Rate: 400}},
	}
	for _, tc := range cases {
		t.Run(tc.workload+"/"+tc.mode.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			out := t.TempDir()
			var live bytes.Buffer
			var pids []int
			var left []string
			rep, err := Run(ctx, Options{
				Workload: tc.workload, Mode: tc.mode, Params: tc.params,
				Systems:   []System{SystemRepstream, SystemKafka, SystemNative},
				SourceDSN: src.DSN("postgres"), TargetDSN: tgt.DSN("postgres"),
				Binary: repstreamBinary, Out: out, Timeout: 2 * time.Minute, Live: &live,
				kafkaWarmUp: testKafkaWarmUp, kafkaStarted: func(b *kafkaBroker) { pids = append(pids, b.pids...) },
				kafkaAfterRun: func(b *kafkaBroker) { left = append(left, topicsLeft(ctx, b)...) },
			})
			if err != nil {
				t.Fatalf("Run: %v\nlive output:\n%s\nlogs:\n%s", err, live.String(), logs(out))
			}
			if len(rep.Runs) != 3 {
				t.Fatalf("runs = %d, want 3", len(rep.Runs))
			}
			for _, r := range rep.Runs {
				if !r.Verified || r.Error != "" {
					t.Errorf("%s: verified=%v error=%q", r.Label, r.Verified, r.Error)
				}
				if r.System != SystemKafka {
					if r.Resources.BrokerCPUSeconds != 0 {
						t.Errorf("%s: broker CPU %v", r.Label, r.Resources.BrokerCPUSeconds)
					}
					continue
				}
				res := r.Resources
				if res.BrokerCPUSeconds <= 0 || res.EngineCPUSeconds <= 0 || res.EnginePeakRSSBytes <= 0 {
					t.Errorf("%s: resources %+v", r.Label, res)
				}
				if res.TotalCPUSeconds < res.EngineCPUSeconds+res.BrokerCPUSeconds {
					t.Errorf("%s: total CPU %v lacks the broker's %v", r.Label, res.TotalCPUSeconds, res.BrokerCPUSeconds)
				}
				if r.FinalStats == nil || r.CaptureFinalStats == nil {
					t.Errorf("%s: final stats apply %v capture %v", r.Label, r.FinalStats != nil, r.CaptureFinalStats != nil)
				}
				if tc.mode == ModeLive && r.Latency.Seen == 0 {
					t.Errorf("%s: no probe seen", r.Label)
				}
				if r.FinalStats != nil && r.CaptureFinalStats != nil {
					// Each half's commit latencies, under its stages.
					stages := func(s *stats.Snapshot) (names []string) {
						for _, l := range stats.OrderStages(s.CommitLatency) {
							if l.Count > 0 {
								names = append(names, l.Stage)
							}
						}
						return names
					}
					if got := stages(r.CaptureFinalStats); !slices.Equal(got, []string{"received", "acked"}) {
						t.Errorf("%s: the capture's commit latency stages %v, want received, acked", r.Label, got)
					}
					// (durable may come after the last look: a flush poll later)
					if got := stages(r.FinalStats); len(got) < 2 || !slices.Equal(got[:2], []string{"received", "visible"}) {
						t.Errorf("%s: the apply's commit latency stages %v, want received, visible (and durable)", r.Label, got)
					}
				}
				for _, half := range []string{"capture", "apply"} {
					if _, err := os.Stat(filepath.Join(out, "logs", strings.ReplaceAll(r.Label, " ", "_")+"."+half+".log")); err != nil {
						t.Errorf("%s: %s log: %v", r.Label, half, err)
					}
				}
			}
			if rep.Settings.Kafka == "" {
				t.Error("settings.kafka empty")
			}
			checkReportFiles(t, out, rep)
			md, err := os.ReadFile(filepath.Join(out, "report.md"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"| kafka / native |", "| broker CPU (kafka) (s) |", "## Kafka path against direct mode", "kafka: capture received "} {
				if !strings.Contains(string(md), want) {
					t.Errorf("report.md lacks %q", want)
				}
			}
			if len(left) != 0 {
				t.Errorf("topics left after the kafka run: %v", left)
			}
			if len(pids) != 1 {
				t.Fatalf("broker started %d times, want 1", len(pids))
			}
			if err := processGone(pids[0]); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestKafkaBenchStoppedTarget runs the kafka system through one broker
// into two targets, the second stopped while a tiny fly loads: both
// targets verify, the second's catch-up and the source's retained WAL are
// reported (the report's section too). (One broker: --kafka-brokers 3 only
// passes the count to kafkatest, whose own tests start three; two more
// JVMs here cost the suite about 20 CPU-seconds.)
func TestKafkaBenchStoppedTarget(t *testing.T) {
	if err := kafkaAvailable(); err != nil {
		if v := os.Getenv(kafkatest.EnvRequire); v != "" && v != "0" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	src, tgt := servers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out := t.TempDir()
	var live bytes.Buffer
	var pids []int
	rep, err := Run(ctx, Options{
		Workload: "fly", Mode: ModeLive, Params: Params{Rows: 7 * 200, Rate: 400},
		Systems:   []System{SystemKafka},
		SourceDSN: src.DSN("postgres"), TargetDSN: tgt.DSN("postgres"),
		KafkaBrokers: 1, KafkaTargets: 2,
		Binary: repstreamBinary, Out: out, Timeout: 2 * time.Minute, Live: &live,
		kafkaWarmUp: testKafkaWarmUp, kafkaStarted: func(b *kafkaBroker) { pids = append(pids, b.pids...) },
	})
	if err != nil {
		t.Fatalf("Run: %v\nlive output:\n%s\nlogs:\n%s", err, live.String(), logs(out))
	}
	if len(rep.Runs) != 1 {
		t.Fatalf("runs = %d, want 1", len(rep.Runs))
	}
	r := rep.Runs[0]
	if !r.Verified || r.Error != "" {
		t.Errorf("verified=%v error=%q", r.Verified, r.Error)
	}
	st := r.StoppedTarget
	if st == nil {
		t.Fatal("no stopped_target in the result")
	}
	if !st.Verified || len(st.Tables) == 0 || st.StoppedSeconds <= 0 || st.CatchUpSeconds <= 0 || st.ApplyCPUSeconds <= 0 {
		t.Errorf("stopped target %+v", st)
	}
	for _, c := range st.Tables {
		if c.Replicated && c.SourceRows == 0 {
			t.Errorf("second target: %s has no rows on the source: the check compared nothing", c.Table)
		}
	}
	if r.WAL.SourceRetainedMaxBytes <= 0 {
		t.Errorf("source retained WAL max %d", r.WAL.SourceRetainedMaxBytes)
	}
	if len(pids) != 1 {
		t.Errorf("broker pids %v, want 1", pids)
	}
	if !strings.Contains(rep.Settings.Kafka, "one throwaway Apache Kafka") || !strings.Contains(rep.Settings.Kafka, "second target") {
		t.Errorf("settings.kafka %q", rep.Settings.Kafka)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## A stopped target", "| source WAL retained for the slot, max (MB) |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "logs", "kafka.apply-2.log")); err != nil {
		t.Errorf("second apply's log: %v", err)
	}
	for _, pid := range pids {
		if err := processGone(pid); err != nil {
			t.Error(err)
		}
	}
}

// topicsLeft lists the broker's topics once the deletions it was asked
// for are done (they are asynchronous; up to 10 s).
func topicsLeft(ctx context.Context, b *kafkaBroker) []string {
	adm, cl, err := kafkalog.NewAdmin(kafkalog.Plain(kafkalog.Brokers(b.addrs)))
	if err != nil {
		return []string{err.Error()}
	}
	defer cl.Close()
	var left []string
	for range 100 {
		td, err := adm.ListTopics(ctx)
		if err != nil {
			return []string{err.Error()}
		}
		if left = td.Names(); len(left) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return left
}

// processGone waits up to 10 s for pid to be gone (or a zombie).
func processGone(pid int) error {
	for range 100 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil {
			if i := bytes.LastIndexByte(b, ')'); i >= 0 && strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z") {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("broker %d still running after the bench", pid)
}
