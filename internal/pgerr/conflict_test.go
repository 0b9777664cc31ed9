package pgerr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassifyData(t *testing.T) {
	tests := []struct {
		code Code
		want DataClass
	}{
		{UniqueViolation, Unique},
		{ExclusionViolation, Unique},
		{RowMissing, RowNotFound},
		{CheckViolation, Check},
		{ForeignKeyViolation, ForeignKey},
		{NotNullViolation, NotNull},
		{InvalidTextRepresentation, ValueProblems},
		{"22003", ValueProblems}, // numeric value out of range
		{"22001", ValueProblems}, // string data right truncation
		{DeadlockDetected, NotData},
		{SerializationFailure, NotData},
		{ConnectionFailure, NotData},
		{UndefinedTable, NotData},
		{InsufficientPrivilege, NotData},
	}
	for _, tt := range tests {
		if got := ClassifyData(pg(tt.code)); got != tt.want {
			t.Errorf("ClassifyData(%s) = %q, want %q", tt.code, got, tt.want)
		}
	}
	if got := ClassifyData(errors.New("plain")); got != NotData {
		t.Errorf("ClassifyData(plain) = %q", got)
	}
}

func TestDetailKey(t *testing.T) {
	tests := []struct{ detail, want string }{
		{"Key (id)=(5) already exists.", "(id)=(5)"},
		{"Key (a, b)=(1, x y) already exists.", "(a, b)=(1, x y)"},
		{`Key (ref)=(7) is not present in table "parent".`, "(ref)=(7)"},
		{"Key (r)=([1,2)) conflicts with existing key (r)=([1,3)).", "(r)=([1,2))"},
		{"Failing row contains (1, -5).", ""},
		{"", ""},
	}
	for _, tt := range tests {
		err := fmt.Errorf("w: %w", &pgconn.PgError{Code: "23505", Detail: tt.detail})
		if got := DetailKey(err); got != tt.want {
			t.Errorf("DetailKey(%q) = %q, want %q", tt.detail, got, tt.want)
		}
	}
}
