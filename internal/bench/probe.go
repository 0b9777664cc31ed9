package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/jackc/pgx/v5"
)

// ProbeTable is the replicated table the latency probe writes to.
const ProbeTable = "bench_probe"

// ProbeDDL creates the probe table (on the source and on the target).
const ProbeDDL = `CREATE TABLE bench_probe (id bigint PRIMARY KEY, sent timestamptz NOT NULL);`

// Probe measures commit → visible latency independently of any engine: it
// commits a row on the source every Interval and polls the target for the
// rows that appeared, recording for each the time between its commit (as the
// committing client saw it return) and its first sighting on the target.
//
// The poller follows the probes rather than a fixed clock: while a probe is
// outstanding it polls every eighth of the oldest one's age, between
// minPoll and poll (10 ms), so a latency is measured to about an eighth of
// itself or a millisecond, whichever is more (an idle Go process's timers
// wake within about a millisecond: a probe visible at once measures about
// 1.3 ms), at a few dozen queries per probe, and a lag of seconds costs no more than a poll every 10 ms; with
// nothing outstanding it waits for the next commit. (A fixed 10 ms poll,
// phase-locked with the 100 ms ticker, measured every latency under 10 ms
// as about 9.5 ms: the p99 counted missed polls.)
//
// Invariants (under mu): ids are assigned consecutively from 1; began[id]
// is set when the id's INSERT is sent, sent[id] once it committed; seen[id]
// is set once, when the poller first saw the row.
type Probe struct {
	src, tgt string
	interval time.Duration
	poll     time.Duration
	log      *slog.Logger

	// ticking is held by the ticker while it commits a probe (Stop waits
	// for it).
	ticking sync.Mutex

	mu     sync.Mutex
	nextID int64
	began  map[int64]time.Time
	sent   map[int64]time.Time
	seen   map[int64]time.Time
	tick   bool          // the ticker is allowed to commit probes
	wake   chan struct{} // a probe was first seen
	begun  chan struct{} // a probe's INSERT was sent (wakes the poller)
}

// minPoll is the shortest interval between two polls of the target.
const minPoll = 250 * time.Microsecond

// NewProbe prepares a probe between the source database srcDSN and the
// target database tgtDSN, both holding ProbeTable.
func NewProbe(srcDSN, tgtDSN string, interval time.Duration, log *slog.Logger) *Probe {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Probe{src: srcDSN, tgt: tgtDSN, interval: interval, poll: 10 * time.Millisecond,
		log:   log.With("component", "bench.probe"),
		began: map[int64]time.Time{}, sent: map[int64]time.Time{}, seen: map[int64]time.Time{},
		wake: make(chan struct{}, 1), begun: make(chan struct{}, 1)}
}

// Run commits probes (while ticking is enabled) and polls the target until
// ctx ends. It returns the first connection or query error.
func (p *Probe) Run(ctx context.Context) error {
	src, err := pgx.Connect(ctx, p.src)
	if err != nil {
		return fmt.Errorf("probe: connect to the source: %w", err)
	}
	defer src.Close(context.Background())
	tgt, err := pgx.Connect(ctx, p.tgt)
	if err != nil {
		return fmt.Errorf("probe: connect to the target: %w", err)
	}
	defer tgt.Close(context.Background())

	errc := make(chan error, 2)
	go func() { errc <- p.pollLoop(ctx, tgt) }()
	go func() { errc <- p.commitLoop(ctx, src) }()
	var first error
	for range 2 {
		if err := <-errc; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	}
	return first
}

// SetTicking turns the periodic probe commits on or off.
func (p *Probe) SetTicking(on bool) {
	p.mu.Lock()
	p.tick = on
	p.mu.Unlock()
}

// Mark commits one probe now (through the ticker's connection, in order) and
// returns its id; used as the end-of-load marker.
func (p *Probe) Mark(ctx context.Context) (int64, time.Time, error) {
	c, err := pgx.Connect(ctx, p.src)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("probe: connect to the source: %w", err)
	}
	defer c.Close(context.Background())
	return p.commit(ctx, c)
}

func (p *Probe) commit(ctx context.Context, c *pgx.Conn) (int64, time.Time, error) {
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.began[id] = time.Now()
	p.mu.Unlock()
	select {
	case p.begun <- struct{}{}:
	default:
	}
	if _, err := c.Exec(ctx, "INSERT INTO bench_probe VALUES ($1, clock_timestamp())", id); err != nil {
		return 0, time.Time{}, fmt.Errorf("probe: insert %d: %w", id, err)
	}
	now := time.Now()
	p.mu.Lock()
	p.sent[id] = now
	p.mu.Unlock()
	return id, now, nil
}

