package target

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/schema"
)

// whereMode says how an UPDATE or DELETE finds its row.
type whereMode byte

const (
	whereNewKey whereMode = 'n' // key columns of the new tuple (update that kept its key)
	whereOldKey whereMode = 'k' // key columns of the old 'K' tuple
	whereFull   whereMode = 'o' // every column of the old 'O' tuple (REPLICA IDENTITY FULL)
)

// relPlan is how changes of one source relation version are applied to the
// target table of the same schema and name.
//
// Invariants: quoted, write, textEq, castTo and identAlways have one entry
// per source column (len(rel.Columns));
// copyCols lists, ascending, the source columns written (write[i]);
// keyCols lists the source's replica-identity columns; stmts only grows.
type relPlan struct {
	rel         *change.Relation
	name        schema.TableName
	quotedTable string
	partitioned bool
	tableOID    uint32 // the target table's OID

	// collapsible caches Writer.Collapsible: 0 not asked yet, 1 yes, -1 no.
	collapsible int8
	// rules: a rule fires on UPDATE or DELETE of the table in replica mode
	// (ENABLE ALWAYS or REPLICA). Such statements cannot be wrapped in WITH,
	// so a missing row is found from the command tag (checkTag).
	rules bool

	quoted []string // quoted target column name per source column
	write  []bool   // false for columns generated on the target
	textEq []bool   // compare as text in FULL matching (type has no equality)
	// castTo is the target type a compared parameter is cast to ("" for
	// none): a composite's, which the server would otherwise take for an
	// anonymous record it cannot read.
	castTo []string
	// eq is the equality a key column is matched with: for a built-in type,
	// pg_catalog's, named with its schema, so that an operator another role
	// made in a schema on the search_path (an exact match for a type that
	// pg_catalog compares through a cast, such as varchar) is never run by
	// the apply session; for other types, the type's own "=".
	eq []string
	// identAlways marks GENERATED ALWAYS identity columns on the target:
	// INSERTs say OVERRIDING SYSTEM VALUE, and an UPDATE may not assign
	// them (modify leaves them out when their value is unchanged).
	identAlways []bool
	copyCols    []int
	keyCols     []int
	// keyCollate[j] is the COLLATE clause of keyCols[j]'s match, or "":
	// the target's key index on the same columns compares that column
	// with another collation than its own (keyCollations).
	keyCollate []string

	copyHeader string
	// changed is the table an UPDATE, DELETE or TRUNCATE names: ONLY the
	// table for an ordinary one, whose inheritance children's rows are
	// not its own (the source's change of a child comes as the child's);
	// the table itself for a partitioned one, whose rows are its
	// partitions'.
	changed string
	stmts   map[string]*stmt
	insert  *stmt // one row's INSERT of the copyCols, built on first use
	// inserts[n] is the INSERT of n rows (n ≥ 2), built on first use
	// (Writer.queueInsertRows).
	inserts []*stmt

	// binary: values arrive in binary (pgoutput binary) and are applied with
	// binary COPY and binary parameters; valueKind is the kind a present
	// value has (KindBinary or KindText).
	binary    bool
	valueKind byte

	// checkLocal: UPDATEs and DELETEs pass the row's xmin and the source
	// transaction's commit time to repstream.local_older, which refuses a
	// row the target's own transaction wrote later (WriterOptions.CheckLocalWrites).
	checkLocal bool
}

// stmt is one prepared UPDATE or DELETE shape.
type stmt struct {
	name   string // server-side prepared statement name, "" until prepared
	sql    string
	params []paramRef
	noop   bool // nothing to SET: the statement is skipped
	// checkTag: the statement is a plain UPDATE or DELETE (the table has
	// rules, relPlan.rules): a command tag of 0 rows is a missing row, and
	// the statement must not share a pipeline with COMMIT.
	checkTag bool
	// inner is the plain UPDATE or DELETE; plain its checkTag variant,
	// made on first use (Writer.ExpectChanges).
	inner string
	plain *stmt

	// For binary plans: the parameter types (the source columns' built-in
	// types, equal to the target's) and formats (all binary).
	oids    []uint32
	formats []int16
}

// paramRef says where a statement parameter's value comes from.
type paramRef struct {
	old bool // old tuple (else new)
	col int  // source column index
	// commitTime: the source transaction's commit time (Writer.SourceCommit),
	// not a column.
	commitTime bool
}

