package kafka

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

// TestKafkaSchemaChanges (issue 30): schema changes on the source go
// through the topic to a target as they go to run's (the event trigger's
// messages, in their transactions): ADD COLUMN with a default, RENAME
// COLUMN, a new table in the published schema and its rows, DROP COLUMN,
// TRUNCATE; and an apply restarted after them reads them again from its
// offset without applying anything twice. An apply started after the
// event trigger was off and on again meanwhile copies every table anew.
func TestKafkaSchemaChanges(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)

	// A schema-change message an ordinary role forged (any role may emit
	// one): the capture keeps it out of the topic, so no target drops
	// ledger.
	e.forgeDrop("ledger")

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

	// The event trigger turned off and on again while the apply was
	// stopped: a table that entered the published schema meanwhile, with
	// rows, was never described in the topic. The apply's next start sees
	// the trigger touched and copies every table anew.
	ap.kill()
	e.exec("ALTER EVENT TRIGGER repstream_ddl DISABLE")
	e.exec("CREATE SCHEMA side; CREATE TABLE side.moved (id int PRIMARY KEY, v text); INSERT INTO side.moved SELECT g, 'm' FROM generate_series(1, 25) g")
	e.exec("ALTER TABLE side.moved SET SCHEMA public")
	e.exec("ALTER EVENT TRIGGER repstream_ddl ENABLE ALWAYS")
	e.exec("INSERT INTO moved VALUES (26, 'after')")
	ap = e.startApply("apply (after the trigger was off)", db)
	tables = append(tables, tableOrder{"moved", "id"})
	waitSame(t, e.s, tgt, tables, 60*time.Second, capt, ap)

	// Off at the apply's start: only the capture sets it right, so the
	// apply waits for the capture's start (both started at once), and
	// refuses to start when none came within 30 s.
	ap.kill()
	e.exec("ALTER EVENT TRIGGER repstream_ddl DISABLE")
	ap = e.startApply("apply (the trigger off)", db)
	if err := exitOf(t, ap, 60*time.Second); err == nil || !strings.Contains(ap.out.Tail(20), "start the capture again") ||
		!strings.Contains(ap.out.Tail(50), "waiting for the capture to set the schema-change triggers right") {
		t.Fatalf("an apply started with the event trigger off: exit %v, want it to wait, then an error naming the capture's start:\n%s", err, ap.out.Tail(20))
	}
	e.exec("INSERT INTO moved VALUES (27, 'trigger off')")
	ap = e.startApply("apply (the trigger off, the capture coming)", db)
	ap.waitLogged("waiting for the capture to set the schema-change triggers right", 30*time.Second)
	capt.stop()
	capt = e.startCapture("capture (sets the trigger right)")
	waitSame(t, e.s, tgt, tables, 60*time.Second, capt, ap)
	capt.stop()
	ap.stop()
}

// forgeDrop emits, as a role with no privilege but to connect, a message
// with the prefix of repstream's schema-change messages that says table
// was dropped.
func (e *kafkaEnv) forgeDrop(table string) {
	e.t.Helper()
	ctx := e.t.Context()
	role := "forger_" + e.slot
	e.exec("CREATE ROLE " + role + " LOGIN")
	e.t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), e.src.DSN(e.srcDB)); err == nil {
			_, _ = c.Exec(context.Background(), "DROP ROLE "+role)
			c.Close(context.Background())
		}
	})
	var oid uint32
	if err := e.s.QueryRow(ctx, "SELECT $1::regclass::oid", table).Scan(&oid); err != nil {
		e.t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(e.src.DSN(e.srcDB))
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.User = role
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close(ctx)
	msg := fmt.Sprintf(`{"tag":"DROP TABLE","dropped":true,"oid":%d,"schema":"public","name":%q,"pubs":[%q]}`, oid, table, e.slot)
	if _, err := c.Exec(ctx, "SELECT pg_logical_emit_message(true, 'repstream.ddl', $1::text)", msg); err != nil {
		e.t.Fatalf("emit a message as %s: %v", role, err)
	}
}

