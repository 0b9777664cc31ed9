package schema

import "testing"

func TestUserTypeCreateSQL(t *testing.T) {
	for _, tc := range []struct {
		u    UserType
		want string
	}{
		{UserType{Schema: "app", Name: "mood", Kind: 'e', Labels: []string{"sad", "it's"}}, `CREATE TYPE "app"."mood" AS ENUM ('sad', 'it''s')`},
		{UserType{Schema: "app", Name: "pt", Kind: 'c', Attrs: []TypeField{{"x", "integer"}, {"Tag", "app.mood[]"}}}, `CREATE TYPE "app"."pt" AS ("x" integer, "Tag" app.mood[])`},
		{UserType{Schema: "app", Name: "pos", Kind: 'd', Base: "numeric(10,2)", NotNull: true, Default: "1", Checks: [][2]string{{"pos_check", "CHECK ((VALUE > (0)::numeric))"}}},
			`CREATE DOMAIN "app"."pos" AS numeric(10,2) DEFAULT 1 NOT NULL CONSTRAINT "pos_check" CHECK ((VALUE > (0)::numeric))`},
		{UserType{Schema: "public", Name: "fr", Kind: 'r', Subtype: "double precision"}, `CREATE TYPE "public"."fr" AS RANGE (SUBTYPE = double precision)`},
	} {
		if got := tc.u.CreateSQL(); got != tc.want {
			t.Errorf("CreateSQL:\n got %s\nwant %s", got, tc.want)
		}
		drop := `DROP TYPE "` + tc.u.Schema + `"."` + tc.u.Name + `"`
		if tc.u.Kind == 'd' {
			drop = `DROP DOMAIN "` + tc.u.Schema + `"."` + tc.u.Name + `"`
		}
		if got := tc.u.DropSQL(); got != drop {
			t.Errorf("DropSQL:\n got %s\nwant %s", got, drop)
		}
	}
}

func TestUserTypeIncompatible(t *testing.T) {
	enum := func(l ...string) *UserType { return &UserType{Kind: 'e', Labels: l} }
	src := enum("a", "b", "c")
	for _, tc := range []struct {
		target *UserType
		ok     bool
	}{
		{enum("a", "b", "c"), true},
		{enum("a", "x", "b", "c", "d"), true}, // more labels, same order
		{enum("a", "c"), false},
		{enum("b", "a", "c"), false},
		{&UserType{Kind: 'c'}, false},
	} {
		if why := src.Incompatible(tc.target); (why == "") != tc.ok {
			t.Errorf("enum %v against target %+v: %q", src.Labels, tc.target, why)
		}
	}
	comp := &UserType{Kind: 'c', Attrs: []TypeField{{"x", "integer"}}}
	if why := comp.Incompatible(&UserType{Kind: 'c', Attrs: []TypeField{{"x", "bigint"}}}); why == "" {
		t.Error("a composite with another attribute type was taken as compatible")
	}
	dom := &UserType{Kind: 'd', Base: "text"}
	if why := dom.Incompatible(&UserType{Kind: 'd', Base: "text"}); why != "" {
		t.Errorf("same domain: %s", why)
	}
}

