package config

import (
	"strings"
	"testing"
)

func TestOnError(t *testing.T) {
	if c := Default(); c.OnError != OnErrorStop {
		t.Errorf("default on_error = %q, want stop", c.OnError)
	}
	var o OnError
	if err := o.Set("park"); err != nil || o != OnErrorPark {
		t.Errorf("Set(park) = %v, %q", err, o)
	}
	if err := o.Set("prak"); err == nil || !strings.Contains(err.Error(), "want stop or park") {
		t.Errorf("Set(prak) = %v", err)
	}
	c := Default()
	if err := Parse([]byte("on_error: park\n"), &c); err != nil || c.OnError != OnErrorPark {
		t.Errorf("yaml on_error: park: %v, %q", err, c.OnError)
	}
	if err := Parse([]byte("on_error: skip\n"), &c); err == nil {
		t.Error("yaml on_error: skip accepted")
	}
	c = Default()
	c.Source, c.Target, c.OnError = "s", "t", "oops"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--on-error") {
		t.Errorf("Validate with on_error oops = %v", err)
	}
}
