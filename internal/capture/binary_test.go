package capture

import (
	"errors"
	"strings"
	"testing"

	"github.com/repstream/repstream/internal/change"
)

// TestBinaryCarries: a raw session streaming binary ends at a relation
// with a column whose type is not built in (ErrTextNeeded, naming the
// column) or of an object identifier type (regclass: its binary form is
// the source's OID); built-in types pass, and a text session takes
// anything.
func TestBinaryCarries(t *testing.T) {
	rel := &change.Relation{Namespace: "public", Name: "t", Columns: []change.Column{
		{Name: "id", TypeOID: 20, Key: true}, {Name: "v", TypeOID: 25},
	}}
	withEnum := &change.Relation{Namespace: "public", Name: "t", Columns: []change.Column{
		{Name: "id", TypeOID: 20, Key: true}, {Name: "mood", TypeOID: change.FirstNormalOID + 7},
	}}
	bin := &Capture{opts: Options{Binary: true}}
	if err := bin.binaryCarries(rel); err != nil {
		t.Fatalf("built-in types: %v", err)
	}
	err := bin.binaryCarries(withEnum)
	if !errors.Is(err, ErrTextNeeded) || !strings.Contains(err.Error(), `column "mood" of public.t`) {
		t.Fatalf("a type not built in: %v", err)
	}
	withRegclass := &change.Relation{Namespace: "public", Name: "t", Columns: []change.Column{
		{Name: "id", TypeOID: 20, Key: true}, {Name: "r", TypeOID: 2205},
	}}
	if err := bin.binaryCarries(withRegclass); !errors.Is(err, ErrTextNeeded) || !strings.Contains(err.Error(), `column "r" of public.t: type regclass holds the OID of an object`) {
		t.Fatalf("regclass: %v", err)
	}
	text := &Capture{opts: Options{}}
	if err := text.binaryCarries(withEnum); err != nil {
		t.Fatalf("a text session: %v", err)
	}
}
