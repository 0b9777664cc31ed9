package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/errqueue"
	"github.com/repstream/repstream/internal/target"
)

// errorsCmd is `repstream errors`: the error queue on the target.
func errorsCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "errors",
		Short: "The error queue on the target: transactions parked by --on-error park (list, show, retry, skip)",
		Long: `Source transactions the target refused for their data (a duplicate key, a
missing row, a violated constraint, a refused value) are parked in the
target's repstream.errors table when the run has --on-error park. They are
recorded as applied (replication goes on) and stay visible here until they
are retried or skipped. Only --target (and --slot) are needed.`,
	}
	cmd.AddCommand(errorsListCmd(stdout), errorsShowCmd(stdout), errorsRetryCmd(stdout, stderr), errorsSkipCmd(stdout))
	return cmd
}

// errorsSettings are the flags of every errors subcommand.
type errorsSettings struct{ settings }

func newErrorsSettings(cmd *cobra.Command) *errorsSettings {
	s := &errorsSettings{settings{cfg: config.Default()}}
	fs := cmd.Flags()
	fs.StringVarP(&s.file, "config", "c", "", "YAML file with the same keys as the flags (flags and REPSTREAM_* variables take precedence)")
	fs.StringVar(&s.cfg.Target, "target", "", "target database (URL or key=value DSN)")
	fs.StringVar(&s.cfg.Slot, "slot", s.cfg.Slot, "replication slot name")
	fs.BoolVar(&s.cfg.TrustTableOwners, "trust-table-owners", false, "the run's --trust-table-owners: with a superuser target role, go on although an event trigger on the target runs the function of a role that is not a superuser (its state's DDL fires it)")
	return s
}

// connect resolves the flags and opens an apply connection to the target.
func (s *errorsSettings) connect(cmd *cobra.Command) (*pgx.Conn, error) {
	if err := s.resolve(cmd); err != nil {
		return nil, err
	}
	if s.cfg.Target == "" {
		return nil, errors.New("--target is required")
	}
	if err := s.findSlot(cmd.Context(), cmd.Flags().Changed("slot"), cmd.ErrOrStderr()); err != nil {
		return nil, err
	}
	s.cfg.EnsureDefaults()
	conn, err := target.Connect(cmd.Context(), s.cfg.Target, "repstream-errors")
	if err != nil {
		return nil, err
	}
	// EnsureState's DDL fires the target's event triggers.
	if err := target.CheckEventTriggers(cmd.Context(), conn, s.cfg.TrustTableOwners); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	if err := target.EnsureState(cmd.Context(), conn); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("prepare repstream state on the target: %w", err)
	}
	// A retry applies replicated rows: marked as apply's are.
	if _, err := (*target.Origins)(nil).Use(cmd.Context(), conn); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

func errorsListCmd(stdout io.Writer) *cobra.Command {
	var format string
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List parked transactions: id, time, LSN, table, key, kind, message",
		Args:  cobra.NoArgs,
	}
	s := newErrorsSettings(cmd)
	cmd.Flags().StringVar(&format, "format", "text", "text or json")
	cmd.Flags().BoolVar(&all, "all", false, "also list retried and skipped transactions")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if format != "text" && format != "json" {
			return fmt.Errorf("--format %q: want text or json", format)
		}
		conn, err := s.connect(cmd)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		entries, err := errqueue.List(cmd.Context(), conn, s.cfg.Slot, all)
		if err != nil {
			return err
		}
		if format == "json" {
			if entries == nil {
				entries = []errqueue.Entry{}
			}
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(entries)
		}
		if len(entries) == 0 {
			fmt.Fprintf(stdout, "no parked transactions for slot %s\n", s.cfg.Slot)
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		head := "ID\tPARKED AT\tEND LSN\tTABLE\tKEY\tKIND\tMESSAGE"
		if all {
			head += "\tSTATE"
		}
		fmt.Fprintln(tw, head)
		for _, e := range entries {
			line := fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s", e.ID, e.CreatedAt.UTC().Format(time.DateTime), e.EndLSN,
				e.Table, e.Key, e.Kind, oneLine(e.Message, 80))
			if all {
				line += "\t" + e.State
			}
			fmt.Fprintln(tw, line)
		}
		return tw.Flush()
	}
	return cmd
}

