package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/healthcheck"
	"github.com/repstream/repstream/internal/kafkalog"
)

func checkCmd(stdout, stderr io.Writer) *cobra.Command {
	s := &settings{cfg: config.Default()}
	var format string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Health and configuration report of a source/target pair: one line per item with OK, WARN or FAIL and the fix",
		Long: `Check everything a run needs, without changing anything on either server (both
sessions are read-only): the source's wal_level, free replication slots and
walsenders, max_slot_wal_keep_size, wal_sender_timeout,
logical_decoding_work_mem, the source role's REPLICATION attribute, each
table's SELECT privilege (every row: no row-level security policy that
applies to the role) and replica identity, the publication and its tables,
the slot (active, wal_status, retained WAL); on the target each table (exists
or would be created with --create-tables, columns compatible, and, unless
--ddl=false, owned by the role, as schema changes need; with a superuser
role, owned by a superuser, in a superuser's schema, unless
--trust-table-owners), whether the role may SET session_replication_role
(with a superuser role: no event trigger running another role's function
in its DDL, unless --trust-table-owners), max_connections against --apply-parallelism,
and repstream's state schema. With --kafka (the halves joined by Kafka): the
brokers, the slot's topic (one partition, its replication factor and
min.insync.replicas), the offset the target has recorded in it and where
the target stands in the topic as status --kafka says it (caught up with
its last commit, or behind by so much WAL), its copy if one is under way or
stopped, and, as an apply's start does, that the source role (give --source
as the apply's) can read what an apply reads in the schema repstream on
the source.

Exits 1 when any item is FAIL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := s.resolveBoth(cmd); err != nil {
				return err
			}
			if format != "text" && format != "json" {
				return fmt.Errorf("--format %q: want text or json", format)
			}
			var kc kafkalog.Cluster
			if s.cfg.Kafka != "" {
				var err error
				if kc, err = engine.KafkaCluster(s.cfg); err != nil {
					return err
				}
			}
			rep, err := healthcheck.Run(cmd.Context(), healthcheck.Options{
				Source: s.cfg.Source, Target: s.cfg.Target, Tables: s.cfg.Tables,
				Publication: s.cfg.Publication, Slot: s.cfg.Slot, CreateTables: s.cfg.CreateTables,
				ApplyParallelism: s.cfg.ApplyParallelism, DDL: s.cfg.DDL, TrustTableOwners: s.cfg.TrustTableOwners, Kafka: kc, Logger: s.logger(stderr),
			})
			if err != nil {
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return fmt.Errorf("write: %w", err)
				}
			} else if err := rep.WriteText(stdout); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			if n := rep.Count(healthcheck.Fail); n > 0 {
				return fmt.Errorf("check: %d item(s) FAIL", n)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	s.bindConnection(fs)
	fs.StringVar(&s.tables, "tables", "", "comma-separated schema.table or schema.* to check (default: the publication's tables)")
	fs.BoolVar(&s.cfg.CreateTables, "create-tables", false, "a table missing on the target will be created by the run (not a failure)")
	fs.IntVar(&s.cfg.ApplyParallelism, "apply-parallelism", s.cfg.ApplyParallelism, "apply workers the run will use (target connections)")
	fs.StringVar(&s.cfg.DDL, "ddl", s.cfg.DDL, "the run's --ddl: with true or relation, schema changes are applied to the target tables, which needs their ownership")
	fs.BoolVar(&s.cfg.TrustTableOwners, "trust-table-owners", false, "the run's --trust-table-owners: a superuser target role may write tables owned by roles that are not superusers")
	fs.StringVar(&s.cfg.Kafka, "kafka", "", "for the halves joined by Kafka (capture, apply): the brokers; checks them, the slot's topic (one partition, its replication), the target's offset and place in it, and what the apply's source role reads in the schema repstream")
	bindKafkaSecurity(fs, &s.cfg)
	fs.StringVar(&format, "format", "text", "text or json")
	return cmd
}
