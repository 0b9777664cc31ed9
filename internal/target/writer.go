package target

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
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
	// firstCopyChunk is a new Writer's largest COPY before it has measured
	// the target (adaptChunk): small, for a target that takes seconds over
	// a few rows; full COPYs that go fast double it.
	firstCopyChunk = 16 << 10
)

// WriterOptions configures a Writer.
type WriterOptions struct {
	Slot   string           // the progress state's slot, for Commit's applied rows
	Stats  *stats.Component // nil: counted nowhere
	Logger *slog.Logger     // nil: discard
	// Origins marks the session's writes with a replication origin
	// (OpenSession; nil: best effort, silent).
	Origins *Origins
	// OwnerChecks, shared by a run's writers, makes each table's owner
	// check once in the run (owners.go); nil: once per writer.
	OwnerChecks     *OwnerChecks
	CopyFlushBytes  int // flush a table's COPY rows past this size; default 4 MiB
	BatchStatements int // pipeline at most this many statements; default 1000
	// InsertRowsMax: at commit, a table with at most this many buffered rows
	// gets them as INSERT statements in the commit's pipeline instead of a
	// COPY; default DefaultInsertRowsMax, negative: always COPY.
	InsertRowsMax int

	// Binary: values arrive in pgoutput's binary format; inserts go through
	// binary COPY and statements get binary parameters. Every written column
	// must then have the same built-in type on both sides (checked per table).
	// A relation whose change.Relation.Binary is set is applied so too.
	Binary bool
	// BinaryAdvice is the way out the error of a column that cannot take
	// binary values gives (default: restart, which chooses text).
	BinaryAdvice string

	// RelationDDL: no event trigger reports schema changes (--ddl=relation);
	// a relation version that differs from its previous one changes the
	// target table the same way before its first change is applied
	// (ddl.go). CreateTables: it also creates a table the target lacks from
	// its first description.
	RelationDDL  bool
	CreateTables bool
	// SchemaChangesStop (--ddl=false): a relation version that differs
	// from its previous one in the stream stops the run, naming the table
	// and what changed; nothing follows it.
	SchemaChangesStop bool
	// AddedColumn (with RelationDDL) tells what the source's catalog says
	// about a column a Relation message adds, so that the target's existing
	// rows get what the source's got (schema.RelationAddSQL); the engine
	// asks the source. nil: an added column stops the run.
	AddedColumn func(ctx context.Context, table schema.TableName, column string) (schema.AddedValue, error)
	// SourceTypes describes, from the source's catalog, the user-defined
	// types that columns of these source type oids need, dependencies
	// first (schema.TypesFor): a schema-change message's column of a type
	// the target lacks gets it made first (ensureTypes). nil: such a
	// change stops the run.
	SourceTypes func(ctx context.Context, oids []uint32) ([]*schema.UserType, error)
	// SourceTypeNames names types by the source's oids and type modifiers
	// as the source's format_type does, schema-qualified: a Relation
	// message's user-defined types (--ddl=relation), which the target
	// cannot name. nil: such a column added stops the run.
	SourceTypeNames func(ctx context.Context, oids []uint32, mods []int32) ([]string, error)

	// MultiRowInserts: at commit, a table's buffered rows, up to
	// MultiRowsMax, go as one INSERT of several rows instead of one INSERT
	// each or a COPY (queueInsertRows). A duplicate key then names the
	// statement's first row: after a multi-row INSERT fails, the writer
	// sends one INSERT per row for a while, so that applying the
	// transaction again (apply's conflict isolation) names the row.
	MultiRowInserts bool

	// Publication is the run's publication; Resync (nil: none) is told of
	// a table the writer records pending, to be copied anew (partition.go:
	// a table holding rows attached as a partition; ddl.go: a table that
	// enters the publication; unrecorded.go): apply must write none of its
	// changes from then on. It returns how to undo that (nil: nothing to
	// undo), called when the transaction that recorded the table does not
	// commit.
	Publication string
	Resync      func(schema.TableName) (undo func())
	// PartialPublication: the run accepts a publication that leaves out a
	// kind of change (--partial-publication); else a table the source's
	// trigger says it now leaves changes of out is recorded pending.
	PartialPublication bool

	// CopyUnrecorded: a table the stream carries that repstream.tables does
	// not record for the slot is recorded pending and copied anew
	// (unrecorded.go): nothing said that it entered the publication, with
	// rows the stream never carried. The tables schema-change messages
	// make are recorded (recordMade). The engine always sets it; a writer
	// without it applies whatever the stream carries.
	CopyUnrecorded bool

	// TrustTableOwners: a superuser target role writes tables that roles
	// that are not superusers own (--trust-table-owners); otherwise such a
	// table stops the writer before its first row (owners.go).
	TrustTableOwners bool

	// DeferPosition: CommitLSN does not read the target's WAL position and
	// returns UnreadPosition (position.go); the caller reads it later.
	DeferPosition bool

	// CheckLocalWrites: UPDATEs and DELETEs refuse, as a conflict
	// (update_origin_differs, delete_origin_differs), a row that a
	// transaction of the target's own — without a replication origin, so
	// not one of a replication's — committed after the source transaction
	// (SourceCommit): the two sides wrote it at once, and applying the
	// older change over the newer would leave them different. Needs
	// track_commit_timestamp on the target; the engine sets it with
	// --origin none there. Changes are not folded then (Collapsible).
	CheckLocalWrites bool
}

