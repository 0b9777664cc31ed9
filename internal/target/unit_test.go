package target

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/golden"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
)

func checkGolden(t *testing.T, file, got string) { t.Helper(); golden.Check(t, file, got) }

// tup builds a tuple from strings: "\x00n" is NULL, "\x00u" unchanged TOAST.
func tup(vals ...string) change.Tuple {
	kinds := make([]byte, len(vals))
	bs := make([][]byte, len(vals))
	for i, v := range vals {
		switch v {
		case "\x00n":
			kinds[i] = change.KindNull
		case "\x00u":
			kinds[i] = change.KindUnchanged
		default:
			kinds[i] = change.KindText
			bs[i] = []byte(v)
		}
	}
	return change.AppendTuple(nil, kinds, bs)
}

const (
	null = "\x00n"
	unch = "\x00u"
)

func kindsOf(t change.Tuple) []byte {
	var k []byte
	it := t.Iter()
	for it.Next() {
		k = append(k, it.Kind())
	}
	return k
}

func testRel(identity byte, key ...string) (*change.Relation, *schema.Table) {
	rel := &change.Relation{Namespace: "public", Name: "Items", ReplicaIdentity: identity}
	tab := &schema.Table{Schema: "public", Name: "Items"}
	for _, c := range []string{"id", "name", "body", "gen_on_target", "doc"} {
		isKey := false
		for _, k := range key {
			isKey = isKey || k == c
		}
		rel.Columns = append(rel.Columns, change.Column{Name: c, Key: isKey})
		tab.Columns = append(tab.Columns, schema.Column{Name: c, Generated: c == "gen_on_target"})
	}
	tab.Columns = append(tab.Columns, schema.Column{Name: "target_only"})
	return rel, tab
}

func TestStatementsGolden(t *testing.T) {
	keyed, keyedTab := testRel(change.IdentityDefault, "id")
	full, fullTab := testRel(change.IdentityFull)
	parted, partedTab := testRel(change.IdentityFull)
	partedTab.Partitioned = true
	textEq := map[string]bool{"doc": true}

	cases := []struct {
		title    string
		rel      *change.Relation
		tab      *schema.Table
		op       change.Op
		mode     whereMode
		new, old change.Tuple
	}{
		{"update keeping its key, all columns", keyed, keyedTab, change.OpUpdate, whereNewKey, tup("1", "a", "b", "x", "{}"), nil},
		{"update keeping its key, body unchanged TOAST", keyed, keyedTab, change.OpUpdate, whereNewKey, tup("1", "a", unch, "x", null), nil},
		{"update with only unchanged non-key columns (no-op)", keyed, keyedTab, change.OpUpdate, whereNewKey, tup("1", unch, unch, unch, unch), nil},
		{"key-changing update ('K' old tuple)", keyed, keyedTab, change.OpUpdate, whereOldKey, tup("2", "a", unch, "x", "{}"), tup("1", null, null, null, null)},
		{"delete by key", keyed, keyedTab, change.OpDelete, whereOldKey, nil, tup("1", null, null, null, null)},
		{"FULL identity update", full, fullTab, change.OpUpdate, whereFull, tup("1", "b", unch, "x", "{}"), tup("1", "a", unch, "x", "{}")},
		{"FULL identity delete", full, fullTab, change.OpDelete, whereFull, nil, tup("1", "a", "b", "x", null)},
		{"FULL identity delete on a partitioned table", parted, partedTab, change.OpDelete, whereFull, nil, tup("1", "a", "b", "x", null)},
	}
	var out strings.Builder
	for _, tc := range cases {
		p, err := newPlan(tc.rel, tc.tab, textEq, false)
		if err != nil {
			t.Fatal(err)
		}
		s := p.buildStmt(tc.op, tc.mode, kindsOf(tc.new), kindsOf(tc.old))
		fmt.Fprintf(&out, "-- %s\n", tc.title)
		if s.noop {
			out.WriteString("-- (no statement)\n\n")
			continue
		}
		fmt.Fprintf(&out, "%s;\n-- params:", s.sql)
		for _, r := range s.params {
			src := "new"
			if r.old {
				src = "old"
			}
			fmt.Fprintf(&out, " %s.%s", src, tc.rel.Columns[r.col].Name)
		}
		out.WriteString("\n\n")
	}
	p, err := newPlan(keyed, keyedTab, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&out, "-- insert COPY header (generated target column left out)\n%s;\n\n", p.copyHeader)
	fmt.Fprintf(&out, "-- insert of one row, for a few rows at commit (generated target column left out)\n%s;\n\n", p.buildInsert().sql)
	fmt.Fprintf(&out, "-- truncate\n%s;\n%s;\n%s;\n",
		truncateSQL([]string{`"public"."a"`}, 0),
		truncateSQL([]string{`"public"."a"`, `"s"."b"`}, change.TruncateCascade),
		truncateSQL([]string{`"public"."a"`}, change.TruncateCascade|change.TruncateRestartIdentity))
	checkGolden(t, "statements.sql", out.String())
}

