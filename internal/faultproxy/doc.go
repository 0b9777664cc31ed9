// Package faultproxy is a TCP proxy for tests that breaks the network on
// command: it sits between a client (repstream, pgx) and a server
// (PostgreSQL) on a loopback port and can cut every connection at once,
// freeze the link (the sockets stay open, no byte moves: a half-dead link,
// which the peers see as silence rather than a close), add latency, or refuse
// new connections.
//
// It is not test-only code so that the end-to-end tests and the benchmarks
// can import it; it uses the standard library only.
//
//	p, err := faultproxy.Start(ctx, "127.0.0.1:5432")
//	dsn := "host=127.0.0.1 port=" + p.Port() + " ..."
//	p.Freeze()   // peers see silence
//	p.Thaw()
//	p.Cut()      // every connection reset, new ones accepted
//	p.Close()
//
// Goroutines: one accept loop owned by the Proxy, and per accepted
// connection two pumps (client → upstream, upstream → client) owned by its
// link. Close stops the accept loop, closes every link and waits for all of
// them.
//
// Files:
//
//	doc.go             this overview
//	faultproxy.go      Proxy (Start, Cut, Freeze, Thaw, Delay, Refuse, Stats, Close), Stats; the per-connection links and their pumps
//	faultproxy_test.go over loopback sockets: forwarding and counters, Cut, Freeze as silence, Delay, Refuse, upstream down, half-close, Close and the context
//	synctest_test.go   the exact timing of Delay and Freeze, in a synctest bubble over net.Pipe
package faultproxy