// Writer applies changes to the target in one target transaction at a time,
// on one connection, which it uses exclusively between Begin and
// Commit/Rollback. It is not safe for concurrent use: one goroutine (an apply
// worker, or eager apply) owns it and its connection.
//
// Inserts are buffered per table as COPY rows, text or binary (copies,
// copybuf.go); updates and deletes are queued as prepared statements in a
// pipelined batch (pipe, pipeline.go; built in modify.go). Inserts into
// different tables may reach the server in another order than they were
// written (the session runs with session_replication_role = replica: no
// triggers, no foreign-key checks), but changes of one table keep their
// order.
//
// A small transaction costs one round trip: BEGIN is not sent on its own but
// queued ahead of the first statement (or put in the first COPY's query),
// and at commit the tables with few buffered rows (InsertRowsMax) become
// prepared INSERTs in the same pipeline as the queued statements, the
// applied record and COMMIT — a COPY per table would cost a round trip and a
// statement the server must parse each. With MultiRowInserts a table's rows
// (up to MultiRowsMax) are one INSERT, and with DeferPosition the commit
// does not read the WAL position: apply's workers send one statement per
// table and kind of change, BEGIN, the applied record and COMMIT.
//
// Invariants:
//   - state says where the transaction stands (txn.go): nothing reaches the
//     server inside it before BEGIN, and after a failed change only Rollback
//     or RollbackToSavepoint are allowed;
//   - a table never has both buffered COPY rows and queued statements
//     (tableBuf);
//   - outside a transaction nothing is buffered or queued.
type Writer struct {
	conn *pgx.Conn
	opts WriterOptions
	log  *slog.Logger
	id   string // prefix of this writer's prepared statement names

	state txnState
	plans map[*change.Relation]*relPlan // cached per relation (catalog.go)
	ahead aheadTables                   // tables created from their rows' description, awaiting their CREATE message (ctas.go)
	// recorded: tables found ready in repstream.tables (CopyUnrecorded),
	// with the relation id of the source table they were found for;
	// takenUp: those this transaction recorded pending, and resyncUndo
	// what undoes the filter's states it changed (unrecorded.go).
	recorded   map[schema.TableName]uint32
	takenUp    map[schema.TableName]bool
	resyncUndo []func()
	// ownerChecked: tables whose owner may have its code run by this
	// writer's role (owners.go).
	ownerChecked map[schema.TableName]bool
	copies       copyBufs
	// copyChunk: the most bytes of rows one COPY sends (copyOut, adaptChunk).
	copyChunk int
	pipe      pipeline
	nstmt     int // prepared statements so far (their names' suffixes)

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

	st                            *stats.Component
	copyRows, statements, flushes *atomic.Int64
	applied                       *atomic.Int64

	// tagCheck: this transaction sends plain UPDATEs and DELETEs and reads
	// missing rows from their command tags (ExpectChanges).
	tagCheck bool
	// singleRows: commits left before MultiRowInserts applies again after
	// a multi-row INSERT failed (insertrows.go).
	singleRows int

	// srcCommit: the commit time of the source transaction being written
	// (SourceCommit), zero when unknown; commitBuf its parameter value.
	srcCommit time.Time
	commitBuf []byte
}

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
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "target", "slot", opts.Slot)
	st := opts.Stats
	if st == nil {
		st = stats.NewRegistry().Component("target")
	}
	return &Writer{
		conn:       conn,
		opts:       opts,
		log:        log,
		id:         "repstream_" + strconv.FormatUint(rand.Uint64(), 36),
		plans:      make(map[*change.Relation]*relPlan),
		copies:     newCopyBufs(),
		pipe:       newPipeline(),
		empty:      make([]byte, 0),
		st:         st,
		copyChunk:  min(opts.CopyFlushBytes, firstCopyChunk),
		copyRows:   st.Counter("copy_rows"),
		statements: st.Counter("statements"),
		flushes:    st.Counter("flushes"),
		applied:    st.Counter("applied_txns"),
	}
}

