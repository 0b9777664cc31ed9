package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/stats"
)

// Version is set at build time (-ldflags "-X ...cli.Version=..."); when it
// is not, BuildVersion reads the module and VCS information Go records.
var Version = "dev"

// BuildVersion is the version to report: Version when the build set it,
// else the module version or the VCS revision Go stamped into the binary
// (with "+dirty" for uncommitted changes), else "dev".
func BuildVersion() string {
	if Version != "dev" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return Version
	}
	return rev + dirty
}

// Run executes the command line and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(ctx, stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "repstream:", err)
		return exitCode(err)
	}
	return 0
}

func newRoot(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "repstream",
		Short:         "Log-based replication from one PostgreSQL database to another",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       BuildVersion(),
	}
	root.AddCommand(topCmd(stdout), adviseCmd(stdout), checkCmd(stdout, stderr))
	root.AddCommand(errorsCmd(stdout, stderr))
	root.AddCommand(runCmd(stderr), statusCmd(stdout), dropCmd(stderr), demoCmd(stdout, stderr))
	root.AddCommand(halfCmd(config.RoleCapture, stderr), halfCmd(config.RoleApply, stderr))
	root.AddCommand(benchCmd(stdout, stderr), sequencesCmd(stdout, stderr))
	root.AddCommand(tablesCmd(stdout, stderr))
	return root
}

// settings are the flags shared by every command that talks to the databases.
type settings struct {
	cfg      config.Config
	tables   string
	file     string
	logLevel string

	logFormat string // text or json
}

func (s *settings) bindConnection(fs *pflag.FlagSet) {
	fs.StringVarP(&s.file, "config", "c", "", "YAML file with the same keys as the flags (flags and REPSTREAM_* variables take precedence)")
	fs.StringVar(&s.cfg.Source, "source", "", "source database (URL or key=value DSN); keep its password off the command line (ps shows it): REPSTREAM_SOURCE, PGPASSWORD, PGPASSFILE, ~/.pgpass or passfile=")
	fs.StringVar(&s.cfg.Target, "target", "", "target database (URL or key=value DSN); keep its password off the command line (ps shows it): REPSTREAM_TARGET, PGPASSWORD, PGPASSFILE, ~/.pgpass or passfile=")
	fs.StringVar(&s.cfg.Slot, "slot", s.cfg.Slot, "replication slot name")
	fs.StringVar(&s.cfg.Publication, "publication", "", "publication name (default: the slot's name; created from --tables when missing)")
	fs.StringVar(&s.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&s.logFormat, "log-format", "text", "text or json (one JSON object a line)")
}

