package install

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// SetAsideForCopy sets aside for slot's copy the keys and indexes of the
// target's empty tables among tables (target.SetAside), unless keep
// (--keep-indexes); the tables the target role does not own are named once.
func SetAsideForCopy(ctx context.Context, tgt *pgx.Conn, slot string, tables []schema.TableName, keep bool, log *slog.Logger) error {
	if keep {
		return nil
	}
	log = log.With("component", "snapshot")
	notOwned, err := target.SetAside(ctx, tgt, slot, tables, log)
	if err != nil {
		return err
	}
	if len(notOwned) > 0 {
		log.Info("copying into target tables with their keys and indexes in place: the target role does not own them (or a table whose foreign key references them), "+
			"or may not create in their schema, and only an owner may drop and make again their keys and indexes; the copy is slower for it", "tables", strings.Join(tableNames(notOwned), ", "), "role", tgt.Config().User)
	}
	return nil
}

// RestoreSetAside makes again, as they were, the keys and indexes of the
// tables set aside for slot's copy that failed or was stopped (emptying
// them: the next run copies them again), with a context of its own (the
// run's may be done), on tgt or, closed, a new connection to targetDSN. A
// failure is logged: the next run, or `repstream drop`, makes them again.
func RestoreSetAside(ctx context.Context, tgt *pgx.Conn, targetDSN, slot string, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if tgt.IsClosed() {
		var err error
		if tgt, err = target.Connect(rctx, targetDSN, "repstream-admin"); err != nil {
			log.Warn("the target tables set aside for the copy keep going without their keys and indexes until the next run or `repstream drop`", "err", err)
			return
		}
		defer tgt.Close(context.WithoutCancel(ctx))
	}
	if err := target.RestoreSetAside(rctx, tgt, slot, false, log.With("component", "snapshot")); err != nil {
		log.Warn("the target tables set aside for the copy keep going without their keys and indexes until the next run or `repstream drop`", "err", err)
	}
}
