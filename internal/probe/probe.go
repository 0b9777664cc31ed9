package probe

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/stats"
)

// Interval is how often Loop polls the source (WAL position,
// slot) and pings the target.
const Interval = 2 * time.Second

// Options says what Loop probes and where it records it.
type Options struct {
	Source, Target string // the DSNs
	Slot           string
	Stats          *stats.Registry // components source and target
	Logger         *slog.Logger
	// Kick has Loop probe at once (a phase change of the run: the slot may
	// have just been created).
	Kick <-chan struct{}
}

// Loop polls the source's WAL position and the slot, and pings the
// target, every Interval (and at each Kick), each on a small connection of
// its own that is reopened after a failure, until ctx ends.
func Loop(ctx context.Context, o Options) {
	src := &prober{side: stats.CompSource, dsn: o.Source, st: o.Stats.Component(stats.CompSource)}
	tgt := &prober{side: stats.CompTarget, dsn: o.Target, st: o.Stats.Component(stats.CompTarget)}
	defer src.close()
	defer tgt.close()
	slot := o.Slot
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		src.probe(ctx, o.Logger, func(ctx context.Context, conn *pgx.Conn) error { return pollSource(ctx, conn, slot, src.st) })
		tgt.probe(ctx, o.Logger, func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SELECT 1")
			return err
		})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-o.Kick:
		}
	}
}

// prober keeps one monitoring connection to one side and records each
// probe's outcome in the side's component: gauges up and last_ok_unix_ns,
// info last_error (never a password: connection errors name host, port,
// user and database at most).
type prober struct {
	side string
	dsn  string
	st   *stats.Component
	conn *pgx.Conn
}

func (p *prober) probe(ctx context.Context, log *slog.Logger, f func(context.Context, *pgx.Conn) error) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := p.connect(pctx)
	if err == nil {
		err = f(pctx, p.conn)
	}
	if ctx.Err() != nil {
		return // stopping: not a failure of the side
	}
	if err != nil {
		msg := pgdsn.RedactError(err).Error()
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		if p.st.Gauge(stats.GaugeUp).Swap(0) == 1 {
			log.Warn("probe failed", "side", p.side, "err", msg)
		}
		p.st.SetInfo(stats.InfoLastError, msg)
		p.close()
		return
	}
	if p.st.Gauge(stats.GaugeUp).Swap(1) == 0 && p.st.Gauge(stats.GaugeLastOKUnixNano).Load() != 0 {
		log.Info("probe succeeds again", "side", p.side)
	}
	p.st.Gauge(stats.GaugeLastOKUnixNano).Store(time.Now().UnixNano())
	p.st.SetInfo(stats.InfoLastError, "")
}

func (p *prober) connect(ctx context.Context) error {
	if p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	cfg, err := pgdsn.ParsePgx(p.dsn)
	if err != nil {
		return fmt.Errorf("%s DSN: %w", p.side, err)
	}
	cfg.RuntimeParams["application_name"] = "repstream-monitor"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s %s: %w", p.side, pgdsn.Describe(&cfg.Config), err)
	}
	p.conn = conn
	return nil
}

func (p *prober) close() {
	if p.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.conn.Close(ctx)
		p.conn = nil
	}
}

// pollSource reads the source's current WAL position and the slot's row
// into the source component's gauges.
func pollSource(ctx context.Context, conn *pgx.Conn, slot string, st *stats.Component) error {
	var cur string
	var confirmed, walStatus *string
	var active, exists bool
	var retained *int64
	err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, s.confirmed_flush_lsn::text, s.wal_status,
			coalesce(s.active, false), pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint, s.slot_name IS NOT NULL
		FROM (SELECT 1) AS one LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = $1`, slot).
		Scan(&cur, &confirmed, &walStatus, &active, &retained, &exists)
	if err != nil {
		return fmt.Errorf("poll the source's WAL position and slot %q: %w", slot, err)
	}
	lsn, err := change.ParseLSN(cur)
	if err != nil {
		return err
	}
	st.Gauge(stats.GaugeWALLSN).Store(int64(lsn))
	st.Gauge(stats.GaugeSlotExists).Store(b2i(exists))
	st.Gauge(stats.GaugeSlotActive).Store(b2i(active))
	if retained != nil {
		st.Gauge(stats.GaugeSlotRetained).Store(max(0, *retained))
	}
	if confirmed != nil {
		if c, err := change.ParseLSN(*confirmed); err == nil {
			st.Gauge(stats.GaugeSlotConfirmed).Store(int64(c))
		}
	}
	switch {
	case !exists:
		st.SetInfo(stats.InfoWALStatus, "missing")
	case walStatus != nil:
		st.SetInfo(stats.InfoWALStatus, *walStatus)
	}
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
