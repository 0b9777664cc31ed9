package kafka

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgoutput"
)

// TestKafkaForgedSchemaChange: a schema change in the topic carries SQL
// the apply runs on the target, so the apply checks each one's signature
// itself, with the Ed25519 public key the capture published on the
// source (repstream.ddl_pubkey): its source role needs no access to the
// HMAC key that signs the trigger's messages (repstream.ddl_key), with
// which it could sign schema changes every target applies. An apply whose
// source role cannot read the public keys is refused at start, naming
// the grants (none on ddl_key), before it makes anything on its target;
// granted them, it starts, and a real schema change goes through
// (checked). Then, each time on a new target (the one before cannot go
// past the record), a record another producer wrote to the topic, its
// transaction's schema-change message a DROP TABLE ledger:
//   - under the real message's Ed25519 signature;
//   - signed with the source's real HMAC key, as a capture of an earlier
//     version wrote them (the apply cannot check it: it says so);
//   - signed with another Ed25519 key;
//
// stops the apply, naming the topic, the offset, the LSN and the xid, with
// nothing of it applied: ledger is still on the target, and a change
// written after it is not applied; a restarted apply stops there again.
func TestKafkaForgedSchemaChange(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	capt := e.startCapture("capture")

	// The applies' source role: SELECT on the published tables, and what
	// its start's error names.
	role := e.sourceRole("applysrc_")
	startApply := func(name, db string) *proc {
		args := e.applyArgs(db)
		for i, a := range args {
			if a == e.src.DSN(e.srcDB) {
				args[i] = strings.Replace(a, "user="+pgcluster.Superuser+" ", "user="+role+" ", 1)
			}
		}
		p := startProc(t, name, args...)
		logTails(t, p)
		return p
	}

	db, tgt := e.newTarget()
	p := startApply("apply (source role without grants)", db)
	err := exitOf(t, p, 30*time.Second)
	line := lineWith(p.out.Tail(20), "repstream.ddl_pubkey", "GRANT USAGE ON SCHEMA repstream TO \""+role+"\"")
	_, grants, _ := strings.Cut(line, "as repstream's source role or a superuser: ")
	grants, _, ok := strings.Cut(grants, " (not ")
	if err == nil || !ok {
		t.Fatalf("an apply whose source role cannot read the public keys: exit %v, want an error naming the grants:\n%s", err, p.out.Tail(20))
	}
	t.Logf("%s", line)
	if strings.Contains(grants, "ddl_key") {
		t.Fatalf("the grants an apply's source role needs name the HMAC key: %s", grants)
	}
	var made bool
	if err := tgt.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'repstream')").Scan(&made); err != nil || made {
		t.Fatalf("the refused apply made the schema repstream on its target (%v)", err)
	}
	e.exec(grants) // as the error says
	var keyReadable bool
	if err := e.s.QueryRow(t.Context(), "SELECT has_table_privilege($1, 'repstream.ddl_key', 'SELECT')", role).Scan(&keyReadable); err != nil || keyReadable {
		t.Fatalf("the applies' source role may read repstream.ddl_key (%v)", err)
	}

	ap := startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	e.exec("ALTER TABLE acct ADD COLUMN region text NOT NULL DEFAULT 'eu'")
	e.exec("UPDATE acct SET region = 'us' WHERE id <= 10")
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	var region bool
	if err := tgt.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM acct WHERE region = 'us')").Scan(&region); err != nil || !region {
		t.Fatalf("the real schema change did not reach the target: %v", err)
	}

	// The real schema change's message in the topic, signed anew by the
	// capture, and the header of the topic's last record (its session).
	var real []byte
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
				real = bytes.Clone(m.Content)
			}
			return nil
		})
	})
	if real == nil {
		t.Fatal("no schema-change message in the topic")
	}
	if !ddlmsg.TopicSigned(real) {
		t.Fatalf("the capture wrote a schema-change message not signed for the topic: %.100q", real)
	}
	var hmacKey []byte
	if err := e.s.QueryRow(t.Context(), "SELECT key FROM repstream.ddl_key").Scan(&hmacKey); err != nil {
		t.Fatal(err)
	}
	json, _ := ddlmsg.Strip(real)
	realHead := real[:len(real)-len(json)]

	// forge writes a record of one transaction xid holding a schema-change
	// message of content, and a change after it on the source.
	forge := func(xid uint32, content func(drop []byte) []byte) []string {
		return forgeSchemaChange(t, k, e, last, xid, content)
	}
	// stops checks that the apply p on tgt, and one restarted, stop at the
	// forged record, with nothing of it applied.
	stops := func(p *proc, db string, tgt *pgx.Conn, want ...string) {
		for i, p := range []*proc{p, nil} {
			if p == nil {
				p = startApply("apply (restarted)", db)
			}
			err := exitOf(t, p, 30*time.Second)
			out := p.out.Tail(20)
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
	}
	// next starts an apply on a new target, whose copy is made after the
	// forged records' LSNs (the WAL moved to its next segment): it reads
	// past them without decoding them, as a target re-seeded after one
	// does.
	next := func(name string) (*proc, string, *pgx.Conn) {
		e.exec("SELECT pg_switch_wal()")
		db, tgt := e.newTarget()
		p := startApply(name, db)
		waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, p)
		return p, db, tgt
	}

	// The real message's Ed25519 signature over other JSON.
	want := forge(4000000000, func(drop []byte) []byte { return append(bytes.Clone(realHead), drop...) })
	stops(ap, db, tgt, append(want, "does not match", "not a repstream record")...)

	// Signed with the source's HMAC key, as an earlier version's capture
	// wrote them: this apply cannot check it (a holder of the key could
	// have signed it) and says how to go on.
	p, db2, tgt2 := next("apply (target 2)")
	want = forge(4000000001, func(drop []byte) []byte { return ddlmsg.Sign(hmacKey, 4000000001, drop) })
	stops(p, db2, tgt2, append(want, "predates asymmetric signing", "restart it", "re-seed")...)

	// Signed with another Ed25519 key.
	p, db3, tgt3 := next("apply (target 3)")
	other := ddlmsg.TopicKey(bytes.Repeat([]byte{9}, ddlmsg.KeyLen))
	want = forge(4000000002, func(drop []byte) []byte { return ddlmsg.SignTopic(other, 4000000002, drop) })
	stops(p, db3, tgt3, append(want, "not published on the source", ddlmsg.KeyFingerprint(other.Public().(ed25519.PublicKey)), "not a repstream record")...)
	capt.stop()
}

