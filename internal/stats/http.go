package stats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// StatusResponse is the JSON document served at GET /status.
type StatusResponse struct {
	Stats Snapshot `json:"stats"`
	// Status is whatever the extra function given to Handler returned
	// (pipeline positions, lag, configuration): null without one.
	Status any `json:"status"`
}

// Handler serves the registry with the default HandlerOptions and extra
// as the /status "status" document; see NewHandler.
func Handler(r *Registry, extra func() any) http.Handler {
	return NewHandler(r, HandlerOptions{Extra: extra})
}

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// Extra is called once per /status request; its result (positions, lag)
	// must be JSON-encodable and is served as "status". May be nil.
	Extra func() any
	// Collector configures /metrics (build info, health judgement).
	Collector CollectorOptions
}

// NewHandler serves the registry over HTTP, read-only:
//
//	GET /         the live page (embedded HTML and JS, reads /status every 2 s)
//	GET /status   JSON StatusResponse {"stats": Snapshot, "status": Extra()}
//	GET /metrics  Prometheus exposition (Collector, go_ and process_ collectors)
//	GET /healthz  200 {"status":"ok"} or 503 {"status":"unhealthy","reasons":[...]}
//
// HEAD is allowed wherever GET is; other methods answer 405, other paths
// 404. Nothing served contains a password or a DSN: the registry holds only
// counts, positions and short facts.
func NewHandler(r *Registry, opts HandlerOptions) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, req *http.Request) {
		if !allowGet(w, req) {
			return
		}
		resp := StatusResponse{Stats: r.Snapshot()}
		if opts.Extra != nil {
			resp.Status = opts.Extra()
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(resp); err != nil {
			http.Error(w, fmt.Sprintf("encode status: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(buf.Bytes())
	})
	metrics := MetricsHandler(NewPrometheusRegistry(r, opts.Collector))
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, req *http.Request) {
		if !allowGet(w, req) {
			return
		}
		metrics.ServeHTTP(w, req)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, req *http.Request) {
		if !allowGet(w, req) {
			return
		}
		s := r.Snapshot()
		rep := HealthReport{Status: "ok"}
		if eng, ok := s.Component(CompEngine); ok {
			rep.Phase = eng.Info[InfoPhase]
		}
		code := http.StatusOK
		if healthy, reasons := Health(s, opts.Collector.Health); !healthy {
			rep.Status, rep.Reasons, code = "unhealthy", reasons, http.StatusServiceUnavailable
		}
		body, _ := json.Marshal(rep) // strings only: cannot fail
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_, _ = w.Write(append(body, '\n'))
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, req *http.Request) {
		if !allowGet(w, req) {
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(livePage)
	})
	return mux
}

func allowGet(w http.ResponseWriter, req *http.Request) bool {
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// ServerOptions bound what clients of the endpoint can hold: every
// connection is closed once it has been idle, slow to send its request or
// slow to read its response for longer than these timeouts, and no more than
// MaxConns are open at once. A zero field takes its DefaultServerOptions
// value. The endpoint has no streaming response (the live page polls
// /status), so WriteTimeout bounds every request.
type ServerOptions struct {
	// ReadHeaderTimeout is how long a client may take to send a request's
	// headers, from the first byte (or from accept, for the first request).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its response.
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
	// MaxConns bounds the open connections. A connection accepted at the
	// bound closes the one that has waited longest for a request (idle, or
	// new and not yet sending), so idle clients never lock out a new
	// request such as a liveness probe's; only when all MaxConns are
	// serving a request is the new one closed at once.
	MaxConns int

	// connState, when set, is called after each state change the bound
	// has seen (tests).
	connState func(net.Conn, http.ConnState)
}

// DefaultServerOptions are the bounds of Serve and ServeListener: a
// read-only endpoint whose answers take milliseconds.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    64 << 10,
		MaxConns:          64,
	}
}

func (o ServerOptions) withDefaults() ServerOptions {
	d := DefaultServerOptions()
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = d.ReadTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = d.WriteTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = d.IdleTimeout
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if o.MaxConns <= 0 {
		o.MaxConns = d.MaxConns
	}
	return o
}

