package stats

import (
	"io"
	"strconv"
	"testing"
)

func BenchmarkAdd(b *testing.B) {
	c := NewRegistry().Component("capture")
	b.ReportAllocs()
	for b.Loop() {
		c.Add(1, 128)
	}
}

// BenchmarkAddParallel is the contended case: every goroutine adds to the
// same component (a pool should rather use one component per worker).
func BenchmarkAddParallel(b *testing.B) {
	c := NewRegistry().Component("queue")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1, 128)
		}
	})
}

func BenchmarkCounterAdd(b *testing.B) {
	ctr := NewRegistry().Component("capture").Counter("keepalives")
	b.ReportAllocs()
	for b.Loop() {
		ctr.Add(1)
	}
}

func BenchmarkSetState(b *testing.B) {
	c := NewRegistry().Component("apply.0")
	b.ReportAllocs()
	s := Busy
	for b.Loop() {
		c.SetState(s)
		s ^= Busy // alternate Idle/Busy
	}
}

func BenchmarkSnapshot(b *testing.B) {
	r := benchRegistry()
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Snapshot()
	}
}

func BenchmarkWriteMetrics(b *testing.B) {
	r := benchRegistry()
	b.ReportAllocs()
	for b.Loop() {
		_ = WriteMetrics(io.Discard, r, CollectorOptions{Build: BuildInfo{Version: "bench"}})
	}
}

// benchRegistry looks like a running pipeline with 8 apply workers.
func benchRegistry() *Registry {
	r := NewRegistry()
	for _, n := range []string{"capture", "queue", "spill", "coordinator"} {
		c := r.Component(n)
		c.Add(1000, 100000)
		c.Counter("events").Add(5)
		c.Gauge("depth").Store(7)
		c.SetInfo("k", "v")
	}
	for i := 0; i < 8; i++ {
		c := r.Component("apply." + strconv.Itoa(i))
		c.Add(1000, 100000)
		c.Counter("rows_copied").Add(900)
	}
	return r
}
