package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/tablesync"
)

func tablesCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tables",
		Short: "Tables of a replication: add one while it runs, list their copy state",
	}
	a := &settings{cfg: config.Default()}
	var opts tablesync.AddOptions
	add := &cobra.Command{
		Use:   "add schema.table...",
		Short: "Add tables to a replication (running or not): publish them and copy their rows",
		Long: `Add tables (schema.table or schema.*) to the slot's publication and copy
their existing rows to the target, without stopping the replication.

Each table is checked first: it exists on the source, has a primary key or a
replica identity, and the target has a compatible table (--create-tables
makes a missing one) that is empty (--truncate empties it). It is recorded
as pending on the target and added to the publication (repstream's own or
yours: a warning says when repstream did not create it). A running engine
takes it up within seconds: it pauses apply between transactions, copies the
table from a new snapshot at a known WAL position L, and goes on — the
table's changes committed up to L are in the copy, later ones are applied.
Without a running engine, the next run does the same before it streams.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.resolveAdmin(cmd, stderr); err != nil {
				return err
			}
			opts.Tables = args
			res, err := tablesync.AddTables(cmd.Context(), a.cfg, opts, a.logger(stderr))
			for _, r := range res {
				fmt.Fprintf(stdout, "%s: %s\n", r.Table, r.Action)
			}
			return err
		},
	}
	a.bindConnection(add.Flags())
	add.Flags().BoolVar(&opts.CreateTables, "create-tables", false, "create missing target tables from the source's definition")
	add.Flags().BoolVar(&opts.Truncate, "truncate", false, "empty non-empty target tables (otherwise that is an error)")
	add.Flags().DurationVar(&opts.NoticeWait, "wait", 30*time.Second, "how long to wait for a running engine to take the tables up")

	l := &settings{cfg: config.Default()}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the replicated tables: published, copy state, sync LSN, rows copied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := l.resolveAdmin(cmd, cmd.ErrOrStderr()); err != nil {
				return err
			}
			rows, err := tablesync.ListTables(cmd.Context(), l.cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			formatTables(stdout, rows)
			return nil
		},
	}
	l.bindConnection(list.Flags())
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(add, list)
	return cmd
}

// formatTables prints `tables list` as a table. A table without a recorded
// copy state streams without a copy of its own (--snapshot=false, or copied
// by a repstream that kept no per-table state).
func formatTables(w io.Writer, rows []tablesync.TableRow) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tPUBLISHED\tSTATE\tSYNC LSN\tROWS\tCOPIED AT\tINDEXES NOT BUILT")
	for _, r := range rows {
		state, lsn, n, at := r.State, "-", "-", "-"
		if state == "" {
			state = "-"
		}
		if r.SyncLSN != "" {
			lsn = r.SyncLSN
		}
		if r.State == "ready" {
			n = fmt.Sprint(r.Rows)
		}
		if !r.CopiedAt.IsZero() {
			at = r.CopiedAt.UTC().Format(time.RFC3339)
		}
		pub := "no"
		if r.Published {
			pub = "yes"
		}
		notBuilt := "-"
		if len(r.IndexesNotBuilt) > 0 {
			notBuilt = fmt.Sprint(len(r.IndexesNotBuilt))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Table, pub, state, lsn, n, at, notBuilt)
	}
	tw.Flush()
	first := true
	for _, r := range rows {
		for _, u := range r.IndexesNotBuilt {
			if first {
				fmt.Fprintln(w, "\nIndexes of the source not built on the target (the tables replicate without them; make what each needs on the target, then run its statement):")
				first = false
			}
			fmt.Fprintf(w, "  %s: index %s: %s\n    %s\n", r.Table, u.Index, u.Error, u.SQL)
		}
	}
}
