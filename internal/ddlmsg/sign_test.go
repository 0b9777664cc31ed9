package ddlmsg

import (
	"bytes"
	"errors"
	"testing"
)

var testKey = bytes.Repeat([]byte{7}, KeyLen)

func TestSignVerify(t *testing.T) {
	json := []byte(`{"tag":"DROP TABLE","dropped":true,"schema":"public","name":"t"}`)
	signed := Sign(testKey, 734, json)
	if Unsigned(signed) {
		t.Fatalf("signed content taken for unsigned: %q", signed)
	}
	got, err := Verify(testKey, 734, signed)
	if err != nil || !bytes.Equal(got, json) {
		t.Fatalf("Verify = %q, %v; want the JSON", got, err)
	}
	if s, ok := Strip(signed); !ok || !bytes.Equal(s, json) {
		t.Fatalf("Strip = %q, %v", s, ok)
	}
	other := bytes.Repeat([]byte{8}, KeyLen)
	tampered := append([]byte(nil), signed...)
	tampered[len(tampered)-2] = 'x'
	for name, c := range map[string]struct {
		key     []byte
		xid     uint32
		content []byte
	}{
		"another transaction": {testKey, 735, signed},
		"another key":         {other, 734, signed},
		"JSON changed":        {testKey, 734, tampered},
		"unsigned":            {testKey, 734, json},
		"made-up signature":   {testKey, 734, append(bytes.Repeat([]byte{'0'}, 64), json...)},
		"not hex":             {testKey, 734, append(bytes.Repeat([]byte{'z'}, 64), json...)},
		"signature only":      {testKey, 734, signed[:64]},
		"empty":               {testKey, 734, nil},
	} {
		if _, err := Verify(c.key, c.xid, c.content); !errors.Is(err, ErrNotSigned) {
			t.Errorf("%s: Verify error %v, want ErrNotSigned", name, err)
		}
	}
}

// TestSignGolden pins the signature to standard HMAC-SHA256 of
// "<xid>:<json>" (the value from Python's hmac module), what the SQL side
// (repstream.ddl_emit, install/ddl.go) computes from the key's pads; the
// e2e tests' schema changes check the two agree.
func TestSignGolden(t *testing.T) {
	got := string(Sign(testKey, 4294967295, []byte(`{}`)))
	const want = "47be230f6c45f7c713d4954704b20c58e6f636693b537c1a027db1f18a515f0a{}"
	if got != want {
		t.Fatalf("signature of {} in transaction 4294967295: %s, want %s", got, want)
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(uint32(1), Sign(testKey, 1, []byte(`{"tag":"x"}`)))
	f.Add(uint32(2), []byte(`{"tag":"x"}`))
	f.Add(uint32(3), []byte("zz"))
	f.Fuzz(func(t *testing.T, xid uint32, content []byte) {
		json, err := Verify(testKey, xid, content)
		if err == nil && !bytes.EqualFold(Sign(testKey, xid, json), content) { // hex of either case
			t.Fatalf("verified content %q is not what Sign makes", content)
		}
	})
}