func (p *Probe) commitLoop(ctx context.Context, c *pgx.Conn) error {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := p.tickOnce(ctx, c); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// tickOnce commits a probe if ticking is on, holding p.ticking.
func (p *Probe) tickOnce(ctx context.Context, c *pgx.Conn) error {
	p.ticking.Lock()
	defer p.ticking.Unlock()
	p.mu.Lock()
	on := p.tick
	p.mu.Unlock()
	if !on {
		return nil
	}
	_, _, err := p.commit(ctx, c)
	return err
}

// StopTicking turns the periodic commits off and waits until every probe
// committed is visible on the target (one the ticker was committing
// included): the target then holds all of bench_probe the source does.
func (p *Probe) StopTicking(ctx context.Context) error {
	p.ticking.Lock() // after a commit under way
	p.mu.Lock()
	p.tick = false
	p.ticking.Unlock()
	var last int64
	for id := range p.sent {
		last = max(last, id)
	}
	p.mu.Unlock()
	if last == 0 {
		return nil
	}
	_, err := p.WaitSeen(ctx, last)
	return err
}

func (p *Probe) pollLoop(ctx context.Context, c *pgx.Conn) error {
	t := time.NewTimer(p.poll)
	defer t.Stop()
	var from int64 = 1 // smallest id not yet seen
	ids := make([]int64, 0, 64)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-p.begun:
			t.Stop()
		}
		ids = ids[:0]
		ids = ids[:0]
		rows, err := c.Query(ctx, "SELECT id FROM bench_probe WHERE id >= $1", from)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("probe: poll the target: %w", err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("probe: scan: %w", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("probe: poll the target: %w", err)
		}
		now := time.Now()
		p.mu.Lock()
		newly := false
		for _, id := range ids {
			if _, ok := p.seen[id]; !ok {
				p.seen[id] = now
				newly = true
			}
		}
		for {
			if _, ok := p.seen[from]; !ok {
				break
			}
			from++
		}
		t.Reset(p.nextPoll(from, now))
		p.mu.Unlock()
		if newly {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
	}
}

// nextPoll is the wait before the next poll when from is the smallest id
// not yet seen (see Probe; under mu).
func (p *Probe) nextPoll(from int64, now time.Time) time.Duration {
	at, ok := p.began[from]
	if !ok {
		return p.poll // nothing outstanding: the next commit wakes the poller
	}
	return min(max(now.Sub(at)/8, minPoll), p.poll)
}

// WaitSeen blocks until probe id is visible on the target and returns when
// it was first seen.
func (p *Probe) WaitSeen(ctx context.Context, id int64) (time.Time, error) {
	for {
		p.mu.Lock()
		at, ok := p.seen[id]
		p.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("probe %d never became visible on the target: %w", id, ctx.Err())
		case <-p.wake:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Lag returns the current lag: the age of the oldest committed probe not yet
// seen, or 0 when every committed probe is visible.
func (p *Probe) Lag(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lag time.Duration
	for id, at := range p.sent {
		if _, ok := p.seen[id]; !ok {
			lag = max(lag, now.Sub(at))
		}
	}
	return lag
}

// Results returns the probes (in id order, T relative to epoch) and the
// latency summary of the probes whose commit time is in [from, to] (zero
// times: unbounded); the points leave out those committed before from.
func (p *Probe) Results(epoch, from, to time.Time) ([]ProbePoint, LatencyFigure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := hdrhistogram.New(1, 3_600_000_000, 3) // µs, up to an hour
	var pts []ProbePoint
	var fig LatencyFigure
	for id := int64(1); id <= p.nextID; id++ {
		at, ok := p.sent[id]
		if !ok {
			continue
		}
		if !from.IsZero() && at.Before(from) {
			continue // a warm-up's
		}
		pt := ProbePoint{T: at.Sub(epoch).Seconds(), LatencyMs: -1}
		inWindow := to.IsZero() || !at.After(to)
		if inWindow {
			fig.Probes++
		}
		if s, ok := p.seen[id]; ok {
			lat := max(s.Sub(at), 0)
			pt.LatencyMs = float64(lat.Microseconds()) / 1000
			if inWindow {
				fig.Seen++
				_ = h.RecordValue(max(lat.Microseconds(), 1))
			}
		}
		pts = append(pts, pt)
	}
	if fig.Seen > 0 {
		ms := func(us int64) float64 { return float64(us) / 1000 }
		fig.P50Ms = ms(h.ValueAtQuantile(50))
		fig.P95Ms = ms(h.ValueAtQuantile(95))
		fig.P99Ms = ms(h.ValueAtQuantile(99))
		fig.MaxMs = ms(h.Max())
	}
	return pts, fig
}