// newPlan matches the source relation's columns to the target table by name.
// textEqCols names target columns whose type has no equality operator.
// binary plans check that every written column has the same built-in type
// on both sides, which binary values need.
func newPlan(rel *change.Relation, tab *schema.Table, textEqCols map[string]bool, binary bool) (*relPlan, error) {
	p := &relPlan{
		binary:      binary,
		valueKind:   change.KindText,
		rel:         rel,
		name:        tab.TableName(),
		quotedTable: tab.TableName().Quoted(),
		partitioned: tab.Partitioned,
		tableOID:    tab.OID,
		quoted:      make([]string, len(rel.Columns)),
		write:       make([]bool, len(rel.Columns)),
		textEq:      make([]bool, len(rel.Columns)),
		castTo:      make([]string, len(rel.Columns)),
		eq:          make([]string, len(rel.Columns)),
		identAlways: make([]bool, len(rel.Columns)),
		stmts:       make(map[string]*stmt),
	}
	var hdr strings.Builder
	hdr.WriteString("COPY ")
	hdr.WriteString(p.quotedTable)
	hdr.WriteString(" (")
	for i, c := range rel.Columns {
		ti := tab.Column(c.Name)
		if ti < 0 {
			return nil, fmt.Errorf("column %q of source table %s is missing on the target table %s",
				c.Name, rel.String(), tab.TableName())
		}
		p.quoted[i] = change.QuoteIdent(c.Name)
		p.write[i] = !tab.Columns[ti].Generated
		if binary && p.write[i] {
			if err := BinaryCompatible(c.TypeOID, tab.Columns[ti].TypeOID); err != nil {
				return nil, fmt.Errorf("column %q of %s: %w: %w", c.Name, rel.String(), ErrBinaryIncompatible, err)
			}
		}
		p.textEq[i] = textEqCols[c.Name]
		if tc := &tab.Columns[ti]; tc.Composite && !binary {
			p.castTo[i] = tc.TypeName
		}
		p.identAlways[i] = tab.Columns[ti].IdentityAlways()
		p.eq[i] = " = "
		if tab.Columns[ti].TypeOID < FirstNormalOID {
			p.eq[i] = " OPERATOR(pg_catalog.=) "
		}
		if c.Key {
			p.keyCols = append(p.keyCols, i)
		}
		if p.write[i] {
			if len(p.copyCols) > 0 {
				hdr.WriteString(", ")
			}
			hdr.WriteString(p.quoted[i])
			p.copyCols = append(p.copyCols, i)
		}
	}
	p.keyCollate = keyCollations(rel, p.keyCols, tab)
	hdr.WriteString(") FROM STDIN")
	if binary {
		hdr.WriteString(" WITH (FORMAT binary)")
		p.valueKind = change.KindBinary
	}
	p.copyHeader = hdr.String()
	p.changed = "ONLY " + p.quotedTable
	if p.partitioned {
		p.changed = p.quotedTable
	}
	return p, nil
}

// stmtKey builds the statement-cache key of a change into buf: op, where
// mode, then one byte per source column (bit 1: in SET, bit 2: in WHERE).
func (p *relPlan) stmtKey(buf []byte, op change.Op, mode whereMode, newKinds, oldKinds []byte) []byte {
	buf = append(buf[:0], byte(op), byte(mode))
	for i := range p.rel.Columns {
		var b byte = '0'
		if op == change.OpUpdate && p.inSet(i, mode, newKinds) {
			b |= 1
		}
		if mode == whereFull && p.inFullWhere(i, oldKinds) {
			b |= 2
		}
		buf = append(buf, b)
	}
	return buf
}

// inSet reports whether source column i is assigned by an UPDATE: written on
// the target, not an unchanged TOAST value, and not a key column when the key
// did not change (assigning it would only defeat HOT updates).
func (p *relPlan) inSet(i int, mode whereMode, newKinds []byte) bool {
	if !p.write[i] || i >= len(newKinds) || newKinds[i] == change.KindUnchanged {
		return false
	}
	return mode != whereNewKey || !p.rel.Columns[i].Key
}

// inFullWhere reports whether old column i takes part in a FULL-identity
// match: present in the old tuple and not generated on the target.
func (p *relPlan) inFullWhere(i int, oldKinds []byte) bool {
	return p.write[i] && i < len(oldKinds) && oldKinds[i] != change.KindUnchanged
}

