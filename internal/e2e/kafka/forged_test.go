package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgoutput"
)

// TestKafkaForgedSchemaChange: a schema change in the topic carries SQL
// the apply runs on the target, so the apply checks each one's signature
// itself, with the key it reads from the source. A real schema change
// goes through (checked); a record that another producer wrote to the
// topic, holding a transaction whose schema-change message reuses the
// real one's signature over other JSON (DROP TABLE ledger), stops the
// apply, naming the topic, the offset, the LSN and the xid, with nothing
// of it applied: ledger is still on the target, and a change written
// after it is not applied; a restarted apply stops there again. An apply
// whose source role cannot read the key is refused at start, naming the
// grants, before it makes anything on its target; granted, it starts.
func TestKafkaForgedSchemaChange(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	capt := e.startCapture("capture")
	ap := e.startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)

	e.exec("ALTER TABLE acct ADD COLUMN region text NOT NULL DEFAULT 'eu'")
	e.exec("UPDATE acct SET region = 'us' WHERE id <= 10")
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	var region bool
	if err := tgt.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM acct WHERE region = 'us')").Scan(&region); err != nil || !region {
		t.Fatalf("the real schema change did not reach the target: %v", err)
	}

	// The real schema change's message in the topic, and the header of
	// the topic's last record (its capture session).
	var sig []byte
	var last kafkalog.Header
	eachRecord(t, k, e.topic(), func(r *kgo.Record) {
		h, body, err := kafkalog.ParseHeader(r.Value)
		if err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		last = h
		if h.Kind != kafkalog.KindData {
			return
		}
		_ = kafkalog.Frames(body, func(f kafkalog.Frame) error {
			var m pgoutput.Message
			if f.Data[0] == pgoutput.MsgMessage && pgoutput.Parse(f.Data, false, int(h.Proto), &m) == nil && m.Name == change.DDLPrefix {
				sig = bytes.Clone(m.Content[:64])
			}
			return nil
		})
	})
	if sig == nil {
		t.Fatal("no schema-change message in the topic")
	}
	var oid uint32
	var walLSN string
	if err := e.s.QueryRow(t.Context(), "SELECT 'ledger'::regclass::oid, pg_current_wal_lsn()::text").Scan(&oid, &walLSN); err != nil {
		t.Fatal(err)
	}
	at, err := change.ParseLSN(walLSN)
	if err != nil {
		t.Fatal(err)
	}
	const xid = 4000000000
	forged := append(bytes.Clone(sig), fmt.Sprintf(`{"tag":"DROP TABLE","dropped":true,"oid":%d,"schema":"public","name":"ledger","pubs":[%q]}`, oid, e.slot)...)
	msg := []byte{pgoutput.MsgMessage, 1}
	msg = binary.BigEndian.AppendUint64(msg, uint64(at+0x10))
	msg = append(append(msg, change.DDLPrefix...), 0)
	msg = append(binary.BigEndian.AppendUint32(msg, uint32(len(forged))), forged...)
	begin := binary.BigEndian.AppendUint64([]byte{pgoutput.MsgBegin}, uint64(at+0x100))
	begin = binary.BigEndian.AppendUint64(begin, 0)
	begin = binary.BigEndian.AppendUint32(begin, xid)
	commit := binary.BigEndian.AppendUint64([]byte{pgoutput.MsgCommit, 0}, uint64(at+0x100))
	commit = binary.BigEndian.AppendUint64(commit, uint64(at+0x110))
	commit = binary.BigEndian.AppendUint64(commit, 0)
	value := kafkalog.AppendHeader(nil, kafkalog.Header{Kind: kafkalog.KindData, Epoch: last.Epoch, LastCommit: at + 0x110, Proto: last.Proto, Binary: last.Binary})
	value = kafkalog.AppendFrame(value, kafkalog.Frame{WALStart: at, Data: begin})
	value = kafkalog.AppendFrame(value, kafkalog.Frame{WALStart: at + 0x10, Data: msg})
	value = kafkalog.AppendFrame(value, kafkalog.Frame{WALStart: at + 0x100, Data: commit})
	cl := k.Client(t, kgo.DefaultProduceTopic(e.topic()))
	rec := &kgo.Record{Value: value}
	if err := cl.ProduceSync(t.Context(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	t.Logf("forged schema change (DROP TABLE ledger, xid %d) at offset %d of %s", xid, rec.Offset, e.topic())
	e.exec("INSERT INTO events VALUES (0, 'after the forged record')")

	want := []string{e.topic(), fmt.Sprintf("offset %d (LSN %s)", rec.Offset, at+0x10), fmt.Sprintf("xid %d", xid), "not a repstream record"}
	for i, p := range []*proc{ap, nil} {
		if p == nil {
			p = e.startApply("apply (restarted)", db)
		}
		err := exitOf(t, p, 30*time.Second)
		out := p.out.tail(20)
		if err == nil {
			t.Fatalf("%s exited 0 on a forged schema change:\n%s", p.name, out)
		}
		line := lineWith(out, want...)
		if line == "" {
			t.Fatalf("%s (%d): no error names %q:\n%s", p.name, i+1, want, out)
		}
		t.Logf("%s", line)
	}
	capt.alive()
	var ledger bool
	var after int
	if err := tgt.QueryRow(t.Context(), "SELECT to_regclass('public.ledger') IS NOT NULL, (SELECT count(*) FROM events WHERE at = 0)").Scan(&ledger, &after); err != nil {
		t.Fatal(err)
	}
	if !ledger || after != 0 {
		t.Fatalf("after the forged record: ledger on the target %v (want true), the change after it applied %d times (want 0)", ledger, after)
	}
	e.exec("DELETE FROM events WHERE at = 0")
	waitSame(t, e.s, tgt, kafkaTables, 10*time.Second, capt)

	// An apply whose source role cannot read the key: refused before it
	// makes anything on its target; with the grants it names, it starts.
	role := "applysrc_" + e.slot
	e.exec("CREATE ROLE " + role + " LOGIN REPLICATION")
	e.exec("GRANT SELECT ON ALL TABLES IN SCHEMA public TO " + role)
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), e.src.DSN(e.srcDB)); err == nil {
			_, _ = c.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role)
			c.Close(context.Background())
		}
	})
	// A new target's copy is made after the forged record's LSNs (the
	// WAL moved to its next segment): it reads past the record without
	// decoding it, as a target re-seeded after one does.
	e.exec("SELECT pg_switch_wal()")
	db2, tgt2 := e.newTarget()
	args := e.applyArgs(db2)
	for i, a := range args {
		if a == e.src.DSN(e.srcDB) {
			args[i] = strings.Replace(a, "user="+pgcluster.Superuser+" ", "user="+role+" ", 1)
		}
	}
	p := startProc(t, "apply (source role without the key)", args...)
	err = exitOf(t, p, 30*time.Second)
	line := lineWith(p.out.tail(20), "repstream.ddl_key", "GRANT USAGE ON SCHEMA repstream TO \""+role+"\"")
	_, grants, _ := strings.Cut(line, "as repstream's source role or a superuser: ")
	grants, _, ok := strings.Cut(grants, " (or ")
	if err == nil || !ok {
		t.Fatalf("an apply whose source role cannot read the key: exit %v, want an error naming the grants:\n%s", err, p.out.tail(20))
	}
	t.Logf("%s", line)
	var made bool
	if err := tgt2.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'repstream')").Scan(&made); err != nil || made {
		t.Fatalf("the refused apply made the schema repstream on its target (%v)", err)
	}
	e.exec(grants) // as the error says
	p = startProc(t, "apply (source role granted)", args...)
	logTails(t, p)
	waitSame(t, e.s, tgt2, kafkaTables, 60*time.Second, capt, p)
	p.stop()
	capt.stop()
}
