package schema

import (
	"slices"
	"testing"
)

func TestSplitTableList(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"a.b,c", []string{"a.b", "c"}},
		{" a.b , c ", []string{"a.b", "c"}},
		{`"a,b"."t,1",public.x`, []string{`"a,b"."t,1"`, "public.x"}},
		{`"q""," . "x,y" , s.*`, []string{`"q""," . "x,y"`, "s.*"}},
		{`"sp ace"."d.o.t"`, []string{`"sp ace"."d.o.t"`}},
		{`"open,x`, []string{`"open,x`}},
		{"a,,b", []string{"a", "", "b"}},
	} {
		if got := SplitTableList(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("SplitTableList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// Each part parses back to the identifier the quotes hold.
	n, err := ParseTableName(SplitTableList(`"a,b"."t,1", x`)[0])
	if err != nil || n != (TableName{Schema: "a,b", Name: "t,1"}) {
		t.Errorf("parse: %v %v", n, err)
	}
}