// forgeSchemaChange writes to e's topic a record of one transaction xid
// holding a schema-change message of content (made from the JSON of a
// DROP TABLE ledger), as another producer may, in the capture session of
// header last, and then a change on the source (an events row at 0). It
// returns what an apply's error must name: the topic, the record's offset
// and LSN, the xid.
func forgeSchemaChange(t *testing.T, k *kafkatest.Cluster, e *kafkaEnv, last kafkalog.Header, xid uint32, content func(drop []byte) []byte) []string {
	t.Helper()
	var oid uint32
	var walLSN string
	if err := e.s.QueryRow(t.Context(), "SELECT 'ledger'::regclass::oid, pg_current_wal_lsn()::text").Scan(&oid, &walLSN); err != nil {
		t.Fatal(err)
	}
	at, err := change.ParseLSN(walLSN)
	if err != nil {
		t.Fatal(err)
	}
	forged := content(fmt.Appendf(nil, `{"tag":"DROP TABLE","dropped":true,"oid":%d,"schema":"public","name":"ledger","pubs":[%q]}`, oid, e.slot))
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
	t.Logf("forged schema change (DROP TABLE ledger, xid %d) at offset %d of %s: %.80q", xid, rec.Offset, e.topic(), forged)
	e.exec("INSERT INTO events VALUES (0, 'after the forged record')")
	return []string{e.topic(), fmt.Sprintf("offset %d (LSN %s)", rec.Offset, at+0x10), fmt.Sprintf("xid %d", xid)}
}

