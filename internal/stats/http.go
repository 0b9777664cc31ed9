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

// Serve listens on addr (host:port; ":0" picks a free port) and serves h
// until ctx is done, then shuts down gracefully (in-flight requests get 5 s).
// It returns nil after a shutdown caused by ctx, or the listen/serve error.
// logger may be nil.
func Serve(ctx context.Context, addr string, h http.Handler, logger *slog.Logger) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen stats endpoint on %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, h, logger)
}

// ServeListener is Serve on an existing listener (which it closes); use it
// when the caller needs to know the bound address before serving.
func ServeListener(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With(slog.String("component", "stats.http"))
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
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
