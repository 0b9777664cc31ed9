package apply

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/change"
)

// relKVT has a key, a value and a column that updates may leave as an
// unchanged TOAST value.
var relKVT = &change.Relation{ID: 3, Namespace: "public", Name: "kvt", ReplicaIdentity: change.IdentityDefault,
	Columns: []change.Column{{Name: "k", Key: true}, {Name: "v"}, {Name: "big"}}}

// tup builds a tuple: "-" is null, "~" an unchanged TOAST value.
func tup(vals ...string) change.Tuple {
	kinds := make([]byte, len(vals))
	bs := make([][]byte, len(vals))
	for i, v := range vals {
		switch v {
		case "-":
			kinds[i] = change.KindNull
		case "~":
			kinds[i] = change.KindUnchanged
		default:
			kinds[i], bs[i] = change.KindText, []byte(v)
		}
	}
	return change.AppendTuple(nil, kinds, bs)
}

func ins(rel *change.Relation, vals ...string) *change.Change {
	return &change.Change{Op: change.OpInsert, Rel: rel, New: tup(vals...)}
}

func upd(rel *change.Relation, vals ...string) *change.Change {
	return &change.Change{Op: change.OpUpdate, Rel: rel, New: tup(vals...)}
}

// updKey is an update that moves the row from key old to the new tuple's key.
func updKey(rel *change.Relation, old string, vals ...string) *change.Change {
	o := make([]string, len(rel.Columns))
	for i := range o {
		o[i] = "-"
	}
	o[0] = old
	return &change.Change{Op: change.OpUpdate, Rel: rel, OldKind: 'K', Old: tup(o...), New: tup(vals...)}
}

func del(rel *change.Relation, key string) *change.Change {
	o := make([]string, len(rel.Columns))
	for i := range o {
		o[i] = "-"
	}
	o[0] = key
	return &change.Change{Op: change.OpDelete, Rel: rel, OldKind: 'K', Old: tup(o...)}
}

// collapse folds in with a fresh folder.
func collapse(in []*change.Change, ok func(*change.Relation) (bool, error)) ([]*change.Change, int, error) {
	var f folder
	return f.fold(in, ok)
}

// describe renders changes as "op(tuple)" for comparisons.
func describe(cs []*change.Change) string {
	var parts []string
	for _, c := range cs {
		t := c.New
		if c.Op == change.OpDelete {
			t = c.Old
		}
		var vals []string
		it := t.Iter()
		for it.Next() {
			switch it.Kind() {
			case change.KindNull:
				vals = append(vals, "-")
			case change.KindUnchanged:
				vals = append(vals, "~")
			default:
				vals = append(vals, string(it.Value()))
			}
		}
		if c.Op == change.OpDelete {
			vals = vals[:1]
		}
		name := ""
		if c.Rel != nil && c.Rel != relKVT {
			name = c.Rel.Name + ":"
		}
		parts = append(parts, fmt.Sprintf("%s%s(%s)", name, c.Op, strings.Join(vals, ",")))
	}
	return strings.Join(parts, " ")
}

func TestCollapseCases(t *testing.T) {
	yes := func(*change.Relation) (bool, error) { return true, nil }
	cases := []struct {
		name  string
		in    []*change.Change
		want  string
		saved int
	}{
		{"insert+update", []*change.Change{ins(relKVT, "1", "a", "x"), upd(relKVT, "1", "b", "~")},
			"insert(1,b,x)", 1},
		// Not into nothing: on a row only the target has, the insert's
		// duplicate key is what the user sees.
		{"insert+delete stay", []*change.Change{ins(relKVT, "1", "a", "x"), del(relKVT, "1")},
			"insert(1,a,x) delete(1)", 0},
		{"insert+updates+delete", []*change.Change{ins(relKVT, "1", "a", "x"), upd(relKVT, "1", "b", "~"), upd(relKVT, "1", "c", "~"), del(relKVT, "1")},
			"insert(1,c,x) delete(1)", 2},
		{"insert+delete+insert", []*change.Change{ins(relKVT, "1", "a", "x"), del(relKVT, "1"), ins(relKVT, "1", "c", "y")},
			"insert(1,a,x) delete(1) insert(1,c,y)", 0},
		{"updates keep unchanged TOAST", []*change.Change{upd(relKVT, "1", "a", "~"), upd(relKVT, "1", "b", "~"), upd(relKVT, "1", "c", "z")},
			"update(1,c,z)", 2},
		{"update over unchanged", []*change.Change{upd(relKVT, "1", "a", "x"), upd(relKVT, "1", "b", "~")},
			"update(1,b,x)", 1},
		{"update+delete", []*change.Change{upd(relKVT, "1", "a", "x"), del(relKVT, "1")},
			"delete(1)", 1},
		{"delete+insert stay", []*change.Change{del(relKVT, "1"), ins(relKVT, "1", "a", "x"), upd(relKVT, "1", "b", "~")},
			"delete(1) insert(1,b,x)", 1},
		{"other keys keep their place", []*change.Change{ins(relKVT, "1", "a", "x"), ins(relKVT, "2", "a", "x"), upd(relKVT, "1", "b", "~")},
			"insert(2,a,x) insert(1,b,x)", 1},
		{"key change closes both runs", []*change.Change{
			ins(relKVT, "1", "a", "x"), ins(relKVT, "2", "a", "x"), del(relKVT, "2"),
			updKey(relKVT, "1", "2", "b", "~"), upd(relKVT, "2", "c", "~")},
			"insert(1,a,x) insert(2,a,x) delete(2) update(2,b,~) update(2,c,~)", 0},
		{"unfoldable table untouched", []*change.Change{ins(relKV, "1", "a"), upd(relKV, "1", "b")},
			"kv:insert(1,a) kv:update(1,b)", 0},
		{"key unknown: nothing folded", []*change.Change{ins(relKVT, "1", "a", "x"), upd(relKVT, "1", "b", "~"), upd(relKVT, "~", "c", "x")},
			"insert(1,a,x) update(1,b,~) update(~,c,x)", 0},
		{"truncate ends runs", []*change.Change{ins(relKVT, "1", "a", "x"),
			{Op: change.OpTruncate, TruncateRels: []*change.Relation{relKVT}}, ins(relKVT, "1", "b", "x"), upd(relKVT, "1", "c", "~")},
			"insert(1,a,x) truncate() insert(1,c,x)", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok := func(rel *change.Relation) (bool, error) {
				if rel == relKV {
					return false, nil
				}
				return yes(rel)
			}
			in := slices.Clone(tc.in)
			before := describe(in)
			out, saved, err := collapse(in, ok)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(out); got != tc.want || saved != tc.saved {
				t.Errorf("got %q (saved %d), want %q (saved %d)", got, saved, tc.want, tc.saved)
			}
			if describe(in) != before {
				t.Errorf("input modified: %s", describe(in))
			}
		})
	}
}