func TestStmtKeyDistinguishesShapes(t *testing.T) {
	rel, tab := testRel(change.IdentityDefault, "id")
	p, err := newPlan(rel, tab, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	shapes := []struct {
		op       change.Op
		mode     whereMode
		new, old change.Tuple
	}{
		{change.OpUpdate, whereNewKey, tup("1", "a", "b", "x", "y"), nil},
		{change.OpUpdate, whereNewKey, tup("1", "a", unch, "x", "y"), nil},
		{change.OpUpdate, whereNewKey, tup("1", unch, "b", "x", "y"), nil},
		{change.OpUpdate, whereOldKey, tup("1", "a", "b", "x", "y"), tup("2", null, null, null, null)},
		{change.OpDelete, whereOldKey, nil, tup("2", null, null, null, null)},
		{change.OpDelete, whereFull, nil, tup("2", "a", "b", "x", "y")},
		{change.OpDelete, whereFull, nil, tup("2", "a", unch, "x", "y")},
	}
	seen := map[string]int{}
	for i, s := range shapes {
		k := string(p.stmtKey(nil, s.op, s.mode, kindsOf(s.new), kindsOf(s.old)))
		if j, dup := seen[k]; dup {
			t.Errorf("shapes %d and %d share key %q", j, i, k)
		}
		seen[k] = i
	}
	// NULL versus text does not change the shape.
	a := p.stmtKey(nil, change.OpUpdate, whereNewKey, kindsOf(tup("1", null, "b", "x", "y")), nil)
	b := p.stmtKey(nil, change.OpUpdate, whereNewKey, kindsOf(tup("1", "a", "b", "x", "y")), nil)
	if !bytes.Equal(a, b) {
		t.Errorf("NULL changed the statement key: %q vs %q", a, b)
	}
}

func TestNewPlanMissingColumn(t *testing.T) {
	rel, tab := testRel(change.IdentityDefault, "id")
	tab.Columns = tab.Columns[:2]
	_, err := newPlan(rel, tab, nil, false)
	if err == nil || !strings.Contains(err.Error(), `column "body" of source table public.Items is missing on the target table public.Items`) {
		t.Fatalf("error = %v", err)
	}
}

func TestCopyEncodingGolden(t *testing.T) {
	values := []string{
		"plain",
		"",
		null,
		`back\slash`,
		"tab\there",
		"line\nfeed",
		"carriage\rreturn\r\n",
		`\N`,
		"ünïcødé — 日本語 🎉",
		"\\\t\n\r",
		"trailing\\",
	}
	cols := make([]int, len(values))
	for i := range cols {
		cols[i] = i
	}
	row := AppendCopyRow(nil, tup(values...), cols)
	// A subset of the columns, in order.
	row = AppendCopyRow(row, tup(values...), []int{0, 3, 7})
	checkGolden(t, "copy_rows.txt", string(row))

	// Decoding gives the values back.
	fields := decodeCopyRow(t, strings.SplitN(string(row), "\n", 2)[0])
	for i, v := range values {
		if fields[i] != v {
			t.Errorf("column %d: decoded %q, want %q", i, fields[i], v)
		}
	}
}

func TestAppendCopyRowBadKinds(t *testing.T) {
	_, bad := appendCopyRow(nil, tup("1", unch), []int{0, 1})
	if bad.kind != change.KindUnchanged || bad.col != 1 {
		t.Errorf("unchanged: bad = %+v", bad)
	}
	bin := change.Tuple(change.AppendTuple(nil, []byte{change.KindBinary}, [][]byte{{1, 2}}))
	if _, bad = appendCopyRow(nil, bin, []int{0}); bad.kind != change.KindBinary {
		t.Errorf("binary: bad = %+v", bad)
	}
	if _, bad = appendCopyRow(nil, tup("1"), []int{0, 1}); bad.kind != 'm' || bad.col != 1 {
		t.Errorf("short tuple: bad = %+v", bad)
	}
	if out, bad := appendCopyRow(nil, tup("1", "2", "3"), []int{0, 2}); bad.kind != 0 || string(out) != "1\t3\n" {
		t.Errorf("subset: %q %+v", out, bad)
	}
}

// decodeCopyRow parses one line of COPY text format ("\N" decodes to null).
func decodeCopyRow(t testing.TB, line string) []string {
	var fields []string
	var cur strings.Builder
	isNull := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\t':
			if isNull {
				fields = append(fields, null)
			} else {
				fields = append(fields, cur.String())
			}
			cur.Reset()
			isNull = false
		case c == '\\':
			i++
			if i >= len(line) {
				t.Fatalf("dangling backslash in %q", line)
			}
			switch line[i] {
			case 'N':
				isNull = true
			case 't':
				cur.WriteByte('\t')
			case 'n':
				cur.WriteByte('\n')
			case 'r':
				cur.WriteByte('\r')
			case '\\':
				cur.WriteByte('\\')
			default:
				t.Fatalf("unexpected escape \\%c in %q", line[i], line)
			}
		case c == '\n' || c == '\r':
			t.Fatalf("raw line break in %q", line)
		default:
			cur.WriteByte(c)
		}
	}
	if isNull {
		fields = append(fields, null)
	} else {
		fields = append(fields, cur.String())
	}
	return fields
}

