package ddlmsg

import "testing"

// TestParse: a message as the event trigger sends it, and a partition
// message; Check refuses a message without its table's or its partition's
// name, Parse only what is not a message's JSON.
func TestParse(t *testing.T) {
	m, err := Parse([]byte(`{"tag":"ALTER TABLE","oid":16400,"schema":"app","name":"n","kind":"r","ident":"d","pubs":["p"],"pkey":["id"],"xid":731,
		"columns":[{"num":1,"name":"id","type":"integer","typeoid":23,"typmod":-1,"notnull":true,"default":null,"identity":"","hasmissing":false,"missing":null,"seq":null}],
		"old":{"oid":16400,"schema":"app","name":"o","pubs":["q"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Tag != "ALTER TABLE" || m.OID != 16400 || m.Schema != "app" || m.Name != "n" || m.Xid != 731 || len(m.Columns) != 1 ||
		!m.Columns[0].NotNull || m.Old == nil || m.Old.Name != "o" || m.Partition != nil || m.Check() != nil {
		t.Errorf("parsed %+v", m)
	}
	if !m.Publishes("p") || m.Publishes("q") || m.Creates() {
		t.Errorf("Publishes(p)=%v Publishes(q)=%v Creates=%v", m.Publishes("p"), m.Publishes("q"), m.Creates())
	}

	m, err = Parse([]byte(`{"tag":"ATTACH PARTITION","schema":"app","name":"root","partition":{"schema":"app","name":"p1","cons":"(k < 10)","rows":true,"standalone_pubs":["p"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if pc := m.Partition; pc == nil || pc.Name != "p1" || pc.Constraint != "(k < 10)" || !pc.Rows || !pc.PublishedAlone("p") || pc.PublishedAlone("q") || pc.Check() != nil {
		t.Errorf("partition %+v", m.Partition)
	}

	if m, err := Parse([]byte(`{"tag":"ALTER TABLE","partition":{"schema":"app"}}`)); err != nil || m.Check() == nil || m.Partition.Check() == nil {
		t.Errorf("a message without names: err %v", err)
	}
	if _, err := Parse([]byte(`{"tag":`)); err == nil {
		t.Error("malformed JSON parsed")
	}
}

// TestPubRelRemade: only an entry of the publication that both the
// message and its old definition name, with another oid, was made again;
// a message of a trigger without pubrels (an earlier version) says nothing.
func TestPubRelRemade(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want bool
	}{
		{`{"pubrels":{"p":16500},"old":{"pubrels":{"p":16400}}}`, true},
		{`{"pubrels":{"p":16400},"old":{"pubrels":{"p":16400}}}`, false},
		{`{"pubrels":{"p":16500},"old":{"pubrels":{"q":16400}}}`, false}, // entered p: entersPublication's other case
		{`{"pubrels":{},"old":{"pubrels":{"p":16400}}}`, false},          // left p
		{`{"pubrels":{"p":16500},"old":{"pubs":["p"]}}`, false},          // old recorded by an earlier trigger
		{`{"pubrels":{"p":16500}}`, false},                               // no old definition
	} {
		m, err := Parse([]byte(c.msg))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.PubRelRemade("p"); got != c.want {
			t.Errorf("%s: PubRelRemade(p) = %v, want %v", c.msg, got, c.want)
		}
	}
}
