// Package pgoutput decodes the messages of PostgreSQL's built-in logical
// decoding output plugin, pgoutput, protocol versions 1 to 4 (the payload of
// each XLogData frame of a logical replication stream).
//
// The decoder is built for the capture hot path: Parse fills a caller-owned
// Message in place, tuples are kept in their wire form (change.Tuple) and
// alias the input, and the common messages (Begin, Commit, Insert, Update,
// Delete and the stream control messages) are decoded without allocating.
// Relation, Type, Truncate, Origin and logical Message decoding allocates;
// those are rare.
//
// Every length and count read from the wire is checked against the bytes that
// remain: malformed or truncated input yields an error wrapping ErrMalformed,
// never a panic or an out-of-range read. Every tuple handed out has been
// validated with change.ValidateTuple, so iterating it is safe. ParseHead
// decodes a row change's header only (xid, relation, tuple tag), leaving
// its tuples undecoded, for a sink that passes the message on whole to a
// reader that will Parse it (capture's raw sessions, for Kafka).
// WithContent re-encodes a logical message with other content (message.go:
// capture --kafka signs schema-change messages anew for the topic).
//
// Wire formats follow src/backend/replication/logical/proto.c:
//
//	B  Begin          int64 final LSN, int64 commit time, int32 xid
//	C  Commit         int8 flags, int64 commit LSN, int64 end LSN, int64 commit time
//	O  Origin         int64 origin commit LSN, string name
//	R  Relation       [xid] int32 oid, string nsp, string name, int8 replident,
//	                  int16 ncols, per column: int8 flags, string name, int32 type, int32 typmod
//	Y  Type           [xid] int32 oid, string nsp, string name
//	I  Insert         [xid] int32 relid, 'N' tuple
//	U  Update         [xid] int32 relid, optional ('K'|'O') tuple, 'N' tuple
//	D  Delete         [xid] int32 relid, ('K'|'O') tuple
//	T  Truncate       [xid] int32 nrels, int8 options, nrels × int32 relid
//	M  Message        [xid] int8 flags, int64 LSN, string prefix, int32 len, content
//	S  Stream Start   int32 xid, int8 first-segment
//	E  Stream Stop    (nothing)
//	c  Stream Commit  int32 xid, int8 flags, int64 commit LSN, int64 end LSN, int64 time
//	A  Stream Abort   int32 xid, int32 subxid [v4 parallel: int64 abort LSN, int64 time]
//
// "[xid]" is present only between Stream Start and Stream Stop. Strings are
// NUL-terminated; an empty namespace means pg_catalog. The two-phase commit
// messages of protocol v3 (b P K r p) are not decoded: repstream never asks
// for two_phase, and Parse reports them as ErrUnsupported.
package pgoutput
