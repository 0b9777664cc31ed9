package capture

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/pgoutput"
)

var testKey = bytes.Repeat([]byte{3}, ddlmsg.KeyLen)

// signed is content as the trigger emits it in top-level transaction xid.
func signed(xid uint32, content string) string {
	return string(ddlmsg.Sign(testKey, xid, []byte(content)))
}

func msgBegin(xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, 0x100)
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint32(b, xid)
}

func msgLogical(transactional bool, prefix, content string) []byte {
	b := []byte{'M', 0}
	if transactional {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, 0x80)
	b = append(b, prefix...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
}

type recordingQueue struct{ changes []*change.Change }

func (q *recordingQueue) Begin(uint32) {}
func (q *recordingQueue) Add(_ context.Context, _ uint32, c *change.Change) error {
	cp := *c
	q.changes = append(q.changes, &cp)
	return nil
}
func (q *recordingQueue) Commit(change.TxnInfo) error { return nil }
func (q *recordingQueue) Abort(uint32, uint32) error  { return nil }

// TestDDLMessages: a transactional repstream.ddl message of a table the
// publication publishes becomes an OpDDL change carrying its JSON and its
// parsed form; other prefixes, non-transactional messages, other
// publications' tables and (without DDLMessages) everything are ignored. A Relation message is
// linked to the version it replaces.
func TestDDLMessages(t *testing.T) {
	const mine = `{"tag":"ALTER TABLE","schema":"public","name":"t","pubs":["p"]}`
	for _, on := range []bool{true, false} {
		q := &recordingQueue{}
		c, err := New(Options{Queue: q, Acker: fakeAcker{}, Publication: "p", DDLMessages: on, DDLKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		c.proto = 3
		for _, m := range [][]byte{
			msgBegin(5),
			msgLogical(true, "other.prefix", signed(5, mine)),
			msgLogical(false, change.DDLPrefix, signed(5, mine)),
			msgLogical(true, change.DDLPrefix, signed(5, `{"tag":"ALTER TABLE","schema":"public","name":"u","pubs":["q"]}`)),
			msgLogical(true, change.DDLPrefix, mine),            // unsigned: forged
			msgLogical(true, change.DDLPrefix, signed(4, mine)), // another transaction's
			msgLogical(true, change.DDLPrefix, signed(5, mine)),
		} {
			if err := c.handle(context.Background(), 7, m); err != nil {
				t.Fatalf("handle %q: %v", m[0], err)
			}
		}
		want := 0
		if on {
			want = 1
		}
		if len(q.changes) != want {
			t.Fatalf("DDLMessages=%v: %d changes queued, want %d", on, len(q.changes), want)
		}
		if on {
			ch := q.changes[0]
			if ch.Op != change.OpDDL || ch.LSN != 7 || string(ch.DDLContent()) != mine {
				t.Errorf("queued %s at %s: %q", ch.Op, ch.LSN, ch.DDLContent())
			}
			if m := ch.DDL; m == nil || m.Tag != "ALTER TABLE" || m.Schema != "public" || m.Name != "t" || !m.Publishes("p") {
				t.Errorf("queued without its parsed message: %+v", m)
			}
		}
		if n := c.cForgedDDL.Load(); on && n != 2 {
			t.Errorf("%d messages counted as not signed, want 2", n)
		}
		if err := c.handle(context.Background(), 8, msgLogical(true, change.DDLPrefix, signed(5, `{"tag":`))); on && err == nil {
			t.Error("a malformed schema-change message was accepted")
		}
	}

	// An earlier version's trigger emitted its messages unsigned: those
	// before DDLSignedFrom are taken, later ones not.
	q := &recordingQueue{}
	c, err := New(Options{Queue: q, Acker: fakeAcker{}, Publication: "p", DDLMessages: true, DDLKey: testKey, DDLSignedFrom: 8})
	if err != nil {
		t.Fatal(err)
	}
	c.proto = 3
	for i, m := range [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, mine), msgLogical(true, change.DDLPrefix, mine)} {
		if err := c.handle(context.Background(), change.LSN(6+i), m); err != nil {
			t.Fatal(err)
		}
	}
	if len(q.changes) != 1 || q.changes[0].LSN != 7 {
		t.Errorf("unsigned messages before and after DDLSignedFrom: %d queued, want the one before", len(q.changes))
	}

	// A message signed with another key: ignored while the source's key
	// is the capture's, a stop once it is another.
	for _, changed := range []bool{false, true} {
		looks := 0
		now := testKey
		if changed {
			now = bytes.Repeat([]byte{4}, ddlmsg.KeyLen)
		}
		c, err := New(Options{Queue: &recordingQueue{}, Acker: fakeAcker{}, Publication: "p", DDLMessages: true, DDLKey: testKey,
			DDLKeyNow: func(context.Context) ([]byte, change.LSN, error) { looks++; return now, 100, nil }})
		if err != nil {
			t.Fatal(err)
		}
		c.proto = 3
		other := string(ddlmsg.Sign(bytes.Repeat([]byte{4}, ddlmsg.KeyLen), 5, []byte(mine)))
		err = c.handle(context.Background(), 6, msgBegin(5))
		if err == nil {
			err = c.handle(context.Background(), 7, msgLogical(true, change.DDLPrefix, other))
		}
		if changed != errors.Is(err, ErrDDLKeyChanged) {
			t.Errorf("key changed %v: %v", changed, err)
		}
		if changed {
			continue
		}
		// More such messages before the position the key was read at
		// cost no look; one after it does.
		for i := range 1000 {
			if err := c.handle(context.Background(), change.LSN(8+i%90), msgLogical(true, change.DDLPrefix, other)); err != nil {
				t.Fatal(err)
			}
		}
		if looks != 1 {
			t.Errorf("1,001 forged messages before the key's position: the key was read %d times, want once", looks)
		}
		if err := c.handle(context.Background(), 100, msgLogical(true, change.DDLPrefix, other)); err != nil || looks != 2 {
			t.Errorf("a forged message at the key's position: %v, the key read %d times, want twice", err, looks)
		}
	}

	c, err = New(Options{Queue: &recordingQueue{}, Acker: fakeAcker{}})
	if err != nil {
		t.Fatal(err)
	}
	c.proto = 3
	for _, m := range [][]byte{msgStreamStart(9, true), msgRelation(9, 16384), msgStreamStop(), msgStreamCommit(9, 10, 20),
		msgStreamStart(11, true), msgRelation(11, 16384), msgStreamStop()} {
		if err := c.handle(context.Background(), 1, m); err != nil {
			t.Fatal(err)
		}
	}
	r := c.streamRels[11][16384]
	if r == nil || r.Previous == nil || r.Previous != nil && r.Previous.Previous != nil || r.Previous.Name != "t" {
		t.Errorf("the second Relation is not linked to the first: %+v", r)
	}
}

// TestRenameUndoneWithSavepoint: in streamed transaction 9, subtransaction
// 901 renames the table's schema (ALTER SCHEMA ... RENAME) and is rolled
// back; the transaction commits without the table described again. The
// rename goes with the savepoint: after the commit the relation is still
// public.t. One made by the top-level transaction stays.
func TestRenameUndoneWithSavepoint(t *testing.T) {
	inStreamDDL := func(xid, sub uint32) []byte {
		content := signed(xid, fmt.Sprintf(`{"tag":"ALTER SCHEMA","schema":"app2","name":"t","oid":16384,"pubs":["p"],"xid":%d}`, sub))
		b := binary.BigEndian.AppendUint32([]byte{'M'}, xid)
		b = append(b, 1)
		b = binary.BigEndian.AppendUint64(b, 0x80)
		b = append(b, change.DDLPrefix...)
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
		return append(b, content...)
	}
	abort := func(xid, sub uint32) []byte {
		return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{'A'}, xid), sub)
	}
	for _, tc := range []struct {
		sub, aborted uint32
		want         string
	}{
		{901, 901, "public"}, // renamed in the savepoint, rolled back
		{901, 902, "app2"},   // another savepoint rolled back
		{9, 901, "app2"},     // renamed by the transaction itself
	} {
		c, err := New(Options{Queue: &recordingQueue{}, Acker: fakeAcker{}, Publication: "p", DDLMessages: true, DDLKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		c.proto = 3
		for _, m := range [][]byte{msgStreamStart(9, true), msgRelation(9, 16384), inStreamDDL(9, tc.sub), msgStreamStop(),
			abort(9, tc.aborted), msgStreamCommit(9, 10, 20)} {
			if err := c.handle(context.Background(), 1, m); err != nil {
				t.Fatal(err)
			}
		}
		if r := c.rels[16384]; r == nil || r.Namespace != tc.want || r.Name != "t" {
			t.Errorf("renamed by %d, %d rolled back: the relation after the commit is %+v, want %s.t", tc.sub, tc.aborted, r, tc.want)
		}
	}
}

// testTopicKey signs the topic's messages as a capture with testKey does.
var testTopicKey = ddlmsg.TopicKey(testKey)

// topicSigned is content as a capture writes it to a topic for top-level
// transaction xid.
func topicSigned(xid uint32, content string) string {
	return string(ddlmsg.SignTopic(testTopicKey, xid, []byte(content)))
}

// TestDecoderRefusesUnverifiedDDL: the Decoder of an apply --kafka
// checks each schema-change message of the topic with the Ed25519 public
// keys the captures published, bound to the same transaction as the
// trigger's signature (BEGIN's xid; in a streamed transaction the
// message's own, the top-level one), and one that does not verify is an
// error naming its transaction, not ignored: the capture writes none to
// the topic. It needs no HMAC key: one signed with another Ed25519 key,
// or carrying an HMAC signature, valid-looking or not, does not pass
// without it. A key published after the decoder started is read again.
// Unsigned ones before DDLSignedFrom are taken. With the HMAC key (a
// source role that may read it), the HMAC form an earlier capture wrote
// is checked as before: a newer key says to restart; one that may be
// signed with an older key (before DDLKeySince) says so.
func TestDecoderRefusesUnverifiedDDL(t *testing.T) {
	const mine = `{"tag":"ALTER TABLE","schema":"public","name":"t","pubs":["p"]}`
	const drop = `{"tag":"DROP TABLE","dropped":true,"schema":"public","name":"t","pubs":["p"]}`
	newKey := bytes.Repeat([]byte{4}, ddlmsg.KeyLen)
	otherTopicKey := ddlmsg.TopicKey(newKey)
	inStream := func(xid uint32, content string) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{'M'}, xid), msgLogical(true, change.DDLPrefix, content)[1:]...)
	}
	for _, tc := range []struct {
		name      string
		msgs      [][]byte
		at        change.LSN // the last message's LSN (the others: 1, 2, ...)
		hmac      bool       // the decoder has the HMAC key
		keyNow    []byte
		published bool // otherTopicKey is published once looked up again
		queued    int
		err       error    // wrapped by the error, nil: none
		contains  []string // in the error
	}{
		{name: "signed", msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, topicSigned(5, mine))}, queued: 1},
		{name: "signed in a stream", msgs: [][]byte{msgStreamStart(9, true), inStream(9, topicSigned(9, mine)), msgStreamStop()}, queued: 1},
		{name: "unsigned before DDLSignedFrom", msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, mine)}, queued: 1},
		{name: "unsigned", at: 6, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, mine)},
			err: ddlmsg.ErrNotSigned, contains: []string{"xid 5", "no signature", `signs every message of slot "s" from 0/3 on`, "another producer", "re-seed"}},
		{name: "another transaction's", at: 6, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, topicSigned(4, mine))},
			err: ddlmsg.ErrNotSigned, contains: []string{"xid 5", "does not match", "another producer wrote this record", "re-seed"}},
		{name: "in a stream, signed for a subtransaction", at: 6, msgs: [][]byte{msgStreamStart(9, true), inStream(9, topicSigned(901, mine))},
			err: ddlmsg.ErrNotSigned, contains: []string{"xid 9", "another producer wrote this record"}},
		{name: "altered after signing", at: 6, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, topicSigned(5, mine)[:len(topicSigned(5, mine))-len(mine)]+drop)},
			err: ddlmsg.ErrNotSigned, contains: []string{"xid 5", "does not match", "another producer wrote this record"}},
		{name: "altered after signing, before DDLKeySince", msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, topicSigned(5, mine)[:len(topicSigned(5, mine))-len(mine)]+drop)},
			err: ddlmsg.ErrNotSigned, contains: []string{"xid 5", "does not match", "the capture writes no such message to the topic, so another producer wrote this record"}},
		{name: "signed with another key", at: 6, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, string(ddlmsg.SignTopic(otherTopicKey, 5, []byte(drop))))},
			err: ddlmsg.ErrUnknownKey, contains: []string{"xid 5", "not published on the source", "another producer wrote this record"}},
		{name: "signed with a key published since", at: 6, published: true, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, string(ddlmsg.SignTopic(otherTopicKey, 5, []byte(mine))))},
			queued: 1},
		{name: "HMAC-signed, without the HMAC key", at: 6, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, signed(5, drop))},
			err: ErrPredatesTopicSigning, contains: []string{"xid 5", "predates", "restart it", "re-seed", "SELECT on repstream.ddl_key"}},
		{name: "HMAC-signed, forged, without the HMAC key", at: 6, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, signed(5, mine)[:64]+drop)},
			err: ErrPredatesTopicSigning, contains: []string{"xid 5", "predates"}},
		{name: "HMAC-signed, with the HMAC key", hmac: true, at: 6, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, signed(5, mine))}, queued: 1},
		{name: "HMAC-signed, forged, with the HMAC key", hmac: true, at: 6, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, signed(5, mine)[:64]+drop)},
			err: ddlmsg.ErrNotSigned, contains: []string{"xid 5", "another producer wrote this record", "re-seed"}},
		{name: "HMAC-signed, maybe an older key", hmac: true, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, string(ddlmsg.Sign(newKey, 5, []byte(mine))))},
			err: ddlmsg.ErrNotSigned, contains: []string{"xid 5", "signed with a key the source had before this apply started", "re-seed"}},
		{name: "HMAC-signed, the key changed", hmac: true, at: 6, keyNow: newKey, msgs: [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, string(ddlmsg.Sign(newKey, 5, []byte(mine))))},
			err: ErrDDLKeyChanged, contains: []string{"xid 5", "restart it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &recordingQueue{}
			keyNow := testKey
			if tc.keyNow != nil {
				keyNow = tc.keyNow
			}
			pub := func(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }
			keys := map[string]ed25519.PublicKey{ddlmsg.KeyFingerprint(pub(testTopicKey)): pub(testTopicKey)}
			opts := Options{Slot: "s", Queue: q, Acker: fakeAcker{}, Publication: "p", DDLMessages: true,
				DDLSignedFrom: 3, DDLKeySince: 6, TopicKeys: keys,
				TopicKeysNow: func(context.Context) (map[string]ed25519.PublicKey, error) {
					now := maps.Clone(keys)
					if tc.published {
						now[ddlmsg.KeyFingerprint(pub(otherTopicKey))] = pub(otherTopicKey)
					}
					return now, nil
				}}
			if tc.hmac {
				opts.DDLKey = testKey
				opts.DDLKeyNow = func(context.Context) ([]byte, change.LSN, error) { return keyNow, 100, nil }
			}
			d, err := NewDecoder(opts, 3)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range tc.msgs {
				at := change.LSN(i + 1)
				if i == len(tc.msgs)-1 && tc.at != 0 {
					at = tc.at
				}
				if err = d.Message(context.Background(), at, m); err != nil {
					break
				}
			}
			if len(q.changes) != tc.queued {
				t.Errorf("%d changes queued, want %d", len(q.changes), tc.queued)
			}
			for _, c := range q.changes {
				if !bytes.Equal(c.DDLContent(), []byte(mine)) {
					t.Errorf("queued %s, want %s", c.DDLContent(), mine)
				}
			}
			if tc.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want one wrapping %v", err, tc.err)
			}
			for _, s := range tc.contains {
				if !bytes.Contains([]byte(err.Error()), []byte(s)) {
					t.Errorf("the error does not say %q: %v", s, err)
				}
			}
		})
	}
	if _, err := NewDecoder(Options{Queue: &recordingQueue{}, Acker: fakeAcker{}, DDLMessages: true}, 3); err == nil {
		t.Error("a decoder of schema-change messages without the keys that check them")
	}
}