func (s *settings) bindRun(fs *pflag.FlagSet) {
	c := &s.cfg
	fs.StringVar(&s.tables, "tables", "", "comma-separated schema.table or schema.* to publish (when the publication is created); double-quote a name with a comma, dot, quote (\"\"), space or capitals: '\"a,b\".\"t,1\"'")
	fs.BoolVar(&c.Snapshot, "snapshot", c.Snapshot, "copy existing rows when the slot is first created")
	fs.IntVar(&c.SnapshotWorkers, "snapshot-workers", c.SnapshotWorkers, "tables, or ranges of a large table, copied at once by the initial copy")
	fs.Var(&c.SnapshotRangeSize, "snapshot-range-size", "the initial copy splits tables larger than this into ranges of this size copied in parallel (0: the total size / (2 × --snapshot-workers), at least 32MiB)")
	fs.BoolVar(&c.Truncate, "truncate", false, "empty non-empty target tables before the initial copy, and before the copy of a table that enters the replication otherwise than by tables add (ALTER PUBLICATION ... ADD TABLE)")
	fs.BoolVar(&c.CreateTables, "create-tables", false, "create missing target tables from the source's definition")
	fs.BoolVar(&c.KeepIndexes, "keep-indexes", false, "copy into existing target tables with their keys and indexes in place (default: an empty table's keys, indexes and the foreign keys referencing it are set aside for the initial copy and rebuilt after it, as they were)")
	fs.BoolVar(&c.AdoptSlot, "adopt-slot", false, "use an existing slot the target has no state for, or whose position is ahead of the target's record (a restored target), from the slot's confirmed position, without an initial copy (the target must already hold the data up to there)")
	fs.BoolVar(&c.PartialPublication, "partial-publication", false, "run with a publication that leaves out inserts, updates, deletes or truncates (those changes never reach the target)")
	fs.BoolVar(&c.TrustTableOwners, "trust-table-owners", false, "with a superuser target role, write tables owned by roles that are not superusers, or in their schemas, make domains of such roles on the source whose defaults or checks are not immutable, and run DDL where such a role's function is an event trigger's (their index expressions, defaults, checks, ENABLE ALWAYS triggers and event triggers then run as a superuser: the owners could make themselves superusers)")
	fs.BoolVar(&c.AllowUntrackedPartitions, "allow-untracked-partitions", false, "run without the schema-change event trigger although a partitioned table is replicated through its root (a TRUNCATE of one partition, ATTACH and DETACH PARTITION then never reach the target)")
	fs.Var(&c.Memory, "memory", "queue memory budget; larger transactions spill to --spill-dir")
	fs.StringVar(&c.SpillDir, "spill-dir", "", "directory for spilled transactions, private to repstream's user: created 0700, refused if it exists as a symlink, another user's, or with group/other permissions (default: $TMPDIR/repstream-<uid>/spill-<slot>)")
	fs.IntVar(&c.ApplyParallelism, "apply-parallelism", c.ApplyParallelism, "apply workers (target connections)")
	fs.Var(&c.CommitOrder, "commit-order", "full: commit on the target in source order; dependent: only dependent transactions ordered")
	fs.Var(&c.OnError, "on-error", "a data conflict (duplicate key, missing row, constraint, bad value): stop the run, or park the transaction in the target's error queue (see repstream errors)")
	fs.IntVar(&c.GroupMaxTxns, "group-max-txns", c.GroupMaxTxns, "source transactions applied in one target transaction at most")
	fs.Var(&c.GroupMaxBytes, "group-max-bytes", "bytes of changes in one target transaction at most")
	fs.DurationVar(&c.CatchUpWait, "catch-up-wait", c.CatchUpWait, "while a backlog is caught up, how long a target transaction may wait for more source transactions (0: never)")
	fs.DurationVar(&c.GroupWait, "group-wait", c.GroupWait, "while source transactions come less than this apart, how long capture waits to gather more (where it does not, a target transaction waits for more) (0: never)")
	fs.BoolVar(&c.Eager, "eager", c.Eager, "apply a large transaction while the source streams it, before it commits")
	fs.BoolVar(&c.Collapse, "collapse", c.Collapse, "fold repeated changes to one key within a target transaction where the target table allows it")
	fs.BoolVar(&c.Binary, "binary", c.Binary, "transfer values in binary (pgoutput binary, binary COPY) when every column has the same built-in type on both sides")
	fs.StringVar(&c.Origin, "origin", c.Origin, "any: capture every source transaction; none: leave out those a replication wrote into the source (repstream's apply, a native subscription: they carry a replication origin), as PostgreSQL's subscription option origin; two replications in opposite directions need none on both")
	fs.StringVar(&c.DDL, "ddl", c.DDL, "schema changes: true (event trigger on the source; relation without superuser), relation (from pgoutput's Relation messages), false")
	fs.DurationVar(&c.PublicationPoll, "publication-poll", c.PublicationPoll, "how often a running engine checks that the publication still publishes every kind of change and, without the event trigger (--ddl=relation or false), compares it with the tables it replicates (a table added, taken out, set UNLOGGED)")
	fs.BoolVar(&c.UntilCaughtUp, "until-caught-up", false, "exit 0 once everything committed on the source before the start is applied and acknowledged")
	fs.BoolVar(&c.SyncSequences, "sync-sequences", false, "copy the replicated tables' sequence positions to the target when the run ends caught up or is stopped (see `sequences sync`)")
	fs.StringVar(&c.HTTP, "http", "", "serve the live page (/), /status (JSON), /metrics (Prometheus) and /healthz on this address, from the start of the run: 127.0.0.1:9187, or :9187 (a port alone binds 127.0.0.1); 0.0.0.0:9187 for every interface")
	fs.DurationVar(&c.HealthzMaxLag, "healthz-max-lag", c.HealthzMaxLag, "/healthz answers 503 when the apply lag passes this (0: never)")
	fs.DurationVar(&c.Progress, "progress", c.Progress, "log one progress line at this interval (0: off)")
	fs.DurationVar(&c.StatusInterval, "status-interval", c.StatusInterval, "standby status updates to the source at least this often")
	fs.StringVar(&c.DecodingWorkMem, "decoding-work-mem", c.DecodingWorkMem, "the walsender's logical_decoding_work_mem: larger transactions stream before they commit")
	fs.DurationVar(&c.SourceTimeout, "source-timeout", c.SourceTimeout, "a source link silent this long (not even answering a status request) is reconnected (0: never)")
	fs.DurationVar(&c.TargetTimeout, "target-timeout", c.TargetTimeout, "a target call blocked this long, with its backend not working, is reconnected (0: never)")
	fs.DurationVar(&c.ReconnectMaxWait, "reconnect-max-wait", c.ReconnectMaxWait, "longest wait between reconnect attempts (exponential backoff with jitter)")
}

