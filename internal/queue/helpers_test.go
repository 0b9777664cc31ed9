package queue

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/stats"
)

var (
	relA = &change.Relation{ID: 16384, Namespace: "public", Name: "a", ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "v", TypeOID: 25, TypeMod: -1}}}
	relB = &change.Relation{ID: 16390, Namespace: "s", Name: "b", ReplicaIdentity: change.IdentityFull,
		Columns: []change.Column{{Name: "x", TypeOID: 25, TypeMod: -1}}}
)

// tuple builds a two-column tuple: the decimal seq and a payload of n bytes
// derived from seq.
func tuple(seq uint64, n int) change.Tuple {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte('a' + (seq+uint64(i))%26)
	}
	return change.Tuple(change.AppendTuple(nil, []byte{change.KindText, change.KindText},
		[][]byte{fmt.Appendf(nil, "%d", seq), p}))
}

// insert makes an insert of row seq with an n-byte payload, LSN = seq.
func insert(rel *change.Relation, xid uint32, seq uint64, n int) *change.Change {
	return &change.Change{Op: change.OpInsert, Xid: xid, LSN: change.LSN(seq), Rel: rel, New: tuple(seq, n)}
}

// update makes an update with an old key tuple.
func update(rel *change.Relation, xid uint32, seq uint64, n int) *change.Change {
	return &change.Change{Op: change.OpUpdate, Xid: xid, LSN: change.LSN(seq), Rel: rel,
		OldKind: 'K', Old: change.Tuple(change.AppendTuple(nil, []byte{change.KindText, change.KindNull},
			[][]byte{fmt.Appendf(nil, "%d", seq), nil})), New: tuple(seq, n)}
}

func truncate(xid uint32, seq uint64, rels ...*change.Relation) *change.Change {
	return &change.Change{Op: change.OpTruncate, Xid: xid, LSN: change.LSN(seq),
		TruncateRels: rels, TruncateOpts: change.TruncateCascade | change.TruncateRestartIdentity}
}

// sameChange reports how got differs from want ("" if equal).
func sameChange(got, want *change.Change) string {
	switch {
	case got.Op != want.Op:
		return fmt.Sprintf("op %v, want %v", got.Op, want.Op)
	case got.Xid != want.Xid:
		return fmt.Sprintf("xid %d, want %d", got.Xid, want.Xid)
	case got.LSN != want.LSN:
		return fmt.Sprintf("lsn %v, want %v", got.LSN, want.LSN)
	case got.Rel != want.Rel:
		return fmt.Sprintf("rel %p, want %p", got.Rel, want.Rel)
	case got.OldKind != want.OldKind:
		return fmt.Sprintf("oldKind %q, want %q", got.OldKind, want.OldKind)
	case !bytes.Equal(got.Old, want.Old):
		return "old tuple differs"
	case !bytes.Equal(got.New, want.New):
		return "new tuple differs"
	case got.TruncateOpts != want.TruncateOpts:
		return "truncate opts differ"
	case len(got.TruncateRels) != len(want.TruncateRels):
		return "truncate rels differ"
	case !reflect.DeepEqual(got.DDL, want.DDL):
		return fmt.Sprintf("schema-change message %+v, want %+v", got.DDL, want.DDL)
	}
	for i := range got.TruncateRels {
		if got.TruncateRels[i] != want.TruncateRels[i] {
			return fmt.Sprintf("truncate rel %d differs", i)
		}
	}
	return ""
}

type testQueue struct {
	*Queue
	reg *stats.Registry
}

func newTestQueue(t testing.TB, budget int64) testQueue {
	t.Helper()
	reg := stats.NewRegistry()
	q, err := New(Options{Budget: budget, SpillDir: filepath.Join(t.TempDir(), "spill"), Stats: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return testQueue{q, reg}
}

func (tq testQueue) counter(comp, name string) int64 {
	return tq.reg.Component(comp).Counter(name).Load()
}

func (tq testQueue) gauge(comp, name string) int64 {
	return tq.reg.Component(comp).Gauge(name).Load()
}

func mustAdd(t testing.TB, q *Queue, xid uint32, c *change.Change) {
	t.Helper()
	if err := q.Add(context.Background(), xid, c); err != nil {
		t.Fatalf("add to %d: %v", xid, err)
	}
}

func mustCommit(t testing.TB, q *Queue, xid uint32) {
	t.Helper()
	if err := q.Commit(change.TxnInfo{Xid: xid, EndLSN: change.LSN(xid) << 8}); err != nil {
		t.Fatalf("commit %d: %v", xid, err)
	}
}

func mustNext(t testing.TB, q *Queue) *Txn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	txn, err := q.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return txn
}

// checkTxn compares the changes of txn with want, twice (iteration is repeatable).
func checkTxn(t testing.TB, txn *Txn, want []*change.Change) {
	t.Helper()
	if txn.Len() != len(want) {
		t.Fatalf("txn %d: Len %d, want %d", txn.Info.Xid, txn.Len(), len(want))
	}
	var bytes int64
	for _, c := range want {
		bytes += int64(c.Size())
	}
	if txn.Bytes() != bytes {
		t.Fatalf("txn %d: Bytes %d, want %d", txn.Info.Xid, txn.Bytes(), bytes)
	}
	for pass := 0; pass < 2; pass++ {
		i := 0
		for c, err := range txn.Changes() {
			if err != nil {
				t.Fatalf("txn %d pass %d change %d: %v", txn.Info.Xid, pass, i, err)
			}
			if i >= len(want) {
				t.Fatalf("txn %d: more than %d changes", txn.Info.Xid, len(want))
			}
			if d := sameChange(c, want[i]); d != "" {
				t.Fatalf("txn %d pass %d change %d: %s", txn.Info.Xid, pass, i, d)
			}
			i++
		}
		if i != len(want) {
			t.Fatalf("txn %d pass %d: %d changes, want %d", txn.Info.Xid, pass, i, len(want))
		}
	}
}

func spillFiles(t testing.TB, q *Queue) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(q.SpillDir(), "*.spill"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// fullDisk wraps the files a queue creates and fails writes past a shared
// byte limit with ENOSPC, writing the part that fits, as a full file system
// does.
type fullDisk struct {
	mu     sync.Mutex
	limit  int64 // total bytes that may be written past the previous end of files
	used   int64
	create func(name string) (spillHandle, error) // the queue's
}

type fullDiskFile struct {
	spillHandle
	name string
	d    *fullDisk
}

// newFullDisk makes q create its spill files on a disk of limit bytes.
func newFullDisk(q *Queue, limit int64) *fullDisk {
	d := &fullDisk{limit: limit, create: q.create}
	q.create = func(name string) (spillHandle, error) {
		h, err := d.create(name)
		if err != nil {
			return nil, err
		}
		return fullDiskFile{h, name, d}, nil
	}
	return d
}

func (d *fullDisk) setLimit(n int64) {
	d.mu.Lock()
	d.limit = n
	d.mu.Unlock()
}

func (f fullDiskFile) WriteAt(p []byte, off int64) (int, error) {
	f.d.mu.Lock()
	room := f.d.limit - f.d.used
	n := int64(len(p))
	var err error
	if n > room {
		n, err = max(room, 0), &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	f.d.used += n
	f.d.mu.Unlock()
	w, werr := f.spillHandle.WriteAt(p[:n], off)
	if werr != nil {
		return w, werr
	}
	return w, err
}

// le32 is a test shorthand.
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