// buildStmt writes the SQL of an UPDATE or DELETE for the given shape.
func (p *relPlan) buildStmt(op change.Op, mode whereMode, newKinds, oldKinds []byte) *stmt {
	w := stmtWriter{p: p, s: &stmt{}}
	if op == change.OpUpdate {
		w.updateSet(mode, newKinds)
	} else {
		w.b.WriteString("DELETE FROM ")
		w.b.WriteString(p.changed)
	}
	w.b.WriteString(" WHERE ")
	switch mode {
	case whereNewKey, whereOldKey:
		w.keyWhere(mode == whereOldKey)
	case whereFull:
		w.fullWhere(oldKinds)
	}
	if p.checkLocal {
		// Evaluated on the row the key matched (the cheaper key quals
		// go first), and on its newest version after a lock wait.
		w.b.WriteString(" AND repstream.local_older(xmin, ")
		w.commitTimeParam()
		w.b.WriteString(")")
	}
	// A row that is not there is a conflict (update_missing,
	// delete_missing), and it must fail on the server: the COMMIT may be
	// queued behind the statement in the same pipeline, and a command tag
	// of 0 rows would be read only after the transaction committed.
	s := w.s
	s.inner = w.b.String()
	if p.rules {
		s.sql, s.checkTag = s.inner, true
		return s
	}
	s.sql = "WITH m AS (" + w.b.String() + " RETURNING 1) SELECT repstream.expect_row(count(*)) FROM m"
	return s
}

// stmtWriter is a statement buildStmt is writing: b its SQL so far, whose
// parameters $1..$n are s.params (and, binary, s.oids and s.formats) in
// the same order — param keeps them in step. It lives on buildStmt's stack.
type stmtWriter struct {
	p *relPlan
	s *stmt
	b strings.Builder
	n int
}

// param writes the next parameter, $n, the value of column col of the old
// row or the new.
func (w *stmtWriter) param(old bool, col int) {
	w.n++
	w.s.params = append(w.s.params, paramRef{old: old, col: col})
	if w.p.binary {
		w.s.oids = append(w.s.oids, w.p.rel.Columns[col].TypeOID)
		w.s.formats = append(w.s.formats, 1)
	}
	w.b.WriteByte('$')
	w.b.WriteString(strconv.Itoa(w.n))
}

// commitTimeParam writes the next parameter, the source transaction's
// commit time (timestamptz).
func (w *stmtWriter) commitTimeParam() {
	w.n++
	w.s.params = append(w.s.params, paramRef{commitTime: true})
	if w.p.binary {
		w.s.oids = append(w.s.oids, timestamptzOID)
		w.s.formats = append(w.s.formats, 1)
	}
	w.b.WriteByte('$')
	w.b.WriteString(strconv.Itoa(w.n))
	w.b.WriteString("::pg_catalog.timestamptz")
}

// timestamptzOID is pg_type's oid of timestamptz.
const timestamptzOID = 1184

// updateSet writes UPDATE t SET col = $n, ... for the columns inSet; with
// none, the statement is a no-op (s.noop), written all the same.
func (w *stmtWriter) updateSet(mode whereMode, newKinds []byte) {
	p := w.p
	w.b.WriteString("UPDATE ")
	w.b.WriteString(p.changed)
	w.b.WriteString(" SET ")
	first := true
	for i := range p.rel.Columns {
		if !p.inSet(i, mode, newKinds) {
			continue
		}
		if !first {
			w.b.WriteString(", ")
		}
		first = false
		w.b.WriteString(p.quoted[i])
		w.b.WriteString(" = ")
		w.param(false, i)
	}
	w.s.noop = first
}

// keyCollations returns, for the source key columns keyCols of rel, the
// COLLATE clause each one's match needs on tab, or nil if none does: the
// collations of tab's replica identity index or primary key, whichever has
// exactly those columns, where that index compares a column with another
// collation than the column's own. A key (a COLLATE "C") of a
// case-insensitive column holds 'abc' and 'ABC' as two rows, which a match
// with the column's own "=" would both change.
func keyCollations(rel *change.Relation, keyCols []int, tab *schema.Table) []string {
	for _, k := range []struct{ cols, collate []string }{{tab.IdentityKey, tab.IdentityCollate}, {tab.PrimaryKey, tab.PrimaryKeyCollate}} {
		if len(k.cols) != len(keyCols) || k.collate == nil {
			continue
		}
		out := make([]string, len(keyCols))
		found := 0
		for j, i := range keyCols {
			for n, c := range k.cols {
				if c == rel.Columns[i].Name {
					found++
					if k.collate[n] != "" {
						out[j] = " COLLATE " + k.collate[n]
					}
				}
			}
		}
		if found == len(keyCols) {
			return out
		}
	}
	return nil
}

