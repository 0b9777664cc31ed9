package errqueue

import (
	"encoding/binary"
	"iter"
	"reflect"
	"testing"

	"github.com/repstream/repstream/internal/change"
)

func seq(cs []*change.Change) iter.Seq2[*change.Change, error] {
	return func(yield func(*change.Change, error) bool) {
		for _, c := range cs {
			if !yield(c, nil) {
				return
			}
		}
	}
}

func sampleChanges() []*change.Change {
	t := &change.Relation{Namespace: "public", Name: "t", ReplicaIdentity: change.IdentityDefault, Columns: []change.Column{
		{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "body", TypeOID: 25, TypeMod: -1}}}
	f := &change.Relation{Namespace: "app", Name: "full \"q\"", ReplicaIdentity: change.IdentityFull, Columns: []change.Column{
		{Name: "a", TypeOID: 1700, TypeMod: 655366}}}
	tup := func(kinds string, vals ...string) change.Tuple {
		bs := make([][]byte, len(vals))
		for i, v := range vals {
			bs[i] = []byte(v)
		}
		return change.AppendTuple(nil, []byte(kinds), bs)
	}
	id := binary.BigEndian.AppendUint32(nil, 5)
	return []*change.Change{
		{Op: change.OpInsert, LSN: 0x16B3F28, Rel: t, New: change.AppendTuple(nil, []byte("bt"), [][]byte{id, []byte("x")})},
		{Op: change.OpUpdate, LSN: 0x16B3F90, Rel: t, OldKind: 'K', Old: tup("tn", "5", ""), New: tup("tu", "6", "")},
		{Op: change.OpUpdate, LSN: 0x16B4000, Xid: 77, Rel: t, New: tup("tn", "6", "")},
		{Op: change.OpDelete, LSN: 1<<32 | 0x10, Rel: f, OldKind: 'O', Old: tup("t", "1.50")},
		{Op: change.OpTruncate, LSN: 1<<32 | 0x20, TruncateRels: []*change.Relation{t, f}, TruncateOpts: change.TruncateCascade},
	}
}

// TestCodecRoundTrip: what Encode writes, Decode reads back the same, with
// changes of one relation sharing one *Relation.
func TestCodecRoundTrip(t *testing.T) {
	in := sampleChanges()
	b, err := Encode(seq(in), true)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Binary || len(d.Changes) != len(in) {
		t.Fatalf("decoded binary=%v, %d changes", d.Binary, len(d.Changes))
	}
	for i := range in {
		if !reflect.DeepEqual(in[i], d.Changes[i]) {
			t.Errorf("change %d:\n got %+v\nwant %+v", i, d.Changes[i], in[i])
		}
	}
	if d.Changes[0].Rel != d.Changes[1].Rel || d.Changes[4].TruncateRels[0] != d.Changes[0].Rel {
		t.Error("changes of one relation do not share it")
	}
	b2, err := Encode(seq(d.Changes), true)
	if err != nil || string(b2) != string(b) {
		t.Errorf("re-encoding differs: %v\n%s\n%s", err, b, b2)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, s := range []string{
		``, `{}`, `{"version":2}`,
		`{"version":1,"relations":[],"changes":[{"op":"I","lsn":"0/1","rel":0}]}`,
		`{"version":1,"relations":[{"schema":"s","table":"t","columns":[{"name":"a"}]}],"changes":[{"op":"I","lsn":"0/1","rel":0,"new":"AAIAbg=="}]}`,
		`{"version":1,"relations":[],"changes":[{"op":"X","lsn":"0/1"}]}`,
		`{"version":1,"relations":[],"changes":[{"op":"T","lsn":"zz"}]}`,
	} {
		if _, err := Decode([]byte(s)); err == nil {
			t.Errorf("Decode(%s): no error", s)
		}
	}
}

func TestKeyText(t *testing.T) {
	cs := sampleChanges()
	x := NewTexts()
	for i, want := range []string{"(id)=(5)", "(id)=(5)", "(id)=(6)", "(a)=(1.50)"} {
		if got := x.Key(cs[i]); got != want {
			t.Errorf("Key(change %d) = %q, want %q", i, got, want)
		}
	}
	if got := x.Row(cs[0].Rel, cs[0].New); got != "id=5, body=x" {
		t.Errorf("Row = %q", got)
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts encodes and
// decodes again to the same changes.
func FuzzDecode(f *testing.F) {
	b, _ := Encode(seq(sampleChanges()), false)
	f.Add(b)
	f.Add([]byte(`{"version":1,"relations":[],"changes":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode(data)
		if err != nil {
			return
		}
		b, err := Encode(seq(d.Changes), d.Binary)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := Decode(b)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(d, d2) {
			t.Fatalf("round trip differs")
		}
	})
}

// TestEncoderBinaryFromRelation: an encoding started as text is binary
// once a change's relation says its values are (Kafka mode: the apply's
// writer is text, the topic's records binary), so a parked transaction is
// retried with the format its values have.
func TestEncoderBinaryFromRelation(t *testing.T) {
	rel := &change.Relation{Namespace: "public", Name: "t", Columns: []change.Column{{Name: "id", TypeOID: 23, Key: true}}, Binary: true}
	id := binary.BigEndian.AppendUint32(nil, 5)
	x := NewEncoder(false)
	x.Add(&change.Change{Op: change.OpInsert, LSN: 0x10, Rel: rel, New: change.AppendTuple(nil, []byte("b"), [][]byte{id})})
	b, err := x.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Binary {
		t.Fatal("decoded as text: the relation's values were binary")
	}
	y := NewEncoder(false)
	rel2 := *rel
	rel2.Binary = false
	y.Add(&change.Change{Op: change.OpInsert, LSN: 0x10, Rel: &rel2, New: change.AppendTuple(nil, []byte("t"), [][]byte{[]byte("5")})})
	if b, err = y.Bytes(); err != nil {
		t.Fatal(err)
	}
	if d, err = Decode(b); err != nil || d.Binary {
		t.Fatalf("text relation: binary=%v, %v", d.Binary, err)
	}
}