// TestKafkaReplacedKeyRevoked: the key that signs the trigger's messages
// (repstream.ddl_key) is replaced on the source (the guard off, a
// REFRESH: what one does with a key that leaked), and the capture started
// again with the new one. From then on the old key signs nothing an
// apply takes: a record another producer wrote to the topic, its
// schema-change message (DROP TABLE ledger) signed for the topic with the
// old key, stops the apply that ran through the change (it had read the
// old public key at its start) and the apply restarted, with nothing of
// it applied. The source publishes the new key alone
// (repstream.ddl_pubkey), and a schema change signed with it reaches a
// new target.
func TestKafkaReplacedKeyRevoked(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	capt := e.startCapture("capture")
	db, tgt := e.newTarget()
	ap := e.startApply("apply", db)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)

	var oldKey []byte
	if err := e.s.QueryRow(t.Context(), "SELECT key FROM repstream.ddl_key").Scan(&oldKey); err != nil {
		t.Fatal(err)
	}
	old := ddlmsg.TopicKey(oldKey)
	oldFP := ddlmsg.KeyFingerprint(old.Public().(ed25519.PublicKey))
	capt.stop()
	e.exec(`ALTER EVENT TRIGGER repstream_ddl_key DISABLE;
		REFRESH MATERIALIZED VIEW repstream.ddl_key;
		ALTER EVENT TRIGGER repstream_ddl_key ENABLE ALWAYS`)
	capt = e.startCapture("capture (new key)")
	e.exec("UPDATE acct SET v = v + 1 WHERE id <= 10")
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)

	var published []string
	if err := e.s.QueryRow(t.Context(), "SELECT array_agg(fingerprint ORDER BY fingerprint) FROM repstream.ddl_pubkey").Scan(&published); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(published, oldFP) || len(published) != 1 {
		t.Errorf("the source publishes %v after the key was replaced; want the new key alone, not the old one (%s)", published, oldFP)
	}

	var last kafkalog.Header
	eachRecord(t, k, e.topic(), func(r *kgo.Record) {
		h, _, err := kafkalog.ParseHeader(r.Value)
		if err != nil {
			t.Fatalf("offset %d: %v", r.Offset, err)
		}
		last = h
	})
	want := forgeSchemaChange(t, k, e, last, 4000000100, func(drop []byte) []byte { return ddlmsg.SignTopic(old, 4000000100, drop) })
	want = append(want, "not published on the source", oldFP)
	for i, p := range []*proc{ap, nil} {
		if p == nil {
			p = e.startApply("apply (restarted)", db)
		}
		select {
		case err := <-p.exited:
			p.exited <- err
		case <-time.After(30 * time.Second):
		}
		var ledger bool
		var after int
		if err := tgt.QueryRow(t.Context(), "SELECT to_regclass('public.ledger') IS NOT NULL, (SELECT count(*) FROM events WHERE at = 0)").Scan(&ledger, &after); err != nil {
			t.Fatal(err)
		}
		if !ledger || after != 0 {
			t.Fatalf("%s took a schema change signed with the replaced key %s: ledger on the target %v (want true), the change after it applied %d times (want 0)\n%s",
				p.name, oldFP, ledger, after, p.out.Tail(20))
		}
		err := exitOf(t, p, time.Second)
		line := lineWith(p.out.Tail(20), want...)
		if err == nil || line == "" {
			t.Fatalf("%s (%d): %v, want a stop naming %q:\n%s", p.name, i+1, err, want, p.out.Tail(20))
		}
		t.Logf("%s", line)
	}
	capt.alive()

	// A new target, copied after the forged record: the new key's
	// schema changes reach it.
	e.exec("DELETE FROM events WHERE at = 0")
	e.exec("SELECT pg_switch_wal()")
	db2, tgt2 := e.newTarget()
	ap2 := e.startApply("apply (target 2)", db2)
	waitSame(t, e.s, tgt2, kafkaTables, 60*time.Second, capt, ap2)
	e.exec("ALTER TABLE acct ADD COLUMN region text NOT NULL DEFAULT 'eu'")
	e.exec("UPDATE acct SET region = 'us' WHERE id <= 10")
	waitSame(t, e.s, tgt2, kafkaTables, 60*time.Second, capt, ap2)
	ap2.stop()
	capt.stop()
}
