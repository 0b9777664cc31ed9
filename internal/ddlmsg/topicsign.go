package ddlmsg

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Messages signed for a Kafka topic.
//
// The HMAC key that signs the trigger's messages (Sign) also checks them:
// a role that may read it can sign messages of its own, and
// pg_logical_emit_message lets any role put one into the source's WAL. So
// the applies of a Kafka topic, whose source roles need not be trusted
// with that, do not get it: the capture, which holds it and checks every
// message with it, signs each one it writes to the topic anew with an
// Ed25519 key (TopicKey) derived from the HMAC key, and publishes the
// public key on the source (repstream.ddl_pubkey, install/ddl.go), which
// the applies read to check the topic's messages (VerifyTopic). Only a
// holder of the HMAC key can sign; a role that can read the public key
// can only check.
//
// Such content is "ed25519:", the key's fingerprint (KeyFingerprint), ':',
// the hex Ed25519 signature of "repstream.ddl ed25519\x00<xid>:<json>"
// (xid: the top-level transaction, as for Sign), then the JSON. It never
// starts with '{' (Unsigned) and is told apart from the HMAC form by its
// prefix (TopicSigned).

// TopicPrefix starts content signed for a topic.
const TopicPrefix = "ed25519:"

// fpLen is the length of a key's hex fingerprint.
const fpLen = 16

// topicHeadLen is the length of the signature part of content signed for
// a topic: the prefix, the fingerprint, ':', the hex signature.
const topicHeadLen = len(TopicPrefix) + fpLen + 1 + 2*ed25519.SignatureSize

// TopicKey returns the Ed25519 key that signs a topic's messages, derived
// from the HMAC key that signs the trigger's (so it follows that key: a
// new ddl_key, a new TopicKey, and nothing more is stored).
func TopicKey(hmacKey []byte) ed25519.PrivateKey {
	h := sha256.New()
	h.Write([]byte("repstream kafka ddl signing\x00"))
	h.Write(hmacKey)
	return ed25519.NewKeyFromSeed(h.Sum(nil))
}

// KeyFingerprint names a public key: the hex of the first 8 bytes of its
// SHA-256.
func KeyFingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:fpLen/2])
}

func topicMessage(xid uint32, json []byte) []byte {
	b := make([]byte, 0, 32+len(json))
	b = append(b, "repstream.ddl ed25519\x00"...)
	b = strconv.AppendUint(b, uint64(xid), 10)
	b = append(b, ':')
	return append(b, json...)
}

// SignTopic returns the content, signed with key for a topic, of the
// message json of top-level transaction xid.
func SignTopic(key ed25519.PrivateKey, xid uint32, json []byte) []byte {
	out := make([]byte, 0, topicHeadLen+len(json))
	out = append(out, TopicPrefix...)
	out = append(out, KeyFingerprint(key.Public().(ed25519.PublicKey))...)
	out = append(out, ':')
	out = hex.AppendEncode(out, ed25519.Sign(key, topicMessage(xid, json)))
	return append(out, json...)
}

// TopicSigned reports whether content is signed for a topic (SignTopic)
// rather than with the HMAC key (Sign) or not at all.
func TopicSigned(content []byte) bool { return bytes.HasPrefix(content, []byte(TopicPrefix)) }

// ErrUnknownKey: content signed for a topic with a key whose fingerprint
// is not among the public keys known (it wraps ErrNotSigned).
var ErrUnknownKey = fmt.Errorf("%w: signed with a key not published on the source (repstream.ddl_pubkey)", ErrNotSigned)

// TopicFingerprint returns the fingerprint of the key that signed content
// for a topic ("" if it is not such content).
func TopicFingerprint(content []byte) string {
	if !TopicSigned(content) || len(content) < topicHeadLen {
		return ""
	}
	return string(content[len(TopicPrefix) : len(TopicPrefix)+fpLen])
}

// VerifyTopic returns the JSON of content signed for a topic (SignTopic)
// for transaction xid with one of keys (by fingerprint), or an error
// wrapping ErrNotSigned (ErrUnknownKey: none of keys has its fingerprint).
func VerifyTopic(keys map[string]ed25519.PublicKey, xid uint32, content []byte) ([]byte, error) {
	if !TopicSigned(content) || len(content) < topicHeadLen || content[len(TopicPrefix)+fpLen] != ':' {
		return nil, fmt.Errorf("%w: no Ed25519 signature", ErrNotSigned)
	}
	fp := TopicFingerprint(content)
	pub, ok := keys[fp]
	if !ok {
		return nil, fmt.Errorf("%w (fingerprint %s)", ErrUnknownKey, fp)
	}
	var sig [ed25519.SignatureSize]byte
	if _, err := hex.Decode(sig[:], content[len(TopicPrefix)+fpLen+1:topicHeadLen]); err != nil {
		return nil, fmt.Errorf("%w: no Ed25519 signature", ErrNotSigned)
	}
	json := content[topicHeadLen:]
	if !ed25519.Verify(pub, topicMessage(xid, json), sig[:]) {
		return nil, fmt.Errorf("%w: the Ed25519 signature does not match (altered, or copied from another transaction)", ErrNotSigned)
	}
	return json, nil
}

// ParsePublicKey checks a public key as repstream.ddl_pubkey holds it
// against its fingerprint.
func ParsePublicKey(fp string, key []byte) (ed25519.PublicKey, error) {
	if len(key) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key %s: %d bytes, not %d", fp, len(key), ed25519.PublicKeySize)
	}
	pub := ed25519.PublicKey(bytes.Clone(key))
	if KeyFingerprint(pub) != fp {
		return nil, errors.New("public key " + fp + ": its fingerprint is not " + fp)
	}
	return pub, nil
}
