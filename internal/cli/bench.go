package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/repstream/repstream/internal/bench"
)

// benchCmd is `repstream bench WORKLOAD...`: the performance lab.
func benchCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		o        = bench.Options{Mode: bench.ModeLive, Systems: bench.AllSystems}
		settings []string
		logLevel string
		summary  bool
	)
	// Every engine-tuning flag of `repstream run` passes through when set;
	// the list comes from run's own flag set, so the two never drift apart.
	passThrough := runTuningFlags()
	cmd := &cobra.Command{
		Use:   "bench WORKLOAD...",
		Short: "Run a seed workload against repstream and native logical replication, verify, and report",
		Long: `Run a seed workload (` + strings.Join(bench.Names(), ", ") + `) against repstream and
PostgreSQL's native logical replication in the same run, verify that every target
equals its source, and write report.json, report.md and PNG charts to --out.

By default two throwaway clusters are started (fsync on); --source/--target use
existing servers (bench creates and drops its own databases there).

Examples:
  repstream bench conditions --mode backlog
  repstream bench pedestals --scale 0.1
  repstream bench conditions --vary apply-parallelism=1,2,4 --systems repstream,native
  repstream bench batch --rows 99000 --memory 64MB
  repstream bench initial-copy --scale 0.3 --systems repstream,native,pgcopydb,pglogical
  repstream bench single-row --mode backlog --systems repstream,native,pglogical,pgstream

Peers (pglogical, pgstream, pgcopydb) run when installed (make peers); a
missing one is skipped with the command that installs it. kafka runs
repstream's Kafka mode (capture and apply) through one throwaway broker from
the jars make kafka caches; without them it is skipped.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
			o.ServerSettings = map[string]string{}
			for _, kv := range settings {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("--server-setting %q: want name=value", kv)
				}
				o.ServerSettings[k] = v
			}
			o.RepstreamFlags = nil
			cmd.Flags().Visit(func(f *pflag.Flag) {
				for _, p := range passThrough {
					if f.Name == p.name {
						o.RepstreamFlags = append(o.RepstreamFlags, "--"+f.Name+"="+f.Value.String())
					}
				}
			})
			o.Live = stdout
			out := o.Out
			var reps []*bench.Report
			var errs []error
			for _, w := range args {
				wo := o
				wo.Workload = w
				if out == "" {
					wo.Out = "bench-" + w
				} else if len(args) > 1 {
					wo.Out = filepath.Join(out, w)
				}
				rep, err := bench.Run(cmd.Context(), wo)
				if rep != nil {
					reps = append(reps, rep)
					if !o.Quiet {
						fmt.Fprintf(stdout, "report: %s\n", filepath.Join(wo.Out, "report.md"))
					}
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", w, err))
					if !errors.Is(err, bench.ErrNotVerified) || cmd.Context().Err() != nil {
						break
					}
				}
			}
			if summary || len(args) > 1 || o.Quiet {
				fmt.Fprintln(stdout)
				bench.SummaryTable(stdout, reps)
			}
			return errors.Join(errs...)
		},
	}
	fs := cmd.Flags()
	fs.Var(&o.Mode, "mode", "live: replicate while loading; backlog: load with replication stopped, then measure the catch-up")
	fs.Var((*bench.Systems)(&o.Systems), "systems", "systems to compare: repstream, native, kafka (repstream capture and apply through a throwaway Kafka broker; needs make kafka), and the peers pglogical, pgstream, pgcopydb (initial-copy only); a peer not installed is skipped")
	fs.Float64Var(&o.Params.Scale, "scale", 1, "fraction of the seed's size (1 = full size)")
	fs.Int64Var(&o.Params.Rows, "rows", 0, "rows to load (overrides --scale)")
	fs.IntVar(&o.Params.TxnRows, "txn-rows", 0, "conditions: rows per transaction (default 100)")
	fs.DurationVar(&o.Params.Delay, "delay", 0, "conditions: pause between transactions (seed: 0, 1ms, 10ms, 20ms, 30ms)")
	fs.IntVar(&o.Params.Rate, "rate", 0, "fly: transactions per second (default 1000)")
	fs.IntVar(&o.Params.Accounts, "accounts", 0, "fly: accounts the transactions update in turn, at most 1000 (default 1000; fewer: hot rows)")
	fs.BoolVar(&o.Params.PreMade, "pre-made", false, "initial-copy: make the target's tables (keys and indexes included) before every system starts, as pg_dump --schema-only would (repstream without --create-tables; pgcopydb clone --drop-if-exists)")
	fs.DurationVar(&o.Params.Duration, "duration", 0, "fly: duration at --scale 1 (default 60s)")
	fs.DurationVar(&o.Params.WarmUp, "warm-up", 5*time.Second, "fly, live mode: the workload runs this long at its rate before the measured interval (the --duration) begins, so that a start's first change to each table is not measured; the start is reported apart (start → first change visible); 0: measure from the first transaction")
	fs.IntVar(&o.Params.Jobs, "jobs", 0, "dbl: most parallel jobs (default 2×CPUs)")
	fs.IntVar(&o.KafkaBrokers, "kafka-brokers", 1, "kafka: brokers in the throwaway Kafka cluster, 1 to 3 (3: replication factor 3)")
	fs.IntVar(&o.KafkaHeapMB, "kafka-heap", bench.DefaultKafkaHeapMB, "kafka: each broker's JVM heap in MiB (its young collections come less often with more)")
	fs.IntVar(&o.KafkaTargets, "kafka-targets", 1, "kafka: targets, 1 or 2; the second is stopped while the workload loads and started after it (its catch-up and the source's retained WAL are reported)")
	fs.IntVar(&o.Repeat, "repeat", 1, "run every system this many rounds (alternating the order); the report gives each round's ratio and their median")
	fs.StringVar(&o.Vary, "vary", "", "run repstream once per value of one of its flags, e.g. apply-parallelism=1,2,4")
	fs.StringVar(&o.SourceDSN, "source", "", "existing source server (default: a throwaway cluster)")
	fs.StringVar(&o.TargetDSN, "target", "", "existing target server (default: a throwaway cluster)")
	fs.StringArrayVar(&settings, "server-setting", nil, "postgresql.conf setting for the throwaway clusters, name=value (repeatable; both clusters)")
	fs.BoolVar(&o.NativeBinary, "native-binary", false, "native subscription WITH (binary = true) (default: text, PostgreSQL's default)")
	fs.BoolVar(&o.Fast, "fast", false, "throwaway clusters with fsync off (quick checks, not real figures)")
	fs.BoolVar(&o.UnixSocket, "unix-socket", false, "connect both systems (and the bench) through the throwaway clusters' Unix sockets instead of TCP")
	fs.StringVar(&o.Out, "out", "", "report directory (default bench-WORKLOAD; with several workloads, one subdirectory each)")
	fs.StringVar(&o.Binary, "repstream-binary", "", "repstream executable to run (default: this one)")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "limit for one system's run")
	fs.BoolVarP(&o.Quiet, "quiet", "q", false, "no live line; print only the summary table")
	fs.BoolVar(&summary, "summary", false, "print the summary table at the end")
	fs.StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	for _, p := range passThrough {
		fs.String(p.name, "", "repstream: "+p.usage)
		if p.boolean {
			fs.Lookup(p.name).NoOptDefVal = "true"
		}
	}
	return cmd
}

type flagDoc struct {
	name, usage string
	boolean     bool
}

// runTuningFlags lists `repstream run`'s flags that tune the engine: all but
// the connection, table-selection and bookkeeping ones the lab sets itself.
func runTuningFlags() []flagDoc {
	own := map[string]bool{"tables": true, "snapshot": true, "snapshot-workers": true, "truncate": true,
		"create-tables": true, "until-caught-up": true, "sync-sequences": true, "http": true, "progress": true, "status-interval": true}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	s := &settings{}
	s.bindRun(fs)
	var out []flagDoc
	fs.VisitAll(func(f *pflag.Flag) {
		if !own[f.Name] {
			out = append(out, flagDoc{f.Name, f.Usage, f.Value.Type() == "bool"})
		}
	})
	return out
}
