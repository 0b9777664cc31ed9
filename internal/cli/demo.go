package cli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/demo"
)

func demoCmd(stdout, stderr io.Writer) *cobra.Command {
	o := demo.Options{Memory: 256 << 20}
	var logLevel string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Replicate a live workload between two throwaway clusters, verify, summarise",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := &settings{logLevel: logLevel}
			o.Out = stdout
			o.Logger = s.logger(stderr)
			return demo.Run(cmd.Context(), o)
		},
	}
	cmd.Flags().IntVar(&o.Rows, "rows", 300_000, "rows of the conditions workload")
	cmd.Flags().IntVar(&o.TxnRows, "txn-rows", 100, "rows per source transaction")
	cmd.Flags().IntVar(&o.Parallelism, "apply-parallelism", config.DefaultParallelism(), "apply workers")
	cmd.Flags().Var(&o.Memory, "memory", "queue memory budget")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	return cmd
}