func FuzzAppendCopyRow(f *testing.F) {
	f.Add("a", "b\\c", false)
	f.Add("\t\n\r", "", true)
	f.Add(`\N`, "日本", false)
	f.Fuzz(func(t *testing.T, a, b string, bNull bool) {
		vals := []string{a, b}
		if bNull {
			vals[1] = null
		}
		if strings.HasPrefix(a, "\x00") || strings.HasPrefix(b, "\x00") {
			return // our test sentinels
		}
		row := AppendCopyRow(nil, tup(vals...), []int{0, 1})
		if !bytes.HasSuffix(row, []byte("\n")) || bytes.Count(row, []byte("\n")) != 1 {
			t.Fatalf("row %q is not one line", row)
		}
		got := decodeCopyRow(t, string(row[:len(row)-1]))
		if len(got) != 2 || got[0] != vals[0] || got[1] != vals[1] {
			t.Fatalf("round trip %q -> %q -> %q", vals, row, got)
		}
		// splitCopyRow (INSERT statements at commit) reads it back too,
		// also when another row follows.
		split, rest, _, err := splitCopyRow(append(row, "x\n"...), nil, nil)
		if err != nil || len(split) != 2 || string(rest) != "x\n" {
			t.Fatalf("split %q: %q rest %q, %v", row, split, rest, err)
		}
		for i, v := range split {
			if v == nil && vals[i] != null || v != nil && string(v) != vals[i] {
				t.Fatalf("split %q: value %d is %q, want %q", row, i, v, vals[i])
			}
		}
	})
}

