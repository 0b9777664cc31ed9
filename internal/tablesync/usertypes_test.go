package tablesync

import (
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/schema"
)

// TestAltered: which of the source's types a poll takes for altered. An
// enum's label renamed is (its pg_enum oid keeps another name), also when
// the old name is added back (a new oid); labels only added are not (no
// row changed). A composite's attributes dropped and added again (another
// order, or the last one: another attribute number), retyped or renamed
// are; a type dropped or made since is not.
func TestAltered(t *testing.T) {
	// An enum's parts are "oid:label".
	oids := map[string]string{"a": "1", "b": "2", "c": "3", "p": "9", "0": "7", "d": "8", "a2": "1", "b2": "2"}
	enum := func(labels ...string) typeDef {
		parts := make([]string, len(labels))
		for i, l := range labels {
			parts[i] = oids[l] + ":" + l
		}
		return typeDef{name: "public.mood", kind: 'e', parts: parts, shown: labels}
	}
	comp := func(attrs ...string) typeDef {
		return typeDef{name: "public.pt", kind: 'c', parts: attrs, shown: attrs}
	}
	was := typeDefs{1: enum("a", "b"), 2: comp("x 23/-1 #1", "y 23/-1 #2"), 3: enum("p"), 4: comp("z 25/-1 #1")}
	readded := enum("a2", "b") // a renamed to a2, then a added back before it
	readded.parts = append([]string{"10:a"}, readded.parts...)
	cases := []struct {
		name string
		now  typeDefs
		want []uint32
	}{
		{"unchanged", typeDefs{1: enum("a", "b"), 2: comp("x 23/-1 #1", "y 23/-1 #2"), 3: enum("p"), 4: comp("z 25/-1 #1")}, nil},
		{"labels added", typeDefs{1: enum("0", "a", "c", "b", "d"), 2: comp("x 23/-1 #1", "y 23/-1 #2")}, nil},
		{"label renamed", typeDefs{1: enum("a2", "b"), 2: comp("x 23/-1 #1", "y 23/-1 #2")}, []uint32{1}},
		{"renamed and added", typeDefs{1: enum("a", "b2", "c"), 2: comp("x 23/-1 #1", "y 23/-1 #2")}, []uint32{1}},
		{"renamed, the old name added back", typeDefs{1: readded}, []uint32{1}},
		{"attributes reordered", typeDefs{1: enum("a", "b"), 2: comp("y 23/-1 #2", "x 23/-1 #3")}, []uint32{2}},
		{"last attribute dropped and added back", typeDefs{2: comp("x 23/-1 #1", "y 23/-1 #3")}, []uint32{2}},
		{"attribute retyped", typeDefs{1: enum("a", "b"), 2: comp("x 20/-1 #1", "y 23/-1 #2")}, []uint32{2}},
		{"attribute added", typeDefs{2: comp("x 23/-1 #1", "y 23/-1 #2", "w 23/-1 #3")}, []uint32{2}},
		{"both", typeDefs{1: enum("a2", "b"), 2: comp("x 23/-1 #1"), 3: enum("p"), 4: comp("z 25/-1 #1")}, []uint32{1, 2}},
		{"made since", typeDefs{1: enum("a", "b"), 2: comp("x 23/-1 #1", "y 23/-1 #2"), 5: enum("new")}, nil},
	}
	for _, c := range cases {
		got := altered(was, c.now)
		if len(got) != len(c.want) {
			t.Errorf("%s: altered %v, want oids %v", c.name, got, c.want)
			continue
		}
		for _, oid := range c.want {
			if why, ok := got[oid]; !ok || !strings.Contains(why, was[oid].name) {
				t.Errorf("%s: oid %d: %q", c.name, oid, why)
			}
		}
	}
}

// TestTargetDiffers: the end of a run compares the target's type of the
// same name: an enum with labels the source renamed differs, one that
// lacks labels the source added does not; a composite differs in any
// attribute.
func TestTargetDiffers(t *testing.T) {
	e := func(labels ...string) *schema.UserType {
		return &schema.UserType{Schema: "public", Name: "mood", Kind: 'e', Labels: labels}
	}
	c := func(fs ...schema.TypeField) *schema.UserType {
		return &schema.UserType{Schema: "public", Name: "pt", Kind: 'c', Attrs: fs}
	}
	x, y := schema.TypeField{Name: "x", Type: "integer"}, schema.TypeField{Name: "y", Type: "integer"}
	for _, k := range []struct {
		src, tgt *schema.UserType
		differs  bool
	}{
		{e("a", "b"), e("a", "b"), false},
		{e("a", "c", "b"), e("a", "b"), false},
		{e("a2", "b"), e("a", "b"), true},
		{e("b", "a"), e("a", "b"), true},
		{c(x, y), c(x, y), false},
		{c(y, x), c(x, y), true},
		{c(x), c(x, y), true},
	} {
		if got := targetDiffers(k.src, k.tgt); (got != "") != k.differs {
			t.Errorf("source %+v, target %+v: %q, want differs %v", k.src, k.tgt, got, k.differs)
		}
	}
}
