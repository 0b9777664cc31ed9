package bench

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Params size and shape a workload. Zero values mean "the seed's value".
type Params struct {
	// Scale is the fraction of the seed's size (1 = the seed's full size).
	Scale float64
	// Rows, when > 0, overrides Scale with a number of rows (row changes for fly).
	Rows int64
	// TxnRows is the rows per transaction of conditions (seed: 100).
	TxnRows int
	// Delay is the pause between conditions transactions (seed: 0, 0.1, 1, 2, 3 cs).
	Delay time.Duration
	// Rate is fly's transactions per second (seed: 1000).
	Rate int
	// Duration is fly's duration at scale 1 (seed: 60 s) — scaled by Scale.
	Duration time.Duration
	// Jobs is dbl's largest number of parallel jobs (default 2×CPUs).
	Jobs int
	// Accounts is how many of fly's 1,000 accounts the transactions update,
	// in turn (default all): fewer makes hot rows, updated again and again.
	Accounts int
	// PreMade (initial-copy): the target's tables are made, with their
	// keys and indexes, before every system starts, as a user restoring
	// pg_dump --schema-only would (repstream without --create-tables,
	// pgcopydb clone with --drop-if-exists).
	PreMade bool
	// WarmUp (fly, live mode) is how long the workload runs at its rate
	// before the measured interval begins (LoadEnv.measure): a start's
	// first change to each table costs each apply connection its reads
	// of the target's catalog, a transient the steady state does not
	// have. What the start took is reported apart (start → first change
	// visible).
	WarmUp time.Duration
}

// rows returns the row count for a workload whose seed size is seed rows.
func (p Params) rows(seed int64) int64 {
	if p.Rows > 0 {
		return p.Rows
	}
	s := p.Scale
	if s <= 0 {
		s = 1
	}
	return max(1, int64(math.Round(float64(seed)*s)))
}

// Map renders the parameters for the report.
func (p Params) Map() map[string]string {
	m := map[string]string{"scale": fmt.Sprint(p.Scale)}
	if p.Rows > 0 {
		m["rows"] = fmt.Sprint(p.Rows)
	}
	if p.TxnRows > 0 {
		m["txn_rows"] = fmt.Sprint(p.TxnRows)
	}
	if p.Delay > 0 {
		m["delay"] = p.Delay.String()
	}
	if p.Rate > 0 {
		m["rate"] = fmt.Sprint(p.Rate)
	}
	if p.Duration > 0 {
		m["duration"] = p.Duration.String()
	}
	if p.Jobs > 0 {
		m["jobs"] = fmt.Sprint(p.Jobs)
	}
	if p.Accounts > 0 {
		m["accounts"] = fmt.Sprint(p.Accounts)
	}
	if p.PreMade {
		m["pre_made"] = "true"
	}
	if p.WarmUp > 0 {
		m["warm_up"] = p.WarmUp.String()
	}
	return m
}

// Workload is one seed workload: the tables it creates on the source (and,
// identically, on the target) and the generator that loads the source.
type Workload struct {
	Name        string
	Description string
	// Tables are the replicated tables (schema public), in the publication.
	Tables []string
	// Unreplicated tables are written by the load but not published; the
	// verification checks that they stay empty on the target.
	Unreplicated []string
	// DDL creates the tables (and generator procedures). It runs on the
	// source and on the target database, so it must be deterministic.
	DDL string
	// Copy marks a workload that measures an initial copy (doCopyRun):
	// the rows exist before the system starts.
	Copy bool
	// WarmsUp marks a live workload that runs Params.WarmUp first and
	// then calls LoadEnv.beginMeasure (fly).
	WarmsUp bool
	// Load generates the workload on the source database.
	Load func(ctx context.Context, env *LoadEnv) (LoadStats, error)
}

// LoadEnv is what a workload's Load gets.
type LoadEnv struct {
	DSN    string
	Params Params
	// Total is set by Load to the rows it will write (0: unknown), and Done
	// counts the rows written so far: the live line's progress bar.
	Total atomic.Int64
	Done  atomic.Int64
	// FirstCommit is set by Load to when its first transaction started
	// (zero: when Load was called).
	mu          sync.Mutex
	firstCommit time.Time
	// dbl collects the dbl workload's per-test results (nil otherwise).
	dbl *dblSink
	// measure, when set, begins the measured interval; a workload that
	// warms up (Params.WarmUp) calls it once, when its first measured
	// transaction is due. Without it the interval began before Load.
	measure func()
}

// beginMeasure marks the load's first measured transaction: it begins the
// measured interval if the runner asked for that (measure), and records
// firstCommit.
func (e *LoadEnv) beginMeasure() {
	if e.measure != nil {
		e.measure()
	}
	e.markFirst()
}

func (e *LoadEnv) markFirst() {
	e.mu.Lock()
	if e.firstCommit.IsZero() {
		e.firstCommit = time.Now()
	}
	e.mu.Unlock()
}

// LoadStats is what a load wrote.
type LoadStats struct {
	Rows       int64 // row changes in replicated tables
	SourceRows int64 // every row written (replicated or not)
	Txns       int64
}

var registry = map[string]*Workload{}

func register(w *Workload) { registry[w.Name] = w }

// Lookup returns the workload called name.
func Lookup(name string) (*Workload, error) {
	w, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown workload %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return w, nil
}

// Names lists the workloads in a fixed order.
func Names() []string {
	order := []string{"conditions", "pedestals", "pedestals-blob", "batch", "single-row", "unrelated", "fly", "dbl"}
	var out []string
	for _, n := range order {
		if _, ok := registry[n]; ok {
			out = append(out, n)
		}
	}
	var rest []string
	for n := range registry {
		found := false
		for _, o := range out {
			found = found || o == n
		}
		if !found {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

func connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to the source: %w", err)
	}
	return c, nil
}

// exec runs one statement in its own transaction (simple protocol).
func execSQL(ctx context.Context, c *pgx.Conn, sql string, args ...any) error {
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("%s: %w", firstLine(sql), err)
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}