// FuzzCopyRowBinary: splitCopyRowBinary reads back what appendCopyRowBinary
// wrote, NULL as nil and an empty value as empty, not nil.
func FuzzCopyRowBinary(f *testing.F) {
	f.Add([]byte{0, 0, 0, 7}, []byte{}, false)
	f.Add([]byte("hi"), []byte(nil), true)
	f.Fuzz(func(t *testing.T, a, b []byte, bNull bool) {
		kinds := []byte{change.KindBinary, change.KindBinary}
		if bNull {
			kinds[1], b = change.KindNull, nil
		}
		tu := change.Tuple(change.AppendTuple(nil, kinds, [][]byte{a, b}))
		row, bad := appendCopyRowBinary(nil, tu, []int{0, 1})
		if bad.kind != 0 {
			t.Fatalf("bad %+v", bad)
		}
		vals, rest, err := splitCopyRowBinary(append(row, 0xee), nil)
		if err != nil || len(vals) != 2 || !bytes.Equal(rest, []byte{0xee}) {
			t.Fatalf("split %v: %q rest %v, %v", row, vals, rest, err)
		}
		if vals[0] == nil || !bytes.Equal(vals[0], a) {
			t.Fatalf("value 0: %q, want %q", vals[0], a)
		}
		if bNull != (vals[1] == nil) || !bytes.Equal(vals[1], b) {
			t.Fatalf("value 1: %q (nil %v), want %q (null %v)", vals[1], vals[1] == nil, b, bNull)
		}
		// A cut row is an error, not a panic.
		for i := range len(row) {
			if _, _, err := splitCopyRowBinary(row[:i], nil); err == nil {
				t.Fatalf("row cut at %d of %d: no error", i, len(row))
			}
		}
	})
}

func TestSplitCopyRowMalformed(t *testing.T) {
	for _, row := range []string{"", "a\tb", "a\\"} {
		if _, _, _, err := splitCopyRow([]byte(row), nil, nil); err == nil {
			t.Errorf("%q: no error", row)
		}
	}
	vals, rest, _, err := splitCopyRow([]byte(`\\N`+"\t"+`\N`+"\t\n"), nil, nil)
	if err != nil || len(vals) != 3 || string(vals[0]) != `\N` || vals[1] != nil || vals[2] == nil || len(vals[2]) != 0 || len(rest) != 0 {
		t.Errorf("escaped backslash-N, NULL, empty: %q rest %q %v", vals, rest, err)
	}
}

func TestCopyErrorLine(t *testing.T) {
	tests := []struct {
		where string
		want  int
	}{
		{`COPY items, line 3, column id: "x"`, 3},
		{`COPY items, line 12`, 12},
		{`COPY items, line 7: "1	a, line 99"`, 7},
		{"SQL function \"f\"\nCOPY items, line 2", 2},
		{`PL/pgSQL function x()`, 0},
		{``, 0},
	}
	for _, tt := range tests {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Where: tt.where})
		if got := copyErrorLine(err); got != tt.want {
			t.Errorf("copyErrorLine(%q) = %d, want %d", tt.where, got, tt.want)
		}
	}
	if copyErrorLine(errors.New("plain")) != 0 {
		t.Error("non-PgError gave a line")
	}
}

func TestProgressIsApplied(t *testing.T) {
	p := Progress{Low: 100, Applied: []change.LSN{150, 200, 300}}
	tests := []struct {
		end  change.LSN
		want bool
	}{{1, true}, {100, true}, {101, false}, {150, true}, {151, false}, {200, true}, {300, true}, {301, false}}
	for _, tt := range tests {
		if got := p.IsApplied(tt.end); got != tt.want {
			t.Errorf("IsApplied(%d) = %v, want %v", tt.end, got, tt.want)
		}
	}
	if (Progress{}).IsApplied(1) {
		t.Error("empty progress says 1 is applied")
	}
}

