package kafka

import (
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/kafkatest"
)

// TestKafkaSchemaChanges (issue 30): schema changes on the source go
// through the topic to a target as they go to run's (the event trigger's
// messages, in their transactions): ADD COLUMN with a default, RENAME
// COLUMN, a new table in the published schema and its rows, DROP COLUMN,
// TRUNCATE; and an apply restarted after them reads them again from its
// offset without applying anything twice.
func TestKafkaSchemaChanges(t *testing.T) {
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 1})
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)

	e.exec("ALTER TABLE acct ADD COLUMN region text NOT NULL DEFAULT 'eu'")
	e.exec("UPDATE acct SET region = 'us', v = v + 1 WHERE id <= 100")
	e.exec("ALTER TABLE acct RENAME COLUMN note TO remark")
	e.exec("UPDATE acct SET remark = 'renamed' WHERE id % 7 = 0")
	e.exec("CREATE TABLE fresh (id int PRIMARY KEY, body text)")
	e.exec("INSERT INTO fresh SELECT g, md5(g::text) FROM generate_series(1, 300) g")
	e.exec("ALTER TABLE ledger ADD COLUMN tag text")
	e.exec("INSERT INTO ledger (id, tag) SELECT g, 'tagged' FROM generate_series(1, 50) g")
	e.exec("ALTER TABLE ledger DROP COLUMN tag")
	e.exec("INSERT INTO ledger (id) SELECT g FROM generate_series(51, 60) g")
	e.exec("BEGIN; ALTER TABLE events ADD COLUMN n int; INSERT INTO events VALUES (1, 'in ddl txn', 1); COMMIT")
	e.exec("TRUNCATE fresh")
	e.exec("INSERT INTO fresh VALUES (1, 'after truncate')")
	tables := append(kafkaTables[:2:2], tableOrder{"events", "at, what"}, tableOrder{"fresh", "id"})
	waitSame(t, e.s, tgt, tables, 60*time.Second, capt, ap)

	// Restarted, the apply reads from its recorded offset (the schema
	// changes before it included): nothing applied twice, nothing missed.
	ap.kill()
	e.exec("ALTER TABLE fresh ADD COLUMN extra int DEFAULT 7")
	e.exec("INSERT INTO fresh VALUES (2, 'after restart', 8)")
	ap = e.startApply("apply (restarted)", db)
	waitSame(t, e.s, tgt, tables, 60*time.Second, capt, ap)
	var cols string
	if err := tgt.QueryRow(t.Context(), `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = 'acct'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != "id,v,remark,region" {
		t.Errorf("target acct columns %q, want id,v,remark,region", cols)
	}
	capt.stop()
	ap.stop()
}

// TestKafkaOnErrorPark (issue 30): --on-error park works through Kafka: a
// transaction that conflicts on the target is parked in that target's
// error queue, the others are applied, and `errors` lists it.
func TestKafkaOnErrorPark(t *testing.T) {
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 1})
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", db, "--on-error", "park")
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	// A row the target has and the source does not: the source's insert
	// of the same key conflicts there.
	if _, err := tgt.Exec(t.Context(), "INSERT INTO ledger (id) VALUES (777)"); err != nil {
		t.Fatal(err)
	}
	e.exec("INSERT INTO ledger (id) VALUES (777)")
	e.exec("INSERT INTO ledger (id) VALUES (778)")
	waitLedger(t, tgt, 778, 60*time.Second, capt, ap)
	var parked int
	if err := tgt.QueryRow(t.Context(), "SELECT count(*) FROM repstream.errors WHERE slot = $1", e.slot).Scan(&parked); err != nil {
		t.Fatal(err)
	}
	if parked != 1 {
		t.Fatalf("parked transactions on the target: %d, want 1", parked)
	}
	capt.stop()
	ap.stop()
}