// TestKafkaBinaryValues: the capture streams values in binary (its
// default, every published column being of a built-in type), its records
// say so, and the apply writes them with binary COPY and parameters: a
// table of many built-in types arrives equal through inserts, updates and
// deletes. A schema change to a column of a type that is not built in (an
// enum) makes the capture start its session again in text, from what the
// topic holds: the rows before and after it arrive equal, none twice. The
// capture compresses its batches with zstd (--kafka-compression), and the
// apply reads them.
func TestKafkaBinaryValues(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	const moodSQL = `CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`
	e.exec(moodSQL)
	const kindsRows = `INSERT INTO kinds SELECT g, g * 1.5, g / 3.0, '2026-01-01'::timestamptz + g * interval '1 hour', '2026-01-01'::date + g,
		jsonb_build_object('g', g, 'a', jsonb_build_array(g, 'x')), ARRAY[g, -g, NULL], md5(g::text)::uuid, decode(md5(g::text), 'hex'),
		g * interval '1 minute', repeat('é', g % 50), g % 2 = 0 FROM generate_series($1::int, $2::int) g`
	e.exec(`CREATE TABLE kinds (id int PRIMARY KEY, n numeric(20,6), f float8, ts timestamptz, d date, j jsonb, a int[], u uuid,
		b bytea, iv interval, tx text, ok boolean)`)
	e.exec(kindsRows, 1, 300)
	db, tgt := e.newTarget()
	if _, err := tgt.Exec(t.Context(), moodSQL); err != nil {
		t.Fatal(err)
	}
	capt := e.startCapture("capture", "--kafka-compression", "zstd")
	ap := e.startApply("apply", db)
	tables := append(slices.Clone(kafkaTables), tableOrder{"kinds", "id"})
	waitSame(t, e.s, tgt, tables, 60*time.Second, capt, ap)
	e.exec(kindsRows, 301, 1000)
	e.exec(`UPDATE kinds SET n = n + 1, j = j || '{"u": 1}', a = a || 0, tx = NULL WHERE id % 3 = 0`)
	e.exec(`DELETE FROM kinds WHERE id % 10 = 0`)
	e.exec(`UPDATE acct SET v = v + 1, note = 'binary' WHERE id <= 200`)
	waitSame(t, e.s, tgt, tables, 60*time.Second, capt, ap)
	binary, text := dataFormats(t, k, e.topic())
	if binary == 0 || text != 0 {
		t.Fatalf("data records: %d binary, %d text; want all binary", binary, text)
	}

	e.exec(`ALTER TABLE kinds ADD COLUMN m mood`)
	e.exec(`UPDATE kinds SET m = 'ok' WHERE id <= 100`)
	e.exec(kindsRows, 2001, 2100)
	e.exec(`UPDATE kinds SET m = 'happy' WHERE id > 2000`)
	e.exec(`INSERT INTO events SELECT g, 'after the enum' FROM generate_series(1, 50) g`)
	waitSame(t, e.s, tgt, tables, 60*time.Second, capt, ap)
	binary, text = dataFormats(t, k, e.topic())
	if text == 0 {
		t.Fatalf("data records after the enum column: %d binary, %d text; want text ones", binary, text)
	}
	if l := lineWith(capt.out.Tail(1000), "values in text"); l == "" {
		t.Errorf("the capture's log does not say it went on in text:\n%s", capt.out.Tail(20))
	}
	codecs := map[uint8]int{}
	eachRecord(t, k, e.topic(), func(r *kgo.Record) { codecs[r.Attrs.CompressionType()]++ })
	if codecs[4] == 0 || len(codecs) > 2 || len(codecs) == 2 && codecs[0] == 0 { // 4: zstd; 0: none (a batch it would not shrink)
		t.Errorf("the records' compression types: %v; want 4 (zstd), and 0 for batches too small to shrink", codecs)
	}
	capt.stop()
	ap.stop()
}

// dataFormats counts the topic's data records with binary and with text
// values.
func dataFormats(t *testing.T, k *kafkatest.Cluster, topic string) (binary, text int) {
	t.Helper()
	for _, h := range recordHeaders(t, k, topic) {
		switch {
		case h.Kind != kafkalog.KindData:
		case h.Binary:
			binary++
		default:
			text++
		}
	}
	return binary, text
}

