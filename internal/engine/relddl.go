package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/schema"
)

// sourceTypes is target.WriterOptions.SourceTypes: the user-defined types
// that columns of the source type oids need, dependencies first, from the
// source's catalog as it is now, on a connection of its own for the one
// question. A type of an extension is an error naming it: repstream does
// not create extensions.
func sourceTypes(dsn string) func(context.Context, []uint32) ([]*schema.UserType, error) {
	return func(ctx context.Context, oids []uint32) ([]*schema.UserType, error) {
		src, err := install.ConnectSource(ctx, dsn)
		if err != nil {
			return nil, fmt.Errorf("read the definitions of the column types on the source: %w", err)
		}
		defer src.Close(context.WithoutCancel(ctx))
		cols := make([]schema.Column, len(oids))
		for i, oid := range oids {
			cols[i] = schema.Column{Name: fmt.Sprintf("type %d", oid), TypeOID: oid}
		}
		types, exts, err := schema.TypesFor(ctx, src, []*schema.Table{{Schema: "-", Name: "-", Columns: cols}})
		if err != nil {
			return nil, err
		}
		if len(exts) > 0 {
			return nil, fmt.Errorf("%w: type %s of extension %s: CREATE EXTENSION %s on the target, then restart", schema.ErrExtensionType, exts[0].Type, exts[0].Extension, exts[0].Extension)
		}
		return types, nil
	}
}

// sourceTypeNames is target.WriterOptions.SourceTypeNames: the types of
// source oids and modifiers as the source's format_type names them, every
// one with its schema, on a connection of its own.
func sourceTypeNames(dsn string) func(context.Context, []uint32, []int32) ([]string, error) {
	return func(ctx context.Context, oids []uint32, mods []int32) ([]string, error) {
		src, err := install.ConnectSource(ctx, dsn)
		if err != nil {
			return nil, fmt.Errorf("name the column types on the source: %w", err)
		}
		defer src.Close(context.WithoutCancel(ctx))
		if _, err := src.Exec(ctx, "SET search_path = pg_catalog, pg_temp"); err != nil {
			return nil, fmt.Errorf("name the column types on the source: %w", err)
		}
		rows, err := src.Query(ctx, `SELECT coalesce(pg_catalog.format_type(o, m), '') FROM unnest($1::oid[], $2::int4[]) WITH ORDINALITY AS u(o, m, i) ORDER BY i`, oids, mods)
		if err != nil {
			return nil, fmt.Errorf("name the column types on the source: %w", err)
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	}
}

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
