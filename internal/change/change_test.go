package change

import (
	"bytes"
	"testing"
)

func TestLSNRoundTrip(t *testing.T) {
	for _, s := range []string{"0/0", "16/B374D848", "FFFFFFFF/FFFFFFFF"} {
		l, err := ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		if l.String() != s {
			t.Fatalf("round trip %s -> %s", s, l)
		}
	}
	for _, bad := range []string{"", "1", "x/1", "1/x", "100000000/0"} {
		if _, err := ParseLSN(bad); err == nil {
			t.Fatalf("ParseLSN(%q) accepted", bad)
		}
	}
}

func TestTupleIter(t *testing.T) {
	tup := Tuple(AppendTuple(nil,
		[]byte{KindText, KindNull, KindUnchanged, KindText},
		[][]byte{[]byte("42"), nil, nil, []byte("")}))
	n, err := ValidateTuple(tup)
	if err != nil || n != len(tup) {
		t.Fatalf("validate: %d %v", n, err)
	}
	var kinds []byte
	var vals [][]byte
	it := tup.Iter()
	for it.Next() {
		if it.Index() != len(kinds) {
			t.Fatalf("index %d at column %d", it.Index(), len(kinds))
		}
		kinds = append(kinds, it.Kind())
		vals = append(vals, it.Value())
	}
	if !bytes.Equal(kinds, []byte("tnut")) {
		t.Fatalf("kinds %q", kinds)
	}
	if string(vals[0]) != "42" || vals[1] != nil || vals[3] == nil || len(vals[3]) != 0 {
		t.Fatalf("vals %q", vals)
	}
	if k, v := tup.Column(3); k != KindText || len(v) != 0 {
		t.Fatalf("Column(3) = %c %q", k, v)
	}
	if k, _ := tup.Column(9); k != 0 {
		t.Fatalf("Column(9) = %c", k)
	}
	for cut := 0; cut < len(tup); cut++ {
		if _, err := ValidateTuple(tup[:cut]); err == nil {
			t.Fatalf("truncated tuple of %d bytes accepted", cut)
		}
	}
}

func TestEmptyTuple(t *testing.T) {
	var tup Tuple
	it := tup.Iter()
	if it.Next() {
		t.Fatal("nil tuple has a column")
	}
}

func FuzzValidateTuple(f *testing.F) {
	f.Add(AppendTuple(nil, []byte{KindText, KindNull}, [][]byte{[]byte("x"), nil}))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := ValidateTuple(b)
		if err != nil {
			return
		}
		it := Tuple(b[:n]).Iter()
		cols := 0
		for it.Next() {
			cols++
		}
		if cols != Tuple(b).NumColumns() {
			t.Fatalf("iterated %d of %d columns", cols, Tuple(b).NumColumns())
		}
	})
}
