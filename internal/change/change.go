package change

import (
	"time"

	"github.com/repstream/repstream/internal/ddlmsg"
)

// Op is the kind of a row change.
type Op byte

const (
	OpInsert   Op = 'I'
	OpUpdate   Op = 'U'
	OpDelete   Op = 'D'
	OpTruncate Op = 'T'
	// OpDDL is a schema change captured on the source by repstream's event
	// trigger (a transactional logical message with prefix DDLPrefix): New
	// is a one-column text tuple holding the message's JSON content
	// (DDLContent: what the queue's spill files carry), DDL its parsed
	// form, Rel is nil.
	OpDDL Op = 'M'
)

// DDLPrefix is the prefix of the logical messages repstream's source event
// trigger emits for schema changes.
const DDLPrefix = "repstream.ddl"

// NewDDL returns the OpDDL change at lsn carrying a copy of content and
// its parsed form (ParseDDL); it fails on content that is not a
// schema-change message's JSON.
func NewDDL(lsn LSN, xid uint32, content []byte) (*Change, error) {
	c := &Change{Op: OpDDL, LSN: lsn, Xid: xid, New: AppendTuple(nil, []byte{KindText}, [][]byte{content})}
	if err := c.ParseDDL(); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseDDL sets c.DDL to the parsed form of the OpDDL change's content —
// the one place a schema-change message is decoded (ddlmsg.Parse): capture
// (NewDDL), and a spill file's read-back, which carries only the content.
func (c *Change) ParseDDL() error {
	m, err := ddlmsg.Parse(c.DDLContent())
	if err != nil {
		return err
	}
	c.DDL = m
	return nil
}

// DDLContent returns the JSON content of an OpDDL change (nil otherwise).
func (c *Change) DDLContent() []byte {
	if c.Op != OpDDL {
		return nil
	}
	_, v := c.New.Column(0)
	return v
}

func (o Op) String() string {
	switch o {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	case OpTruncate:
		return "truncate"
	case OpDDL:
		return "schema change"
	}
	return "op(" + string(rune(o)) + ")"
}

// Truncate options (pgoutput's Truncate message flags).
const (
	TruncateCascade         uint8 = 1
	TruncateRestartIdentity uint8 = 2
)

// Change is one row change of a transaction.
//
// Old and New alias memory owned by whoever produced the Change (the capture
// stage copies every message out of the connection's buffer before decoding,
// so a Change stays valid until the queue releases its transaction).
type Change struct {
	Op  Op
	Xid uint32 // the (sub)transaction that made the change, inside streamed blocks; else 0
	LSN LSN    // WAL position of the message that carried the change
	Rel *Relation

	// OldKind is 'K' (replica-identity key columns only; the other columns are
	// null) or 'O' (the whole old row, REPLICA IDENTITY FULL), or 0 when the
	// message carried no old tuple (an update that kept its key).
	OldKind byte
	Old     Tuple
	New     Tuple // inserts and updates

	// Truncate only.
	TruncateRels []*Relation
	TruncateOpts uint8

	// DDL is an OpDDL change's message, parsed from its content (New) by
	// ParseDDL; nil for other changes.
	DDL *ddlmsg.Message
}

// ChangeOverhead is the fixed accounting cost of one Change beyond its tuples:
// the struct and its slot in a transaction buffer.
const ChangeOverhead = 96

// Size is the number of bytes the change is accounted for in the queue budget.
func (c *Change) Size() int {
	return ChangeOverhead + len(c.Old) + len(c.New) + 8*len(c.TruncateRels)
}

// TxnInfo describes a source transaction.
type TxnInfo struct {
	Xid        uint32
	CommitLSN  LSN // LSN of the commit record: NOT a safe acknowledgement point
	EndLSN     LSN // end of the commit record: what the slot is acknowledged with
	CommitTime time.Time
	Streamed   bool // arrived in stream blocks before its commit (protocol v2+)
}
