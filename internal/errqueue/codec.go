package errqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/repstream/repstream/internal/change"
)

// The encoding of a parked transaction's changes (repstream.errors.changes,
// jsonb): the relations the changes refer to, once each, and the changes in
// order, each with its tuples exactly as pgoutput sent them (TupleData,
// base64 in JSON) — so the values keep their format ('t' text, 'b' binary,
// 'n' null, 'u' unchanged TOAST) and nothing is converted on the way.
//
//	{"version": 1, "binary": true,
//	 "relations": [{"schema": "public", "table": "t", "replica_identity": "d",
//	                "columns": [{"name": "id", "type_oid": 23, "type_mod": -1, "key": true}, ...]}],
//	 "changes": [{"op": "U", "lsn": "0/16B3F28", "rel": 0, "old_kind": "K", "old": "AAEAdAAAAAE1", "new": "..."},
//	             {"op": "T", "lsn": "...", "truncate_rels": [0, 1], "truncate_opts": 0}]}
type encoded struct {
	Version   int          `json:"version"`
	Binary    bool         `json:"binary"` // values are in pgoutput's binary format (apply wrote them so)
	Relations []encodedRel `json:"relations"`
	Changes   []encodedChg `json:"changes"`
}

type encodedRel struct {
	Schema          string       `json:"schema"`
	Table           string       `json:"table"`
	ReplicaIdentity string       `json:"replica_identity"`
	Columns         []encodedCol `json:"columns"`
}

type encodedCol struct {
	Name    string `json:"name"`
	TypeOID uint32 `json:"type_oid"`
	TypeMod int32  `json:"type_mod"`
	Key     bool   `json:"key"`
}

type encodedChg struct {
	Op           string `json:"op"`
	LSN          string `json:"lsn"`
	Xid          uint32 `json:"xid,omitempty"`
	Rel          int    `json:"rel"`
	OldKind      string `json:"old_kind,omitempty"`
	Old          []byte `json:"old,omitempty"`
	New          []byte `json:"new,omitempty"`
	TruncateRels []int  `json:"truncate_rels,omitempty"`
	TruncateOpts uint8  `json:"truncate_opts,omitempty"`
}

const encodingVersion = 1

// Encoder builds the encoding of one source transaction's changes, one
// change at a time (Add copies what it keeps: the change may be reused).
type Encoder struct {
	e     encoded
	index map[*change.Relation]int
}

// NewEncoder starts an encoding (binary: the values are in binary format).
func NewEncoder(binary bool) *Encoder {
	return &Encoder{e: encoded{Version: encodingVersion, Binary: binary, Relations: []encodedRel{}, Changes: []encodedChg{}},
		index: map[*change.Relation]int{}}
}

func (x *Encoder) rel(r *change.Relation) int {
	if i, ok := x.index[r]; ok {
		return i
	}
	er := encodedRel{Schema: r.Namespace, Table: r.Name, Columns: make([]encodedCol, len(r.Columns))}
	if r.ReplicaIdentity != 0 {
		er.ReplicaIdentity = string(rune(r.ReplicaIdentity))
	}
	for i, c := range r.Columns {
		er.Columns[i] = encodedCol{Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod, Key: c.Key}
	}
	x.index[r] = len(x.e.Relations)
	x.e.Relations = append(x.e.Relations, er)
	return x.index[r]
}

// Add appends c.
func (x *Encoder) Add(c *change.Change) {
	ec := encodedChg{Op: string(rune(c.Op)), LSN: c.LSN.String(), Xid: c.Xid, Rel: -1}
	if c.Rel != nil && c.Rel.Binary {
		x.e.Binary = true // the decoder's session streamed binary values (Kafka mode: the record's)
	}
	if c.Rel != nil {
		ec.Rel = x.rel(c.Rel)
	}
	if c.OldKind != 0 {
		ec.OldKind = string(rune(c.OldKind))
	}
	if c.Old != nil {
		ec.Old = append([]byte{}, c.Old...)
	}
	if c.New != nil {
		ec.New = append([]byte{}, c.New...)
	}
	for _, r := range c.TruncateRels {
		ec.TruncateRels = append(ec.TruncateRels, x.rel(r))
	}
	ec.TruncateOpts = c.TruncateOpts
	x.e.Changes = append(x.e.Changes, ec)
}

// Len is the number of changes added.
func (x *Encoder) Len() int { return len(x.e.Changes) }

