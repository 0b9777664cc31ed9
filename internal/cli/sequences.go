package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
)

func sequencesCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sequences",
		Short: "Sequence positions (logical replication does not carry them)",
	}
	s := &settings{cfg: config.Default()}
	sync := &cobra.Command{
		Use:   "sync",
		Short: "Copy the positions of the replicated tables' sequences to the target (for a cutover)",
		Long: `Set every sequence the replicated tables use (serial and identity columns,
nextval defaults) on the target to its position on the source, in one target
transaction. The tables are --tables, or else the publication's.

Run it at a cutover, once the source takes no more writes and the target has
caught up (or use run --until-caught-up --sync-sequences). A target sequence
that is already ahead of the source's is left alone and reported: moving it
back would hand out values the target already holds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := s.resolveBoth(cmd); err != nil {
				return err
			}
			res, err := engine.SyncSequences(cmd.Context(), s.cfg, s.logger(stderr))
			if len(res) > 0 {
				tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SEQUENCE\tSOURCE\tTARGET BEFORE\tACTION")
				for _, r := range res {
					fmt.Fprintf(tw, "%s\t%d%s\t%d%s\t%s\n", r.Sequence, r.Source.LastValue, called(r.Source.IsCalled),
						r.Target.LastValue, called(r.Target.IsCalled), r.Action)
				}
				tw.Flush()
			} else if err == nil {
				fmt.Fprintln(stdout, "no sequences: the replicated tables use none")
			}
			return err
		},
	}
	s.bindConnection(sync.Flags())
	sync.Flags().StringVar(&s.tables, "tables", "", "comma-separated schema.table or schema.* whose sequences to sync (default: the publication's tables)")
	cmd.AddCommand(sync)
	return cmd
}

// called marks a position whose last_value has not been handed out yet.
func called(isCalled bool) string {
	if isCalled {
		return ""
	}
	return " (not called)"
}
