package target

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/pgerr"
)

// LinkWatch finds target connections that are open but silent — a NAT or
// firewall that dropped the link's state, a frozen network, a host gone
// without a reset — and closes them, so that the engine reconnects instead
// of waiting for ever (TCP keepalives do not help while the peer's kernel
// still answers, and nothing else times out).
//
// Every connection opened with it (ConnectWatched) records when
// a read or write call started blocking and when bytes last moved. A
// connection is suspect when a call has been blocked, with no bytes moving
// either way, for half the timeout. Silence alone is not death: a
// backend may legitimately compute for ten minutes (a long COPY, a slow
// trigger) without a byte on the wire. So Run asks the server over a fresh
// connection what the suspect's backend is doing (pg_stat_activity): busy
// (state active, not waiting on its client) — the link is fine, keep
// waiting; idle or gone (it answered and the answer never came), or — after
// a whole timeout, since the engine may just be slow to send the next
// rows of a COPY — waiting on its client: the link is dead, its
// socket is closed, and the blocked call fails with pgerr.ErrSilentLink in
// its chain. A server that cannot be reached within a quarter of the
// timeout is as dead as the link. So a silent link is closed within
// 0.85 × the timeout (half, a tick of a tenth, a probe of a quarter).
//
// Invariant: a watched connection is closed by the watch only after the
// server said (or could not say) that its backend is not working for it;
// never for time spent on the engine's side (no call is blocked then).
//
// Goroutines: the watched connections' owners call Read/Write; Run (one
// goroutine) inspects them. State is atomic or under mu.
type LinkWatch struct {
	dsn     string
	timeout time.Duration
	log     *slog.Logger
	closed  *atomic.Int64 // connections closed as silent (a stats counter or a private one)

	mu    sync.Mutex
	conns map[*watchedConn]struct{}

	// probe reports the state of backends by PID; a missing PID has no
	// backend. Replaced in tests.
	probe func(ctx context.Context, pids []uint32) (map[uint32]backendState, error)
	now   func() time.Time
}

type backendState struct {
	state, waitType, wait string
	blockers              string // waiting for a lock: the sessions that hold it up (blockerSQL)
}

// busy: the backend is working on a request, not waiting for the client.
func (b backendState) busy() bool { return b.state == "active" && b.waitType != "Client" }

// NewLinkWatch watches connections to the target dsn: a call blocked for
// half the timeout with no bytes moving makes its connection suspect. closed, if not
// nil, counts the connections closed as silent.
func NewLinkWatch(dsn string, timeout time.Duration, closed *atomic.Int64, log *slog.Logger) *LinkWatch {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if closed == nil {
		closed = new(atomic.Int64)
	}
	w := &LinkWatch{dsn: dsn, timeout: timeout, log: log.With("component", "linkwatch"), closed: closed,
		conns: map[*watchedConn]struct{}{}, now: time.Now}
	w.probe = w.probeServer
	return w
}

// install makes cfg's connections watched.
func (w *LinkWatch) install(cfg *pgx.ConnConfig) {
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		wc := &watchedConn{Conn: c, w: w}
		wc.last.Store(w.now().UnixNano())
		w.mu.Lock()
		w.conns[wc] = struct{}{}
		w.mu.Unlock()
		return wc, nil
	}
}

// register records conn's backend PID, once it is connected.
func (w *LinkWatch) register(conn *pgx.Conn) {
	nc := conn.PgConn().Conn()
	for nc != nil {
		if wc, ok := nc.(*watchedConn); ok {
			wc.pid.Store(conn.PgConn().PID())
			return
		}
		u, ok := nc.(interface{ NetConn() net.Conn }) // a TLS connection
		if !ok {
			return
		}
		nc = u.NetConn()
	}
}

// Run inspects the watched connections every tenth of the timeout until ctx
// ends. It never fails: a probe that cannot reach the server is an answer.
func (w *LinkWatch) Run(ctx context.Context) error {
	if w.timeout <= 0 {
		return nil
	}
	t := time.NewTicker(w.timeout / 10)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.check(ctx)
		}
	}
}

