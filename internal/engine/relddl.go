package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/schema"
)

// addedColumnOnSource is target.WriterOptions.AddedColumn for
// --ddl=relation: pgoutput's Relation message does not say what the rows
// that existed before an ADD COLUMN got, so the writer asks the source's
// catalog (schema.LoadAddedValue), on a connection of its own that lives
// for the one question (schema changes are rare; the apply workers have no
// source connection). The catalog is the current one: a column dropped,
// renamed or retyped since is an error (schema.ErrAddedColumnGone). So is,
// for eager apply (eager), a column added by the transaction it applies
// before the source commits it: another session does not see it yet.
func addedColumnOnSource(dsn string, eager bool) func(context.Context, schema.TableName, string) (schema.AddedValue, error) {
	return func(ctx context.Context, table schema.TableName, column string) (v schema.AddedValue, err error) {
		if eager {
			defer func() {
				if errors.Is(err, schema.ErrAddedColumnGone) {
					err = fmt.Errorf("%w; or the column was added by this transaction, applied before its commit (--eager), when the source's catalog does not show it to other sessions yet: restart once the transaction has committed on the source, or run with --eager=false", err)
				}
			}()
		}
		src, err := install.ConnectSource(ctx, dsn)
		if err != nil {
			return schema.AddedValue{}, fmt.Errorf("ask the source what the existing rows got: %w", err)
		}
		defer src.Close(context.WithoutCancel(ctx))
		if _, err := src.Exec(ctx, schema.AddedValueSettings); err != nil {
			return schema.AddedValue{}, fmt.Errorf("ask the source what the existing rows got: %w", err)
		}
		return schema.LoadAddedValue(ctx, src, table, column)
	}
}
