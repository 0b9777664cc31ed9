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
	var kafka bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Replicate a live workload between two throwaway clusters, verify, summarise",
		Long: `Replicate a live workload between two throwaway clusters, verify, summarise.

With --kafka (make demo-kafka): through a throwaway Kafka broker, one capture
and one apply per target into two target databases (--create-tables), a
workload with one transaction of two thirds of --rows, one target stopped
and started again, both targets verified row for row; needs the broker's
jars (make kafka).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := &settings{logLevel: logLevel}
			o.Out = stdout
			o.Logger = s.logger(stderr)
			if kafka {
				return demo.RunKafka(cmd.Context(), o)
			}
			return demo.Run(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&kafka, "kafka", false, "through a Kafka broker: one capture, two applies into two target databases (make demo-kafka)")
	cmd.Flags().IntVar(&o.Rows, "rows", 300_000, "rows of the conditions workload")
	cmd.Flags().IntVar(&o.TxnRows, "txn-rows", 100, "rows per source transaction")
	cmd.Flags().IntVar(&o.Parallelism, "apply-parallelism", config.DefaultParallelism(), "apply workers")
	cmd.Flags().Var(&o.Memory, "memory", "queue memory budget")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	return cmd
}