// keyWhere writes the key match, key columns of the old row or the new.
func (w *stmtWriter) keyWhere(old bool) {
	p := w.p
	for j, i := range p.keyCols {
		if j > 0 {
			w.b.WriteString(" AND ")
		}
		w.b.WriteString(p.quoted[i])
		if p.keyCollate != nil {
			w.b.WriteString(p.keyCollate[j])
		}
		w.b.WriteString(p.eq[i])
		w.param(old, i)
		p.cast(&w.b, i)
	}
}

// fullWhere writes the FULL-identity match: the one row (its ctid, and
// tableoid when partitioned) whose columns inFullWhere match the old row's,
// the exact one first.
func (w *stmtWriter) fullWhere(oldKinds []byte) {
	p := w.p
	if p.partitioned {
		w.b.WriteString("(tableoid, ctid) = (SELECT tableoid, ctid FROM ")
	} else {
		w.b.WriteString("ctid = (SELECT ctid FROM ")
	}
	w.b.WriteString(p.changed)
	w.b.WriteString(" WHERE ")
	first := true
	for i := range p.rel.Columns {
		if !p.inFullWhere(i, oldKinds) {
			continue
		}
		if !first {
			w.b.WriteString(" AND ")
		}
		first = false
		w.fullMatch(i)
	}
	if first {
		w.b.WriteString("true")
	}
	// Rows that are equal but not the same (1.0 and 1.00, -0 and 0,
	// 'A' and 'a' under a case-insensitive collation): the one whose
	// every value has the same text as the old row's, if there is one.
	// exactOrder reuses the parameters written so far.
	if !first {
		w.b.WriteString(" ORDER BY ")
		w.b.WriteString(p.exactOrder(oldKinds, w.s))
	}
	w.b.WriteString(" LIMIT 1)")
}

// fullMatch writes the match of column i with the old row's value, NULL
// matching NULL.
func (w *stmtWriter) fullMatch(i int) {
	p := w.p
	if !p.textEq[i] && p.eq[i] != " = " {
		// IS NOT DISTINCT FROM would look "=" up on the search
		// path: pg_catalog's, named, with NULL matching NULL.
		w.b.WriteString("(")
		w.b.WriteString(p.quoted[i])
		w.b.WriteString(p.eq[i])
		w.param(true, i)
		w.b.WriteString(" OR ")
		w.b.WriteString(p.quoted[i])
		w.b.WriteString(" IS NULL AND $")
		w.b.WriteString(strconv.Itoa(w.n))
		w.b.WriteString(" IS NULL)")
		return
	}
	w.b.WriteString(p.quoted[i])
	if p.textEq[i] {
		w.b.WriteString("::text")
	}
	w.b.WriteString(" IS NOT DISTINCT FROM ")
	w.param(true, i)
	if p.textEq[i] && p.binary {
		w.b.WriteString("::text") // the parameter has the column's type
	} else if !p.textEq[i] {
		p.cast(&w.b, i)
	}
}

// exactOrder is the ORDER BY that puts first the row matching the old row
// exactly, as text, column by column; the parameters are those the WHERE of
// s already has, in the same order.
func (p *relPlan) exactOrder(oldKinds []byte, s *stmt) string {
	var b strings.Builder
	b.WriteString("(")
	first := true
	k := len(s.params)
	var n []int
	for i := range p.rel.Columns {
		if p.inFullWhere(i, oldKinds) {
			n = append(n, i)
		}
	}
	// The WHERE's parameters are the last len(n) of s.params.
	base := k - len(n)
	for j, i := range n {
		if !first {
			b.WriteString(" AND ")
		}
		first = false
		b.WriteString(p.quoted[i])
		b.WriteString("::text IS NOT DISTINCT FROM $")
		b.WriteString(strconv.Itoa(base + j + 1))
		b.WriteString("::text")
	}
	b.WriteString(") DESC")
	return b.String()
}

// cast writes column i's explicit parameter cast, if it needs one.
func (p *relPlan) cast(b *strings.Builder, i int) {
	if p.castTo[i] != "" {
		b.WriteString("::")
		b.WriteString(p.castTo[i])
	}
}

// buildInsert writes the INSERT of one row: the written columns (copyCols),
// in order, as parameters — the values of one COPY row.
func (p *relPlan) buildInsert() *stmt { return p.buildInsertRows(1) }

