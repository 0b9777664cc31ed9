package pgoutput

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
)

// TestRecord re-records testdata/capture_v*.bin from a real PostgreSQL
// cluster. It runs only when asked:
//
//	REPSTREAM_RECORD_GOLDEN=1 go test ./internal/pgoutput -run 'TestRecord' -v
//	go test ./internal/pgoutput -run TestGolden -update
//
// Both slots are created before the workload, so the v1 and v3 captures
// decode the same WAL.
func TestRecord(t *testing.T) {
	if os.Getenv("REPSTREAM_RECORD_GOLDEN") == "" {
		t.Skip("set REPSTREAM_RECORD_GOLDEN=1 to re-record the captures")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := pgtest.Cluster(t, pgcluster.Options{Name: "pgoutput-record", Fast: true})
	const db = "postgres"

	if err := c.Exec(ctx, db, recordSchema); err != nil {
		t.Fatalf("schema: %v", err)
	}
	for _, slot := range []string{"rec_v1", "rec_v3"} {
		if err := c.Exec(ctx, db, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot)); err != nil {
			t.Fatalf("create slot %s: %v", slot, err)
		}
	}
	for i, step := range recordWorkload {
		if err := c.Exec(ctx, db, step); err != nil {
			t.Fatalf("workload step %d: %v\n%s", i, err, step)
		}
	}

	for _, rc := range []struct {
		slot  string
		proto int
		args  []string
	}{
		{"rec_v1", 1, []string{"proto_version '1'", "publication_names 'pub'", "messages 'true'"}},
		{"rec_v3", 3, []string{"proto_version '3'", "publication_names 'pub'", "messages 'true'", "streaming 'true'"}},
	} {
		cp, err := receiveCapture(ctx, c.ReplicationDSN(db)+" options='-c logical_decoding_work_mem=64kB'", rc.slot, rc.proto, rc.args)
		if err != nil {
			t.Fatalf("receive %s: %v", rc.slot, err)
		}
		path := filepath.Join("testdata", fmt.Sprintf("capture_v%d.bin", rc.proto))
		if err := writeCapture(path, cp); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded %d messages into %s", len(cp.records), path)
	}
}

// receiveCapture streams the slot until the non-transactional "end" message
// and returns every XLogData payload.
func receiveCapture(ctx context.Context, dsn, slot string, proto int, args []string) (capture, error) {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return capture{}, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return capture{}, fmt.Errorf("start replication: %w", err)
	}
	cp := capture{proto: proto}
	inStream := false
	var received pglogrepl.LSN
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return capture{}, fmt.Errorf("receive after %d messages: %w", len(cp.records), err)
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return capture{}, fmt.Errorf("server: %s", msg.Message)
		case *pgproto3.CopyData:
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return capture{}, err
				}
				if ka.ReplyRequested {
					err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
						WALWritePosition: received, WALFlushPosition: received, WALApplyPosition: received,
						ClientTime: time.Now()})
					if err != nil {
						return capture{}, err
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
				if err != nil {
					return capture{}, err
				}
				received = xld.WALStart
				data := append([]byte(nil), xld.WALData...)
				cp.records = append(cp.records, captureRecord{inStream: inStream, data: data})
				var m Message
				if err := Parse(data, inStream, proto, &m); err != nil {
					return capture{}, fmt.Errorf("message %d: %w", len(cp.records), err)
				}
				switch {
				case m.Type == MsgStreamStart:
					inStream = true
				case m.Type == MsgStreamStop:
					inStream = false
				case m.Type == MsgMessage && m.Flags == 0 && m.Name == "end":
					return cp, nil
				}
			}
		}
	}
}

const recordSchema = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TYPE size AS ENUM ('small', 'large');
CREATE TABLE alltypes (
	id int PRIMARY KEY, b bigint, n numeric(12,3), f float8, t text, big text,
	vc varchar(20), j jsonb, arr int[], tarr text[], by bytea, ts timestamptz,
	d date, u uuid, ok bool, m mood);