// Begin starts a target transaction.
func (w *Writer) Begin(ctx context.Context) error {
	if w.state.inTxn() {
		return errors.New("begin target transaction: already in a transaction")
	}
	w.discard()
	w.ahead.reset()
	w.abandonTakenUp() // a transaction that ended without Commit or Rollback
	w.tagCheck = false
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
	w.state = txnPending
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
	if !w.state.inTxn() {
		return fmt.Errorf("apply %s at %s: no target transaction (Begin first)", c.Op, c.LSN)
	}
	if w.state.failed() {
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
	case change.OpDDL:
		err = w.ddl(ctx, c)
	default:
		err = fmt.Errorf("apply %s at %s: unknown operation", c.Op, c.LSN)
	}
	if err != nil {
		if errors.Is(err, errTakenUp) {
			return nil // its table waits for a copy, which holds the change (unrecorded.go)
		}
		w.fail()
		return err
	}
	if c.Op != change.OpInsert {
		// Queued (a statement in the pipeline) or sent. An insert is
		// counted when it is queued as a statement or once its COPY has
		// completed (copyOut): a row buffered for COPY has not reached the
		// target.
		w.st.Add(1, int64(c.Size()))
	}
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
	if !w.state.inTxn() {
		return 0, errors.New("commit target transaction: no transaction")
	}
	lsn, err := w.commit(ctx, applied)
	if err != nil {
		if w.state.inTxn() {
			_ = w.Rollback(ctx) // best effort; the error that matters is err
		}
		return 0, err
	}
	return lsn, nil
}

