package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

// TestKafkaOriginNone: `capture --origin none` on real brokers leaves out
// of the topic what a replication wrote into the source — a session marked
// with a replication origin, as repstream's apply and native subscriptions
// mark theirs — and carries everything else, before and after it, to the
// apply's target; the slot still passes the left-out transaction (the
// capture acknowledges its position: nothing waits for it). On the
// installed PostgreSQL 15 this is capture's own filter of Origin messages
// (16+ asks pgoutput); before, only unit tests ran it.
func TestKafkaOriginNone(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	capt := e.startCapture("capture", "--origin", "none")
	db, tgt := e.newTarget()
	ap := e.startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 2*time.Minute, capt, ap)

	ctx := t.Context()
	marked, err := pgx.Connect(ctx, e.src.DSN(e.srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer marked.Close(context.Background())
	origin := "o_" + e.slot
	if _, err := marked.Exec(ctx, "SELECT pg_replication_origin_create($1)", origin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), e.src.DSN(e.srcDB)); err == nil {
			_, _ = c.Exec(context.Background(), "SELECT pg_replication_origin_drop($1)", origin)
			c.Close(context.Background())
		}
	})
	if _, err := marked.Exec(ctx, "SELECT pg_replication_origin_session_setup($1)", origin); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO acct VALUES (5001, 1, 'before')`)
	if _, err := marked.Exec(ctx, `INSERT INTO acct VALUES (5002, 2, 'replicated in'); UPDATE acct SET note = 'replicated in' WHERE id <= 10`); err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO acct VALUES (5003, 3, 'after')`)
	e.waitCaptured(capt)
	pgtest.WaitFor(t, "the row written after the marked transaction on the target", time.Minute, func() (bool, error) {
		capt.alive()
		ap.alive()
		var n int
		err := tgt.QueryRow(ctx, "SELECT count(*) FROM acct WHERE id = 5003").Scan(&n)
		return n == 1, err
	})
	var plain, left, notes int
	if err := tgt.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id IN (5001, 5003)), count(*) FILTER (WHERE id = 5002),
		count(*) FILTER (WHERE note = 'replicated in') FROM acct`).Scan(&plain, &left, &notes); err != nil {
		t.Fatal(err)
	}
	if plain != 2 || left != 0 || notes != 0 {
		t.Errorf("target: %d of the 2 plain rows, %d of the marked transaction's row (want 0), %d rows it updated (want 0)", plain, left, notes)
	}
}