// rawSink keeps what a capture --kafka gives its raw sink.
type rawSink struct{ frames [][]byte }

func (s *rawSink) Message(_ context.Context, _ change.LSN, data []byte, _ *pgoutput.Message) error {
	s.frames = append(s.frames, bytes.Clone(data))
	return nil
}
func (s *rawSink) Err() error { return nil }

// TestRawSignsForTopic: a capture --kafka checks each schema-change
// message with the HMAC key and hands its raw sink the 'M' frame with
// the content signed anew with Ed25519 for the same transaction (in a
// stream: the message's top-level xid), the rest of the frame as it was;
// an apply's decoder with only the public key takes it, and one whose
// HMAC signature does not verify never reaches the sink.
func TestRawSignsForTopic(t *testing.T) {
	const mine = `{"tag":"ALTER TABLE","schema":"public","name":"t","pubs":["p"]}`
	sink := &rawSink{}
	if _, err := New(Options{Slot: "s", Raw: sink, Acker: fakeAcker{}, Publication: "p", DDLMessages: true, DDLKey: testKey}); err == nil {
		t.Error("a capture --kafka of schema-change messages without the key that signs them for the topic")
	}
	c, err := New(Options{Slot: "s", Raw: sink, Acker: fakeAcker{}, Publication: "p", DDLMessages: true, DDLKey: testKey, TopicKey: testTopicKey, ProtoVersion: 2})
	if err != nil {
		t.Fatal(err)
	}
	c.proto = 2
	inStream := func(xid uint32, content string) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{'M'}, xid), msgLogical(true, change.DDLPrefix, content)[1:]...)
	}
	in := [][]byte{msgBegin(5), msgLogical(true, change.DDLPrefix, signed(5, mine)),
		msgLogical(true, change.DDLPrefix, signed(5, mine)[:64]+`{"tag":"DROP TABLE","dropped":true,"schema":"public","name":"t","pubs":["p"]}`),
		msgStreamStart(9, true), inStream(9, signed(9, mine)), msgStreamStop()}
	for i, m := range in {
		if err := c.handle(context.Background(), change.LSN(i+1), m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if len(sink.frames) != 5 {
		t.Fatalf("%d frames written, want 5 (the forged message left out)", len(sink.frames))
	}
	pub := testTopicKey.Public().(ed25519.PublicKey)
	keys := map[string]ed25519.PublicKey{ddlmsg.KeyFingerprint(pub): pub}
	for i, want := range []struct {
		frame     int
		xid       uint32
		inStream  bool
		headBytes int // the frame before the content's length
	}{{1, 5, false, 1 + 1 + 8 + len(change.DDLPrefix) + 1}, {3, 9, true, 1 + 4 + 1 + 8 + len(change.DDLPrefix) + 1}} {
		f := sink.frames[want.frame]
		var m pgoutput.Message
		if err := pgoutput.Parse(f, want.inStream, 2, &m); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.HasPrefix(m.Content, []byte(ddlmsg.TopicPrefix)) {
			t.Fatalf("frame %d: content %q, want it signed for the topic", i, m.Content)
		}
		orig := in[map[int]int{1: 1, 3: 4}[want.frame]]
		if !bytes.Equal(f[:want.headBytes], orig[:want.headBytes]) || m.Name != change.DDLPrefix || m.Flags != 1 {
			t.Errorf("frame %d: header %x, want %x", i, f[:want.headBytes], orig[:want.headBytes])
		}
		json, err := ddlmsg.VerifyTopic(keys, want.xid, m.Content)
		if err != nil || string(json) != mine {
			t.Errorf("frame %d: %q, %v; want the message verified", i, json, err)
		}
		if _, err := ddlmsg.Verify(testKey, want.xid, m.Content); err == nil {
			t.Errorf("frame %d: HMAC-verifies", i)
		}
	}
	q := &recordingQueue{}
	d, err := NewDecoder(Options{Slot: "s", Queue: q, Acker: fakeAcker{}, Publication: "p", DDLMessages: true, TopicKeys: keys}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range sink.frames {
		if err := d.Message(context.Background(), change.LSN(i+1), f); err != nil {
			t.Fatalf("decode frame %d: %v", i, err)
		}
	}
	if len(q.changes) != 2 {
		t.Errorf("%d schema changes decoded, want 2", len(q.changes))
	}
}