// resolve merges file, environment and flags: flag > REPSTREAM_* > file > default.
func (s *settings) resolve(cmd *cobra.Command) error {
	changed := map[string]string{}
	cmd.Flags().Visit(func(f *pflag.Flag) { changed[f.Name] = f.Value.String() })
	if s.file != "" {
		fileCfg, err := config.Load(s.file)
		if err != nil {
			return err
		}
		s.cfg = fileCfg
		// The file's tables stay a list, entry by entry (an entry may
		// hold a comma in a quoted name); --tables or REPSTREAM_TABLES
		// replaces it.
		if fileCfg.LogLevel != "" {
			s.logLevel = fileCfg.LogLevel
		}
		if fileCfg.LogFormat != "" {
			s.logFormat = fileCfg.LogFormat
		}
	}
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" || f.Name == "help" {
			return
		}
		v, ok := changed[f.Name]
		if !ok {
			v, ok = os.LookupEnv("REPSTREAM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")))
		}
		if ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", f.Name, err))
			}
		}
	})
	if s.tables != "" {
		s.cfg.Tables = schema.SplitTableList(s.tables)
	}
	s.cfg.LogLevel, s.cfg.LogFormat = s.logLevel, s.logFormat
	if _, err := config.NewLogger(io.Discard, s.logLevel, s.logFormat); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// resolveBoth is resolve for commands that need both databases, then the
// defaults (config.EnsureDefaults).
func (s *settings) resolveBoth(cmd *cobra.Command) error {
	if err := s.resolve(cmd); err != nil {
		return err
	}
	if s.cfg.Source == "" || s.cfg.Target == "" {
		return errors.New("--source and --target are required")
	}
	s.cfg.EnsureDefaults()
	return nil
}

// resolveAdmin is resolveBoth for an admin command of one replication:
// without a slot named, it finds the replication on the target (findSlot)
// before the defaults that derive from the slot are filled.
func (s *settings) resolveAdmin(cmd *cobra.Command, w io.Writer) error {
	if err := s.resolve(cmd); err != nil {
		return err
	}
	if s.cfg.Source == "" || s.cfg.Target == "" {
		return errors.New("--source and --target are required")
	}
	if err := s.findSlot(cmd.Context(), cmd.Flags().Changed("slot"), w); err != nil {
		return err
	}
	s.cfg.EnsureDefaults()
	return nil
}

// logger is the logger --log-level and --log-format ask for (resolve has
// rejected invalid values; a logger is returned regardless).
func (s *settings) logger(w io.Writer) *slog.Logger {
	log, err := config.NewLogger(w, s.logLevel, s.logFormat)
	if err != nil {
		return slog.New(slog.NewTextHandler(w, nil))
	}
	return log
}