func errorsShowCmd(stdout io.Writer) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a parked transaction: where it failed and all its changes, values as text",
		Args:  cobra.ExactArgs(1),
	}
	s := newErrorsSettings(cmd)
	cmd.Flags().StringVar(&format, "format", "text", "text or json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil {
			return fmt.Errorf("ID %q: want a number", args[0])
		}
		conn, err := s.connect(cmd)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		e, err := errqueue.Get(cmd.Context(), conn, s.cfg.Slot, id)
		if err != nil {
			return err
		}
		d, err := errqueue.Decode(e.Changes)
		if err != nil {
			return fmt.Errorf("entry %d: %w", id, err)
		}
		x := errqueue.NewTexts()
		type shownChange struct {
			Op    string `json:"op"`
			LSN   string `json:"lsn"`
			Table string `json:"table"`
			Key   string `json:"key,omitempty"`
			Old   string `json:"old,omitempty"`
			New   string `json:"new,omitempty"`
		}
		shown := make([]shownChange, 0, len(d.Changes))
		for _, c := range d.Changes {
			sc := shownChange{Op: c.Op.String(), LSN: c.LSN.String()}
			if c.Op == change.OpTruncate {
				names := make([]string, len(c.TruncateRels))
				for i, r := range c.TruncateRels {
					names[i] = r.String()
				}
				sc.Table = strings.Join(names, ", ")
			} else {
				sc.Table, sc.Key = c.Rel.String(), x.Key(c)
				if c.OldKind != 0 {
					sc.Old = x.Row(c.Rel, c.Old)
				}
				sc.New = x.Row(c.Rel, c.New)
			}
			shown = append(shown, sc)
		}
		if format == "json" {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				errqueue.Entry
				Binary  bool          `json:"binary"`
				Changes []shownChange `json:"changes"`
			}{e, d.Binary, shown})
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		row := func(k, v string) {
			if v != "" {
				fmt.Fprintf(tw, "%s:\t%s\n", k, v)
			}
		}
		row("id", strconv.FormatInt(e.ID, 10))
		row("slot", e.Slot)
		row("state", e.State)
		row("kind", e.Kind)
		row("table", e.Table)
		row("key", e.Key)
		row("operation", e.Op)
		row("sqlstate", e.SQLState)
		row("message", e.Message)
		row("source xid", strconv.FormatUint(uint64(e.Xid), 10))
		row("commit lsn", e.CommitLSN)
		row("end lsn", e.EndLSN)
		if e.CommitTime != nil {
			row("committed at", e.CommitTime.UTC().Format(time.RFC3339Nano))
		}
		row("parked at", e.CreatedAt.UTC().Format(time.RFC3339Nano))
		if e.ResolvedAt != nil {
			row("resolved at", e.ResolvedAt.UTC().Format(time.RFC3339Nano))
		}
		row("resolution", e.Resolution)
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "changes (%d):\n", len(shown))
		for i, c := range shown {
			fmt.Fprintf(stdout, "  %d. %s %s at %s", i+1, c.Op, c.Table, c.LSN)
			if c.Key != "" {
				fmt.Fprintf(stdout, " key %s", c.Key)
			}
			fmt.Fprintln(stdout)
			if c.Old != "" {
				fmt.Fprintf(stdout, "       old: %s\n", c.Old)
			}
			if c.New != "" {
				fmt.Fprintf(stdout, "       new: %s\n", c.New)
			}
		}
		return nil
	}
	return cmd
}

func errorsRetryCmd(stdout, stderr io.Writer) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "retry ID... | --all",
		Short: "Apply parked transactions again, as they stand now, each in one target transaction",
		Long: `Apply each parked transaction again on the target as it stands now (after you
mended the rows that made it fail), in one target transaction that also marks
it retried. A transaction that fails again stays parked; its error is printed.
With --all, every parked transaction of the slot is retried, oldest first.`,
	}
	s := newErrorsSettings(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "retry every parked transaction of the slot")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		conn, err := s.connect(cmd)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		ids, err := entryIDs(cmd.Context(), conn, s.cfg.Slot, args, all)
		if err != nil {
			return err
		}
		failed := 0
		for _, id := range ids {
			if err := errqueue.Retry(cmd.Context(), conn, s.cfg.Slot, id); err != nil {
				failed++
				fmt.Fprintf(stderr, "entry %d stays parked: %v\n", id, err)
				continue
			}
			fmt.Fprintf(stdout, "entry %d retried: applied\n", id)
		}
		if failed > 0 {
			return fmt.Errorf("%d of %d transactions failed again and stay parked", failed, len(ids))
		}
		return nil
	}
	return cmd
}

func errorsSkipCmd(stdout io.Writer) *cobra.Command {
	var all bool
	var lsn string
	cmd := &cobra.Command{
		Use:   "skip ID... | --all | --lsn LSN",
		Short: "Give up parked transactions, or have the next run skip the transaction a stopped run stopped on",
		Long: `With IDs or --all: mark parked transactions skipped (their changes are given
up; the entry stays as the record of it, see list --all).

With --lsn: record that the source transaction with that commit or end LSN
(a --on-error stop run prints the command with the end LSN) is to be
skipped: the next run records it as applied without applying it, and keeps it
in the error queue in state skipped, where show displays it.`,
	}
	s := newErrorsSettings(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "skip every parked transaction of the slot")
	cmd.Flags().StringVar(&lsn, "lsn", "", "the commit or end LSN of a source transaction the next run is to skip")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		conn, err := s.connect(cmd)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		if lsn != "" {
			if all || len(args) > 0 {
				return errors.New("--lsn takes no IDs and no --all")
			}
			l, err := change.ParseLSN(lsn)
			if err != nil {
				return fmt.Errorf("--lsn: %w", err)
			}
			requested, err := errqueue.RequestSkip(cmd.Context(), conn, s.cfg.Slot, l)
			if err != nil {
				return err
			}
			if !requested {
				fmt.Fprintf(stdout, "the transaction at %s is already applied on the target: nothing to skip\n", l)
				return nil
			}
			fmt.Fprintf(stdout, "the next run of slot %s skips the source transaction with commit or end LSN %s\n", s.cfg.Slot, l)
			return nil
		}
		ids, err := entryIDs(cmd.Context(), conn, s.cfg.Slot, args, all)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := errqueue.Skip(cmd.Context(), conn, s.cfg.Slot, id); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "entry %d skipped\n", id)
		}
		return nil
	}
	return cmd
}

// entryIDs parses IDs, or with all lists the parked ones.
func entryIDs(ctx context.Context, conn *pgx.Conn, slot string, args []string, all bool) ([]int64, error) {
	switch {
	case all && len(args) > 0:
		return nil, errors.New("give IDs or --all, not both")
	case all:
		return errqueue.ParkedIDs(ctx, conn, slot)
	case len(args) == 0:
		return nil, errors.New("give the IDs of parked transactions (see errors list), or --all")
	}
	ids := make([]int64, len(args))
	for i, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("ID %q: want a number", a)
		}
		ids[i] = id
	}
	return ids, nil
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
