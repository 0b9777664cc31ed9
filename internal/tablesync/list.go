package tablesync

import (
	"context"
	"slices"
	"time"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/target"
)

// TableRow is one line of `tables list`.
type TableRow struct {
	Table     string    `json:"table"`
	Published bool      `json:"published"`
	State     string    `json:"state"`    // pending, copying, ready, or "" (no copy recorded)
	SyncLSN   string    `json:"sync_lsn"` // "" before the copy
	Rows      int64     `json:"rows"`
	Bytes     int64     `json:"bytes"`
	CopiedAt  time.Time `json:"copied_at"`
	// IndexesNotBuilt are the source's indexes of the table that
	// --create-tables could not build on the target (and that are still
	// missing there): the table replicates without them.
	IndexesNotBuilt []target.UnbuiltIndex `json:"indexes_not_built,omitempty"`
}

// ListTables returns the publication's tables and every table with a sync
// state for the slot, ordered by name.
func ListTables(ctx context.Context, cfg config.Config) ([]TableRow, error) {
	cfg.EnsureDefaults()
	pub := cfg.Publication
	src, tgt, closeBoth, err := install.ConnectBoth(ctx, cfg, "repstream-tables")
	if err != nil {
		return nil, err
	}
	defer closeBoth()
	published, err := install.PublicationTables(ctx, src, pub)
	if err != nil {
		return nil, err
	}
	syncs, err := target.LoadTableSyncs(ctx, tgt, cfg.Slot)
	if err != nil {
		return nil, err
	}
	rows := map[string]*TableRow{}
	var order []string
	get := func(name string) *TableRow {
		if r, ok := rows[name]; ok {
			return r
		}
		rows[name] = &TableRow{Table: name}
		order = append(order, name)
		return rows[name]
	}
	for _, t := range published {
		get(t.String()).Published = true
	}
	for _, s := range syncs {
		r := get(s.String())
		r.State, r.Rows, r.Bytes, r.CopiedAt = s.State, s.Rows, s.Bytes, s.CopiedAt
		if s.SyncLSN != 0 {
			r.SyncLSN = s.SyncLSN.String()
		}
	}
	unbuilt, err := target.UnbuiltIndexes(ctx, tgt, cfg.Slot)
	if err != nil {
		return nil, err
	}
	for _, u := range unbuilt {
		r := get(u.Table.String())
		r.IndexesNotBuilt = append(r.IndexesNotBuilt, u)
	}
	slices.Sort(order)
	out := make([]TableRow, len(order))
	for i, n := range order {
		out[i] = *rows[n]
	}
	return out, nil
}
