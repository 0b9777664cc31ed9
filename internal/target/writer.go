package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgerr"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/stats"
)

// Defaults of WriterOptions.
const (
	DefaultCopyFlushBytes  = 4 << 20
	DefaultBatchStatements = 1000
	// DefaultInsertRowsMax: a COPY costs a round trip, and the server parses
	// and sets it up anew each time; for a few rows, prepared INSERTs in the
	// commit's pipeline cost less (BenchmarkWriterSmallTxn).
	DefaultInsertRowsMax = 8
)

// WriterOptions configures a Writer.
type WriterOptions struct {
	Slot            string           // the progress state's slot, for Commit's applied rows
	Stats           *stats.Component // nil: counted nowhere
	Logger          *slog.Logger     // nil: slog.Default()
	CopyFlushBytes  int              // flush a table's COPY rows past this size; default 4 MiB
	BatchStatements int              // pipeline at most this many statements; default 1000
	// InsertRowsMax: at commit, a table with at most this many buffered rows
	// gets them as INSERT statements in the commit's pipeline instead of a
	// COPY; default DefaultInsertRowsMax, negative: always COPY.
	InsertRowsMax int

	// Binary: values arrive in pgoutput's binary format; inserts go through
	// binary COPY and statements get binary parameters. Every written column
	// must then have the same built-in type on both sides (checked per table).
	Binary bool
}

// Writer applies changes to the target in one target transaction at a time,
// on one connection, which it uses exclusively between Begin and
// Commit/Rollback.
//
// Inserts are buffered per table as COPY rows (text or binary format); updates and deletes are
// queued as prepared statements in a pipelined batch. Inserts into different
// tables may reach the server in another order than they were written (the
// session runs with session_replication_role = replica: no triggers, no
// foreign-key checks), but changes of one table keep their order.
//
// A small transaction costs one round trip: BEGIN is not sent on its own but
// queued ahead of the first statement (or put in the first COPY's query),
// and at commit the tables with few buffered rows (InsertRowsMax) become
// prepared INSERTs in the same pipeline as the queued statements, the
// applied record and COMMIT — a COPY per table would cost a round trip and a
// statement the server must parse each.
//
// Invariants:
//   - a table never has both buffered COPY rows and queued statements: an
//     insert into a table with queued statements is queued as an INSERT
//     statement behind them (tableBuf.inBatch), an update or delete flushes
//     the table's COPY rows first;
//   - begin says where BEGIN is: not sent yet (beginPending), queued as the
//     batch's first statement (beginQueued: items[0] is its control item), or
//     sent; nothing reaches the server inside the transaction before BEGIN;
//   - a tableBuf's rows all follow the COPY header of tableBuf.plan, and
//     lsns[i] is the LSN of row i+1 (COPY line numbers start at 1);
//   - items[i] describes the i-th statement of batch; len(items) is the
//     batch's statement count;
//   - failed is set when a statement of the current transaction failed: only
//     Rollback or RollbackToSavepoint are then allowed;
//   - copyBytes is the sum of len(rows) over dirty.
type Writer struct {
	conn *pgx.Conn
	opts WriterOptions
	log  *slog.Logger
	id   string // prefix of this writer's prepared statement names

	plans  map[*change.Relation]*relPlan
	tables map[schema.TableName]*tableBuf
	dirty  []*tableBuf // tables with buffered COPY rows

	copyBytes   int
	batch       *pgconn.Batch
	items       []batchItem
	batchTables []*tableBuf
	batchBytes  int

	nstmt  int
	inTxn  bool
	failed bool
	begin  beginState

	appliedStmt string    // name of the prepared applied-record INSERT, "" until prepared
	ctl         [3]string // names of the prepared control statements (controlSQL), "" until prepared

	// Scratch space reused for every change (no per-column allocation).
	reader             bytes.Reader
	keyBuf             []byte
	newKinds, oldKinds []byte
	newVals, oldVals   [][]byte
	params             [][]byte
	empty              []byte // non-nil empty value (nil is NULL)
	lsnText            []byte
	rowBuf             []byte // one insert's row, when it is queued as a statement
	unescaped          []byte // text COPY values with escapes, decoded
	insertVals         [][]byte
	tail               []pgconn.CommandTag

	st                                    *stats.Component
	copyRows, statements, flushes         *atomic.Int64
	updateMissing, deleteMissing, applied *atomic.Int64
}

// tableBuf is the pending work for one target table.
type tableBuf struct {
	plan    *relPlan
	rows    []byte
	lsns    []change.LSN
	dirty   bool // has buffered rows (is in Writer.dirty)
	inBatch bool // a queued statement touches the table
}

// batchItem describes one queued statement: a change's (op, lsn, plan), or
// BEGIN (op 0).
type batchItem struct {
	op   change.Op
	lsn  change.LSN
	plan *relPlan
	s    *stmt
}

// beginState says whether the transaction's BEGIN has reached the server.
type beginState byte

const (
	beginSent    beginState = iota // sent (or no transaction)
	beginPending                   // not sent, not queued
	beginQueued                    // first statement of the unsent batch
)

