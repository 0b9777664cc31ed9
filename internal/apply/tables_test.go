package apply

import (
	"testing"

	"github.com/repstream/repstream/internal/change"
)

func TestTableFilterKeep(t *testing.T) {
	a := &change.Relation{Namespace: "public", Name: "a"} // ready, copied at 0/100
	b := &change.Relation{Namespace: "public", Name: "b"} // pending
	c := &change.Relation{Namespace: "public", Name: "c"} // unknown: applied in full
	d := &change.Relation{Namespace: "other", Name: "a"}  // same name, other schema
	f := NewTableFilter(map[TableName]TableState{
		{"public", "a"}: {Ready: true, SyncLSN: 0x100},
		{"public", "b"}: {},
	})
	ins := func(r *change.Relation) *change.Change { return &change.Change{Op: change.OpInsert, Rel: r} }
	cases := []struct {
		name string
		rel  *change.Relation
		end  change.LSN
		keep bool
	}{
		{"ready, ends before the copy's snapshot", a, 0xff, false},
		{"ready, ends exactly at the copy's snapshot (in the copy)", a, 0x100, false},
		{"ready, ends just after the copy's snapshot", a, 0x101, true},
		{"ready, in progress (end unknown)", a, 0, true},
		{"pending, any end", b, 0x1000, false},
		{"pending, in progress", b, 0, false},
		{"unknown table", c, 0x10, true},
		{"other schema, same name", d, 0x10, true},
	}
	for _, tc := range cases {
		got, keep := f.Keep(ins(tc.rel), tc.end)
		if keep != tc.keep {
			t.Errorf("%s: keep = %v, want %v", tc.name, keep, tc.keep)
		}
		if keep && got.Rel != tc.rel {
			t.Errorf("%s: the change was altered", tc.name)
		}
	}
	if got := f.MaxSyncLSN(); got != 0x100 {
		t.Errorf("MaxSyncLSN = %s, want 0/100", got)
	}

	// TRUNCATE of several relations keeps those not skipped.
	tr := &change.Change{Op: change.OpTruncate, TruncateRels: []*change.Relation{a, b, c}}
	got, keep := f.Keep(tr, 0x50)
	if !keep || len(got.TruncateRels) != 1 || got.TruncateRels[0] != c {
		t.Fatalf("truncate a, b, c at 0/50: keep=%v rels=%v", keep, got.TruncateRels)
	}
	if len(tr.TruncateRels) != 3 {
		t.Fatal("Keep changed the original change")
	}
	got, keep = f.Keep(tr, 0x200)
	if !keep || len(got.TruncateRels) != 2 {
		t.Fatalf("truncate a, b, c at 0/200: keep=%v rels=%v", keep, got.TruncateRels)
	}
	if _, keep := f.Keep(&change.Change{Op: change.OpTruncate, TruncateRels: []*change.Relation{a, b}}, 0x50); keep {
		t.Fatal("truncate of skipped tables only was kept")
	}

	// Put makes a pending table ready; a nil filter keeps everything.
	f.Put(TableName{"public", "b"}, TableState{Ready: true, SyncLSN: 0x300})
	if _, keep := f.Keep(ins(b), 0x300); keep {
		t.Error("b ready at 0/300: change ending at 0/300 kept")
	}
	if _, keep := f.Keep(ins(b), 0x301); !keep {
		t.Error("b ready at 0/300: change ending at 0/301 skipped")
	}
	if f.MaxSyncLSN() != 0x300 {
		t.Errorf("MaxSyncLSN = %s, want 0/300", f.MaxSyncLSN())
	}
	var none *TableFilter
	if _, keep := none.Keep(ins(a), 1); !keep {
		t.Error("nil filter skipped a change")
	}
}
