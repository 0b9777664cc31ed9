package schema

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestRelationAddSQL: what an added column becomes on the target for each
// thing the source's catalog can say about it; golden file
// testdata/relation_add.txt.
func TestRelationAddSQL(t *testing.T) {
	s := func(v string) *string { return &v }
	cases := []struct {
		name        string
		typ         string
		v           AddedValue
		targetEmpty bool
		wantErr     error
	}{
		{name: "constant default", typ: "integer", v: AddedValue{Type: "integer", HasMissing: true, Missing: s("7"), Default: s("7")}},
		{name: "default dropped since", typ: "integer", v: AddedValue{Type: "integer", HasMissing: true, Missing: s("7")}},
		{name: "text with quotes, commas and braces", typ: "text", v: AddedValue{Type: "text", HasMissing: true, Missing: s(`a,'b' "c" {d} \e`), Default: s("'x'::text")}},
		{name: "the text NULL", typ: "text", v: AddedValue{Type: "text", HasMissing: true, Missing: s("NULL"), Default: s("'NULL'::text")}},
		{name: "now()", typ: "timestamp with time zone", v: AddedValue{Type: "timestamp with time zone", HasMissing: true, Missing: s("2026-11-24 15:00:00.123456+00"), Default: s("now()")}},
		{name: "missing NULL", typ: "integer", v: AddedValue{Type: "integer", HasMissing: true, Default: s("f()")}},
		{name: "no default", typ: "integer", v: AddedValue{Type: "integer"}},
		{name: "default NULL", typ: "integer", v: AddedValue{Type: "integer", Default: s("NULL::integer")}},
		{name: "volatile, target has rows", typ: "double precision", v: AddedValue{Type: "double precision", Default: s("random()")}, wantErr: ErrVolatileDefault},
		{name: "volatile, target empty", typ: "double precision", v: AddedValue{Type: "double precision", Default: s("random()")}, targetEmpty: true},
		{name: "a domain's volatile default, target has rows", typ: "public.dn", v: AddedValue{Type: "public.dn", DomainDefault: s("random()")}, wantErr: ErrVolatileDefault},
		{name: "a domain's default, stored once", typ: "public.dn", v: AddedValue{Type: "public.dn", DomainDefault: s("5"), HasMissing: true, Missing: s("5")}},
		{name: "identity, target has rows", typ: "integer", v: AddedValue{Type: "integer", Identity: "a"}, wantErr: ErrVolatileDefault},
		{name: "identity, target empty", typ: "integer", v: AddedValue{Type: "integer", Identity: "d"}, targetEmpty: true},
		{name: "type changed since", typ: "integer", v: AddedValue{Type: "bigint", HasMissing: true, Missing: s("7")}, wantErr: ErrAddedColumnGone},
		{name: "generated", typ: "integer", v: AddedValue{Type: "integer", Generated: s("(id * 2)")}},
	}
	var b strings.Builder
	for _, tc := range cases {
		fmt.Fprintf(&b, "== %s\n", tc.name)
		actions, err := RelationAddSQL(`Col "x"`, tc.typ, tc.v, tc.targetEmpty)
		if !errors.Is(err, tc.wantErr) || (err != nil) != (tc.wantErr != nil) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.wantErr)
		}
		for _, a := range actions {
			fmt.Fprintf(&b, "%s;\n", a)
		}
		if err != nil {
			fmt.Fprintf(&b, "ERROR: %v\n", err)
		}
	}
	checkGolden(t, "relation_add.txt", b.String())
}
