package capture

import "github.com/repstream/repstream/internal/pgoutput"

// originFilter leaves out, whole, the transactions that carry a
// replication origin (Options.SkipOrigins: --origin none) on a source
// whose pgoutput has no origin option (PostgreSQL 14 and 15; 16+ is asked
// for origin 'none' and sends none of them). pgoutput says a transaction's
// origin in an Origin message right after its BEGIN, or after the first
// STREAM START of a streamed one; its row changes, truncates and logical
// messages are dropped, while its Relation messages are kept (pgoutput
// counts them as sent) and its COMMIT still reaches the queue, empty, so
// that the watermark and the slot's confirmed position move past it.
//
// A streamed transaction's origin is known to the walsender only at its
// commit (PostgreSQL 14 and 15 send none after its first STREAM START), so
// capture asks those servers not to stream (start): each transaction
// comes whole after its commit, BEGIN and Origin first. The filter still
// follows the streamed form, should a server send it.
type originFilter struct {
	on      bool
	txn     bool            // the open transaction (not streamed) carries an origin
	streams map[uint32]bool // the streamed transactions that carry one, until their end
	skipped int64           // row changes and messages left out
}

// observe follows the transaction boundaries and Origin messages of m
// (inStream, streamXid: capture's state as m is parsed, before handle's
// switch changes it). It reports whether m is left out.
func (f *originFilter) observe(m *pgoutput.Message, inStream bool, streamXid uint32) bool {
	if !f.on {
		return false
	}
	switch m.Type {
	case pgoutput.MsgBegin, pgoutput.MsgCommit:
		f.txn = false
	case pgoutput.MsgOrigin:
		if inStream {
			if f.streams == nil {
				f.streams = map[uint32]bool{}
			}
			f.streams[streamXid] = true
		} else {
			f.txn = true
		}
	case pgoutput.MsgInsert, pgoutput.MsgUpdate, pgoutput.MsgDelete, pgoutput.MsgTruncate, pgoutput.MsgMessage:
		if inStream && f.streams[streamXid] || !inStream && f.txn {
			f.skipped++
			return true
		}
	case pgoutput.MsgStreamCommit:
		delete(f.streams, m.Xid)
	case pgoutput.MsgStreamAbort:
		if m.SubXid == 0 || m.SubXid == m.Xid {
			delete(f.streams, m.Xid)
		}
	}
	return false
}