// TestKafkaBinaryTargetMismatch: an apply whose target has a column of
// another type than the source's (bigint for integer) is refused at start
// while the capture writes binary values, naming the column and the way
// out, with nothing left on the target; once the capture runs with
// --binary=false, the same apply starts and the target equals the source.
func TestKafkaBinaryTargetMismatch(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	if _, err := tgt.Exec(t.Context(), `CREATE TABLE acct (id bigint PRIMARY KEY, v int NOT NULL, note text)`); err != nil {
		t.Fatal(err)
	}
	capt := e.startCapture("capture")
	ap := e.startApply("apply", db)
	err := exitOf(t, ap, 90*time.Second)
	out := ap.out.Tail(1000)
	if err == nil || lineWith(out, `column "id" of public.acct`, "binary", "--binary=false") == "" {
		t.Fatalf("apply: %v, want a refusal naming the column and --binary=false:\n%s", err, ap.out.Tail(30))
	}
	var left int
	if err := tgt.QueryRow(t.Context(), `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relname IN ('ledger', 'events')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("tables the refused apply created are left: %d, %v", left, err)
	}

	capt.stop()
	capt = e.startCapture("capture (text)", "--binary=false")
	e.exec(`UPDATE acct SET v = v + 1 WHERE id <= 10`)
	pgtest.WaitFor(t, "a text record in the topic", 30*time.Second, func() (bool, error) {
		hs := recordHeaders(t, k, e.topic())
		return len(hs) > 0 && !hs[len(hs)-1].Binary, nil
	})
	ap = e.startApply("apply (again)", db)
	e.exec(`UPDATE acct SET v = v + 1, note = 'text' WHERE id <= 100`)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	capt.stop()
	ap.stop()
}

// TestKafkaSchemaRename: ALTER SCHEMA ... RENAME of a replicated schema
// goes through the topic, and an apply restarted after it reads the
// schema's tables under their new name (pgoutput does not describe them
// again; the capture's records do); a new apply started then copies and
// follows them too. Then the same inside large transactions streamed
// while in progress, one rolling the rename back to a savepoint, one
// committing it, each with rows of the table in stream blocks after the
// rename's: the records of a later block describe the table under its new
// names once renamed in the transaction, under its old ones once the
// savepoint is rolled back (pgoutput describes it again then).
func TestKafkaSchemaRename(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	if e.src.Version() < 15 {
		t.Skip("FOR TABLES IN SCHEMA needs PostgreSQL 15+")
	}
	e.exec(`CREATE SCHEMA app;
		CREATE TABLE app.a (id int PRIMARY KEY, v text);
		INSERT INTO app.a SELECT g, 'a' || g FROM generate_series(1, 100) g`)
	db, tgt := e.newTarget()
	e.tables = "app.*"
	capt := e.startCapture("capture", "--decoding-work-mem", "64kB")
	ap := e.startApply("apply", db)
	e.exec(`INSERT INTO app.a VALUES (0, 'before the rename: the slot describes app.a')`)
	waitSame(t, e.s, tgt, []tableOrder{{"app.a", "id"}}, 60*time.Second, capt, ap)
	e.exec(`ALTER SCHEMA app RENAME TO app2`)
	for i := 101; i <= 110; i++ {
		e.exec(`INSERT INTO app2.a VALUES ($1, 'after the rename')`, i)
	}
	// streamed waits until the walsender has decoded (and, over
	// logical_decoding_work_mem, streamed) all the WAL written so far: a
	// transaction committed on another connection flushes it.
	other, err := pgx.Connect(t.Context(), e.src.DSN(e.srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	streamed := func() {
		t.Helper()
		var at string
		if err := e.s.QueryRow(t.Context(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&at); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(t.Context(), `SELECT txid_current()`); err != nil {
			t.Fatal(err)
		}
		pgtest.WaitFor(t, "the walsender to stream the transaction so far", 30*time.Second, func() (bool, error) {
			capt.alive()
			var ok bool
			err := e.s.QueryRow(t.Context(), `SELECT coalesce(bool_or(r.sent_lsn >= $2::pg_lsn), false)
				FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid
				WHERE s.slot_name = $1`, e.slot, at).Scan(&ok)
			return ok, err
		})
	}
	e.exec(`BEGIN`)
	e.exec(`INSERT INTO app2.a SELECT g, repeat('b', 100) FROM generate_series(1001, 2000) g`)
	e.exec(`SAVEPOINT s`)
	e.exec(`ALTER SCHEMA app2 RENAME TO app3`)
	e.exec(`INSERT INTO app3.a SELECT g, repeat('r', 100) FROM generate_series(2001, 3000) g`)
	streamed()
	e.exec(`ROLLBACK TO s`)
	e.exec(`INSERT INTO app2.a SELECT g, repeat('a', 100) FROM generate_series(3001, 4000) g`)
	streamed()
	e.exec(`UPDATE app2.a SET v = 'after the rollback' WHERE id <= 20`)
	e.exec(`COMMIT`)
	e.exec(`BEGIN`)
	e.exec(`INSERT INTO app2.a SELECT g, repeat('c', 100) FROM generate_series(5001, 6000) g`)
	e.exec(`ALTER SCHEMA app2 RENAME TO app3`)
	e.exec(`INSERT INTO app3.a SELECT g, repeat('d', 100) FROM generate_series(6001, 7000) g`)
	streamed()
	e.exec(`INSERT INTO app3.a SELECT g, repeat('e', 100) FROM generate_series(7001, 8000) g`)
	e.exec(`UPDATE app3.a SET v = 'renamed, same transaction' WHERE id BETWEEN 21 AND 40`)
	e.exec(`COMMIT`)
	after := []tableOrder{{"app3.a", "id"}}
	waitSame(t, e.s, tgt, after, 60*time.Second, capt, ap)
	// The renames moved the table's record along: it was copied once,
	// at the start (100 or 101 rows), never anew (thousands).
	var recorded string
	if err := tgt.QueryRow(t.Context(), `SELECT coalesce(string_agg(schema_name || '.' || table_name || ' ' || state || ' ' || (rows <= 101), ', '), '') FROM repstream.tables`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != "app3.a ready true" {
		t.Errorf("the target records %q, want app3.a ready from its first copy (at most 101 rows): renamed, it was copied anew", recorded)
	}
	ap.stop()
	e.exec(`UPDATE app3.a SET v = 'while the apply was stopped' WHERE id <= 10`)
	e.exec(`INSERT INTO app3.a VALUES (8001, 'while the apply was stopped')`)
	ap = e.startApply("apply (restarted)", db)
	e.exec(`INSERT INTO app3.a VALUES (8002, 'after the restart')`)
	waitSame(t, e.s, tgt, after, 60*time.Second, capt, ap)
	db2, tgt2 := e.newTarget()
	ap2 := e.startApply("apply (new target)", db2)
	e.exec(`INSERT INTO app3.a VALUES (8003, 'with a second target')`)
	waitSame(t, e.s, tgt, after, 60*time.Second, capt, ap, ap2)
	waitSame(t, e.s, tgt2, after, 60*time.Second, capt, ap, ap2)
	var streams int
	if err := e.s.QueryRow(t.Context(), `SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1`, e.slot).Scan(&streams); err != nil || streams < 2 {
		t.Fatalf("the walsender streamed %d transactions (%v); the test meant to exercise streaming", streams, err)
	}
	capt.stop()
	ap.stop()
	ap2.stop()
}

// TestKafkaOnErrorPark (issue 30): --on-error park works through Kafka: a
// transaction that conflicts on the target is parked in that target's
// error queue, the others are applied, and `errors` lists it.
func TestKafkaOnErrorPark(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
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

// TestKafkaFirstStartWithTrigger: a capture that followed schema changes
// from the Relation messages (--ddl=relation) is started with the event
// trigger; a table added to the publication while both halves were
// stopped, with rows, had no message. The apply's first start with the
// trigger copies the tables it does not record, not the others. Then an
// upgrade, the apply started before the capture: it waits for the capture
// to set the trigger right, and copies nothing anew.
func TestKafkaFirstStartWithTrigger(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	capt := e.startCapture("capture (relation)", "--ddl", "relation")
	ap := e.startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	capt.stop()
	ap.stop()
	var copied string
	q := `SELECT max(copied_at)::text FROM repstream.tables WHERE table_name = 'acct'`
	if err := tgt.QueryRow(t.Context(), q).Scan(&copied); err != nil {
		t.Fatal(err)
	}

	e.exec("CREATE TABLE added (id int PRIMARY KEY, v text); INSERT INTO added SELECT g, 'a' FROM generate_series(1, 30) g")
	e.exec("ALTER PUBLICATION " + e.slot + " ADD TABLE added")
	capt = e.startCapture("capture (event trigger)")
	e.exec("INSERT INTO added VALUES (31, 'after')")
	ap = e.startApply("apply (first start with the trigger)", db)
	waitSame(t, e.s, tgt, append(kafkaTables[:3:3], tableOrder{"added", "id"}), 60*time.Second, capt, ap)
	copiedOnce := func(who string) {
		t.Helper()
		var again string
		if err := tgt.QueryRow(t.Context(), q).Scan(&again); err != nil {
			t.Fatal(err)
		}
		if again != copied {
			t.Errorf("%s copied acct again (copied_at %s, then %s)", who, copied, again)
		}
	}
	copiedOnce("the apply's first start with the trigger")
	capt.stop()
	ap.stop()

	// An upgrade from a version that made the event trigger otherwise
	// (here: enabled for origin sessions only) and recorded nothing of
	// it, both halves started at once, the apply first: it waits for the
	// capture to set the trigger right, rather than record it as it was
	// and, at its next poll, see the capture's change and copy every
	// table anew.
	e.exec("ALTER EVENT TRIGGER repstream_ddl ENABLE")
	if _, err := tgt.Exec(t.Context(), "UPDATE repstream.replications SET ddl_triggers = NULL WHERE slot = $1", e.slot); err != nil {
		t.Fatal(err)
	}
	ap = e.startApply("apply (upgraded, before the capture)", db, "--publication-poll", "1s")
	ap.waitLogged("waiting for the capture to set the schema-change triggers right", 30*time.Second)
	capt = e.startCapture("capture (upgraded)")
	e.exec("INSERT INTO added VALUES (32, 'upgraded')")
	waitSame(t, e.s, tgt, append(kafkaTables[:3:3], tableOrder{"added", "id"}), 60*time.Second, capt, ap)
	time.Sleep(3 * time.Second) // past a few polls
	ap.alive()
	copiedOnce("the upgraded apply")
	capt.stop()
	ap.stop()
}
