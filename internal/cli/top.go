package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/repstream/repstream/internal/monitor"
)

func topCmd(stdout io.Writer) *cobra.Command {
	var (
		addr     string
		interval time.Duration
		count    int
		format   string
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch a running engine: one line per interval with every stage's rate, busy/idle/flow-control shares and lag",
		Long: `Poll the /status endpoint of a running 'repstream run --http ADDR' and print
one line per interval (after a header line):

  14:25:50 CAP 12.3k 1.2M B0 I95 F5 | Q 2.1M | APL(4) 12.1k B90 I10 F0 | lag 1.2M

CAP capture (changes and bytes a second), Q the queue's memory (SP: bytes
spilled in the interval), APL(n) the n apply workers together, EGR eager apply
when it ran, SNAP the initial copy while it copies; B, I and F are the
percentages of the interval each stage spent busy, idle and waiting (flow
control); lag is the WAL received but not yet durably applied on the target.
For the halves joined by Kafka, the --http of a 'repstream capture' prints
"unacked" (the WAL received and not yet acknowledged by the brokers) instead
of lag, and that of a 'repstream apply' adds TOPIC (the records of the topic it
has not read yet). --format json prints one JSON object per
interval instead (every component, every apply worker).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				return fmt.Errorf("--http is required (the address given to repstream run --http)")
			}
			if interval <= 0 {
				return fmt.Errorf("--interval must be positive")
			}
			if format != "text" && format != "json" {
				return fmt.Errorf("--format %q: want text or json", format)
			}
			ctx := cmd.Context()
			url := monitor.StatusURL(addr)
			client := &http.Client{Timeout: 10 * time.Second}
			prev, err := monitor.Fetch(ctx, client, url)
			if err != nil {
				return err
			}
			if format == "text" {
				fmt.Fprintln(stdout, monitor.Legend)
				fmt.Fprintln(stdout, monitor.Header)
			}
			enc := json.NewEncoder(stdout)
			t := time.NewTicker(interval)
			defer t.Stop()
			for n := 0; count <= 0 || n < count; n++ {
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
				cur, err := monitor.Fetch(ctx, client, url)
				if err != nil {
					return err
				}
				iv := monitor.Measure(prev, cur)
				prev = cur
				if format == "json" {
					if err := enc.Encode(iv); err != nil {
						return fmt.Errorf("write: %w", err)
					}
					continue
				}
				if _, err := fmt.Fprintln(stdout, monitor.FormatLine(iv)); err != nil {
					return fmt.Errorf("write: %w", err)
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "http", "", "address of the engine's --http endpoint (e.g. :9187 or http://host:9187)")
	fs.DurationVar(&interval, "interval", 5*time.Second, "time between lines")
	fs.IntVar(&count, "count", 0, "stop after this many lines (0: until interrupted)")
	fs.StringVar(&format, "format", "text", "text or json (one object per interval)")
	return cmd
}
