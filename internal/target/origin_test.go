package target

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestOriginsUse: a superuser's sessions each take their own origin of the
// pool; a role that may not use origins writes unmarked while marking is
// best effort, and is refused, naming the GRANT, once it is required (a
// replication back into the source was seen).
func TestOriginsUse(t *testing.T) {
	e := newEnv(t, `CREATE ROLE origins_nobody LOGIN`)
	t.Cleanup(func() { _, _ = e.check.Exec(context.Background(), `DROP ROLE IF EXISTS origins_nobody`) })
	o := NewOrigins(nil)
	setUp := func(c *pgx.Conn) bool {
		t.Helper()
		var on bool
		if err := c.QueryRow(e.ctx, `SELECT pg_replication_origin_session_is_setup()`).Scan(&on); err != nil {
			t.Fatal(err)
		}
		return on
	}
	other, err := Connect(e.ctx, e.dsn, "repstream-test")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	for _, c := range []*pgx.Conn{e.conn, other} {
		if ok, err := o.Use(e.ctx, c); !ok || err != nil {
			t.Fatalf("a superuser's session: Use = %v, %v", ok, err)
		}
		if !setUp(c) {
			t.Fatal("no origin set up in the session")
		}
	}
	var active int
	if err := e.check.QueryRow(e.ctx, `SELECT count(DISTINCT external_id) FROM pg_replication_origin_status WHERE external_id LIKE 'repstream\_%'`).Scan(&active); err != nil || active < 2 {
		t.Fatalf("origins of the pool with state: %d (%v), want one per session, at least 2", active, err)
	}

	nobody, err := pgx.Connect(e.ctx, e.dsn+" user=origins_nobody")
	if err != nil {
		t.Fatal(err)
	}
	defer nobody.Close(context.Background())
	if ok, err := o.Use(e.ctx, nobody); ok || err != nil {
		t.Fatalf("a role without the grants, best effort: Use = %v, %v; want false, no error", ok, err)
	}
	o.Require()
	if _, err := o.Use(e.ctx, nobody); err == nil || !strings.Contains(err.Error(), OriginsGrant) {
		t.Fatalf("a role without the grants, required: %v; want an error naming the GRANT", err)
	}
}
