package stats

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestStateAccounting(t *testing.T) {
	t.Parallel()
	type step struct {
		advance time.Duration
		set     State
		noSet   bool // only advance
	}
	tests := []struct {
		name                string
		steps               []step
		busy, idle, waiting float64
		state               string
	}{
		{
			name:  "starts idle",
			steps: []step{{advance: 3 * time.Second, noSet: true}},
			idle:  3, state: "idle",
		},
		{
			name: "busy then waiting, current state counted up to now",
			steps: []step{
				{advance: time.Second, set: Busy},        // 1s idle
				{advance: 2 * time.Second, set: Waiting}, // 2s busy
				{advance: 4 * time.Second, noSet: true},  // 4s waiting so far
			},
			busy: 2, idle: 1, waiting: 4, state: "waiting",
		},
		{
			name: "setting the same state again changes nothing",
			steps: []step{
				{set: Busy},
				{advance: time.Second, set: Busy},
				{advance: time.Second, set: Busy},
				{advance: 500 * time.Millisecond, set: Idle},
			},
			busy: 2.5, state: "idle",
		},
		{
			name: "unknown state counts as busy",
			steps: []step{
				{set: State(42)},
				{advance: time.Second, set: Idle},
			},
			busy: 1, state: "idle",
		},
		{
			name: "many short intervals",
			steps: func() []step {
				var s []step
				for i := 0; i < 1000; i++ {
					s = append(s, step{advance: time.Millisecond, set: State(i % 3)})
				}
				return s
			}(),
			// State i%3 is entered at step i and left after 1ms at step
			// i+1; the initial 1ms is idle; the last state (999%3=0, Idle)
			// has 0s so far.
			busy: 0.333, idle: 0.334, waiting: 0.333, state: "idle",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := newFakeClock()
			r := NewRegistry(WithClock(clk.Now))
			c := r.Component("x")
			for _, s := range tt.steps {
				clk.Advance(s.advance)
				if !s.noSet {
					c.SetState(s.set)
				}
			}
			cs, ok := r.Snapshot().Component("x")
			if !ok {
				t.Fatal("component x missing from snapshot")
			}
			if !near(cs.BusySeconds, tt.busy) || !near(cs.IdleSeconds, tt.idle) || !near(cs.WaitingSeconds, tt.waiting) {
				t.Errorf("busy/idle/waiting = %v/%v/%v, want %v/%v/%v",
					cs.BusySeconds, cs.IdleSeconds, cs.WaitingSeconds, tt.busy, tt.idle, tt.waiting)
			}
			if cs.State != tt.state {
				t.Errorf("state = %q, want %q", cs.State, tt.state)
			}
		})
	}
}

// A snapshot must not close the current interval: taking snapshots in the
// middle of a state changes no totals.
func TestSnapshotDoesNotDisturbAccounting(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	r := NewRegistry(WithClock(clk.Now))
	c := r.Component("apply.0")
	c.SetState(Busy)
	for i := 0; i < 10; i++ {
		clk.Advance(100 * time.Millisecond)
		cs, _ := r.Snapshot().Component("apply.0")
		if want := float64(i+1) / 10; !near(cs.BusySeconds, want) {
			t.Fatalf("after %d ticks busy = %v, want %v", i+1, cs.BusySeconds, want)
		}
	}
	c.SetState(Idle)
	clk.Advance(time.Second)
	cs, _ := r.Snapshot().Component("apply.0")
	if !near(cs.BusySeconds, 1) || !near(cs.IdleSeconds, 1) {
		t.Errorf("busy/idle = %v/%v, want 1/1", cs.BusySeconds, cs.IdleSeconds)
	}
}

