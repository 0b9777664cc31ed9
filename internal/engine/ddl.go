package engine

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/ddlmsg"
	"github.com/repstream/repstream/internal/install"
)

// Schema changes on the source (--ddl): with the event trigger repstream
// installs on the source (install/ddl.go), whose messages travel in the
// stream; or, without it, from pgoutput's Relation messages (target/ddl.go).

// ddlMode is how a run follows schema changes.
type ddlMode int

const (
	ddlOff      ddlMode = iota // --ddl=false: a schema change stops the run (the plan finds a mismatch)
	ddlTrigger                 // event trigger messages
	ddlRelation                // diff of pgoutput Relation messages
)

func (m ddlMode) String() string {
	return [...]string{"off", "event trigger", "relation messages"}[m]
}

// setUpDDL decides how this run follows schema changes and, for the event
// trigger, installs it on the source (in one transaction: install.InstallDDL),
// through around when it is not nil (tablesync's TriggersAtStart: a look
// at the triggers before they are set right).
func setUpDDL(ctx context.Context, src *pgx.Conn, setting, slot, pub string, log *slog.Logger, around func(setUp func() error) error) (ddlMode, error) {
	switch setting {
	case "false":
		return ddlOff, nil
	case "relation":
		return ddlRelation, nil
	}
	super, version, err := install.SourceRole(ctx, src)
	if err != nil {
		return ddlOff, err
	}
	switch {
	case version < 140000:
		log.Warn("schema changes are followed from pgoutput's Relation messages: logical messages need PostgreSQL 14 on the source", "ddl", "relation")
		return ddlRelation, nil
	case !super:
		log.Warn("schema changes are followed from pgoutput's Relation messages: the source role is not a superuser and cannot create the event trigger (a RENAME COLUMN will stop the run)", "ddl", "relation")
		return ddlRelation, nil
	}
	setUp := func() error { return install.InstallDDL(ctx, src, version, slot, pub) }
	if around == nil {
		around = func(setUp func() error) error { return setUp() }
	}
	if err := around(setUp); err != nil {
		return ddlOff, err
	}
	log.Info("schema changes are captured by the event trigger repstream_ddl on the source")
	return ddlTrigger, nil
}

// ddlKeyNow reads the key that signs the trigger's messages as the source
// at dsn has it now, and the source's WAL position read just before it, in
// an earlier statement (capture's Options.DDLKeyNow).
func ddlKeyNow(dsn, slot string) func(context.Context) ([]byte, change.LSN, error) {
	return func(ctx context.Context) ([]byte, change.LSN, error) {
		src, err := install.ConnectSource(ctx, dsn)
		if err != nil {
			return nil, 0, err
		}
		defer src.Close(context.WithoutCancel(ctx))
		before, err := install.WALPosition(ctx, src)
		if err != nil {
			return nil, 0, err
		}
		key, _, err := install.DDLSigning(ctx, src, slot)
		return key, before, err
	}
}

// topicKeysNow reads the public keys that check the topic's
// schema-change messages as the source at dsn has them now (capture's
// Options.TopicKeysNow).
func topicKeysNow(dsn string) func(context.Context) (map[string]ed25519.PublicKey, error) {
	return func(ctx context.Context) (map[string]ed25519.PublicKey, error) {
		src, err := install.ConnectSource(ctx, dsn)
		if err != nil {
			return nil, err
		}
		defer src.Close(context.WithoutCancel(ctx))
		return install.TopicKeys(ctx, src)
	}
}

// publishTopicKey derives, for a capture --kafka, the Ed25519 key that
// signs anew the schema-change messages it writes to the topic from the
// source's key (e.ddlKey) and publishes its public key on the source
// (repstream.ddl_pubkey), before any message it signs is written.
func (e *Engine) publishTopicKey(ctx context.Context, src *pgx.Conn) error {
	e.topicKey = ddlmsg.TopicKey(e.ddlKey)
	pub := e.topicKey.Public().(ed25519.PublicKey)
	removed, err := install.PublishTopicKey(ctx, src, pub)
	if err != nil {
		return err
	}
	if len(removed) > 0 {
		e.log.Warn("the source's key that signs schema-change messages was replaced: the public keys of the earlier ones are no longer published, and what they signed is no longer taken (an apply still behind such a message stops at it: re-seed that target)",
			"removed", strings.Join(removed, ", "), "fingerprint", ddlmsg.KeyFingerprint(pub))
	}
	e.log.Info("the topic's schema-change messages are signed with the key published on the source", "fingerprint", ddlmsg.KeyFingerprint(pub))
	return nil
}

// readDDLKey reads, for an apply, the public keys that check the topic's
// schema-change messages (e.topicKeys), from where every message of the
// slot is signed (e.ddlSignedFrom), and the source's WAL position read
// after them (e.ddlKeySince): the apply checks every schema-change
// message of the topic (capture.Options.DDLFromTopic). A source role
// that may read the HMAC key (repstream.ddl_key) reads it too (e.ddlKey),
// to check the messages a capture of an earlier version wrote signed
// with it.
func (e *Engine) readDDLKey(ctx context.Context, src *pgx.Conn) error {
	if _, err := install.CheckApplySourceReads(ctx, src); err != nil {
		return err
	}
	var err error
	if e.ddlSignedFrom, err = install.DDLSignedFrom(ctx, src, e.cfg.Slot); err != nil {
		return err
	}
	if e.topicKeys, err = install.TopicKeys(ctx, src); err != nil {
		return err
	}
	var readable bool
	if err := src.QueryRow(ctx, `SELECT pg_catalog.to_regclass('repstream.ddl_key') IS NOT NULL AND pg_catalog.has_table_privilege('repstream.ddl_key', 'SELECT')`).Scan(&readable); err != nil {
		return fmt.Errorf("source: look up repstream.ddl_key: %w", err)
	}
	e.ddlKey = nil
	if readable {
		if e.ddlKey, _, err = install.DDLSigning(ctx, src, e.cfg.Slot); err != nil {
			return err
		}
	}
	if e.ddlKeySince, err = install.WALPosition(ctx, src); err != nil {
		return err
	}
	return nil
}