// check closes the suspect connections whose backends are not working.
func (w *LinkWatch) check(ctx context.Context) {
	now := w.now()
	var suspects []*watchedConn
	var pids []uint32
	var silent []time.Duration
	w.mu.Lock()
	for c := range w.conns {
		if s := c.silentFor(now); s >= w.timeout/2 && c.pid.Load() != 0 {
			suspects = append(suspects, c)
			pids = append(pids, c.pid.Load())
			silent = append(silent, s)
		}
	}
	w.mu.Unlock()
	if len(suspects) == 0 {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, w.timeout/4)
	states, err := w.probe(pctx, pids)
	cancel()
	if ctx.Err() != nil {
		return
	}
	for i, c := range suspects {
		pid := c.pid.Load()
		why := ""
		switch st, ok := states[pid]; {
		case err != nil:
			why = fmt.Sprintf("the target cannot be asked about it: %v", err)
		case !ok:
			why = "its backend is gone"
		case st.busy():
			w.log.Debug("target connection quiet but its backend is working", "pid", pid, "wait_event", st.wait)
			if st.waitType == "Lock" && st.blockers != "" && now.Sub(time.Unix(0, c.lockSaid.Load())) >= lockWaitEvery {
				// Not dead, held up: by whom, so that the user can end
				// it (repstream waits, as for a lock of NoteLockWait's).
				c.lockSaid.Store(now.UnixNano())
				w.log.Warn("waiting for a lock another session holds on the target: repstream's statement goes on once that session ends its transaction or releases the lock",
					"waiting_pid", pid, "wait_event", st.wait, "waiting", silent[i].Round(time.Second), "held_by", st.blockers)
			}
			continue
		case st.state == "active" && silent[i] < w.timeout:
			// Waiting for its client in the middle of a statement (a COPY):
			// the link may be dead, or the engine slow to send the next
			// rows. Only a whole timeout of silence decides.
			continue
		default:
			why = fmt.Sprintf("its backend is %s (wait %s/%s)", st.state, st.waitType, st.wait)
		}
		w.log.Warn("target connection open but silent: closing it", "pid", pid,
			"silent", silent[i].Round(time.Second), "why", why)
		c.kill()
		w.closed.Add(1)
	}
}

// probeServer asks the target, over a fresh connection, what the backends
// are doing.
func (w *LinkWatch) probeServer(ctx context.Context, pids []uint32) (map[uint32]backendState, error) {
	conn, err := Connect(ctx, w.dsn, "repstream-linkwatch")
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT w.pid, coalesce(w.state, ''), coalesce(w.wait_event_type, ''), coalesce(w.wait_event, ''),
		coalesce(CASE WHEN w.wait_event_type = 'Lock' THEN (SELECT pg_catalog.string_agg(`+blockerSQL+`, '; ' ORDER BY a.pid)
			FROM pg_catalog.pg_stat_activity a WHERE a.pid = ANY (pg_catalog.pg_blocking_pids(w.pid))) END, '')
		FROM pg_catalog.pg_stat_activity w WHERE w.pid = ANY($1)`, pids)
	if err != nil {
		return nil, err
	}
	out := map[uint32]backendState{}
	for rows.Next() {
		var pid int32
		var st backendState
		if err := rows.Scan(&pid, &st.state, &st.waitType, &st.wait, &st.blockers); err != nil {
			return nil, err
		}
		out[uint32(pid)] = st
	}
	return out, rows.Err()
}

// watchedConn is a target connection's socket, timing its calls.
type watchedConn struct {
	net.Conn
	w                 *LinkWatch
	pid               atomic.Uint32
	reading, writing  atomic.Int64 // Unix ns a blocked call began; 0: none
	last              atomic.Int64 // Unix ns bytes last moved either way
	lockSaid          atomic.Int64 // Unix ns Run last logged who holds a lock the backend waits for
	killed            atomic.Bool
	unregisterOnClose sync.Once
}

// silentFor is how long a call has been blocked with no bytes moving (0 if
// no call is blocked).
func (c *watchedConn) silentFor(now time.Time) time.Duration {
	since := max(c.reading.Load(), c.writing.Load())
	if since == 0 {
		return 0
	}
	if r, wr := c.reading.Load(), c.writing.Load(); r != 0 && wr != 0 {
		since = min(r, wr)
	}
	return now.Sub(time.Unix(0, max(since, c.last.Load())))
}

func (c *watchedConn) kill() {
	c.killed.Store(true)
	_ = c.Conn.Close()
}

func (c *watchedConn) Read(p []byte) (int, error) {
	c.reading.Store(c.w.now().UnixNano())
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(c.w.now().UnixNano())
	}
	c.reading.Store(0)
	return n, c.wrap(err)
}

func (c *watchedConn) Write(p []byte) (int, error) {
	c.writing.Store(c.w.now().UnixNano())
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.last.Store(c.w.now().UnixNano())
	}
	c.writing.Store(0)
	return n, c.wrap(err)
}

func (c *watchedConn) wrap(err error) error {
	if err != nil && c.killed.Load() {
		return fmt.Errorf("%w (closed by repstream after %s without an answer): %w", pgerr.ErrSilentLink, c.w.timeout, err)
	}
	return err
}

func (c *watchedConn) Close() error {
	c.unregisterOnClose.Do(func() {
		c.w.mu.Lock()
		delete(c.w.conns, c)
		c.w.mu.Unlock()
	})
	return c.Conn.Close()
}