// model is a table as a map from key to row values ("~" never stored).
type model map[string][3]string

// apply applies c like the target would and reports whether it found what
// it expected (no duplicate key on insert, the row present on update and
// delete).
func (m model) apply(c *change.Change) bool {
	get := func(t change.Tuple) [3]string {
		var r [3]string
		it := t.Iter()
		for it.Next() {
			switch it.Kind() {
			case change.KindUnchanged:
				r[it.Index()] = "~"
			case change.KindNull:
				r[it.Index()] = "-"
			default:
				r[it.Index()] = string(it.Value())
			}
		}
		return r
	}
	switch c.Op {
	case change.OpInsert:
		r := get(c.New)
		if _, dup := m[r[0]]; dup {
			return false
		}
		m[r[0]] = r
	case change.OpUpdate:
		r := get(c.New)
		from := r[0]
		if c.OldKind != 0 {
			from = get(c.Old)[0]
		}
		old, found := m[from]
		if !found {
			return false
		}
		for i := range r {
			if r[i] == "~" {
				r[i] = old[i]
			}
		}
		delete(m, from)
		if _, dup := m[r[0]]; dup {
			return false
		}
		m[r[0]] = r
	case change.OpDelete:
		k := get(c.Old)[0]
		if _, found := m[k]; !found {
			return false
		}
		delete(m, k)
	}
	return true
}

// TestCollapseRandom generates random valid change sequences over a few keys
// (inserts, updates with and without unchanged TOAST values, key changes,
// deletes) and checks that the folded sequence applied to the same starting
// table gives the same table, never misses a row or hits a duplicate, and
// never has more changes.
func TestCollapseRandom(t *testing.T) {
	for seed := uint64(0); seed < 2000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		keys := 1 + rng.IntN(6)
		src := model{}
		for k := 0; k < keys; k++ {
			if rng.IntN(2) == 0 {
				key := keyName(k)
				src[key] = [3]string{key, "v0", "big0"}
			}
		}
		start := clone(src)
		var in []*change.Change
		for i := 0; i < rng.IntN(30); i++ {
			key := keyName(rng.IntN(keys))
			row, exists := src[key]
			var c *change.Change
			val := fmt.Sprintf("v%d", i)
			switch {
			case !exists:
				c = ins(relKVT, key, val, fmt.Sprintf("big%d", i))
			case rng.IntN(4) == 0:
				c = del(relKVT, key)
			case rng.IntN(4) == 0:
				to := keyName(rng.IntN(keys))
				if _, taken := src[to]; taken {
					continue
				}
				c = updKey(relKVT, key, to, val, "~")
			default:
				big := "~"
				if rng.IntN(3) == 0 {
					big = fmt.Sprintf("big%d", i)
				}
				c = upd(relKVT, key, val, big)
			}
			_ = row
			if !src.apply(c) {
				t.Fatalf("seed %d: generator made an invalid change %s", seed, describe([]*change.Change{c}))
			}
			in = append(in, c)
		}
		out, saved, err := collapse(in, func(*change.Relation) (bool, error) { return true, nil })
		if err != nil {
			t.Fatal(err)
		}
		if saved != len(in)-len(out) || len(out) > len(in) {
			t.Fatalf("seed %d: saved %d, in %d, out %d", seed, saved, len(in), len(out))
		}
		tgt := clone(start)
		for _, c := range out {
			if !tgt.apply(c) {
				t.Fatalf("seed %d: folded change %s fails on the target\nin:  %s\nout: %s", seed,
					describe([]*change.Change{c}), describe(in), describe(out))
			}
		}
		if fmt.Sprint(tgt) != fmt.Sprint(src) {
			t.Fatalf("seed %d: target %v, source %v\nin:  %s\nout: %s", seed, tgt, src, describe(in), describe(out))
		}
	}
}

func keyName(k int) string { return fmt.Sprintf("k%d", k) }

func clone(m model) model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func BenchmarkCollapse(b *testing.B) {
	// A hot-row group: 1,000 transactions each inserting a new row and
	// updating one of 10 counters.
	var in []*change.Change
	for i := 0; i < 1000; i++ {
		in = append(in, ins(relKVT, fmt.Sprintf("o%d", i), "v", "x"), upd(relKVT, fmt.Sprintf("c%d", i%10), fmt.Sprint(i), "~"))
	}
	yes := func(*change.Relation) (bool, error) { return true, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := collapse(in, yes); err != nil {
			b.Fatal(err)
		}
	}
}