func TestSilentConversion(t *testing.T) {
	for _, tc := range []struct {
		from, to string
		silent   bool
	}{
		{"timestamp with time zone", "timestamp without time zone", true},
		{"timestamp without time zone", "timestamp with time zone", true},
		{"time with time zone", "time without time zone", true},
		{"timestamp(3) with time zone", "timestamp with time zone", false},
		{"double precision", "real", true},
		{"numeric", "double precision", true},
		{"bigint", "double precision", true},
		{"integer", "double precision", false},
		{"integer", "real", true},
		{"real", "double precision", false},
		{"numeric", "numeric(10,2)", true},
		{"numeric(10,4)", "numeric(12,2)", true},
		{"numeric(10,2)", "numeric(12,4)", false},
		{"numeric(10,2)", "numeric", false},
		{"numeric(10)", "numeric(12)", false},
		{"text", "integer", false},                               // the target rejects what it cannot hold
		{"character varying(20)", "character varying(10)", true}, // 'ab' and 11 spaces: 'ab' and 8
		{"text", "character varying(10)", true},
		{"character varying", "character varying(10)", true},
		{"character varying(10)", "character varying(20)", false},
		{"character varying(10)", "character varying(10)", false},
		{"character varying(10)", "text", false},
		{"text", "name", true},
		{"character varying(20)", "name", true},
		{"name", "name", false},
		// Any type's text goes into name, cut at 63 bytes.
		{"jsonb", "name", true},
		{"bytea", "name", true},
		{"text[]", "name", true},
		{"numeric", "name", true},
		{"integer", "name", false},
		{"uuid", "name", false},
		{"timestamp(3) with time zone", "name", false},
		{"character varying(15)", "name", false},
		{"integer[]", "name[]", false},
		{"text[]", "name[]", true},
		{"name[]", "name[]", false},
		{"text", "name[]", false}, // another kind: Incompatible's
		{"text[]", "character varying(10)[]", true},
		{"json[]", "character(10)[]", true},
		// Any text that may end in spaces loses them in character(n),
		// and beyond the length in character varying(n).
		{"json", "character varying(10)", true},
		{"xml", "character varying(10)", true},
		{"name", "character varying(10)", true},
		{"character(10)", "character varying(5)", true},
		{"bpchar", "character varying(5)", true},
		{"character(5)", "character varying(5)", false},
		{"jsonb", "character varying(10)", false}, // no trailing spaces: longer is refused
		{"integer", "character varying(3)", false},
		{`"char"`, "character varying(1)", false},
		{"json", "character(10)", true},
		{"name", "character(10)", true},
		{"bpchar", "character(10)", false},
		{"jsonb", "character(10)", false},
		{"macaddr", "macaddr8", true},
		{"macaddr8", "macaddr", false}, // refused when it is not a 6-byte one
		{"numeric(10,0)", "numeric(10,-2)", true},
		{"integer", "numeric(10,-2)", true},
		{"bigint", "numeric(12,-1)", true},
		{"numeric(10,2)", "numeric(12,-1)", true},
		{"numeric(10,-1)", "numeric(10,-2)", true},
		{"numeric(10,-2)", "numeric(10,-1)", false},
		{"numeric(10,-2)", "numeric", false},
		{"integer", "numeric(10,0)", false},
		{"smallint", "numeric(5)", false},
		{"date", "timestamp with time zone", true},
		{"daterange", "tstzrange", true},
		{"date", "timestamp without time zone", false},
		{"integer[]", "integer[]", false},
		{"tstzrange", "tsrange", true}, // the bounds' zone dropped
		{"tstzmultirange", "tsmultirange", true},
		{"numrange", "int4range", false}, // the target rejects 1.5
		{"int8range", "numrange", false},
		{"tsrange[]", "tstzrange[]", true},
		// Each true case below was stored on PostgreSQL 15 and read back changed.
		{"timestamp(3) with time zone", "timestamp(3) without time zone", true},
		{"timestamp without time zone", "timestamp(0) without time zone", true},
		{"timestamp(0) without time zone", "timestamp(3) without time zone", false},
		{"timestamp(3) with time zone", "timestamp(3) with time zone", false},
		{"time without time zone", "time(0) without time zone", true},
		{"time(2) with time zone", "time(1) with time zone", true},
		{"interval", "interval(0)", true},
		{"interval second(3)", "interval", false},
		{"interval", "interval day", true},
		{"interval", "interval year to month", true},
		{"interval day", "interval day to second(3)", false},
		{"interval day to second(3)", "interval day to second(2)", true},
		{"timestamp with time zone", "date", true},
		{"timestamp without time zone", "time without time zone", true},
		{"date", "timestamp without time zone", false},
		{"real", "numeric(5,1)", true},
		{"double precision", "numeric", false},
		{"integer", "numeric(10,2)", false},
		{"numeric", "money", true},
		{"money", "money", false},
		{"text", "character(10)", true},
		{"character varying(5)", "character(5)", true},
		{"character(5)", "character(10)", false},
		{"json", "jsonb", true},
		{"jsonb", "json", false},
		{"timestamp without time zone[]", "timestamp(0) without time zone[]", true},
		{"timestamp with time zone[]", "timestamp without time zone", false}, // another kind: Incompatible's rule
		{`"odd(3)"`, `"odd(3)"`, false},
	} {
		if got := SilentConversion(tc.from, tc.to) != ""; got != tc.silent {
			t.Errorf("SilentConversion(%q, %q) = %v, want %v", tc.from, tc.to, got, tc.silent)
		}
	}
}
