package pgerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func pg(code Code) error {
	return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: string(code), Message: "m"})
}

func TestCopyWhere(t *testing.T) {
	tests := []struct {
		where string
		line  int
		col   string
		ok    bool
	}{
		{`COPY items, line 3, column id: "x"`, 3, "id", true},
		{`COPY items, line 12`, 12, "", true},
		{`COPY items, line 7: "1	a, line 99, column z"`, 7, "", true},
		{"SQL function \"f\"\nCOPY items, line 2, column b", 2, "b", true},
		{`PL/pgSQL function x()`, 0, "", false},
		{``, 0, "", false},
	}
	for _, tt := range tests {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Where: tt.where})
		cc, ok := CopyWhere(err)
		if ok != tt.ok || cc.Line != tt.line || cc.Column != tt.col {
			t.Errorf("CopyWhere(%q) = %+v, %v; want line %d column %q, %v", tt.where, cc, ok, tt.line, tt.col, tt.ok)
		}
	}
	if _, ok := CopyWhere(errors.New("plain")); ok {
		t.Error("non-PgError gave a COPY context")
	}
}

func TestParam(t *testing.T) {
	for where, want := range map[string]int{
		`unnamed portal parameter $2 = '...'`:             2,
		"SQL statement\nunnamed portal parameter $12 = x": 12,
		`unnamed portal parameter $ = x`:                  0,
		`COPY t, line 1`:                                  0,
	} {
		if got := Param(&pgconn.PgError{Where: where}); got != want {
			t.Errorf("Param(%q) = %d, want %d", where, got, want)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name                               string
		err                                error
		lost, conflict, unique, inUse, prm bool
	}{
		{"deadlock", pg(DeadlockDetected), false, true, false, false, false},
		{"serialization", pg(SerializationFailure), false, true, false, false, false},
		{"unique", pg(UniqueViolation), false, false, true, false, false},
		{"exclusion", pg(ExclusionViolation), false, false, true, false, false},
		{"slot in use", pg(ObjectInUse), false, false, false, true, false},
		{"privilege", pg(InsufficientPrivilege), false, false, false, false, true},
		{"admin shutdown", pg(AdminShutdown), true, false, false, false, false},
		{"recovery", pg(CannotConnectNow), true, false, false, false, false},
		{"too many", pg(TooManyConnections), true, false, false, false, false},
		{"class 08", pg("08P01"), true, false, false, false, false},
		{"auth", pg(InvalidPassword), false, false, false, false, false},
		{"missing table", pg(UndefinedTable), false, false, false, false, false},
		{"eof", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true, false, false, false, false},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, true, false, false, false, false},
		{"plain", errors.New("x"), false, false, false, false, false},
		{"canceled", context.Canceled, false, false, false, false, false},
		{"nil", nil, false, false, false, false, false},
	}
	for _, tt := range tests {
		if got := ConnectionLost(tt.err); got != tt.lost {
			t.Errorf("%s: ConnectionLost = %v", tt.name, got)
		}
		if got := TxnConflict(tt.err); got != tt.conflict {
			t.Errorf("%s: TxnConflict = %v", tt.name, got)
		}
		if got := UniqueConflict(tt.err); got != tt.unique {
			t.Errorf("%s: UniqueConflict = %v", tt.name, got)
		}
		if got := SlotInUse(tt.err); got != tt.inUse {
			t.Errorf("%s: SlotInUse = %v", tt.name, got)
		}
		if got := PermissionDenied(tt.err); got != tt.prm {
			t.Errorf("%s: PermissionDenied = %v", tt.name, got)
		}
	}
}

func FuzzWhere(f *testing.F) {
	f.Add("COPY t, line 3, column c: \"v\"")
	f.Add("unnamed portal parameter $1 = 'x'")
	f.Fuzz(func(t *testing.T, where string) {
		err := &pgconn.PgError{Where: where}
		cc, _ := CopyWhere(err)
		if cc.Line < 0 {
			t.Fatalf("negative line %d", cc.Line)
		}
		if Param(err) < 0 {
			t.Fatal("negative parameter")
		}
	})
}

