package engine

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
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