// Bytes returns the encoding (JSON).
func (x *Encoder) Bytes() ([]byte, error) {
	b, err := json.Marshal(x.e)
	if err != nil {
		return nil, fmt.Errorf("encode parked transaction: %w", err)
	}
	return b, nil
}

// Encode serializes the changes of one source transaction (binary: their
// values are in binary format).
func Encode(changes iter.Seq2[*change.Change, error], binary bool) ([]byte, error) {
	x := NewEncoder(binary)
	for c, err := range changes {
		if err != nil {
			return nil, fmt.Errorf("encode parked transaction: %w", err)
		}
		x.Add(c)
	}
	return x.Bytes()
}

// Decoded is a parked transaction's changes, read back.
type Decoded struct {
	Binary  bool
	Changes []*change.Change // changes of one relation share its *change.Relation
}

var errBadEncoding = errors.New("malformed parked transaction")

// Decode reads what Encode wrote; it validates every tuple and reference.
func Decode(b []byte) (Decoded, error) {
	var e encoded
	if err := json.Unmarshal(b, &e); err != nil {
		return Decoded{}, fmt.Errorf("decode parked transaction: %w", err)
	}
	if e.Version != encodingVersion {
		return Decoded{}, fmt.Errorf("decode parked transaction: encoding version %d, want %d", e.Version, encodingVersion)
	}
	rels := make([]*change.Relation, len(e.Relations))
	for i, er := range e.Relations {
		r := &change.Relation{Namespace: er.Schema, Name: er.Table, Columns: make([]change.Column, len(er.Columns))}
		if ri, err := oneByte(er.ReplicaIdentity); err != nil {
			return Decoded{}, fmt.Errorf("decode parked transaction: relation %d replica identity: %w", i, err)
		} else {
			r.ReplicaIdentity = ri
		}
		for j, c := range er.Columns {
			r.Columns[j] = change.Column{Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod, Key: c.Key}
		}
		rels[i] = r
	}
	rel := func(i int) (*change.Relation, error) {
		if i < 0 || i >= len(rels) {
			return nil, fmt.Errorf("%w: relation %d of %d", errBadEncoding, i, len(rels))
		}
		return rels[i], nil
	}
	out := Decoded{Binary: e.Binary, Changes: make([]*change.Change, 0, len(e.Changes))}
	for i, ec := range e.Changes {
		fail := func(err error) (Decoded, error) {
			return Decoded{}, fmt.Errorf("decode parked transaction: change %d: %w", i, err)
		}
		op, err := oneByte(ec.Op)
		if err != nil {
			return fail(err)
		}
		c := &change.Change{Op: change.Op(op), Xid: ec.Xid, TruncateOpts: ec.TruncateOpts}
		if c.LSN, err = change.ParseLSN(ec.LSN); err != nil {
			return fail(err)
		}
		if c.OldKind, err = oneByte(ec.OldKind); err != nil {
			return fail(err)
		}
		switch c.Op {
		case change.OpInsert, change.OpUpdate, change.OpDelete:
			if c.Rel, err = rel(ec.Rel); err != nil {
				return fail(err)
			}
		case change.OpTruncate:
			for _, k := range ec.TruncateRels {
				r, err := rel(k)
				if err != nil {
					return fail(err)
				}
				c.TruncateRels = append(c.TruncateRels, r)
			}
		default:
			return fail(fmt.Errorf("%w: operation %q", errBadEncoding, ec.Op))
		}
		for _, t := range []struct {
			src []byte
			dst *change.Tuple
		}{{ec.Old, &c.Old}, {ec.New, &c.New}} {
			if t.src == nil {
				continue
			}
			n, err := change.ValidateTuple(t.src)
			if err != nil || n != len(t.src) {
				return fail(fmt.Errorf("%w: tuple", errBadEncoding))
			}
			if c.Rel != nil && change.Tuple(t.src).NumColumns() != len(c.Rel.Columns) {
				return fail(fmt.Errorf("%w: tuple of %d columns for %d", errBadEncoding, change.Tuple(t.src).NumColumns(), len(c.Rel.Columns)))
			}
			*t.dst = change.Tuple(t.src)
		}
		out.Changes = append(out.Changes, c)
	}
	return out, nil
}

// oneByte reads a one-character field ("" is 0).
func oneByte(s string) (byte, error) {
	switch len(s) {
	case 0:
		return 0, nil
	case 1:
		return s[0], nil
	}
	return 0, fmt.Errorf("%w: %q is not one character", errBadEncoding, s)
}
