package stats

import (
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// State is what a component is doing with its wall time. See the package
// documentation for the exact meaning of each state.
type State int

const (
	// Idle: nothing to do, waiting for input from upstream.
	Idle State = iota
	// Busy: doing the component's own work.
	Busy
	// Waiting: has work but is blocked (flow control, budget, locks, dependencies).
	Waiting

	numStates = 3
)

// String returns "idle", "busy" or "waiting".
func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Busy:
		return "busy"
	case Waiting:
		return "waiting"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Option configures a Registry.
type Option func(*Registry)

// WithClock sets the clock the registry reads for state accounting, uptime and
// snapshot times. Default: time.Now. Tests inject a fake clock to make state
// times and snapshots deterministic. The clock must be safe for concurrent use.
func WithClock(now func() time.Time) Option {
	return func(r *Registry) {
		if now != nil {
			r.now = now
		}
	}
}

// WithVersion records the version of the running binary, which
// repstream_build_info reports.
func WithVersion(v string) Option {
	return func(r *Registry) { r.version = v }
}

// Registry holds the components of one repstream process.
//
// Invariants: components are never removed; order lists every component
// exactly once, in creation order, and byName indexes the same set. Both are
// guarded by mu. The clock, start time and version never change after
// NewRegistry.
type Registry struct {
	now     func() time.Time
	start   time.Time
	version string

	mu     sync.RWMutex
	byName map[string]*Component
	order  []*Component

	latency *CommitLatency // set by NewRegistry, never replaced
}

// NewRegistry returns an empty registry; its uptime starts now.
func NewRegistry(opts ...Option) *Registry {
	r := &Registry{now: time.Now, byName: make(map[string]*Component)}
	for _, o := range opts {
		o(r)
	}
	r.start = r.now()
	r.latency = newCommitLatency(r.now)
	return r
}

// Version returns the version given with WithVersion ("" without one).
func (r *Registry) Version() string { return r.version }

// Component returns the component with that name, creating it (in state Idle)
// if it does not exist yet. Names are free text such as "capture", "queue",
// "spill", "coordinator", "apply.0". Safe for concurrent use.
func (r *Registry) Component(name string) *Component {
	r.mu.RLock()
	c := r.byName[name]
	r.mu.RUnlock()
	if c != nil {
		return c
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c = r.byName[name]; c != nil {
		return c
	}
	c = &Component{name: name, now: r.now, since: r.now()}
	r.byName[name] = c
	r.order = append(r.order, c)
	return c
}

// Components returns the registered components in creation order.
func (r *Registry) Components() []*Component {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]*Component(nil), r.order...)
}

// Component is one stage's (or one worker's) statistics.
//
// Invariants:
//   - items, bytes and txns only grow; they are updated with atomic adds only.
//   - Under stateMu: the component has been in state since `since`, and
//     spent[s] is the total time of all closed intervals in state s, so
//     spent[Idle]+spent[Busy]+spent[Waiting] + (now-since) is the component's
//     age. spent never decreases.
//   - Under metaMu: counters, gauges and info only gain keys; a counter or
//     gauge pointer, once handed out, stays the one reported under its name.
type Component struct {
	name string
	now  func() time.Time

	items atomic.Int64
	bytes atomic.Int64
	txns  atomic.Int64

	stateMu sync.Mutex
	state   State
	since   time.Time
	spent   [numStates]time.Duration

	metaMu   sync.Mutex
	counters map[string]*atomic.Int64
	gauges   map[string]*atomic.Int64
	info     map[string]string
}

// Name returns the component's name.
func (c *Component) Name() string { return c.name }

// Add counts items (rows, messages, changes: whatever the component's unit
// is) and their size in bytes. Lock-free and allocation-free: call it per row.
func (c *Component) Add(items, bytes int64) {
	c.items.Add(items)
	c.bytes.Add(bytes)
}

// AddTxns counts n transactions. Lock-free and allocation-free.
func (c *Component) AddTxns(n int64) {
	c.txns.Add(n)
}

// SetState closes the interval spent in the current state and enters s.
// Setting the current state again is allowed and changes nothing observable.
// Goroutine-safe; it takes a short mutex and reads the clock once, so call it
// per batch or per wait, not per row. Unknown states are counted as Busy.
func (c *Component) SetState(s State) {
	if s < 0 || s >= numStates {
		s = Busy
	}
	// The clock is read under the lock: a snapshot taken between reading it
	// and taking the lock would otherwise count time this call then records
	// as shorter, and state times would appear to go backwards.
	c.stateMu.Lock()
	now := c.now()
	if d := now.Sub(c.since); d > 0 {
		c.spent[c.state] += d
		c.since = now
	}
	c.state = s
	c.stateMu.Unlock()
}

// State returns the component's current state.
func (c *Component) State() State {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.state
}

