package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/faultproxy"
	"github.com/repstream/repstream/internal/pgerr"
)

// TestFaultProxyWithPostgres: a pgx connection through the fault proxy
// works, gets a connection error at once when the proxy cuts it, and hangs
// until its own deadline (not an error from the network) while the proxy
// freezes the link.
func TestFaultProxyWithPostgres(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p, err := faultproxy.Start(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(e.src.Port())))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dsn := fmt.Sprintf("host=127.0.0.1 port=%s user=postgres dbname=%s sslmode=disable connect_timeout=5", p.Port(), e.srcDB)
	connect := func() *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect through the proxy: %v", err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	one := func(c *pgx.Conn, timeout time.Duration) (time.Duration, error) {
		qctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		t0 := time.Now()
		var n int
		err := c.QueryRow(qctx, "SELECT 1").Scan(&n)
		return time.Since(t0), err
	}

	// Cut: the next query fails at once with a lost connection.
	c := connect()
	if _, err := one(c, 10*time.Second); err != nil {
		t.Fatalf("query through the proxy: %v", err)
	}
	if n := p.Cut(); n != 1 {
		t.Fatalf("Cut closed %d connections, want 1", n)
	}
	el, err := one(c, 10*time.Second)
	if err == nil || !pgerr.ConnectionLost(err) || el > 5*time.Second {
		t.Fatalf("query after Cut: %v after %v, want a lost connection at once", err, el)
	}

	// Freeze: the query gets no answer and no error until its deadline.
	c = connect()
	if _, err := one(c, 10*time.Second); err != nil {
		t.Fatalf("query through the proxy: %v", err)
	}
	p.Freeze()
	const deadline = 1500 * time.Millisecond
	el, err = one(c, deadline)
	if err == nil || el < deadline || el > deadline+5*time.Second {
		t.Fatalf("query while frozen: %v after %v, want it to hang until its %v deadline", err, el, deadline)
	}
	if !pgconn.Timeout(err) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("query while frozen: %v, want the deadline's error", err)
	}
	p.Thaw()
	// A fresh connection works again after the thaw.
	if _, err := one(connect(), 10*time.Second); err != nil {
		t.Fatalf("query after Thaw: %v", err)
	}
	if s := p.Stats(); s.Accepted < 3 || s.BytesUp == 0 || s.BytesDown == 0 {
		t.Fatalf("proxy stats %+v", s)
	}
}