func TestSnapshotContent(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	r := NewRegistry(WithClock(clk.Now))
	start := clk.Now()

	capture := r.Component("capture")
	clk.Advance(time.Second)
	queue := r.Component("queue")
	apply := r.Component("apply.0")
	if again := r.Component("capture"); again != capture {
		t.Fatal("Component is not get-or-create: a second call returned a new component")
	}

	capture.Add(10, 1000)
	capture.Add(5, 500)
	capture.AddTxns(2)
	capture.SetInfo("slot", "repstream")
	capture.SetInfo("protocol", "3")
	capture.SetInfo("protocol", "4")
	capture.Counter("keepalives").Add(3)
	capture.Counter("keepalives").Add(1)
	queue.Gauge("bytes_buffered").Store(4096)
	queue.Gauge("bytes_buffered").Add(-96)
	apply.SetState(Busy)
	clk.Advance(2 * time.Second)

	s := r.Snapshot()
	if got, want := s.Time, start.Add(3*time.Second); !got.Equal(want) {
		t.Errorf("Time = %v, want %v", got, want)
	}
	if !near(s.Uptime, 3) {
		t.Errorf("Uptime = %v, want 3", s.Uptime)
	}
	var names []string
	for _, c := range s.Components {
		names = append(names, c.Name)
		if c.Counters == nil || c.Gauges == nil || c.Info == nil {
			t.Errorf("%s: nil map in snapshot", c.Name)
		}
	}
	if got, want := names, []string{"capture", "queue", "apply.0"}; !slices.Equal(got, want) {
		t.Errorf("component order = %v, want %v", got, want)
	}

	cs, ok := s.Component("capture")
	if !ok {
		t.Fatal("capture missing")
	}
	if cs.Items != 15 || cs.Bytes != 1500 || cs.Txns != 2 {
		t.Errorf("capture items/bytes/txns = %d/%d/%d, want 15/1500/2", cs.Items, cs.Bytes, cs.Txns)
	}
	if cs.Counters["keepalives"] != 4 {
		t.Errorf("keepalives = %d, want 4", cs.Counters["keepalives"])
	}
	if cs.Info["slot"] != "repstream" || cs.Info["protocol"] != "4" || len(cs.Info) != 2 {
		t.Errorf("info = %v", cs.Info)
	}
	if !near(cs.IdleSeconds, 3) {
		t.Errorf("capture idle = %v, want 3 (created at start)", cs.IdleSeconds)
	}
	qs, _ := s.Component("queue")
	if qs.Gauges["bytes_buffered"] != 4000 {
		t.Errorf("bytes_buffered = %d, want 4000", qs.Gauges["bytes_buffered"])
	}
	if !near(qs.IdleSeconds, 2) {
		t.Errorf("queue idle = %v, want 2 (created 1s after start)", qs.IdleSeconds)
	}
	as, _ := s.Component("apply.0")
	if as.State != "busy" || !near(as.BusySeconds, 2) || as.IdleSeconds != 0 {
		t.Errorf("apply.0 = %+v", as)
	}
	if _, ok := s.Component("nope"); ok {
		t.Error("Component(nope) found")
	}

	// The snapshot is a copy: later updates do not show in it.
	capture.Counter("keepalives").Add(100)
	capture.SetInfo("slot", "other")
	if cs.Counters["keepalives"] != 4 || cs.Info["slot"] != "repstream" {
		t.Error("snapshot maps alias live component state")
	}
}

func TestStateString(t *testing.T) {
	t.Parallel()
	for s, want := range map[State]string{Idle: "idle", Busy: "busy", Waiting: "waiting", State(7): "state(7)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

// TestConcurrent hammers a registry from many goroutines while snapshots run,
// then checks that nothing was lost, that state times never go backwards
// between snapshots and that they always add up to each component's age.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	clk.tick = time.Microsecond // every clock read moves time forward
	r := NewRegistry(WithClock(clk.Now))

	const workers, iters = 8, 2000
	names := []string{"capture", "queue", "apply.0", "apply.1"}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var snapErr atomic.Value

	// Snapshot reader: per component, each state's time is non-decreasing
	// and the sum equals the age (now - created), which a snapshot of a
	// component created during the run reveals.
	wg.Add(1)
	go func() {
		defer wg.Done()
		prev := map[string]ComponentSnapshot{}
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := r.Snapshot()
			_ = WriteMetrics(discard{}, r, CollectorOptions{Build: BuildInfo{Version: "test"}})
			for _, c := range s.Components {
				p, ok := prev[c.Name]
				if ok && (c.BusySeconds < p.BusySeconds || c.IdleSeconds < p.IdleSeconds ||
					c.WaitingSeconds < p.WaitingSeconds || c.Items < p.Items) {
					snapErr.Store("values went backwards for " + c.Name)
				}
				prev[c.Name] = c
			}
		}
	}()

	var workersWG sync.WaitGroup
	for w := 0; w < workers; w++ {
		workersWG.Add(1)
		go func() {
			defer workersWG.Done()
			for i := 0; i < iters; i++ {
				c := r.Component(names[(w+i)%len(names)])
				c.Add(1, 10)
				c.AddTxns(1)
				c.Counter("rows").Add(1)
				c.Gauge("depth").Store(int64(i))
				if i%10 == 0 {
					c.SetState(State(i % 3))
					c.SetInfo("worker", "w")
				}
			}
		}()
	}
	workersWG.Wait()
	close(stop)
	wg.Wait()
	if v := snapErr.Load(); v != nil {
		t.Fatal(v)
	}

	s := r.Snapshot()
	var items, bytes, txns, rows int64
	for _, c := range s.Components {
		items += c.Items
		bytes += c.Bytes
		txns += c.Txns
		rows += c.Counters["rows"]
	}
	if want := int64(workers * iters); items != want || txns != want || rows != want || bytes != 10*want {
		t.Errorf("items/txns/rows/bytes = %d/%d/%d/%d, want %d each (bytes x10)", items, txns, rows, bytes, want)
	}
	if len(s.Components) != len(names) {
		t.Errorf("%d components, want %d", len(s.Components), len(names))
	}
	for _, c := range s.Components {
		sum := c.BusySeconds + c.IdleSeconds + c.WaitingSeconds
		if sum <= 0 || sum > s.Uptime+1e-9 {
			t.Errorf("%s: state seconds sum %v outside (0, uptime %v]", c.Name, sum, s.Uptime)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestHotPathsDoNotAllocate(t *testing.T) {
	r := NewRegistry()
	c := r.Component("capture")
	ctr := c.Counter("x")
	st := State(0)
	for name, f := range map[string]func(){
		"Add":      func() { c.Add(1, 100) },
		"AddTxns":  func() { c.AddTxns(1) },
		"SetState": func() { st = (st + 1) % numStates; c.SetState(st) },
		"Counter":  func() { ctr.Add(1) },
		"existing Component lookup": func() {
			_ = r.Component("capture")
		},
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s allocates %v times per call, want 0", name, n)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