func runCmd(stderr io.Writer) *cobra.Command {
	s := &settings{cfg: config.Default()}
	s.cfg.Progress = 10e9
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Replicate from the source to the target (snapshot, then streaming)",
		Long: `Replicate changes from --source to --target through a logical replication slot.

On the first run the slot and (from --tables) the publication are created and,
unless --snapshot=false, the rows that already exist are copied from the slot's
snapshot. Then changes stream, are queued within --memory (larger transactions
spill to --spill-dir), and are applied exactly once: the position of every
applied transaction is stored on the target with its data.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := s.resolve(cmd); err != nil {
				return err
			}
			log := s.logger(stderr)
			stop, err := startCPUProfile(os.Getenv("REPSTREAM_CPUPROFILE"), log)
			if err != nil {
				return err
			}
			defer stop()
			err = engine.New(s.cfg, log, stats.NewRegistry(stats.WithVersion(BuildVersion()))).Run(cmd.Context())
			if err != nil && cmd.Context().Err() != nil && errors.Is(err, context.Canceled) {
				// SIGINT/SIGTERM before streaming began (the checks, the
				// initial copy): a requested stop, which the next run resumes.
				log.Info("stopped before streaming began: the next run resumes", "where", err.Error())
				return nil
			}
			return err
		},
	}
	s.bindConnection(cmd.Flags())
	s.bindRun(cmd.Flags())
	return cmd
}

func statusCmd(stdout io.Writer) *cobra.Command {
	s := &settings{cfg: config.Default()}
	var asJSON bool
	format, maxInactive := "text", 5*time.Minute
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print a slot's positions: source, confirmed, applied, lag and retained WAL",
		Long: `Print a slot's positions: source, confirmed, applied, lag and retained WAL.

Exit code 2, with the reason on stderr, when the slot is missing, invalidated
(wal_status lost) or inactive for longer than --max-inactive; with --kafka
also when the topic cannot be read, the target's offset is gone from it, or
the target is behind the topic's last commit and has not advanced for longer
than --max-inactive (its apply stopped), or its copy has not progressed for
longer than --max-inactive with no apply of the slot connected to the
target (its apply stopped during the copy); 1 on any other error; 0 otherwise
(wal_status unreserved is a WARN line on stderr).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := s.resolveAdmin(cmd, cmd.ErrOrStderr()); err != nil {
				return err
			}
			if asJSON {
				format = "json"
			}
			return runStatus(cmd, s, format, maxInactive)
		},
	}
	s.bindConnection(cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (same as --format json)")
	cmd.Flags().StringVar(&format, "format", format, "text or json")
	cmd.Flags().DurationVar(&maxInactive, "max-inactive", maxInactive, "exit 2 when the slot has been inactive longer than this, or (--kafka) the target behind the topic has not advanced for longer, or its copy, its apply stopped, has not progressed for longer (0: never)")
	cmd.Flags().StringVar(&s.cfg.Kafka, "kafka", "", "for a target of `repstream apply --kafka`: the brokers; adds the slot's topic, its last commit and the target's place in it: caught up, or behind by how much WAL since when (exit 2 when the topic cannot be read, the target's offset is gone from it, or the target is behind and stale, or its copy stopped: --max-inactive)")
	bindKafkaSecurity(cmd.Flags(), &s.cfg)
	return cmd
}

