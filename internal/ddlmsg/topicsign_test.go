package ddlmsg

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"
)

// TestTopicSignVerify: content a capture signs for a topic verifies with
// the public key alone, for its transaction only; it is neither unsigned
// nor HMAC-verifiable content, Strip gives its JSON, and every change, a
// signature of another key (known or not) or the HMAC form fails.
func TestTopicSignVerify(t *testing.T) {
	json := []byte(`{"tag":"DROP TABLE","dropped":true,"schema":"public","name":"t"}`)
	key := TopicKey(testKey)
	if !bytes.Equal(key, TopicKey(bytes.Clone(testKey))) {
		t.Fatal("TopicKey is not a function of the HMAC key")
	}
	other := TopicKey(bytes.Repeat([]byte{8}, KeyLen))
	if bytes.Equal(key, other) {
		t.Fatal("two HMAC keys, one topic key")
	}
	pub := key.Public().(ed25519.PublicKey)
	opub := other.Public().(ed25519.PublicKey)
	keys := map[string]ed25519.PublicKey{KeyFingerprint(pub): pub}
	signed := SignTopic(key, 734, json)
	if Unsigned(signed) || !TopicSigned(signed) || TopicSigned(Sign(testKey, 734, json)) {
		t.Fatalf("signed content not told apart: %q", signed)
	}
	if TopicFingerprint(signed) != KeyFingerprint(pub) {
		t.Fatalf("fingerprint %q, want %q", TopicFingerprint(signed), KeyFingerprint(pub))
	}
	got, err := VerifyTopic(keys, 734, signed)
	if err != nil || !bytes.Equal(got, json) {
		t.Fatalf("VerifyTopic = %q, %v; want the JSON", got, err)
	}
	if s, ok := Strip(signed); !ok || !bytes.Equal(s, json) {
		t.Fatalf("Strip = %q, %v", s, ok)
	}
	if _, err := Verify(testKey, 734, signed); !errors.Is(err, ErrNotSigned) {
		t.Fatalf("HMAC Verify of Ed25519 content: %v", err)
	}
	tampered := bytes.Clone(signed)
	tampered[len(tampered)-2] = 'x'
	badSig := bytes.Clone(signed)
	badSig[len(TopicPrefix)+fpLen+1] ^= 1
	// another key's signature under this key's fingerprint
	relabeled := append([]byte(nil), signed[:len(TopicPrefix)+fpLen+1]...)
	relabeled = append(relabeled, SignTopic(other, 734, json)[len(TopicPrefix)+fpLen+1:]...)
	both := map[string]ed25519.PublicKey{KeyFingerprint(pub): pub, KeyFingerprint(opub): opub}
	for name, c := range map[string]struct {
		keys    map[string]ed25519.PublicKey
		xid     uint32
		content []byte
		unknown bool
	}{
		"another transaction":         {keys, 735, signed, false},
		"JSON changed":                {keys, 734, tampered, false},
		"signature changed":           {keys, 734, badSig, false},
		"another key, unpublished":    {keys, 734, SignTopic(other, 734, json), true},
		"another key, under this one": {both, 734, relabeled, false},
		"no keys":                     {nil, 734, signed, true},
		"HMAC form":                   {keys, 734, Sign(testKey, 734, json), false},
		"unsigned":                    {keys, 734, json, false},
		"prefix only":                 {keys, 734, []byte(TopicPrefix), false},
		"head only":                   {keys, 734, signed[:topicHeadLen], false},
		"not hex":                     {keys, 734, append(append(bytes.Clone(signed[:len(TopicPrefix)+fpLen+1]), bytes.Repeat([]byte{'z'}, 128)...), json...), false},
	} {
		got, err := VerifyTopic(c.keys, c.xid, c.content)
		if !errors.Is(err, ErrNotSigned) || got != nil && name != "head only" {
			t.Errorf("%s: VerifyTopic = %q, %v; want ErrNotSigned", name, got, err)
		}
		if errors.Is(err, ErrUnknownKey) != c.unknown {
			t.Errorf("%s: %v, unknown key: want %v", name, err, c.unknown)
		}
	}
	if _, err := ParsePublicKey(KeyFingerprint(pub), pub); err != nil {
		t.Error(err)
	}
	if _, err := ParsePublicKey(KeyFingerprint(pub), opub); err == nil {
		t.Error("a public key under another's fingerprint")
	}
	if _, err := ParsePublicKey(KeyFingerprint(pub), pub[:31]); err == nil {
		t.Error("a short public key")
	}
}
