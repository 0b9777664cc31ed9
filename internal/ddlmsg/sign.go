package ddlmsg

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Signed messages.
//
// pg_logical_emit_message is executable by every role, so any role that
// may connect to the source database can put a message with the prefix
// repstream.ddl into the WAL, and its JSON would be applied to every
// target as a schema change: a table dropped, a column added whose default
// the target's role (often a superuser) evaluates. So the triggers sign
// each message they emit (repstream.ddl_emit, install/ddl.go) with a key
// that only repstream's schema owner can read (repstream.ddl_key, made
// once per source database, with the trigger; the SQL side computes
// HMAC-SHA256 from its pads as sha256(okey || sha256(ikey || message))),
// and capture checks the signature before anything of the message is
// used.
//
// The content of a signed message is the hex HMAC-SHA256 (KeyLen bytes
// of key) of "<xid>:<json>", then the JSON, where xid is the top-level
// transaction that emitted it, as BEGIN (or STREAM START) says: a signed
// message copied into another transaction (by a role that can read the
// WAL) does not verify there.

// KeyLen is the length of the signing key.
const KeyLen = 32

// sigLen is the length of the hex signature that starts signed content.
const sigLen = 2 * sha256.Size

// Sign returns the signed content of the message json emitted by
// transaction xid (what repstream.ddl_emit makes; for tests and tools).
func Sign(key []byte, xid uint32, json []byte) []byte {
	out := make([]byte, 0, sigLen+len(json))
	out = hex.AppendEncode(out, mac(key, xid, json))
	return append(out, json...)
}

func mac(key []byte, xid uint32, json []byte) []byte {
	h := hmac.New(sha256.New, key)
	var b [12]byte
	h.Write(strconv.AppendUint(b[:0], uint64(xid), 10))
	h.Write([]byte{':'})
	h.Write(json)
	return h.Sum(nil)
}

// Unsigned reports whether content is a message as triggers before
// signing emitted it: the JSON alone.
func Unsigned(content []byte) bool { return len(content) > 0 && content[0] == '{' }

// ErrNotSigned: a repstream.ddl message whose signature is missing or
// does not verify. Repstream's triggers did not emit it.
var ErrNotSigned = errors.New("not signed by repstream's schema-change trigger")

// Verify returns the JSON of signed content emitted by transaction xid,
// or ErrNotSigned.
func Verify(key []byte, xid uint32, content []byte) ([]byte, error) {
	json, ok := Strip(content)
	if !ok || TopicSigned(content) {
		return nil, fmt.Errorf("%w: no signature", ErrNotSigned)
	}
	var got [sha256.Size]byte
	if _, err := hex.Decode(got[:], content[:sigLen]); err != nil {
		return nil, fmt.Errorf("%w: no signature", ErrNotSigned)
	}
	if !hmac.Equal(got[:], mac(key, xid, json)) {
		return nil, fmt.Errorf("%w: the signature does not match (another key, or copied from another transaction)", ErrNotSigned)
	}
	return json, nil
}

// Strip returns the JSON of signed content (with the HMAC key or for a
// topic) without checking its signature (the capture's writer, after the
// capture checked it), and false when content is not signed content.
func Strip(content []byte) ([]byte, bool) {
	if TopicSigned(content) {
		if len(content) <= topicHeadLen {
			return nil, false
		}
		return content[topicHeadLen:], true
	}
	if len(content) <= sigLen || Unsigned(content) {
		return nil, false
	}
	return content[sigLen:], true
}
