package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/repstream/repstream/internal/monitor"
	"github.com/repstream/repstream/internal/pgdsn"
)

func adviseCmd(stdout io.Writer) *cobra.Command {
	var (
		addr, targetDSN, format string
		duration                time.Duration
		idle, flow              float64
	)
	cmd := &cobra.Command{
		Use:   "advise",
		Short: "Sample a running engine and name its bottleneck (the Streams Performance Advisor's rule), with what to change",
		Long: `Read the /status endpoint of a running 'repstream run --http ADDR' at the start
and the end of --duration and apply the Oracle Streams Performance Advisor's
rule: the bottleneck is the busiest component whose idle share and whose
flow-control (waiting) share of the interval are both below the thresholds.
The apply workers count as one component "apply" (their shares averaged);
the busiest worker is named too.

It prints "bottleneck: <component>" or "no bottleneck", what each component
did, and recommendations drawn from what it measured. With --target it also
reads (never changes) the target's catalog for triggers that fire for
replicated rows and heavily indexed tables. The CPU count in the advice is
this machine's: run advise where repstream runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				return fmt.Errorf("--http is required (the address given to repstream run --http)")
			}
			if duration <= 0 {
				return fmt.Errorf("--duration must be positive")
			}
			if idle <= 0 || idle > 100 || flow <= 0 || flow > 100 {
				return fmt.Errorf("--idle-threshold and --flow-threshold are percentages in (0, 100]")
			}
			if format != "text" && format != "json" {
				return fmt.Errorf("--format %q: want text or json", format)
			}
			ctx := cmd.Context()
			url := monitor.StatusURL(addr)
			client := &http.Client{Timeout: 10 * time.Second}
			first, err := monitor.Fetch(ctx, client, url)
			if err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(duration):
			}
			last, err := monitor.Fetch(ctx, client, url)
			if err != nil {
				return err
			}
			in := monitor.Inputs{Thresholds: monitor.Thresholds{Idle: idle / 100, Flow: flow / 100}, CPUs: runtime.NumCPU()}
			if targetDSN != "" {
				if in.Target, err = readTargetFacts(ctx, targetDSN); err != nil {
					return err
				}
			}
			v := monitor.Advise(first.Stats, last.Stats, in)
			if format == "json" {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			return monitor.WriteVerdict(stdout, v)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "http", "", "address of the engine's --http endpoint (e.g. :9187 or http://host:9187)")
	fs.DurationVar(&duration, "duration", 60*time.Second, "how long to sample")
	fs.Float64Var(&idle, "idle-threshold", 50, "a component idle at least this % of the time is not the bottleneck")
	fs.Float64Var(&flow, "flow-threshold", 50, "a component in flow control (waiting) at least this % of the time is not the bottleneck")
	fs.StringVar(&targetDSN, "target", "", "target database: also list its triggers that fire for replicated rows and heavily indexed tables (read-only)")
	fs.StringVar(&format, "format", "text", "text or json")
	return cmd
}

// readTargetFacts reads the target's catalog in a read-only session.
func readTargetFacts(ctx context.Context, dsn string) (*monitor.TargetFacts, error) {
	cfg, err := pgdsn.ParsePgx(dsn)
	if err != nil {
		return nil, fmt.Errorf("--target: %w", err)
	}
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the target %s: %w", pgdsn.Describe(&cfg.Config), pgdsn.RedactError(err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return monitor.ReadTargetFacts(ctx, conn)
}
