package capture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
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
	if !c.isDDL(m) {
		return nil
	}
	content, err := c.ddlContent(ctx, walStart, m)
	if content == nil {
		return err
	}
	// Decoded once, here (change.NewDDL, ddlmsg.Parse): the change carries
	// the parsed message (change.Change.DDL) to apply and the target.
	ch, err := change.NewDDL(walStart, 0, content)
	if err != nil {
		return fmt.Errorf("schema change at %s: decode the message: %w", walStart, err)
	}
	msg := ch.DDL
	table := msg.Schema + "." + msg.Name
	// A table moved out of the publication's schemas (SET SCHEMA) is
	// published no longer, but was: the target moves it too.
	if !slices.Contains(msg.Pubs, c.opts.Publication) && (msg.Old == nil || !slices.Contains(msg.Old.Pubs, c.opts.Publication)) {
		c.log.Debug("schema change of a table the publication does not publish", "table", table, "command", msg.Tag, "lsn", walStart)
		return nil
	}
	c.log.Info("schema change captured", "table", table, "command", msg.Tag, "lsn", walStart, "xid", msg.Xid)
	if c.inStream {
		// pgoutput sends a streamed transaction's messages with the
		// top-level xid, whichever subtransaction emitted them; a STREAM
		// ABORT names the subtransaction. Filed under the emitting one, the
		// schema change goes with the savepoint rolled back (the queue drops
		// the subtransaction's changes, eager apply rolls back to its
		// savepoint), as its rows do.
		ch.Xid = m.Xid
		if msg.Xid != 0 {
			ch.Xid = msg.Xid
		}
	}
	if err := c.add(ctx, ch); err != nil {
		return err
	}
	c.renamed(msg.OID, msg.Schema, msg.Name, ch.Xid)
	c.partitionChange(msg.Tag, m)
	return nil
}

// partitionChange marks the transaction of the schema-change message m
// (command tag) for a new decoding session after its commit when it
// attaches or detaches a partition on a PostgreSQL 14 source. There the
// walsender's cache of what each table publishes is not renewed by a
// table's own invalidation (PostgreSQL 15 does): a table it looked at
// before its ATTACH PARTITION to a root published through the root stays
// unpublished for it, and one DETACHed stays published under the root's
// name, until the walsender starts again. Its changes would be dropped
// from, or wrongly sent in, the stream for good. A new session from that
// commit decodes what follows with a new cache. (Rows of the table in the
// same transaction after the ATTACH or DETACH are still decoded with the
// old cache: PostgreSQL 14's own limit.)
func (c *Capture) partitionChange(tag string, m *pgoutput.Message) {
	if c.major == 0 || c.major >= 15 || tag != "ATTACH PARTITION" && tag != "DETACH PARTITION" {
		return
	}
	xid := c.txnXid
	if c.inStream {
		xid = m.Xid
	}
	c.redecode[xid] = true
}

