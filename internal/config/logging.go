package config

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// LogLevels and LogFormats are the values --log-level and --log-format take.
var (
	LogLevels  = []string{"debug", "info", "warn", "error"}
	LogFormats = []string{"text", "json"}
)

// ParseLogLevel parses a --log-level value; anything else is an error that
// lists the valid values.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: use one of %s", s, strings.Join(LogLevels, ", "))
}

// NewLogger returns the slog logger --log-level and --log-format ask for,
// writing to w: slog's text or JSON handler.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lv, err := ParseLogLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use one of %s", format, strings.Join(LogFormats, ", "))
}

func (c *Config) validateLogging() []error {
	var errs []error
	if _, err := NewLogger(io.Discard, c.LogLevel, c.LogFormat); err != nil {
		errs = append(errs, err)
	}
	if c.HealthzMaxLag < 0 {
		errs = append(errs, fmt.Errorf("--healthz-max-lag %s: 0 (no limit) or more", c.HealthzMaxLag))
	}
	if c.HealthzMaxLag > 0 && c.HealthzMaxLag < time.Second {
		errs = append(errs, fmt.Errorf("--healthz-max-lag %s: at least 1s (or 0 for no limit)", c.HealthzMaxLag))
	}
	return errs
}