func (w *Writer) commit(ctx context.Context, applied []change.LSN) (change.LSN, error) {
	if w.state.failed() {
		return 0, errors.New("commit target transaction: a change failed earlier")
	}
	if err := w.ahead.check(); err != nil {
		w.fail()
		return 0, fmt.Errorf("commit target transaction: %w", err)
	}
	if err := w.queueSmallCopies(ctx); err != nil {
		w.fail()
		return 0, err
	}
	if w.pipe.checkTags { // a missing row must be seen before COMMIT
		if err := w.flushBatch(ctx); err != nil {
			w.fail()
			return 0, err
		}
	}
	w.queueBegin()
	if len(applied) > 0 {
		if w.appliedStmt == "" {
			name := w.id + "_applied"
			if _, err := w.conn.PgConn().Prepare(ctx, name, appliedInsert, nil); err != nil {
				w.fail()
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
		w.pipe.batch.ExecPrepared(w.appliedStmt, [][]byte{[]byte(w.opts.Slot), lt, ft}, nil, nil)
	}
	w.pipe.batch.ExecPrepared(w.ctl[ctlCommit], nil, nil, nil)
	if !w.opts.DeferPosition {
		w.pipe.batch.ExecPrepared(w.ctl[ctlWALPos], nil, nil, nil)
	}
	n := len(w.pipe.items)
	stmts := w.pipe.changes()
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
			if ce := asConflict(err, 0, nil, 0); ce != nil {
				err = ce // a deferred constraint
			}
			err = fmt.Errorf("commit target transaction: %w", err)
		}
		w.pipe.reset()
		return 0, err
	}
	w.pipe.reset()
	w.state = txnNone
	if !committed(tail, w.opts.DeferPosition) {
		w.abandonTakenUp()
		return 0, errors.New("commit target transaction: the server rolled it back")
	}
	w.endTakenUp()
	var lsn change.LSN
	if w.opts.DeferPosition {
		lsn = UnreadPosition
	} else if pos != nil {
		if lsn, err = change.ParseLSN(string(pos)); err != nil {
			return 0, fmt.Errorf("commit target transaction: read the WAL position: %w", err)
		}
	}
	w.statements.Add(int64(stmts))
	w.flushes.Add(1)
	w.singleRows = max(w.singleRows-1, 0)
	w.applied.Add(int64(len(applied)))
	w.st.AddTxns(int64(len(applied)))
	return lsn, nil
}

// appliedInsert records applied source transactions (Commit).
const appliedInsert = "INSERT INTO repstream.applied (slot, end_lsn, first_lsn) VALUES ($1, $2::pg_lsn, $3::pg_lsn)"

// Rollback discards buffered changes and rolls the target transaction back.
// It is a no-op outside a transaction.
func (w *Writer) Rollback(ctx context.Context) error {
	w.discard()
	w.abandonTakenUp()
	sent := w.state.sent()
	w.state = txnNone
	if !sent {
		return nil // no transaction, or the server never saw it
	}
	if err := w.exec(ctx, "ROLLBACK"); err != nil {
		return fmt.Errorf("roll back target transaction: %w", err)
	}
	return nil
}

// discard drops every buffered row and queued statement.
func (w *Writer) discard() {
	if w.state == txnQueued {
		w.state = txnPending // the batch holding BEGIN is dropped unsent
	}
	w.copies.discard()
	w.pipe.drop()
}

// flushAll sends every buffered row and queued statement.
func (w *Writer) flushAll(ctx context.Context) error {
	if err := w.flushCopies(ctx); err != nil {
		return err
	}
	return w.flushBatch(ctx)
}

// appendLSN appends l in PostgreSQL's X/Y form without allocating.
func appendLSN(b []byte, l change.LSN) []byte {
	b = strconv.AppendUint(b, uint64(l>>32), 16)
	b = append(b, '/')
	return strconv.AppendUint(b, uint64(uint32(l)), 16)
}

// BackendPID is the server process of the writer's session
// (apply.LockHolder).
func (w *Writer) BackendPID() uint32 { return w.conn.PgConn().PID() }

// Blocks reports whether the writer's open transaction holds a lock that
// one of the sessions pids waits for (pg_blocking_pids; apply.LockHolder):
// apply's worker, waiting for earlier groups before it commits, then
// gives way. False when the server has not seen the transaction begin.
func (w *Writer) Blocks(ctx context.Context, pids []uint32) (bool, error) {
	if !w.state.sent() || len(pids) == 0 {
		return false, nil
	}
	ps := make([]int32, len(pids))
	for i, p := range pids {
		ps[i] = int32(p)
	}
	var blocks bool
	err := w.conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.unnest($1::int4[]) AS p(pid)
WHERE pg_catalog.pg_backend_pid() = ANY (pg_catalog.pg_blocking_pids(p.pid)))`, ps).Scan(&blocks)
	if err != nil {
		return false, fmt.Errorf("look up the sessions the apply session blocks: %w", err)
	}
	return blocks, nil
}
