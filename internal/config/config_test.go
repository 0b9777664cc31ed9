package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    Size
		wantErr bool
	}{
		{"256MiB", 256 << 20, false},
		{"64MB", 64 << 20, false},
		{"1GiB", 1 << 30, false},
		{"512k", 512 << 10, false},
		{"1048576", 1 << 20, false},
		{"1.5G", 3 << 29, false},
		{"", 0, true},
		{"12XB", 0, true},
		{"-1M", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseYAML(t *testing.T) {
	c := Default()
	err := Parse([]byte("source: host=a\ntarget: host=b\ntables: [public.t, s.*]\nmemory: 64MiB\napply_parallelism: 4\n"), &c)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source != "host=a" || c.Memory != 64<<20 || len(c.Tables) != 2 || c.ApplyParallelism != 4 || c.Slot != "repstream" {
		t.Fatalf("parsed %+v", c)
	}
	before := c
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, c) {
		t.Fatalf("Validate changed the configuration: %+v -> %+v", before, c)
	}
	c.EnsureDefaults()
	if c.Publication != "repstream" || c.SpillDir == "" || c.DDL != "true" {
		t.Fatalf("derived defaults missing: %+v", c)
	}
	again := c
	again.EnsureDefaults()
	if !reflect.DeepEqual(again, c) {
		t.Fatalf("EnsureDefaults is not idempotent: %+v -> %+v", c, again)
	}
	// The publication and the spill directory follow the slot.
	d := Config{Slot: "other"}
	d.EnsureDefaults()
	if d.Publication != "other" || !strings.HasSuffix(d.SpillDir, "spill-other") {
		t.Fatalf("defaults of slot other: %+v", d)
	}
	if err := Parse([]byte("sourc: x\n"), &c); err == nil {
		t.Fatal("unknown key accepted")
	}
}

func TestValidate(t *testing.T) {
	c := Default()
	c.Slot = "Bad-Name"
	c.CommitOrder = "random"
	c.DDL = "yes"
	c.KafkaLinger = -time.Millisecond
	c.Origin = "local"
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"--source", "--target", "--slot", "--commit-order", "--ddl", "--kafka-linger", "--origin \"local\": want any or none"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// TestValidateOrigin: --origin none is a capture's (run, capture --kafka);
// an apply --kafka's is refused, naming where it belongs.
func TestValidateOrigin(t *testing.T) {
	for _, x := range []struct {
		role Role
		ok   bool
	}{{RoleRun, true}, {RoleCapture, true}, {RoleApply, false}} {
		c := Default()
		c.Role, c.Source, c.Target, c.Kafka, c.Origin = x.role, "host=a", "host=b", "k:9092", OriginNone
		err := c.Validate()
		if (err == nil) != x.ok || err != nil && !strings.Contains(err.Error(), "pass it to repstream capture") {
			t.Errorf("%q with --origin none: %v", x.role, err)
		}
	}
}

func TestCommitOrder(t *testing.T) {
	var o CommitOrder
	for _, ok := range []string{"full", "dependent", " dependent "} {
		if err := o.Set(ok); err != nil {
			t.Errorf("Set(%q): %v", ok, err)
		}
	}
	if o != CommitDependent {
		t.Errorf("after Set(dependent): %q", o)
	}
	for _, typo := range []string{"ful", "Full", "dependant", ""} {
		err := o.Set(typo)
		if err == nil || !strings.Contains(err.Error(), "full or dependent") {
			t.Errorf("Set(%q) = %v; want an error naming the valid values", typo, err)
		}
	}
	if o != CommitDependent {
		t.Errorf("a rejected Set changed the value to %q", o)
	}
	c := Default()
	if err := Parse([]byte("commit_order: dependnet\n"), &c); err == nil || !strings.Contains(err.Error(), "full or dependent") {
		t.Errorf("YAML typo accepted: %v", err)
	}
	if err := Parse([]byte("commit_order: dependent\n"), &c); err != nil || c.CommitOrder != CommitDependent {
		t.Errorf("YAML commit_order: %v, %q", err, c.CommitOrder)
	}
}

func TestValidateDSNKeys(t *testing.T) {
	c := Default()
	c.Source = "host=a prot=5432"
	c.Target = "postgres://u:s3cret@b/d?sslmod=require"
	err := c.Validate()
	if err == nil {
		t.Fatal("unknown DSN keys accepted")
	}
	for _, want := range []string{`--source: invalid connection string: unknown connection parameter "prot" (did you mean "port"?)`,
		`--target: invalid connection string: unknown connection parameter "sslmod" (did you mean "sslmode"?)`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q repeats the password", err)
	}
}

// TestLoadRefusesWritableByOthers: a config file that other users may
// write is refused, naming the fix; one only its owner writes is read.
func TestLoadRefusesWritableByOthers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repstream.yaml")
	if err := os.WriteFile(path, []byte("slot: s1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o666, 0o620, 0o602} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "writable by other users") || !strings.Contains(err.Error(), "chmod go-w "+path) {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil || c.Slot != "s1" {
		t.Errorf("mode 0644: %v (slot %q)", err, c.Slot)
	}
}