// ListenAddr is the address the endpoint binds for addr: a port alone
// (":9187" or "9187") is 127.0.0.1's, so that only this host reaches it;
// every other address is bound as given ("0.0.0.0:9187" or "[::]:9187" for
// every interface).
func ListenAddr(addr string) string {
	if addr != "" && strings.Trim(addr, "0123456789") == "" {
		return net.JoinHostPort("127.0.0.1", addr)
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// Serve listens on addr (host:port; a port alone binds 127.0.0.1, see
// ListenAddr; ":0" picks a free port) and serves h until ctx is done, then
// shuts down gracefully (in-flight requests get 5 s), with the
// DefaultServerOptions. It returns nil after a shutdown caused by ctx, or
// the listen/serve error. logger may be nil.
func Serve(ctx context.Context, addr string, h http.Handler, logger *slog.Logger) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", ListenAddr(addr))
	if err != nil {
		return fmt.Errorf("listen stats endpoint on %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, h, logger)
}

// ServeListener is Serve on an existing listener (which it closes); use it
// when the caller needs to know the bound address before serving.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	return ServeListenerOptions(ctx, ln, h, logger, ServerOptions{})
}

// ServeListenerOptions is ServeListener with other bounds than the
// defaults.
func ServeListenerOptions(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger, opts ServerOptions) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With(slog.String("component", "stats.http"))
	opts = opts.withDefaults()
	cc := newConnCap(opts.MaxConns, logger)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		ReadTimeout:       opts.ReadTimeout,
		WriteTimeout:      opts.WriteTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    opts.MaxHeaderBytes,
		ConnState: func(c net.Conn, state http.ConnState) {
			cc.track(c, state)
			if opts.connState != nil {
				opts.connState(c, state)
			}
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	logger.Info("stats endpoint listening", slog.String("addr", ln.Addr().String()))

	select {
	case err := <-done:
		// Serve never returns nil; ErrServerClosed cannot happen before Shutdown.
		return fmt.Errorf("serve stats endpoint on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if serveErr := <-done; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	if err != nil {
		return fmt.Errorf("shut down stats endpoint on %s: %w", ln.Addr(), err)
	}
	logger.Info("stats endpoint stopped")
	return nil
}

// connCap is the server's ConnState hook that keeps at most max
// connections open. Accept calls it with StateNew before serving the
// connection, so a connection over the bound is never served.
//
// Invariant: conns holds every connection accepted and neither closed by
// the server nor closed here; len(conns) <= max.
type connCap struct {
	max int
	log *slog.Logger

	mu      sync.Mutex
	seq     uint64 // orders the entries' since
	conns   map[net.Conn]*connEntry
	evicted uint64 // closed here to make room
	refused uint64 // closed here at accept: all max were serving
	logged  time.Time
}

type connEntry struct {
	state http.ConnState
	since uint64 // seq when the connection became new or idle
}

func newConnCap(n int, log *slog.Logger) *connCap {
	return &connCap{max: n, log: log, conns: make(map[net.Conn]*connEntry)}
}

func (c *connCap) track(conn net.Conn, state http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch state {
	case http.StateNew:
		if len(c.conns) >= c.max && !c.evictLocked() {
			c.refused++
			c.logLocked()
			_ = conn.Close()
			return
		}
		c.seq++
		c.conns[conn] = &connEntry{state: state, since: c.seq}
	case http.StateActive:
		if e := c.conns[conn]; e != nil {
			e.state = state
		}
	case http.StateIdle:
		if e := c.conns[conn]; e != nil {
			c.seq++
			e.state, e.since = state, c.seq
		}
	case http.StateHijacked, http.StateClosed:
		delete(c.conns, conn)
	}
}

// evictLocked closes the connection that has waited longest for a request
// and reports whether there was one (none while all are serving one).
func (c *connCap) evictLocked() bool {
	var oldest net.Conn
	var since uint64
	for conn, e := range c.conns {
		if e.state != http.StateActive && (oldest == nil || e.since < since) {
			oldest, since = conn, e.since
		}
	}
	if oldest == nil {
		return false
	}
	delete(c.conns, oldest)
	_ = oldest.Close()
	c.evicted++
	c.logLocked()
	return true
}

// logLocked warns, at most once a minute, that the bound was reached.
func (c *connCap) logLocked() {
	if now := time.Now(); now.Sub(c.logged) >= time.Minute {
		c.logged = now
		c.log.Warn("stats endpoint at its connection bound: closing waiting connections",
			slog.Int("max_conns", c.max), slog.Uint64("evicted", c.evicted), slog.Uint64("refused", c.refused))
	}
}
