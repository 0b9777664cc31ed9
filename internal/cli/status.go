package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/slotstatus"
)

// ExitUnhealthy is the exit code of `repstream status` when the slot is
// missing, invalidated or inactive for longer than --max-inactive, or (with
// --kafka) the target cannot go on from the topic or is behind it without
// advancing for longer than --max-inactive, or its copy stopped with its
// apply for longer than --max-inactive (1 is any other error: a
// database unreachable, a bad flag).
const ExitUnhealthy = 2

// exitError makes Run exit with its code instead of 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the process exit code for an error returned by a command.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// statusOutput is `repstream status --format json`: the positions and the
// verdict in one object.
type statusOutput struct {
	slotstatus.SlotStatus
	slotstatus.Verdict
}

// runStatus prints the slot's status and verdict; an unhealthy slot is an
// exitError with ExitUnhealthy and the one-line reason, warnings are
// "WARN" lines on stderr.
func runStatus(cmd *cobra.Command, s *settings, format string, maxInactive time.Duration) error {
	if format != "text" && format != "json" {
		return fmt.Errorf("--format %q: text or json", format)
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	st, err := slotstatus.Status(cmd.Context(), s.cfg.Source, s.cfg.Target, s.cfg.Slot)
	var missing *slotstatus.SlotMissingError
	var v slotstatus.Verdict
	switch {
	case errors.As(err, &missing):
		v = slotstatus.Verdict{Health: "fail", Problem: missing.Error()}
	case err != nil:
		return err
	default:
		if s.cfg.Kafka != "" {
			kc, err := engine.KafkaCluster(s.cfg)
			if err != nil {
				return err
			}
			slotstatus.AddKafka(cmd.Context(), &st, kc)
		}
		v = st.Check(maxInactive)
	}
	if format == "json" {
		if err := writeJSON(stdout, statusOutput{SlotStatus: st, Verdict: v}); err != nil {
			return err
		}
	} else if missing == nil {
		st.Format(stdout)
	}
	for _, w := range v.Warnings {
		fmt.Fprintln(stderr, "repstream: WARN:", w)
	}
	if v.Problem != "" {
		return &exitError{code: ExitUnhealthy, err: errors.New(v.Problem)}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