func TestAppendLSN(t *testing.T) {
	for _, s := range []string{"0/0", "16/B374D848", "FFFFFFFF/FFFFFFFF"} {
		l, _ := change.ParseLSN(s)
		got := string(appendLSN(nil, l))
		back, err := change.ParseLSN(got)
		if err != nil || back != l {
			t.Errorf("appendLSN(%s) = %s", s, got)
		}
	}
}

func BenchmarkAppendCopyRow(b *testing.B) {
	t := tup("123456", "some name", "a longer text value with a\ttab and a \\ backslash", null,
		"2024-05-01 12:34:56.789+00", "{1,2,3}", "true", "3.14159")
	cols := []int{0, 1, 2, 3, 4, 5, 6, 7}
	dst := make([]byte, 0, 4096)
	b.SetBytes(int64(len(t)))
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendCopyRow(dst[:0], t, cols)
	}
}

func TestAppendCopyRowAllocs(t *testing.T) {
	tu := tup("1", "x\ty", null, "")
	dst := make([]byte, 0, 256)
	n := testing.AllocsPerRun(100, func() { dst = AppendCopyRow(dst[:0], tu, []int{0, 1, 2, 3}) })
	if n != 0 {
		t.Errorf("AppendCopyRow allocates %v times per row", n)
	}
}

func TestAppendCopyRowBinary(t *testing.T) {
	tu := change.Tuple(change.AppendTuple(nil,
		[]byte{change.KindBinary, change.KindNull, change.KindBinary, change.KindBinary},
		[][]byte{{0, 0, 0, 7}, nil, {}, {'h', 'i'}}))
	out, bad := appendCopyRowBinary(nil, tu, []int{0, 1, 3})
	want := []byte{0, 3, 0, 0, 0, 4, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2, 'h', 'i'}
	if bad.kind != 0 || !bytes.Equal(out, want) {
		t.Errorf("got %v %+v, want %v", out, bad, want)
	}
	// An empty value is a zero length, not NULL.
	if out, _ = appendCopyRowBinary(nil, tu, []int{2}); !bytes.Equal(out, []byte{0, 1, 0, 0, 0, 0}) {
		t.Errorf("empty value: %v", out)
	}
	if _, bad = appendCopyRowBinary(nil, tup("1"), []int{0}); bad.kind != change.KindText {
		t.Errorf("text in binary: bad = %+v", bad)
	}
	if _, bad = appendCopyRowBinary(nil, tu, []int{0, 4}); bad.kind != 'm' || bad.col != 4 {
		t.Errorf("short tuple: bad = %+v", bad)
	}
	if n := testing.AllocsPerRun(100, func() { out, _ = appendCopyRowBinary(out[:0], tu, []int{0, 1, 3}) }); n != 0 {
		t.Errorf("appendCopyRowBinary allocates %v times per row", n)
	}
}

func TestBinaryCompatible(t *testing.T) {
	if err := BinaryCompatible(23, 23); err != nil {
		t.Errorf("int4 to int4: %v", err)
	}
	if err := BinaryCompatible(23, 20); err == nil {
		t.Error("int4 to int8: no error")
	}
	if err := BinaryCompatible(16500, 16500); err == nil {
		t.Error("user type: no error")
	}
	// Their binary form is an OID of the source's (TestObjectRefTypes), or
	// there is none (aclitem).
	for _, oid := range []uint32{2205, 2210, 2206, 24, 4096, 1033, 1034} {
		if err := BinaryCompatible(oid, oid); err == nil {
			t.Errorf("type OID %d (an object identifier type, or aclitem): no error", oid)
		}
	}
}