// NewWriter returns a Writer on conn, a connection made by Connect.
func NewWriter(conn *pgx.Conn, opts WriterOptions) *Writer {
	if opts.CopyFlushBytes <= 0 {
		opts.CopyFlushBytes = DefaultCopyFlushBytes
	}
	if opts.BatchStatements <= 0 {
		opts.BatchStatements = DefaultBatchStatements
	}
	if opts.InsertRowsMax == 0 {
		opts.InsertRowsMax = DefaultInsertRowsMax
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	st := opts.Stats
	if st == nil {
		st = stats.NewRegistry().Component("target")
	}
	return &Writer{
		conn:          conn,
		opts:          opts,
		log:           log.With("component", "target", "slot", opts.Slot),
		id:            "repstream_" + strconv.FormatUint(rand.Uint64(), 36),
		plans:         make(map[*change.Relation]*relPlan),
		tables:        make(map[schema.TableName]*tableBuf),
		batch:         &pgconn.Batch{},
		empty:         make([]byte, 0),
		st:            st,
		copyRows:      st.Counter("copy_rows"),
		statements:    st.Counter("statements"),
		flushes:       st.Counter("flushes"),
		updateMissing: st.Counter("update_missing"),
		deleteMissing: st.Counter("delete_missing"),
		applied:       st.Counter("applied_txns"),
	}
}

// Begin starts a target transaction.
func (w *Writer) Begin(ctx context.Context) error {
	if w.inTxn {
		return errors.New("begin target transaction: already in a transaction")
	}
	w.discard()
	// Once per session: every transaction runs these, and a prepared
	// statement spares the server parsing and planning them each time.
	for i, sql := range controlSQL {
		if w.ctl[i] != "" {
			continue
		}
		name := w.id + "_ctl" + strconv.Itoa(i)
		if _, err := w.conn.PgConn().Prepare(ctx, name, sql, nil); err != nil {
			return fmt.Errorf("begin target transaction: prepare %q: %w", sql, err)
		}
		w.ctl[i] = name
	}
	w.inTxn, w.failed, w.begin = true, false, beginPending
	return nil
}

// controlSQL are the statements of every transaction, prepared once.
var controlSQL = [3]string{ctlBegin: "BEGIN", ctlCommit: "COMMIT", ctlWALPos: "SELECT pg_current_wal_insert_lsn()::text"}

const (
	ctlBegin = iota
	ctlCommit
	ctlWALPos
)

// Write applies one change (buffered: errors may surface at a later Write or
// at Commit, naming the change that failed). c may be reused by the caller
// once Write returns. After an error the transaction is failed: call Rollback
// (or RollbackToSavepoint).
func (w *Writer) Write(ctx context.Context, c *change.Change) error {
	if !w.inTxn {
		return fmt.Errorf("apply %s at %s: no target transaction (Begin first)", c.Op, c.LSN)
	}
	if w.failed {
		return fmt.Errorf("apply %s at %s: target transaction failed earlier, roll back first", c.Op, c.LSN)
	}
	var err error
	switch c.Op {
	case change.OpInsert:
		err = w.insert(ctx, c)
	case change.OpUpdate, change.OpDelete:
		err = w.modify(ctx, c)
	case change.OpTruncate:
		err = w.truncate(ctx, c)
	default:
		err = fmt.Errorf("apply %s at %s: unknown operation", c.Op, c.LSN)
	}
	if err != nil {
		w.failed = true
		return err
	}
	w.st.Add(1, int64(c.Size()))
	return nil
}

// Commit flushes everything, records the applied source transactions in
// repstream.applied (one row for the run: applied must be the end LSNs of
// consecutive source transactions in commit order; same transaction) and
// commits.
// If Commit fails, the transaction is rolled back (neither data nor LSNs
// stay); after a connection error the outcome is unknown and the caller must
// reload the Progress.
func (w *Writer) Commit(ctx context.Context, applied []change.LSN) error {
	_, err := w.CommitLSN(ctx, applied)
	return err
}

// CommitLSN is Commit that also returns a WAL position of the target at or
// after the commit record: with synchronous_commit=off, the transaction is
// durable once pg_current_wal_flush_lsn() reaches it. The applied record,
// the COMMIT and the position travel in one round trip.
func (w *Writer) CommitLSN(ctx context.Context, applied []change.LSN) (change.LSN, error) {
	if !w.inTxn {
		return 0, errors.New("commit target transaction: no transaction")
	}
	lsn, err := w.commit(ctx, applied)
	if err != nil {
		if w.inTxn {
			_ = w.Rollback(ctx) // best effort; the error that matters is err
		}
		return 0, err
	}
	return lsn, nil
}

func (w *Writer) commit(ctx context.Context, applied []change.LSN) (change.LSN, error) {
	if w.failed {
		return 0, errors.New("commit target transaction: a change failed earlier")
	}
	if err := w.queueSmallCopies(ctx); err != nil {
		w.failed = true
		return 0, err
	}
	w.queueBegin()
	if len(applied) > 0 {
		if w.appliedStmt == "" {
			name := w.id + "_applied"
			if _, err := w.conn.PgConn().Prepare(ctx, name, appliedInsert, nil); err != nil {
				w.failed = true
				return 0, fmt.Errorf("commit target transaction: prepare %q: %w", appliedInsert, err)
			}
			w.appliedStmt = name
		}
		// One row for the run: applied lists consecutive source transactions.
		first, last := applied[0], applied[0]
		for _, l := range applied[1:] {
			first, last = min(first, l), max(last, l)
		}
		lt := appendLSN(w.lsnText[:0], last)
		ft := appendLSN(lt[len(lt):], first)
		w.lsnText = ft
		w.batch.ExecPrepared(w.appliedStmt, [][]byte{[]byte(w.opts.Slot), lt, ft}, nil, nil)
	}
	w.batch.ExecPrepared(w.ctl[ctlCommit], nil, nil, nil)
	w.batch.ExecPrepared(w.ctl[ctlWALPos], nil, nil, nil)
	n := len(w.items)
	stmts := w.changeItems()
	done, tail, pos, err := w.sendBatch(ctx)
	if err != nil {
		// A statement before COMMIT failed (the server then skips COMMIT and
		// the transaction stays open, aborted) or COMMIT failed: the caller
		// rolls back, which is harmless if nothing is open any more.
		switch {
		case done < n:
			err = w.itemError(done, err)
		case len(applied) > 0 && done == n:
			err = fmt.Errorf("commit target transaction: record %d applied transactions (%s..%s) of slot %q: %w",
				len(applied), applied[0], applied[len(applied)-1], w.opts.Slot, err)
		default:
			err = fmt.Errorf("commit target transaction: %w", err)
		}
		w.resetBatch()
		return 0, err
	}
	w.resetBatch()
	w.inTxn = false
	if len(tail) < 2 || tail[len(tail)-2].String() == "ROLLBACK" {
		return 0, errors.New("commit target transaction: the server rolled it back")
	}
	var lsn change.LSN
	if pos != nil {
		if lsn, err = change.ParseLSN(string(pos)); err != nil {
			return 0, fmt.Errorf("commit target transaction: read the WAL position: %w", err)
		}
	}
	w.statements.Add(int64(stmts))
	w.flushes.Add(1)
	w.applied.Add(int64(len(applied)))
	w.st.AddTxns(int64(len(applied)))
	return lsn, nil
}

// appliedInsert records applied source transactions (Commit).
const appliedInsert = "INSERT INTO repstream.applied (slot, end_lsn, first_lsn) VALUES ($1, $2::pg_lsn, $3::pg_lsn)"

// queueSmallCopies sends the buffered rows of tables with more than
// InsertRowsMax rows by COPY and queues the others as INSERT statements.
func (w *Writer) queueSmallCopies(ctx context.Context) error {
	for len(w.dirty) > 0 {
		tb := w.dirty[0]
		w.dirty = w.dirty[1:]
		if len(tb.lsns) > w.opts.InsertRowsMax {
			if err := w.copyOut(ctx, tb); err != nil {
				return err
			}
			continue
		}
		// tb is emptied first, so that an error leaves no rows behind for
		// the next transaction; nothing appends to it while rows is read.
		rows, lsns := tb.rows, tb.lsns
		w.copyBytes -= len(rows)
		tb.rows, tb.lsns, tb.dirty = tb.rows[:0], tb.lsns[:0], false
		for _, lsn := range lsns {
			var err error
			if rows, err = w.queueInsertRow(ctx, tb.plan, rows, lsn); err != nil {
				return err
			}
		}
	}
	w.dirty = w.dirty[:0]
	return nil
}

// Rollback discards buffered changes and rolls the target transaction back.
// It is a no-op outside a transaction.
func (w *Writer) Rollback(ctx context.Context) error {
	w.discard()
	if !w.inTxn {
		return nil
	}
	sent := w.begin == beginSent
	w.inTxn, w.failed, w.begin = false, false, beginSent
	if !sent {
		return nil // the server never saw the transaction
	}
	if err := w.exec(ctx, "ROLLBACK"); err != nil {
		return fmt.Errorf("roll back target transaction: %w", err)
	}
	return nil
}

// Savepoint flushes buffered changes and sets a savepoint.
func (w *Writer) Savepoint(ctx context.Context, name string) error {
	if err := w.usable("savepoint " + name); err != nil {
		return err
	}
	if err := w.flushAll(ctx); err != nil {
		w.failed = true
		return err
	}
	if err := w.txExec(ctx, "SAVEPOINT "+change.QuoteIdent(name)); err != nil {
		w.failed = true
		return fmt.Errorf("savepoint %s: %w", name, err)
	}
	return nil
}

// RollbackToSavepoint discards the changes written since the savepoint
// (buffered or not) and makes a failed transaction usable again.
func (w *Writer) RollbackToSavepoint(ctx context.Context, name string) error {
	if !w.inTxn {
		return fmt.Errorf("roll back to savepoint %s: no transaction", name)
	}
	w.discard()
	if err := w.exec(ctx, "ROLLBACK TO SAVEPOINT "+change.QuoteIdent(name)); err != nil {
		w.failed = true
		return fmt.Errorf("roll back to savepoint %s: %w", name, err)
	}
	w.failed = false
	return nil
}

// ReleaseSavepoint flushes buffered changes and releases the savepoint.
func (w *Writer) ReleaseSavepoint(ctx context.Context, name string) error {
	if err := w.usable("release savepoint " + name); err != nil {
		return err
	}
	if err := w.flushAll(ctx); err != nil {
		w.failed = true
		return err
	}
	if err := w.txExec(ctx, "RELEASE SAVEPOINT "+change.QuoteIdent(name)); err != nil {
		w.failed = true
		return fmt.Errorf("release savepoint %s: %w", name, err)
	}
	return nil
}

// Flush sends every buffered change to the server without committing.
func (w *Writer) Flush(ctx context.Context) error {
	if err := w.usable("flush"); err != nil {
		return err
	}
	if err := w.flushAll(ctx); err != nil {
		w.failed = true
		return err
	}
	return nil
}

// ForgetRelations drops the cached plans (target table descriptions) of
// every relation, e.g. after the target's schema changed. Prepared
// statements stay on the server.
func (w *Writer) ForgetRelations() {
	clear(w.plans)
}

func (w *Writer) usable(what string) error {
	if !w.inTxn {
		return fmt.Errorf("%s: no target transaction", what)
	}
	if w.failed {
		return fmt.Errorf("%s: target transaction failed earlier, roll back first", what)
	}
	return nil
}

func (w *Writer) exec(ctx context.Context, sql string) error {
	_, err := w.conn.PgConn().Exec(ctx, sql).ReadAll()
	return err
}

// txExec runs sql inside the transaction (after BEGIN).
func (w *Writer) txExec(ctx context.Context, sql string) error {
	if err := w.ensureBegun(ctx); err != nil {
		return err
	}
	return w.exec(ctx, sql)
}

// queueBegin queues BEGIN as the batch's first statement if it has not
// reached the server; call it before queueing any statement.
func (w *Writer) queueBegin() {
	if w.begin != beginPending {
		return
	}
	w.batch.ExecPrepared(w.ctl[ctlBegin], nil, nil, nil)
	w.items = append(w.items, batchItem{})
	w.begin = beginQueued
}

// ensureBegun makes sure BEGIN has reached the server: before a COPY or a
// statement outside the batch.
func (w *Writer) ensureBegun(ctx context.Context) error {
	switch w.begin {
	case beginQueued:
		return w.flushBatch(ctx)
	case beginPending:
		if err := w.exec(ctx, "BEGIN"); err != nil {
			return fmt.Errorf("begin target transaction: %w", err)
		}
		w.begin = beginSent
	}
	return nil
}

// discard drops every buffered change.
func (w *Writer) discard() {
	if w.begin == beginQueued {
		w.begin = beginPending // the batch holding BEGIN is dropped unsent
	}
	for _, tb := range w.dirty {
		tb.rows, tb.lsns, tb.dirty = tb.rows[:0], tb.lsns[:0], false
	}
	w.dirty = w.dirty[:0]
	w.copyBytes = 0
	if len(w.items) > 0 {
		w.batch = &pgconn.Batch{} // drop the unsent statements
	}
	w.resetBatch()
}

func (w *Writer) resetBatch() {
	for _, tb := range w.batchTables {
		tb.inBatch = false
	}
	w.items, w.batchTables, w.batchBytes = w.items[:0], w.batchTables[:0], 0
}

// plan returns the cached plan of rel, loading the target table on first use.
func (w *Writer) plan(ctx context.Context, rel *change.Relation) (*relPlan, error) {
	if p := w.plans[rel]; p != nil {
		return p, nil
	}
	tab, err := schema.LoadTable(ctx, w.conn, rel.Namespace, rel.Name)
	if err != nil {
		return nil, fmt.Errorf("%w on target", err)
	}
	var textEq map[string]bool
	if !rel.HasKey() {
		textEq, err = w.textEqColumns(ctx, tab)
		if err != nil {
			return nil, err
		}
	}
	p, err := newPlan(rel, tab, textEq, w.opts.Binary)
	if err != nil {
		return nil, err
	}
	w.plans[rel] = p
	return p, nil
}

// collapsibleQuery reads, for one target table (oid $1), what makes folding
// repeated changes to one key unsafe: how many unique and exclusion indexes
// it has, how many of them are a plain unique index on exactly the key
// columns $2 (sorted), and how many triggers and rules fire even under
// session_replication_role = replica (ENABLE ALWAYS).
const collapsibleQuery = `
SELECT
  count(*) FILTER (WHERE i.indisunique OR i.indisexclusion),
  count(*) FILTER (WHERE i.indisunique AND NOT i.indisexclusion AND i.indexprs IS NULL AND i.indpred IS NULL
                     AND (SELECT array_agg(a.attname::text ORDER BY a.attname)
                            FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                            JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                           WHERE k.ord <= i.indnkeyatts) = $2::text[]),
  (SELECT count(*) FROM pg_catalog.pg_trigger t WHERE t.tgrelid = $1 AND t.tgenabled = 'A'),
  (SELECT count(*) FROM pg_catalog.pg_rewrite r WHERE r.ev_class = $1 AND r.ev_enabled = 'A' AND r.rulename <> '_RETURN')
FROM pg_catalog.pg_index i
WHERE i.indrelid = $1`

// Collapsible reports whether repeated changes to one key of rel may be
// folded into one within a target transaction (see internal/apply's
// collapse.go): the target table is not partitioned, its only unique index
// is on exactly the source's replica-identity key columns (no exclusion
// constraint, no partial or expression unique index), and no trigger or rule
// fires in replica mode (ENABLE ALWAYS). The answer is cached with the
// relation's plan.
func (w *Writer) Collapsible(ctx context.Context, rel *change.Relation) (bool, error) {
	p, err := w.plan(ctx, rel)
	if err != nil {
		return false, fmt.Errorf("apply to %s: %w", rel.String(), err)
	}
	if p.collapsible != 0 {
		return p.collapsible > 0, nil
	}
	ok, err := w.collapsible(ctx, p)
	if err != nil {
		return false, fmt.Errorf("read the unique indexes and triggers of %s on target: %w", p.name, err)
	}
	p.collapsible = -1
	if ok {
		p.collapsible = 1
	}
	return ok, nil
}

func (w *Writer) collapsible(ctx context.Context, p *relPlan) (bool, error) {
	if p.partitioned || !p.rel.HasKey() {
		return false, nil
	}
	var key []string
	for _, i := range p.keyCols {
		key = append(key, p.rel.Columns[i].Name)
	}
	slices.Sort(key)
	var uniques, onKey, triggers, rules int64
	if err := w.conn.QueryRow(ctx, collapsibleQuery, p.tableOID, key).Scan(&uniques, &onKey, &triggers, &rules); err != nil {
		return false, err
	}
	return uniques == 1 && onKey == 1 && triggers == 0 && rules == 0, nil
}

func (w *Writer) textEqColumns(ctx context.Context, tab *schema.Table) (map[string]bool, error) {
	rows, err := w.conn.Query(ctx, textEqQuery, tab.OID)
	if err != nil {
		return nil, fmt.Errorf("load column types of %s on target: %w", tab.TableName(), err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("load column types of %s on target: %w", tab.TableName(), err)
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m, nil
}

func (w *Writer) table(p *relPlan) *tableBuf {
	tb := w.tables[p.name]
	if tb == nil {
		tb = &tableBuf{plan: p}
		w.tables[p.name] = tb
	}
	return tb
}

func (w *Writer) insert(ctx context.Context, c *change.Change) error {
	p, err := w.plan(ctx, c.Rel)
	if err != nil {
		return fmt.Errorf("apply insert to %s at %s: %w", c.Rel, c.LSN, err)
	}
	tb := w.table(p)
	if tb.inBatch {
		// Behind the table's queued statements, as a statement too.
		if w.rowBuf, err = appendRow(w.rowBuf[:0], c, p); err != nil {
			return err
		}
		if _, err := w.queueInsertRow(ctx, p, w.rowBuf, c.LSN); err != nil {
			return err
		}
		return w.batchFull(ctx)
	}
	if tb.dirty && tb.plan != p {
		if err := w.flushCopy(ctx, tb); err != nil {
			return err
		}
	}
	tb.plan = p
	before := len(tb.rows)
	rows, err := appendRow(tb.rows, c, p)
	if err != nil {
		tb.rows = rows[:before]
		return err
	}
	tb.rows = rows
	tb.lsns = append(tb.lsns, c.LSN)
	if !tb.dirty {
		tb.dirty = true
		w.dirty = append(w.dirty, tb)
	}
	w.copyBytes += len(rows) - before
	switch {
	case len(tb.rows) >= w.opts.CopyFlushBytes:
		return w.flushCopy(ctx, tb)
	case w.copyBytes >= 4*w.opts.CopyFlushBytes:
		return w.flushCopies(ctx)
	}
	return nil
}

// appendRow appends insert c's row in p's COPY format (text or binary) to
// dst; a value that format cannot carry is an error naming the column (dst
// then holds a partial row).
func appendRow(dst []byte, c *change.Change, p *relPlan) ([]byte, error) {
	var bad byteCol
	if p.binary {
		dst, bad = appendCopyRowBinary(dst, c.New, p.copyCols)
	} else {
		dst, bad = appendCopyRow(dst, c.New, p.copyCols)
	}
	if bad.kind != 0 {
		return dst, fmt.Errorf("apply insert to %s at %s: column %q: %s", c.Rel, c.LSN, c.Rel.Columns[bad.col].Name, kindProblem(bad.kind))
	}
	return dst, nil
}

func kindProblem(kind byte) string {
	switch kind {
	case change.KindUnchanged:
		return "unchanged TOAST value where a full value is needed"
	case change.KindBinary:
		return "binary value in a text-format stream"
	case change.KindText:
		return "text value in a binary-format stream (a type without a binary send function?): run with --binary=false"
	case 'm':
		return "missing from the tuple"
	}
	return fmt.Sprintf("unexpected value kind %q", kind)
}

// flushCopy sends a table's buffered rows with one COPY.
func (w *Writer) flushCopy(ctx context.Context, tb *tableBuf) error {
	if !tb.dirty {
		return nil
	}
	for i, d := range w.dirty {
		if d == tb {
			w.dirty = append(w.dirty[:i], w.dirty[i+1:]...)
			break
		}
	}
	return w.copyOut(ctx, tb)
}

// flushCopies sends every table's buffered rows.
func (w *Writer) flushCopies(ctx context.Context) error {
	for len(w.dirty) > 0 {
		tb := w.dirty[0]
		w.dirty = w.dirty[1:]
		if err := w.copyOut(ctx, tb); err != nil {
			return err
		}
	}
	w.dirty = w.dirty[:0]
	return nil
}

// copyOut runs the COPY of tb's rows and empties tb (tb is already removed
// from w.dirty).
func (w *Writer) copyOut(ctx context.Context, tb *tableBuf) error {
	sql := tb.plan.copyHeader
	if w.begin == beginPending {
		// BEGIN travels in the COPY's query string: one round trip.
		sql = "BEGIN; " + sql
		w.begin = beginSent
	} else if err := w.ensureBegun(ctx); err != nil {
		w.copyBytes -= len(tb.rows)
		tb.rows, tb.lsns, tb.dirty = tb.rows[:0], tb.lsns[:0], false
		return err
	}
	n := len(tb.lsns)
	w.reader.Reset(tb.rows)
	var data io.Reader = &w.reader
	if tb.plan.binary {
		data = io.MultiReader(bytes.NewReader(binaryCopyHeader), &w.reader, bytes.NewReader(binaryCopyTrailer))
	}
	_, err := w.conn.PgConn().CopyFrom(ctx, data, sql)
	w.copyBytes -= len(tb.rows)
	lsns := tb.lsns
	tb.rows, tb.lsns, tb.dirty = tb.rows[:0], tb.lsns[:0], false
	if cap(tb.rows) > 2*w.opts.CopyFlushBytes {
		tb.rows = nil // a huge row: do not keep its buffer
	}
	if err != nil {
		lsn := lsns[0]
		if line := copyErrorLine(err); line >= 1 && line <= n {
			lsn = lsns[line-1]
		}
		return fmt.Errorf("apply insert to %s at %s%s: %w", tb.plan.rel, lsn, columnSuffix(err), err)
	}
	w.copyRows.Add(int64(n))
	w.flushes.Add(1)
	return nil
}

// CopyErrorColumn returns the column a COPY error's context names
// ("COPY t, line N, column c: value"), or "".
func CopyErrorColumn(err error) string {
	cc, _ := pgerr.CopyWhere(err)
	return cc.Column
}

func columnSuffix(err error) string {
	if c := CopyErrorColumn(err); c != "" {
		return ", column " + c
	}
	return ""
}

// Retryable reports whether a group that failed with err can succeed when
// applied again after every earlier group has committed: always for a
// deadlock or serialization failure; for a unique or exclusion violation
// only on the first failure (concurrent, firstTry), when an earlier group
// that frees the value may not have committed yet — once they all have, the
// violation is real.
func Retryable(err error, firstTry bool) bool {
	return pgerr.TxnConflict(err) || firstTry && pgerr.UniqueConflict(err)
}

// copyErrorLine extracts N from a COPY error's context line
// "COPY t, line N[, column c][: value]", or returns 0.
func copyErrorLine(err error) int {
	cc, _ := pgerr.CopyWhere(err)
	return cc.Line
}

// splitTuple fills kinds and vals from t (vals[i] nil for NULL and 'u', never
// nil for text).
func (w *Writer) splitTuple(t change.Tuple, kinds []byte, vals [][]byte) ([]byte, [][]byte) {
	kinds, vals = kinds[:0], vals[:0]
	it := t.Iter()
	for it.Next() {
		kinds = append(kinds, it.Kind())
		v := it.Value()
		if (it.Kind() == change.KindText || it.Kind() == change.KindBinary) && v == nil {
			v = w.empty
		}
		vals = append(vals, v)
	}
	return kinds, vals
}

// modify queues an UPDATE or DELETE.
func (w *Writer) modify(ctx context.Context, c *change.Change) error {
	p, err := w.plan(ctx, c.Rel)
	if err != nil {
		return fmt.Errorf("apply %s to %s at %s: %w", c.Op, c.Rel, c.LSN, err)
	}
	tb := w.table(p)
	if tb.dirty {
		if err := w.flushCopy(ctx, tb); err != nil {
			return err
		}
	}
	ncols := len(c.Rel.Columns)
	w.newKinds, w.newVals = w.splitTuple(c.New, w.newKinds, w.newVals)
	w.oldKinds, w.oldVals = w.splitTuple(c.Old, w.oldKinds, w.oldVals)
	var mode whereMode
	switch c.OldKind {
	case 'K':
		mode = whereOldKey
	case 'O':
		mode = whereFull
	case 0:
		mode = whereNewKey
	default:
		return fmt.Errorf("apply %s to %s at %s: unknown old tuple kind %q", c.Op, c.Rel, c.LSN, c.OldKind)
	}
	if err := w.checkShape(c, p, mode, ncols); err != nil {
		return fmt.Errorf("apply %s to %s at %s: %w", c.Op, c.Rel, c.LSN, err)
	}

	w.keyBuf = p.stmtKey(w.keyBuf, c.Op, mode, w.newKinds, w.oldKinds)
	s := p.stmts[string(w.keyBuf)]
	if s == nil {
		s = p.buildStmt(c.Op, mode, w.newKinds, w.oldKinds)
		p.stmts[string(w.keyBuf)] = s
	}
	if s.noop {
		return nil
	}
	if err := w.prepare(ctx, s); err != nil {
		return fmt.Errorf("apply %s to %s at %s: %w", c.Op, c.Rel, c.LSN, err)
	}
	params := w.params[:0]
	size := 0
	for _, r := range s.params {
		var v []byte
		if r.old {
			v = w.oldVals[r.col]
		} else {
			v = w.newVals[r.col]
		}
		params = append(params, v)
		size += len(v)
	}
	w.params = params
	w.queue(s, params, size, batchItem{op: c.Op, lsn: c.LSN, plan: p, s: s}, tb)
	return w.batchFull(ctx)
}

// prepare prepares s on the server once.
func (w *Writer) prepare(ctx context.Context, s *stmt) error {
	if s.name != "" {
		return nil
	}
	name := w.id + "_" + strconv.Itoa(w.nstmt)
	if _, err := w.conn.PgConn().Prepare(ctx, name, s.sql, s.oids); err != nil {
		return fmt.Errorf("prepare %q: %w", s.sql, err)
	}
	w.nstmt++
	s.name = name
	return nil
}

// queue appends prepared statement s with params (size bytes) to the batch,
// behind BEGIN if that has not reached the server.
func (w *Writer) queue(s *stmt, params [][]byte, size int, it batchItem, tb *tableBuf) {
	w.queueBegin()
	w.batch.ExecPrepared(s.name, params, s.formats, nil)
	w.items = append(w.items, it)
	if !tb.inBatch {
		tb.inBatch = true
		w.batchTables = append(w.batchTables, tb)
	}
	w.batchBytes += size + 16
}

// batchFull sends the batch once it holds enough statements or bytes.
func (w *Writer) batchFull(ctx context.Context) error {
	if len(w.items) >= w.opts.BatchStatements || w.batchBytes >= w.opts.CopyFlushBytes {
		return w.flushBatch(ctx)
	}
	return nil
}

// queueInsertRow queues the first row of rows (COPY format of p) as an
// INSERT and returns the rest.
func (w *Writer) queueInsertRow(ctx context.Context, p *relPlan, rows []byte, lsn change.LSN) ([]byte, error) {
	s := p.insert
	if s == nil {
		s = p.buildInsert()
		p.insert = s
	}
	if err := w.prepare(ctx, s); err != nil {
		return nil, fmt.Errorf("apply insert to %s at %s: %w", p.rel, lsn, err)
	}
	var err error
	before := len(rows)
	if p.binary {
		w.insertVals, rows, err = splitCopyRowBinary(rows, w.insertVals[:0])
	} else {
		w.insertVals, rows, w.unescaped, err = splitCopyRow(rows, w.insertVals[:0], w.unescaped[:0])
	}
	if err != nil {
		return nil, fmt.Errorf("apply insert to %s at %s: %w", p.rel, lsn, err)
	}
	w.queue(s, w.insertVals, before-len(rows), batchItem{op: change.OpInsert, lsn: lsn, plan: p, s: s}, w.table(p))
	return rows, nil
}

// checkShape verifies the tuples carry what the statement needs.
func (w *Writer) checkShape(c *change.Change, p *relPlan, mode whereMode, ncols int) error {
	if c.Op == change.OpUpdate && len(w.newKinds) != ncols {
		return fmt.Errorf("new tuple has %d columns, relation has %d", len(w.newKinds), ncols)
	}
	if mode != whereNewKey && len(w.oldKinds) != ncols {
		return fmt.Errorf("old tuple has %d columns, relation has %d", len(w.oldKinds), ncols)
	}
	switch mode {
	case whereNewKey:
		if c.Op == change.OpDelete {
			return errors.New("delete without old tuple")
		}
		if len(p.keyCols) == 0 {
			return errors.New("no replica identity key and no old tuple to find the row")
		}
		for _, k := range p.keyCols {
			if w.newKinds[k] != p.valueKind {
				return fmt.Errorf("key column %q: %s", c.Rel.Columns[k].Name, keyProblem(w.newKinds[k]))
			}
		}
	case whereFull:
		n := 0
		for i := range w.oldKinds {
			if p.inFullWhere(i, w.oldKinds) {
				n++
			}
		}
		if n == 0 {
			return errors.New("old tuple has no column to match the row by (all unchanged TOAST or generated on the target)")
		}
	case whereOldKey:
		if len(p.keyCols) == 0 {
			return errors.New("old key tuple but the relation has no key columns")
		}
		for _, k := range p.keyCols {
			if w.oldKinds[k] != p.valueKind {
				return fmt.Errorf("key column %q: %s", c.Rel.Columns[k].Name, keyProblem(w.oldKinds[k]))
			}
		}
	}
	for _, kinds := range [2][]byte{w.newKinds, w.oldKinds} {
		for i, k := range kinds {
			if (k == change.KindBinary || k == change.KindText) && k != p.valueKind {
				return fmt.Errorf("column %q: %s", c.Rel.Columns[i].Name, kindProblem(k))
			}
		}
	}
	return nil
}

func keyProblem(kind byte) string {
	if kind == change.KindNull {
		return "NULL key value"
	}
	return kindProblem(kind)
}

// flushBatch sends the queued statements in one pipeline and checks each
// result: an error names the failing statement's change; zero rows affected
// by an update or delete is counted and logged as a missing row.
func (w *Writer) flushBatch(ctx context.Context) error {
	n := len(w.items)
	if n == 0 {
		return nil
	}
	stmts := w.changeItems()
	done, _, _, err := w.sendBatch(ctx)
	if err != nil {
		err = w.itemError(min(done, n-1), err)
	}
	w.resetBatch()
	if err != nil {
		return err
	}
	w.statements.Add(int64(stmts))
	w.flushes.Add(1)
	return nil
}

// sendBatch sends the batch in one pipeline and reads every result. The
// first len(items) results are the queued statements'; the command tags of
// those after them are returned in tail, and val is the first value of the
// last row any statement returned. done counts the statements that
// completed before err. The caller resets the batch.
func (w *Writer) sendBatch(ctx context.Context) (done int, tail []pgconn.CommandTag, val []byte, err error) {
	if w.begin == beginQueued {
		w.begin = beginSent
	}
	tail = w.tail[:0]
	mrr := w.conn.PgConn().ExecBatch(ctx, w.batch)
	w.batch = &pgconn.Batch{} // the sent one may hold more than the items
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		for rr.NextRow() {
			if v := rr.Values(); len(v) > 0 {
				val = append(val[:0], v[0]...)
			}
		}
		tag, err := rr.Close()
		if err != nil {
			break
		}
		if done < len(w.items) {
			it := w.items[done]
			if (it.op == change.OpUpdate || it.op == change.OpDelete) && tag.RowsAffected() == 0 {
				w.missing(it)
			}
		} else {
			tail = append(tail, tag)
		}
		done++
	}
	w.tail = tail
	return done, tail, val, mrr.Close()
}

// itemError names the queued statement i in err.
func (w *Writer) itemError(i int, err error) error {
	it := w.items[i]
	if it.op == 0 {
		return fmt.Errorf("begin target transaction: %w", err)
	}
	col := ""
	if r, ok := paramOf(err, it.s); ok {
		col = ", column " + it.plan.rel.Columns[r.col].Name
	}
	return fmt.Errorf("apply %s to %s at %s%s: %w", it.op, it.plan.rel, it.lsn, col, err)
}

// paramOf returns the parameter of s that err's context names: the server
// says which parameter it could not read ("unnamed portal parameter $2 =
// ..."), as COPY says which column.
func paramOf(err error, s *stmt) (paramRef, bool) {
	n := pgerr.Param(err)
	if s == nil || n < 1 || n > len(s.params) {
		return paramRef{}, false
	}
	return s.params[n-1], true
}

// changeItems counts the queued statements that apply changes (BEGIN aside).
func (w *Writer) changeItems() int {
	if len(w.items) > 0 && w.items[0].op == 0 {
		return len(w.items) - 1
	}
	return len(w.items)
}

func (w *Writer) missing(it batchItem) {
	if it.op == change.OpUpdate {
		w.updateMissing.Add(1)
		w.log.Warn("row to update not found on target", "table", it.plan.rel.String(), "lsn", it.lsn.String())
	} else {
		w.deleteMissing.Add(1)
		w.log.Warn("row to delete not found on target", "table", it.plan.rel.String(), "lsn", it.lsn.String())
	}
}

func (w *Writer) flushAll(ctx context.Context) error {
	if err := w.flushCopies(ctx); err != nil {
		return err
	}
	return w.flushBatch(ctx)
}

// truncate flushes everything and truncates every listed table in one statement.
func (w *Writer) truncate(ctx context.Context, c *change.Change) error {
	if err := w.flushAll(ctx); err != nil {
		return err
	}
	names := make([]string, 0, len(c.TruncateRels))
	desc := ""
	for i, rel := range c.TruncateRels {
		if i > 0 {
			desc += ", "
		}
		desc += rel.String()
	}
	for _, rel := range c.TruncateRels {
		p, err := w.plan(ctx, rel)
		if err != nil {
			return fmt.Errorf("apply truncate to %s at %s: %w", desc, c.LSN, err)
		}
		names = append(names, p.quotedTable)
	}
	if len(names) == 0 {
		return nil
	}
	if err := w.txExec(ctx, truncateSQL(names, c.TruncateOpts)); err != nil {
		return fmt.Errorf("apply truncate to %s at %s: %w", desc, c.LSN, err)
	}
	w.statements.Add(1)
	w.flushes.Add(1)
	return nil
}

// appendLSN appends l in PostgreSQL's X/Y form without allocating.
func appendLSN(b []byte, l change.LSN) []byte {
	b = strconv.AppendUint(b, uint64(l>>32), 16)
	b = append(b, '/')
	return strconv.AppendUint(b, uint64(uint32(l)), 16)
}