// buildInsertRows writes the INSERT of n rows (n ≥ 1; n = 1 without
// columns): the written columns (copyCols) of each row in turn, as
// parameters — the values of n COPY rows. Parameter k (from 1) is row
// (k-1)/len(copyCols).
func (p *relPlan) buildInsertRows(n int) *stmt {
	s := &stmt{}
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(p.quotedTable)
	if len(p.copyCols) == 0 {
		b.WriteString(" DEFAULT VALUES")
		s.sql = b.String()
		return s
	}
	b.WriteString(" (")
	for j, i := range p.copyCols {
		if j > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.quoted[i])
	}
	for range n {
		for _, i := range p.copyCols {
			s.params = append(s.params, paramRef{col: i})
			if p.binary {
				s.oids = append(s.oids, p.rel.Columns[i].TypeOID)
				s.formats = append(s.formats, 1)
			}
		}
	}
	b.WriteString(")")
	for _, i := range p.copyCols {
		if p.identAlways[i] {
			// The source's value, as native replication applies it.
			b.WriteString(" OVERRIDING SYSTEM VALUE")
			break
		}
	}
	b.WriteString(" VALUES ")
	k := 0
	for r := range n {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j := range p.copyCols {
			if j > 0 {
				b.WriteString(", ")
			}
			k++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(k))
		}
		b.WriteByte(')')
	}
	s.sql = b.String()
	return s
}

// truncateSQL returns TRUNCATE for the quoted table names and pgoutput
// options. A CASCADE on the source is not repeated, as native replication
// does not repeat it: pgoutput lists every published table the cascade
// reached, and a cascade on the target would also empty tables that exist
// only there. A target table that references one of them by a foreign key
// makes the TRUNCATE fail, which stops (or parks) the transaction.
func truncateSQL(tables []string, opts uint8) string {
	var b strings.Builder
	b.WriteString("TRUNCATE ")
	b.WriteString(strings.Join(tables, ", "))
	if opts&change.TruncateRestartIdentity != 0 {
		b.WriteString(" RESTART IDENTITY")
	}
	return b.String()
}

// textEqQuery lists the columns of a table whose type has no usable
// equality: json, xml and the geometric types (whose "=" compares areas),
// through domains and arrays, and composite types with such a field (whose
// record comparison fails on it, at the first UPDATE). FULL-identity
// matching compares those columns as text.
const textEqQuery = `
WITH RECURSIVE ty(col, oid, depth) AS (
  SELECT a.attname::text, a.atttypid, 0
  FROM pg_catalog.pg_attribute a
  WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT ty.col, n.oid, ty.depth + 1
  FROM ty JOIN pg_catalog.pg_type t ON t.oid = ty.oid
  CROSS JOIN LATERAL (
    SELECT t.typbasetype AS oid WHERE t.typtype = 'd'
    UNION ALL SELECT t.typelem WHERE t.typlen = -1 AND t.typelem <> 0
    UNION ALL SELECT ca.atttypid FROM pg_catalog.pg_attribute ca
      WHERE t.typtype = 'c' AND ca.attrelid = t.typrelid AND ca.attnum > 0 AND NOT ca.attisdropped
  ) n
  WHERE ty.depth < 8
)
SELECT DISTINCT ty.col FROM ty JOIN pg_catalog.pg_type t ON t.oid = ty.oid
WHERE t.typcategory = 'G' OR t.oid IN (114, 142)`

// ErrBinaryIncompatible is wrapped by a plan's refusal of a column whose
// binary values the target column cannot take (BinaryCompatible).
var ErrBinaryIncompatible = errors.New("values in binary")

// FirstNormalOID is PostgreSQL's FirstNormalObjectId (change.FirstNormalOID).
const FirstNormalOID = change.FirstNormalOID

// BinaryCompatible reports why a source column's binary values cannot be
// applied to a target column (nil if they can): both must have the same
// built-in type, other than an object identifier type (regclass, regtype,
// ...) or one without a binary form (aclitem): change.TextOnly. Binary formats of user-defined types (enums aside)
// embed OIDs that differ between databases, and a binary value is read by
// the target type's receive function, which must be the sender's
// counterpart. A regclass's binary value is the source's OID of the
// table: stored on the target it names another table, or none, where its
// text (the name) is read back as the target's own.
func BinaryCompatible(srcType, tgtType uint32) error {
	switch {
	case srcType >= FirstNormalOID || srcType == 0:
		return fmt.Errorf("type OID %d is not built in, binary transfer cannot carry it", srcType)
	case change.TextOnly(srcType) != "":
		return errors.New(change.TextOnly(srcType))
	case srcType != tgtType:
		return fmt.Errorf("type OID %d on the source but %d on the target, binary transfer needs the same type", srcType, tgtType)
	}
	return nil
}