// redecodeAfter returns ErrRedecode after the commit (ending at end) of
// a transaction partitionChange marked, once the Acker holds it (applied
// on the target, or in the topic): the next session then starts after it,
// and its walsender never looked at the table before the change. Until
// then nothing more is read (status updates go on).
func (c *Capture) redecodeAfter(ctx context.Context, xid uint32, end change.LSN) error {
	if !c.redecode[xid] {
		return nil
	}
	delete(c.redecode, xid)
	err := c.blocking(ctx, func(ctx context.Context) error {
		for c.opts.Acker.Flush() < end {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.log.Info("a partition was attached or detached on a PostgreSQL 14 source: decoding starts again after its commit, with a new walsender (its cache of what each table publishes would be stale)",
		"xid", xid, "end", end)
	return fmt.Errorf("%w: transaction %d (end %s) attached or detached a partition", ErrRedecode, xid, end)
}

// ErrRedecode ends a capture session that must start again, from what
// is acknowledged, at once: nothing failed (partitionChange).
var ErrRedecode = errors.New("the source's walsender must decode again")

// isDDL reports whether m is a message of repstream's schema-change
// triggers that this capture follows.
func (c *Capture) isDDL(m *pgoutput.Message) bool {
	return c.opts.DDLMessages && m.Name == change.DDLPrefix && m.Flags&pgoutput.MessageTransactional != 0
}

// ddlContent returns the JSON of the repstream.ddl message m, which the
// slot sent at walStart, or nil when repstream's trigger did not emit it:
// any role that may connect to the source can emit a message with that
// prefix (pg_logical_emit_message), and its schema change would be made on
// every target by apply's role. Such a message is ignored, with a
// warning naming its position and transaction: it changed nothing on the
// source, so the target misses nothing. One signed with another key than
// this capture's stops it (an error) if the source's key changed since
// its start: the trigger's own messages would be ignored from there on.
// Read from a Kafka topic (DDLFromTopic), a message that does not verify
// is an error (notFromCapture): the capture never writes one there.
func (c *Capture) ddlContent(ctx context.Context, walStart change.LSN, m *pgoutput.Message) ([]byte, error) {
	if ddlmsg.Unsigned(m.Content) && walStart < c.opts.DDLSignedFrom {
		return m.Content, nil // an earlier version's trigger emitted it
	}
	xid := c.ddlXid(m)
	if c.opts.DDLFromTopic {
		if ddlmsg.TopicSigned(m.Content) {
			return c.topicContent(ctx, walStart, xid, m.Content)
		}
		if _, signed := ddlmsg.Strip(m.Content); signed && len(c.opts.DDLKey) == 0 {
			return nil, c.beforeTopicSigning(xid)
		}
	}
	json, err := ddlmsg.Verify(c.opts.DDLKey, xid, m.Content)
	if err == nil {
		return json, nil
	}
	_, signed := ddlmsg.Strip(m.Content)
	if signed && c.opts.DDLKeyNow != nil && walStart >= c.keyKnownBefore {
		now, before, kerr := c.opts.DDLKeyNow(ctx)
		if kerr != nil {
			return nil, fmt.Errorf("schema-change message at %s (transaction %d) not signed with this run's key: read the source's key again: %w", walStart, xid, kerr)
		}
		if !bytes.Equal(now, c.opts.DDLKey) {
			if c.opts.DDLFromTopic {
				return nil, fmt.Errorf("%w: the schema-change message of xid %d is signed with another key than the one this apply started with; restart it, which reads the new key (should a message signed with the old key that this target has not applied come after, it stops there: re-seed the target then)",
					ErrDDLKeyChanged, xid)
			}
			return nil, fmt.Errorf("%w: the message at %s (transaction %d) is signed with another key than the one this run started with; restart repstream, which reads the new key (schema changes signed with the old one and not yet applied are then ignored, with a warning each)",
				ErrDDLKeyChanged, walStart, xid)
		}
		// A message signed with a new key was emitted after the key's
		// change committed and was visible: one written before the
		// source's WAL reached before, read ahead of the key, would have
		// shown the new key. So the many forged messages a role may
		// write at once cost one look, not a source connection each.
		c.keyKnownBefore = max(c.keyKnownBefore, before)
	}
	if c.opts.DDLFromTopic {
		return nil, c.notFromCapture(walStart, xid, signed, err)
	}
	c.log.Warn("a schema-change message that repstream's trigger did not emit is ignored: a role that may connect to the source wrote it with pg_logical_emit_message (nothing of it is applied)",
		"lsn", walStart, "xid", xid, "reason", err)
	c.cForgedDDL.Add(1)
	return nil, nil
}

// ddlXid is the transaction a schema-change message is bound to by its
// signature: the top-level one, as BEGIN says, or in a stream the
// message's own (pgoutput gives the top-level xid there).
func (c *Capture) ddlXid(m *pgoutput.Message) uint32 {
	if c.inStream {
		return m.Xid
	}
	return c.txnXid
}

// topicContent returns the JSON of content that a capture signed for the
// topic (ddlmsg.SignTopic), checked with the source's published public
// keys (Options.TopicKeys; read again for a key not among them), or the
// error of a message that does not verify: another producer wrote it.
func (c *Capture) topicContent(ctx context.Context, walStart change.LSN, xid uint32, content []byte) ([]byte, error) {
	if c.topicKeys == nil {
		c.topicKeys = c.opts.TopicKeys
	}
	json, err := ddlmsg.VerifyTopic(c.topicKeys, xid, content)
	if errors.Is(err, ddlmsg.ErrUnknownKey) && c.opts.TopicKeysNow != nil {
		// A capture started since with a new key publishes it before it
		// writes a message signed with it.
		keys, kerr := c.opts.TopicKeysNow(ctx)
		if kerr != nil {
			return nil, fmt.Errorf("schema-change message of xid %d signed with key %s, not among the source's public keys read at start: read them again: %w",
				xid, ddlmsg.TopicFingerprint(content), kerr)
		}
		c.topicKeys = keys
		json, err = ddlmsg.VerifyTopic(keys, xid, content)
	}
	if err != nil {
		if !errors.Is(err, ddlmsg.ErrUnknownKey) {
			// A published key's signature that does not match: no
			// older key signed it.
			walStart = max(walStart, c.opts.DDLKeySince)
		}
		return nil, c.notFromCapture(walStart, xid, true, err)
	}
	return json, nil
}

// beforeTopicSigning is the error of a schema-change message of the topic
// signed with the source's HMAC key (a capture of a version from before
// Ed25519 signing wrote it), which this apply cannot check: its source
// role may not read that key (and should not: what reads it can sign).
func (c *Capture) beforeTopicSigning(xid uint32) error {
	return fmt.Errorf("%w: the schema-change message of xid %d predates the topic's Ed25519 signatures (a capture of an earlier version wrote it, signed with the source's HMAC key repstream.ddl_key, which this apply's source role cannot read): "+
		"let the capture of this version write the topic from here (restart it) and re-seed this target (`repstream drop --target-only --slot %s --source ... --target ...`, then `repstream apply` again), "+
		"or, to apply what the earlier capture wrote, grant the apply's source role SELECT on repstream.ddl_key until it is past those records, then revoke it (a role that reads that key can sign schema changes for every target)",
		ErrPredatesTopicSigning, xid, c.opts.Slot)
}

// ErrPredatesTopicSigning: a schema-change message of a Kafka topic is in
// the HMAC form an earlier capture wrote, and the apply has not the key
// that checks it (beforeTopicSigning).
var ErrPredatesTopicSigning = errors.New("a schema-change message predates asymmetric signing")

// notFromCapture is the error of a schema-change message read from a
// Kafka topic (at walStart, in transaction xid) that does not verify
// (err): the capture checks every message before it writes it, so
// another producer wrote it to the topic, or, unsigned (signed false)
// after DDLSignedFrom, a capture of a version from before signed messages
// while that version's trigger was installed on the source again. Its
// schema change could run SQL of the writer's choice on the target: it
// stops the apply.
func (c *Capture) notFromCapture(walStart change.LSN, xid uint32, signed bool, err error) error {
	reseed := fmt.Sprintf("nothing of it is applied, and this target cannot go past it: let only the capture's principal write to the topic (Kafka ACLs), then re-seed this target (`repstream drop --target-only --slot %s --source ... --target ...`, then `repstream apply` again: a new initial copy)", c.opts.Slot)
	switch {
	case !signed:
		return fmt.Errorf("schema-change message of xid %d: %w, and repstream's trigger signs every message of slot %q from %s on: the capture writes no such message to the topic, so another producer wrote this record (or a capture of a version from before signed schema-change messages did, while that version's event trigger was installed on the source again: then check that the source made this schema change); %s",
			xid, err, c.opts.Slot, c.opts.DDLSignedFrom, reseed)
	case walStart >= c.opts.DDLKeySince:
		return fmt.Errorf("schema-change message of xid %d: %w: the capture writes no such message to the topic, so another producer wrote this record; %s",
			xid, err, reseed)
	default:
		return fmt.Errorf("schema-change message of xid %d: %w: another producer wrote this record, or it was signed with a key the source had before this apply started (repstream.ddl_key made again or replaced since: repstream's event trigger installed anew after its last drop, the source restored from a dump, a REFRESH with its guard off; a capture's start removes the public keys of replaced ones), which cannot be checked any more; %s",
			xid, err, reseed)
	}
}

// ErrDDLKeyChanged: the key that signs the source's schema-change
// messages (repstream.ddl_key) is not the one the capture started with.
var ErrDDLKeyChanged = errors.New("the key that signs schema-change messages on the source (repstream.ddl_key) changed")

// relRename is a rename of relation id in a streamed transaction's
// relations, made by subtransaction sub: before (nil: the stream had none
// of its own) became after.
type relRename struct {
	sub, id       uint32
	before, after *change.Relation
}

// renamed makes the relation id, if described before under another name,
// go by schema.name from here on. pgoutput describes a table again after
// its own RENAME or SET SCHEMA, but not after ALTER SCHEMA ... RENAME of
// its schema: its rows would keep coming under the old schema's name.
// Inside a stream the rename is the streamed transaction's, made by
// (sub)transaction sub, and undone if sub is rolled back (undoRenames).
func (c *Capture) renamed(id uint32, schema, name string, sub uint32) {
	rel, err := c.relation(id)
	if err != nil || rel.Namespace == schema && rel.Name == name {
		return
	}
	cp := *rel
	cp.Namespace, cp.Name = schema, name
	prev := *rel
	prev.Previous = nil
	cp.Previous = &prev
	if c.inStream {
		rs := c.streamRels[c.streamXid]
		if rs == nil {
			rs = map[uint32]*change.Relation{}
			c.streamRels[c.streamXid] = rs
		}
		if sub == 0 {
			sub = c.streamXid
		}
		c.streamRenames[c.streamXid] = append(c.streamRenames[c.streamXid], relRename{sub: sub, id: id, before: rs[id], after: &cp})
		rs[id] = &cp
		return
	}
	c.rels[id] = &cp
}

// undoRenames undoes, newest first, the renames subtransaction sub of
// streamed transaction xid made, where no later Relation message replaced
// them: the rollback of a savepoint drops a schema change made after it
// (its OpDDL change goes with the subtransaction), and pgoutput need not
// describe the table again.
func (c *Capture) undoRenames(xid, sub uint32) {
	rn, rs := c.streamRenames[xid], c.streamRels[xid]
	for i := len(rn) - 1; i >= 0; i-- {
		if r := rn[i]; r.sub == sub && rs[r.id] == r.after {
			if r.before == nil {
				delete(rs, r.id)
			} else {
				rs[r.id] = r.before
			}
		}
	}
	keep := rn[:0]
	for _, r := range rn {
		if r.sub != sub {
			keep = append(keep, r)
		}
	}
	c.streamRenames[xid] = keep
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