// Counter returns the named monotonically increasing counter, creating it at
// zero. Look it up once and keep the pointer; only ever Add to it.
func (c *Component) Counter(name string) *atomic.Int64 {
	return c.named(&c.counters, name)
}

// Gauge returns the named gauge (a value that goes up and down, such as a
// queue depth or buffered bytes), creating it at zero. Keep the pointer.
func (c *Component) Gauge(name string) *atomic.Int64 {
	return c.named(&c.gauges, name)
}

func (c *Component) named(m *map[string]*atomic.Int64, name string) *atomic.Int64 {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	if *m == nil {
		*m = make(map[string]*atomic.Int64)
	}
	v := (*m)[name]
	if v == nil {
		v = new(atomic.Int64)
		(*m)[name] = v
	}
	return v
}

// SetInfo records a small text fact about the component, such as the slot
// name or the negotiated protocol version. The last value for a key wins.
func (c *Component) SetInfo(key, value string) {
	c.metaMu.Lock()
	defer c.metaMu.Unlock()
	if c.info == nil {
		c.info = make(map[string]string)
	}
	c.info[key] = value
}

// Snapshot is a point-in-time copy of a registry.
type Snapshot struct {
	// Time is when the snapshot was taken (registry clock).
	Time time.Time `json:"time"`
	// Uptime is the registry's age in seconds at Time.
	Uptime float64 `json:"uptime_seconds"`
	// Components are in creation order.
	Components []ComponentSnapshot `json:"components"`
	// CommitLatency is each stage's commit → stage latencies since the
	// process started (CommitLatency), by stage name; absent before
	// any transaction.
	CommitLatency []StageLatency `json:"commit_latency,omitempty"`
}

// ComponentSnapshot is a point-in-time copy of one component. The three state
// times include the current state up to the snapshot time, so they add up to
// the component's age. The maps are never nil.
type ComponentSnapshot struct {
	Name           string            `json:"name"`
	Items          int64             `json:"items"`
	Bytes          int64             `json:"bytes"`
	Txns           int64             `json:"txns"`
	BusySeconds    float64           `json:"busy_seconds"`
	IdleSeconds    float64           `json:"idle_seconds"`
	WaitingSeconds float64           `json:"waiting_seconds"`
	State          string            `json:"state"`
	Counters       map[string]int64  `json:"counters"`
	Gauges         map[string]int64  `json:"gauges"`
	Info           map[string]string `json:"info"`
}

// Snapshot copies every component's current values. Components are read one
// at a time, each consistently for its state times; counters are read with
// atomic loads (a snapshot taken while stages run is not a global cut, which
// is fine for rates).
func (r *Registry) Snapshot() Snapshot {
	comps := r.Components()
	now := r.now()
	s := Snapshot{
		Time:       now,
		Uptime:     now.Sub(r.start).Seconds(),
		Components: make([]ComponentSnapshot, 0, len(comps)),
	}
	for _, c := range comps {
		s.Components = append(s.Components, c.snapshot(now))
	}
	s.CommitLatency = r.latency.Snapshot()
	return s
}

func (c *Component) snapshot(now time.Time) ComponentSnapshot {
	cs := ComponentSnapshot{
		Name:  c.name,
		Items: c.items.Load(),
		Bytes: c.bytes.Load(),
		Txns:  c.txns.Load(),
	}

	c.stateMu.Lock()
	spent := c.spent
	state := c.state
	if n := c.now(); n.After(now) {
		now = n // never count less than a SetState that ran after the snapshot began
	}
	if d := now.Sub(c.since); d > 0 {
		spent[state] += d
	}
	c.stateMu.Unlock()
	cs.State = state.String()
	cs.IdleSeconds = spent[Idle].Seconds()
	cs.BusySeconds = spent[Busy].Seconds()
	cs.WaitingSeconds = spent[Waiting].Seconds()

	c.metaMu.Lock()
	cs.Counters = loadAll(c.counters)
	cs.Gauges = loadAll(c.gauges)
	cs.Info = make(map[string]string, len(c.info))
	for k, v := range c.info {
		cs.Info[k] = v
	}
	c.metaMu.Unlock()
	return cs
}

func loadAll(m map[string]*atomic.Int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v.Load()
	}
	return out
}

// Component returns the snapshot of the named component.
func (s Snapshot) Component(name string) (ComponentSnapshot, bool) {
	for _, c := range s.Components {
		if c.Name == name {
			return c, true
		}
	}
	return ComponentSnapshot{}, false
}

// Seconds returns the time spent in state st.
func (cs ComponentSnapshot) Seconds(st State) float64 {
	switch st {
	case Idle:
		return cs.IdleSeconds
	case Busy:
		return cs.BusySeconds
	case Waiting:
		return cs.WaitingSeconds
	}
	return 0
}

// sortedKeys returns the keys of m in ascending order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
