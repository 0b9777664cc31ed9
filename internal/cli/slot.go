package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/target"
)

// slotGiven reports whether the user named the slot: --slot,
// REPSTREAM_SLOT, or the config file's slot key.
func (s *settings) slotGiven(changed bool) bool {
	if changed {
		return true
	}
	if _, ok := os.LookupEnv("REPSTREAM_SLOT"); ok {
		return true
	}
	if s.file != "" {
		b, err := os.ReadFile(s.file)
		if err == nil {
			var c config.Config
			if config.Parse(b, &c) == nil && c.Slot != "" {
				return true
			}
		}
	}
	return false
}

// findSlot, for an admin command run without a slot named, takes the one
// replication whose state the target holds (and says which on w), refuses
// to guess between several (listing them), and keeps the default when the
// target holds none.
func (s *settings) findSlot(ctx context.Context, changed bool, w io.Writer) error {
	if s.slotGiven(changed) {
		return nil
	}
	conn, err := target.Connect(ctx, s.cfg.Target, "repstream-admin")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	slots, err := target.Replications(ctx, conn)
	if err != nil {
		return err
	}
	switch len(slots) {
	case 0:
		return nil
	case 1:
		if slots[0] != s.cfg.Slot {
			fmt.Fprintf(w, "using slot %s, the one replication whose state the target holds (--slot to name another)\n", slots[0])
		}
		s.cfg.Slot = slots[0]
		return nil
	}
	return fmt.Errorf("the target holds the state of %d replications (slots %s): name one with --slot", len(slots), strings.Join(slots, ", "))
}