ALTER TABLE alltypes ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE full_ident (a int, b text);
ALTER TABLE full_ident REPLICA IDENTITY FULL;
CREATE TABLE parent (id serial PRIMARY KEY, v text);
CREATE TABLE child (id serial PRIMARY KEY, parent_id int REFERENCES parent (id));
CREATE TABLE plain (id int PRIMARY KEY, v text);
CREATE TABLE bulk (id int PRIMARY KEY, pad text, s size);
CREATE PUBLICATION pub FOR ALL TABLES;
SELECT pg_replication_origin_create('upstream');
`

// recordWorkload is the scripted SQL of the captures; each step runs on a
// fresh connection (simple protocol, several statements allowed).
var recordWorkload = []string{
	// Every type, a TOASTed (external, incompressible) value.
	`INSERT INTO alltypes VALUES (1, 9000000000, 12345.678, 3.14159, E'hello\t"world"\n\u00fc',
		(SELECT string_agg(md5(i::text || random()::text), '') FROM generate_series(1, 200) i),
		'varchar', '{"a": [1, 2, {"b": null}]}', '{1,2,3}', '{"x y",z,NULL}', '\xdeadbeef',
		'2025-01-02 03:04:05.678+00', '2025-01-02', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, 'happy')`,
	// NULLs and special values, two rows in one transaction.
	`INSERT INTO alltypes (id) VALUES (2);
	INSERT INTO alltypes (id, f, n, t, ok) VALUES (3, 'NaN', 'NaN', '', false), (4, '-Infinity', -0.001, 'x', NULL)`,
	// Update keeping the key: the TOASTed column arrives as 'u'.
	`UPDATE alltypes SET t = 'updated', n = n + 1 WHERE id = 1`,
	// Update changing the key: 'K' old tuple.
	`UPDATE alltypes SET id = 10 WHERE id = 2`,
	`UPDATE alltypes SET id = 11 WHERE id = 1`,
	`DELETE FROM alltypes WHERE id = 10`,
	// REPLICA IDENTITY FULL: 'O' old tuples.
	`INSERT INTO full_ident VALUES (1, 'one'), (2, NULL);
	UPDATE full_ident SET b = 'uno' WHERE a = 1;
	DELETE FROM full_ident WHERE a = 2`,
	// A rolled-back subtransaction in a small transaction.
	`BEGIN; INSERT INTO plain VALUES (1, 'kept');
	SAVEPOINT s1; INSERT INTO plain VALUES (2, 'rolled back'); ROLLBACK TO s1;
	INSERT INTO plain VALUES (3, 'kept too'); COMMIT`,
	// Logical messages.
	`SELECT pg_logical_emit_message(true, 'repstream', 'transactional hello')`,
	`BEGIN; INSERT INTO plain VALUES (4, 'with message');
	SELECT pg_logical_emit_message(true, 'repstream', '\x0001ff'::bytea); COMMIT`,
	`SELECT pg_logical_emit_message(false, 'repstream', 'non-transactional')`,
	// Truncates.
	`INSERT INTO parent (v) VALUES ('a'), ('b'); INSERT INTO child (parent_id) VALUES (1)`,
	`TRUNCATE parent RESTART IDENTITY CASCADE`,
	`TRUNCATE plain`,
	// A transaction from a replication origin: Origin message.
	`SELECT pg_replication_origin_session_setup('upstream');
	BEGIN; SELECT pg_replication_origin_xact_setup('0/ABCDEF', '2025-01-02 03:04:05+00');
	INSERT INTO plain VALUES (5, 'from upstream'); COMMIT;
	SELECT pg_replication_origin_session_reset()`,
	// A large transaction, streamed: Relation and Type inside the stream,
	// in-stream insert, update, delete, truncate and message.
	`BEGIN;
	INSERT INTO bulk SELECT i, repeat('x', 100), 'small' FROM generate_series(1, 400) i;
	UPDATE bulk SET s = 'large' WHERE id <= 3;
	DELETE FROM bulk WHERE id BETWEEN 4 AND 6;
	INSERT INTO plain VALUES (6, 'in stream');
	TRUNCATE plain;
	SELECT pg_logical_emit_message(true, 'repstream', 'in stream');
	COMMIT`,
	// A streamed transaction with a rolled-back subtransaction: Stream Abort
	// with a subxid.
	`BEGIN;
	INSERT INTO bulk SELECT i, repeat('y', 100), 'large' FROM generate_series(1001, 1300) i;
	SAVEPOINT a;
	INSERT INTO bulk SELECT i, repeat('z', 100), 'small' FROM generate_series(2001, 2300) i;
	ROLLBACK TO a;
	INSERT INTO bulk SELECT i, repeat('w', 100), 'small' FROM generate_series(3001, 3050) i;
	COMMIT`,
	// A streamed transaction aborted at the end.
	`BEGIN;
	INSERT INTO bulk SELECT i, repeat('v', 100), 'small' FROM generate_series(5001, 5400) i;
	ROLLBACK`,
	// End marker: the recorder stops here.
	`SELECT pg_logical_emit_message(false, 'end', 'end')`,
}
