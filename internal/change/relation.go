package change

import "strings"

// Replica identity settings of a relation, as sent in pgoutput's Relation message.
const (
	IdentityDefault byte = 'd' // primary key
	IdentityNothing byte = 'n'
	IdentityFull    byte = 'f' // the whole old row
	IdentityIndex   byte = 'i' // a chosen unique index
)

// FirstNormalOID is PostgreSQL's FirstNormalObjectId: types below it are
// built in, with the same OID and binary format in every database.
const FirstNormalOID = 16384

// TextOnly says why values of the built-in type oid cannot travel in
// binary ("" when they can): an object identifier type (regclass,
// regtype, ... and their arrays) holds OIDs of database objects, so its
// binary form is the source's OID, which names another object on a
// target, or none, while its text, the object's name, is read as the
// target's; aclitem and gtsvector have no binary form at all (a binary
// COPY of them fails).
func TextOnly(oid uint32) string {
	if name := objectRefTypes[oid]; name != "" {
		return "type " + name + " holds the OID of an object, which differs between databases: binary transfer would store the source's OID (its text, the object's name, is read as the target's)"
	}
	if name := noBinaryForm[oid]; name != "" {
		return "type " + name + " has no binary form"
	}
	return ""
}

var noBinaryForm = map[uint32]string{1033: "aclitem", 1034: "aclitem[]", 3642: "gtsvector", 3644: "gtsvector[]"}

var objectRefTypes = map[uint32]string{
	24: "regproc", 1008: "regproc[]", 2202: "regprocedure", 2207: "regprocedure[]",
	2203: "regoper", 2208: "regoper[]", 2204: "regoperator", 2209: "regoperator[]",
	2205: "regclass", 2210: "regclass[]", 2206: "regtype", 2211: "regtype[]",
	3734: "regconfig", 3735: "regconfig[]", 3769: "regdictionary", 3770: "regdictionary[]",
	4089: "regnamespace", 4090: "regnamespace[]", 4096: "regrole", 4097: "regrole[]",
	4191: "regcollation", 4192: "regcollation[]",
}

// Column is one column of a Relation as the source describes it.
// Generated columns are never sent by pgoutput, so they never appear here.
type Column struct {
	Name    string
	TypeOID uint32
	TypeMod int32
	Key     bool // part of the replica identity
}

// Relation describes a source table at one point of the stream. A Relation is
// immutable once decoded: a schema change produces a new *Relation, and every
// Change points at the version that was current when it was captured.
type Relation struct {
	ID              uint32 // the source's OID: valid only for one replication connection
	Namespace       string // "" in the wire format means pg_catalog; the decoder fills it in
	Name            string
	ReplicaIdentity byte
	Columns         []Column

	// Previous is the version of the relation this one replaced in the
	// stream (a copy whose own Previous is nil), nil the first time capture
	// saw the relation. Schema changes without repstream's event trigger
	// are found by comparing the two (--ddl=relation).
	Previous *Relation

	// Binary says that the values of its changes are in pgoutput's binary
	// format (the slot streamed with binary 'true'): set by the decoder for
	// its session. A target writer applies them with binary COPY and
	// parameters whatever its own setting.
	Binary bool
}

// String returns schema.table, unquoted, for messages.
func (r *Relation) String() string { return r.Namespace + "." + r.Name }

// QuotedName returns "schema"."table", safe to paste into SQL.
func (r *Relation) QuotedName() string {
	return QuoteIdent(r.Namespace) + "." + QuoteIdent(r.Name)
}

// KeyColumns returns the indexes of the replica-identity columns.
func (r *Relation) KeyColumns() []int {
	var ks []int
	for i, c := range r.Columns {
		if c.Key {
			ks = append(ks, i)
		}
	}
	return ks
}

// HasKey reports whether rows can be identified by a key (primary key or
// replica identity index) rather than by their whole old value.
func (r *Relation) HasKey() bool {
	if r.ReplicaIdentity == IdentityFull || r.ReplicaIdentity == IdentityNothing {
		return false
	}
	for _, c := range r.Columns {
		if c.Key {
			return true
		}
	}
	return false
}

// QuoteIdent quotes an SQL identifier the way PostgreSQL's quote_ident does
// for any input: always double-quoted, embedded quotes doubled.
func QuoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