func dropCmd(stderr io.Writer) *cobra.Command {
	s := &settings{cfg: config.Default()}
	var targetOnly bool
	cmd := &cobra.Command{
		Use:   "drop",
		Short: "Remove the slot, the publication if repstream created it, its state on the target and its spill directory; what other replications share goes with the last",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := s.resolve(cmd); err != nil {
				return err
			}
			if s.cfg.Kafka != "" && !targetOnly {
				// The Kafka mode's whole replication: the capture's
				// source side and topic, and a target's state if named.
				if s.cfg.Source == "" || !s.slotGiven(cmd.Flags().Changed("slot")) {
					return errors.New("drop --kafka: --source and --slot are required (--target too, to drop that target's state)")
				}
				c := s.cfg
				if c.Target != "" && !cmd.Flags().Changed("spill-dir") {
					c.SpillDir, c.Role = "", config.RoleApply
				}
				c.EnsureDefaults()
				return engine.DropKafka(cmd.Context(), c, s.logger(stderr))
			}
			if err := s.resolveAdmin(cmd, stderr); err != nil {
				return err
			}
			if targetOnly {
				c := s.cfg
				if !cmd.Flags().Changed("spill-dir") {
					c.SpillDir, c.Role = "", config.RoleApply
					c.EnsureDefaults()
				}
				return install.DropTarget(cmd.Context(), c.Target, c.Slot, c.SpillDir, c.TrustTableOwners, s.logger(stderr))
			}
			return engine.Drop(cmd.Context(), s.cfg.Source, s.cfg.Target, s.cfg.Slot, s.cfg.Publication, s.cfg.SpillDir, s.cfg.TrustTableOwners, s.logger(stderr))
		},
	}
	s.bindConnection(cmd.Flags())
	cmd.Flags().BoolVar(&s.cfg.TrustTableOwners, "trust-table-owners", false, "the run's --trust-table-owners: with a superuser target role, drop what repstream made on the target although an event trigger there runs the function of a role that is not a superuser")
	cmd.Flags().BoolVar(&targetOnly, "target-only", false, "remove only the slot's state on --target (and the apply's spill directory): for one target of `repstream apply --kafka`, leaving the slot, the publication, the topic and the other targets as they are; then `repstream apply` copies that target again")
	cmd.Flags().StringVar(&s.cfg.SpillDir, "spill-dir", "", "the run's --spill-dir, if it had one: removed with its spill files (default: $TMPDIR/repstream-<uid>/spill-<slot>)")
	cmd.Flags().StringVar(&s.cfg.Kafka, "kafka", "", "a replication of `repstream capture`: the brokers; drops the slot, the publication if repstream made it and no other logical slot of the database may use it, and the topic repstream.<slot> (--target: that target's state too; the other targets' with --target-only each); --target is then optional. Stop the capture and the applies first")
	bindKafkaSecurity(cmd.Flags(), &s.cfg)
	return cmd
}

