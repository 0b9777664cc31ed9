package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/pgoutput"
)

// Schema changes reach capture two ways: as the logical messages of
// repstream's event trigger on the source (prefix change.DDLPrefix, emitted
// transactionally at the position of the DDL in its transaction), and as
// the new Relation message pgoutput sends before the next change of a table
// whose definition changed. Capture turns the first into change.OpDDL
// changes, queued like any other change of the transaction, and links each
// Relation to the version it replaces (change.Relation.Previous), which
// the fallback diff (--ddl=relation) compares.

// message queues a repstream.ddl message of a table the publication
// publishes as an OpDDL change; other messages are ignored.
func (c *Capture) message(ctx context.Context, walStart change.LSN, m *pgoutput.Message) error {
	if m.Name != change.DDLPrefix || m.Flags&pgoutput.MessageTransactional == 0 || !c.opts.DDLMessages {
		return nil
	}
	// Only what routing needs; apply decodes the rest (schema.DDLMessage).
	var msg struct {
		Tag, Schema, Name string
		Pubs              []string
		Xid               uint32 // the (sub)transaction that emitted it (0: not said)
	}
	if err := json.Unmarshal(m.Content, &msg); err != nil {
		return fmt.Errorf("schema change at %s: decode the message: %w", walStart, err)
	}
	table := msg.Schema + "." + msg.Name
	if !slices.Contains(msg.Pubs, c.opts.Publication) {
		c.log.Debug("schema change of a table the publication does not publish", "table", table, "command", msg.Tag, "lsn", walStart)
		return nil
	}
	c.log.Info("schema change captured", "table", table, "command", msg.Tag, "lsn", walStart, "xid", msg.Xid)
	var xid uint32
	if c.inStream {
		// pgoutput sends a streamed transaction's messages with the
		// top-level xid, whichever subtransaction emitted them; a STREAM
		// ABORT names the subtransaction. Filed under the emitting one, the
		// schema change goes with the savepoint rolled back (the queue drops
		// the subtransaction's changes, eager apply rolls back to its
		// savepoint), as its rows do.
		xid = m.Xid
		if msg.Xid != 0 {
			xid = msg.Xid
		}
	}
	return c.add(ctx, change.NewDDL(walStart, xid, m.Content))
}

// linkPrevious sets r.Previous to a copy of the version of the relation r
// replaces (nil if capture has not seen it before).
func (c *Capture) linkPrevious(r *change.Relation) {
	prev := c.rels[r.ID]
	if c.inStream {
		if p := c.streamRels[c.streamXid][r.ID]; p != nil {
			prev = p
		}
	}
	if prev == nil {
		return
	}
	cp := *prev
	cp.Previous = nil
	r.Previous = &cp
}
