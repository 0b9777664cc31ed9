package engine

import (
	"context"
	"crypto/ed25519"
	"errors"
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
	if err := install.PublishTopicKey(ctx, src, pub); err != nil {
		return err
	}
	e.log.Info("the topic's schema-change messages are signed with the key published on the source", "fingerprint", ddlmsg.KeyFingerprint(pub))
	return nil
}

// sourceStateTables are the tables of the schema repstream on the source
// that an apply reads: the public keys that check the topic's
// schema-change messages, the registry (from where the slot's messages
// are signed) and the published partitions (whether their TRUNCATE
// triggers are there). Not repstream.ddl_key: a role that reads it can
// sign schema changes that every target applies.
var sourceStateTables = []string{"ddl_pubkey", "replications", "partition_state"}

// checkDDLKeyReadable refuses, before an apply makes anything, a source
// role that cannot read the public keys that check the topic's
// schema-change messages and the rest of what the apply reads in the
// schema repstream (sourceStateTables): it needs USAGE on the schema and
// SELECT on them. No table of keys yet (a trigger installed by a capture
// of an earlier version): checked again once the apply waited for the
// capture (readDDLKey).
func checkDDLKeyReadable(ctx context.Context, src *pgx.Conn) error {
	var exists, usage bool
	var role string
	var tables, lacking []string
	err := src.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class k WHERE k.relnamespace = n.oid AND k.relname = 'ddl_pubkey'),
       pg_catalog.has_schema_privilege(n.oid, 'USAGE'),
       coalesce(array_agg('repstream.' || c.relname ORDER BY c.relname) FILTER (WHERE c.oid IS NOT NULL), '{}'),
       coalesce(array_agg('repstream.' || c.relname ORDER BY c.relname) FILTER (WHERE NOT pg_catalog.has_table_privilege(c.oid, 'SELECT')), '{}'),
       current_user
FROM pg_catalog.pg_namespace n
LEFT JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = ANY ($1)
WHERE n.nspname = 'repstream'
GROUP BY n.oid`, sourceStateTables).Scan(&exists, &usage, &tables, &lacking, &role)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // no schema repstream: no trigger
	}
	if err != nil {
		return fmt.Errorf("source: look up the keys that check schema-change messages (repstream.ddl_pubkey): %w", err)
	}
	if !exists || usage && len(lacking) == 0 {
		return nil
	}
	r := pgx.Identifier{role}.Sanitize()
	return fmt.Errorf("the source role %s cannot read what an apply reads in the schema repstream on the source (%s), among it the public keys that check schema-change messages (repstream.ddl_pubkey): "+
		"the apply checks every schema-change message of the topic with them, for one it cannot check could run SQL of whoever may write to the topic on this target; "+
		"run on the source, as repstream's source role or a superuser: GRANT USAGE ON SCHEMA repstream TO %s; GRANT SELECT ON %s TO %s; "+
		"(not SELECT on repstream.ddl_key: a role that reads it can sign schema changes for every target)", r, strings.Join(tables, ", "), r, strings.Join(tables, ", "), r)
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
	if err := checkDDLKeyReadable(ctx, src); err != nil {
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
