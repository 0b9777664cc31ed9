package config

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "component", "test")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || rec["msg"] != "shown" || rec["component"] != "test" {
		t.Fatalf("JSON log %q: %v", buf.String(), err)
	}
	if _, err := NewLogger(&buf, "loud", "text"); err == nil || !strings.Contains(err.Error(), "debug, info, warn, error") {
		t.Errorf("invalid level: %v", err)
	}
	if _, err := NewLogger(&buf, "info", "xml"); err == nil || !strings.Contains(err.Error(), "text, json") {
		t.Errorf("invalid format: %v", err)
	}
	c := Default()
	c.Source, c.Target, c.LogLevel = "a", "b", "verbose"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Errorf("Validate accepted --log-level verbose: %v", err)
	}
}
