package tablesync

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/target"
)

// EmptyCopied empties the published tables an interrupted initial copy
// wrote to (recorded in repstream.tables): they belong to that copy.
func (ts *Syncer) EmptyCopied(ctx context.Context, tgt *pgx.Conn, tables []schema.TableName) error {
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	var owned []schema.TableName
	for _, s := range syncs {
		if t := (schema.TableName{Schema: s.Schema, Name: s.Name}); slices.Contains(tables, t) {
			owned = append(owned, t)
		}
	}
	if len(owned) > 0 {
		ts.log.Info("the slot of an interrupted initial copy is gone: copying every table again", "component", "tablesync", "emptied", tableNames(owned))
	}
	return snapshot.CheckTargets(ctx, tgt, owned, true, ts.log)
}

// CheckReady fails when a table of the slot is not copied yet: a run
// is never reported caught up with a table pending or being copied.
func (ts *Syncer) CheckReady(tgt *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	syncs, err := target.LoadTableSyncs(ctx, tgt, ts.cfg.Slot)
	if err != nil {
		return err
	}
	var notReady []string
	for _, s := range syncs {
		if s.State != target.TableReady {
			notReady = append(notReady, s.String()+" ("+s.State+")")
		}
	}
	if len(notReady) > 0 {
		return fmt.Errorf("not caught up: tables not copied yet: %s", strings.Join(notReady, ", "))
	}
	return nil
}

func tableNames(ts []schema.TableName) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.String()
	}
	return out
}
