package install

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// startTypes is what a start's tables check found of the target's types:
// per table checked, the user-defined types its columns hold, and whether
// they were found the source's (no TypeProblems).
type startTypes struct {
	types   []*schema.UserType
	holders map[string][]string // type (schema.name) → columns holding it
	clean   map[string]bool     // type → every table holding it checked equal to the source's
}

// add takes the types of target table tt, clean when its check found no
// type that differs from the source's.
func (s *startTypes) add(ctx context.Context, tgt *pgx.Conn, tt *schema.Table, clean bool) error {
	types, holders, err := target.TablesTypes(ctx, tgt, []*schema.Table{tt})
	if err != nil {
		return fmt.Errorf("target table %s: %w", tt.TableName(), err)
	}
	if s.holders == nil {
		s.holders, s.clean = map[string][]string{}, map[string]bool{}
	}
	for _, u := range types {
		k := u.String()
		if _, ok := s.holders[k]; !ok {
			s.types = append(s.types, u)
			s.clean[k] = true
		}
		s.holders[k] = append(s.holders[k], holders[k]...)
		s.clean[k] = s.clean[k] && clean
	}
	return nil
}

// checkTypeRecords compares, on a start that takes a difference of a type
// for a schema change still in the stream (followed: a resumed stream
// with the trigger's type changes), each type the target's tables hold
// with its record (repstream.types): one that differs from it was changed
// by someone other than repstream, and the start stops, naming it — unless
// it is now the source's type of that name, as an error of a schema
// change (a rename it cannot tell) asks the user to make it: recorded
// anew, with a warning. Then it records what the check found the
// source's: the types not recorded yet, and, when nothing can be pending
// (not followed), every one, replacing its record. Records of types no
// table checked holds are forgotten.
func (s *startTypes) checkTypeRecords(ctx context.Context, src, tgt *pgx.Conn, slot string, followed bool, log *slog.Logger) error {
	recs, err := target.LoadTypeRecords(ctx, tgt, slot)
	if err != nil {
		return err
	}
	recorded := map[string]target.TypeRecord{}
	var gone []string
	for _, r := range recs {
		k := r.Schema + "." + r.Name
		recorded[k] = r
		if len(s.holders[k]) == 0 {
			gone = append(gone, k)
		}
	}
	var drift []target.TypeDrift
	var mended, clean []*schema.UserType
	for _, u := range s.types {
		k := u.String()
		if s.clean[k] {
			clean = append(clean, u)
		}
		r, ok := recorded[k]
		if !followed || !ok || r.Structure == u.Structure() {
			continue
		}
		su, err := schema.LoadType(ctx, src, u.Schema, u.Name)
		if err != nil {
			return fmt.Errorf("look up type %s on the source: %w", u, err)
		}
		if su != nil && su.Structure() == u.Structure() {
			log.Warn("a type of the target was changed since repstream recorded it, and is now the source's: recorded anew",
				"type", k, "recorded", r.Structure, "now", u.Structure())
			mended = append(mended, u)
			continue
		}
		drift = append(drift, target.TypeDrift{Type: r, Now: u.Structure(), HeldBy: s.holders[k]})
	}
	if err := target.TypeDriftError(drift); err != nil {
		return err
	}
	if err := target.ForgetTypes(ctx, tgt, slot, gone); err != nil {
		return err
	}
	if err := target.RecordTypes(ctx, tgt, slot, mended, true); err != nil {
		return err
	}
	return target.RecordTypes(ctx, tgt, slot, clean, !followed)
}

// recordAddedTypes records, where absent, the types that the target's
// tables hold, checked equal to the source's (CheckAddable). A target
// whose state a version before repstream.types made, not started since,
// records nothing: its next start does.
func recordAddedTypes(ctx context.Context, tgt *pgx.Conn, slot string, tables []schema.TableName) error {
	var kept bool
	if err := tgt.QueryRow(ctx, "SELECT to_regclass('repstream.types') IS NOT NULL").Scan(&kept); err != nil || !kept || slot == "" {
		return err
	}
	var s startTypes
	for _, n := range tables {
		tt, err := schema.LoadTable(ctx, tgt, n.Schema, n.Name)
		if err != nil {
			return fmt.Errorf("target table %s: %w", n, err)
		}
		if err := s.add(ctx, tgt, tt, true); err != nil {
			return err
		}
	}
	return target.RecordTypes(ctx, tgt, slot, s.types, false)
}