// startCPUProfile writes a CPU profile of the run to path (the
// REPSTREAM_CPUPROFILE environment variable; "" = none), for `go tool pprof`.
// It is how the engine's hot paths are found under a real workload, e.g. a
// bench run, whose repstream processes inherit the variable.
func startCPUProfile(path string, log *slog.Logger) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	// Not through a symbolic link (one another user planted in a shared
	// directory would have the profile truncate the file it names).
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("REPSTREAM_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("REPSTREAM_CPUPROFILE: %w", err)
	}
	log.Info("writing a CPU profile", "component", "cli", "path", path)
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// halfCmd is `capture` or `apply`: one half of a replication whose halves
// are joined by a Kafka topic (engine/kafka.go).
func halfCmd(role config.Role, stderr io.Writer) *cobra.Command {
	s := &settings{cfg: config.Default()}
	s.cfg.Progress = 10e9
	cmd := &cobra.Command{Args: cobra.NoArgs}
	switch role {
	case config.RoleCapture:
		cmd.Use = "capture"
		cmd.Short = "Capture the slot's stream into the Kafka topic repstream.<slot> (one capture, any number of applies)"
		cmd.Long = `Read the replication slot and write its stream, in commit order with the
transactions' boundaries, to the Kafka topic repstream.<slot> (one partition;
replication factor 3 and min.insync.replicas 2 on a cluster of 3 brokers or
more, else what the cluster has). Records are written acks=all by an
idempotent, transactional producer whose id is the topic's name: a new
capture fences any earlier one of the slot. The slot is acknowledged only
up to what the brokers hold. The publication, the event trigger and the slot are made as run makes
them; there is no initial copy here: each apply makes its own.`
	case config.RoleApply:
		cmd.Use = "apply"
		cmd.Short = "Apply the Kafka topic repstream.<slot> to one target (its own initial copy, then the topic)"
		cmd.Long = `Read the Kafka topic a capture writes (repstream.<slot>) and apply it to
--target exactly once, as run applies: the position of every applied
transaction is recorded in the target with its rows, and the topic offset to
read from again beside it. The first start copies the source's tables (at a
snapshot of their own) and then applies the topic's transactions after that
snapshot. Run one apply per target; a slow or stopped one holds back only
itself.`
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := s.resolve(cmd); err != nil {
			return err
		}
		s.cfg.Role = role
		log := s.logger(stderr)
		// REPSTREAM_CPUPROFILE as for run, one file per half: <path>.<role>.
		prof := os.Getenv("REPSTREAM_CPUPROFILE")
		if prof != "" {
			prof += "." + string(role)
		}
		stop, err := startCPUProfile(prof, log)
		if err != nil {
			return err
		}
		defer stop()
		err = engine.New(s.cfg, log, stats.NewRegistry(stats.WithVersion(BuildVersion()))).Run(cmd.Context())
		if err != nil && cmd.Context().Err() != nil && errors.Is(err, context.Canceled) {
			log.Info("stopped before streaming began: the next start resumes", "where", err.Error())
			return nil
		}
		return err
	}
	s.bindConnection(cmd.Flags())
	s.bindRun(cmd.Flags())
	cmd.Flags().StringVar(&s.cfg.Kafka, "kafka", "", "the Kafka brokers: host:port[,host:port...]")
	bindKafkaSecurity(cmd.Flags(), &s.cfg)
	if role == config.RoleCapture {
		cmd.Flags().DurationVar(&s.cfg.KafkaTxnTimeout, "kafka-txn-timeout", kafkalog.TxnTimeout,
			"timeout of the capture's Kafka transactions (at most the brokers' transaction.max.timeout.ms); brokers away longer abort the open one and the capture starts a new session")
		cmd.Flags().DurationVar(&s.cfg.KafkaLinger, "kafka-linger", kafkalog.DefaultLinger,
			"how long a record waits after a transaction's end for the transactions that follow, unless it holds 64 KiB or none ended in as long before (a quiet stream: it goes at once): longer costs the brokers and every apply fewer requests, and adds up to that much to each transaction's latency (while catching up: 50 ms)")
		cmd.Flags().StringVar(&s.cfg.KafkaCompression, "kafka-compression", kafkalog.DefaultCompression,
			"codec of the records' batches: "+strings.Join(kafkalog.Compressions, ", ")+" (snappy and lz4 are cheap, zstd compresses most; none spares the CPU of the capture, the brokers and every apply, and moves about twice the bytes)")
	}
	return cmd
}

// bindKafkaSecurity adds the flags of how the brokers are reached; the
// SASL password is read from $REPSTREAM_KAFKA_PASSWORD only.
func bindKafkaSecurity(fs *pflag.FlagSet, cfg *config.Config) {
	fs.BoolVar(&cfg.KafkaTLS, "kafka-tls", cfg.KafkaTLS, "connect to the brokers over TLS (implied by --kafka-ca, --kafka-cert)")
	fs.StringVar(&cfg.KafkaCA, "kafka-ca", cfg.KafkaCA, "PEM file of the CA certificates that sign the brokers' (default: the system's)")
	fs.StringVar(&cfg.KafkaCert, "kafka-cert", cfg.KafkaCert, "PEM client certificate for the brokers (mutual TLS), with --kafka-key")
	fs.StringVar(&cfg.KafkaKey, "kafka-key", cfg.KafkaKey, "PEM private key of --kafka-cert")
	fs.StringVar(&cfg.KafkaSASL, "kafka-sasl", cfg.KafkaSASL, "SASL mechanism towards the brokers: "+strings.Join(kafkalog.SASLMechanisms, ", ")+" (the password in $"+kafkalog.EnvPassword+")")
	fs.StringVar(&cfg.KafkaUser, "kafka-user", cfg.KafkaUser, "SASL user towards the brokers")
}