func TestPrivilegeExplain(t *testing.T) {
	t.Parallel()
	denied := fmt.Errorf("copy: %w", &pgconn.PgError{Severity: "ERROR", Code: "42501", Message: "permission denied for table t"})
	other := fmt.Errorf("copy: %w", &pgconn.PgError{Code: "23505", Message: "duplicate key"})
	tests := []struct {
		name string
		p    Privilege
		err  error
		want string // "" = unchanged
	}{
		{name: "select", p: SelectPrivilege("public.t", "repl"), err: denied,
			want: "copy: ERROR: permission denied for table t (SQLSTATE 42501); the source role repl needs SELECT on public.t for the initial copy; run: GRANT SELECT ON public.t TO repl"},
		{name: "replication", p: ReplicationPrivilege("Repl User"), err: denied, want: `run: ALTER ROLE "Repl User" REPLICATION`},
		{name: "publication", p: PublicationPrivilege("rs", []string{"public.a", "public.b"}, "repl"), err: denied,
			want: "run: CREATE PUBLICATION rs FOR TABLE public.a, public.b (as the tables' owner"},
		{name: "session_replication_role", p: ReplicationRolePrivilege("app"), err: denied,
			want: "run: GRANT SET ON PARAMETER session_replication_role TO app (PostgreSQL 15+"},
		{name: "write", p: WritePrivilege(`public."T"`, "app"), err: denied, want: `run: GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public."T" TO app`},
		{name: "state schema", p: CreateSchemaPrivilege("app-db", "app"), err: denied, want: `run: GRANT CREATE ON DATABASE "app-db" TO app`},
		{name: "other errors unchanged", p: SelectPrivilege("public.t", "repl"), err: other},
		{name: "nil unchanged", p: SelectPrivilege("public.t", "repl"), err: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.p.Explain(tt.err)
			if tt.want == "" {
				if got != tt.err {
					t.Fatalf("Explain changed %v into %v", tt.err, got)
				}
				return
			}
			var pe *PrivilegeError
			if !errors.As(got, &pe) || !PermissionDenied(got) || !strings.Contains(got.Error(), tt.want) {
				t.Fatalf("Explain = %v\nwant it to contain %q and wrap the permission error", got, tt.want)
			}
			// A second Explain further out keeps the first, closer one.
			if again := WritePrivilege("x", "y").Explain(fmt.Errorf("outer: %w", got)); strings.Contains(again.Error(), "ON x TO y") {
				t.Fatalf("an explained error was explained again: %v", again)
			}
		})
	}
	if msg := ReplicationPrivilege("r").Missing().Error(); msg != "the source role r needs the REPLICATION attribute to stream from a replication slot; run: ALTER ROLE r REPLICATION" {
		t.Fatalf("Missing: %s", msg)
	}
}

func TestTransient(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"silent link", fmt.Errorf("receive: %w", ErrSilentLink), true},
		{"slot in use", pg(ObjectInUse), true},
		{"admin shutdown", pg(AdminShutdown), true},
		{"crash shutdown", pg(CrashShutdown), true},
		{"recovery", pg(CannotConnectNow), true},
		{"reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		{"eof", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{"disk full", pg(DiskFull), false},
		// Local file errors (a spill file's): a syscall.Errno has the methods
		// of net.Error, and was once taken for a lost connection, retried
		// forever on a full spill disk.
		{"local disk full", fmt.Errorf("write spill file /s/txn-1-1.spill at offset 0: %w", &os.PathError{Op: "write", Path: "/s/txn-1-1.spill", Err: syscall.ENOSPC}), false},
		{"local quota", &os.PathError{Op: "write", Path: "/s/f", Err: syscall.EDQUOT}, false},
		{"local read-only", &os.PathError{Op: "openat", Path: "f", Err: syscall.EROFS}, false},
		{"local permission", &os.PathError{Op: "openat", Path: "f", Err: syscall.EACCES}, false},
		{"local i/o error", &os.PathError{Op: "read", Path: "/s/f", Err: syscall.EIO}, false},
		{"bare errno", fmt.Errorf("x: %w", syscall.ENOSPC), false},
		{"network timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}, true},
		{"network unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, true},
		{"auth", pg(InvalidPassword), false},
		{"privilege", pg(InsufficientPrivilege), false},
		{"missing slot or publication", pg(UndefinedObject), false},
		{"invalidated slot", pg(ObjectNotInPrerequisite), false},
		{"unique", pg(UniqueViolation), false},
		{"canceled", context.Canceled, false},
		{"plain", errors.New("x"), false},
		{"nil", nil, false},
	} {
		if got := Transient(tt.err); got != tt.want {
			t.Errorf("%s: Transient = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestTruncateRefused(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{pg(FeatureNotSupported), true}, // a foreign key references the table
		{pg(InsufficientPrivilege), true},
		{fmt.Errorf("truncate: %w", pg(LockNotAvailable)), true},
		{pg(AdminShutdown), false},
		{pg(UndefinedTable), false},
		{io.ErrUnexpectedEOF, false},
		{nil, false},
	} {
		if got := TruncateRefused(c.err); got != c.want {
			t.Errorf("TruncateRefused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
