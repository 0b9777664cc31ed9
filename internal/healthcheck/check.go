package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/errqueue"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/pgdsn"
	"github.com/repstream/repstream/internal/provision"
	"github.com/repstream/repstream/internal/schema"
	"github.com/repstream/repstream/internal/target"
)

// Options say what to check.
type Options struct {
	Source, Target string
	// Tables are --tables patterns; empty: the publication's tables.
	Tables      []string
	Publication string
	Slot        string
	// CreateTables: a table missing on the target would be created by the
	// run (--create-tables), which is then not a failure.
	CreateTables bool
	// ApplyParallelism is the number of apply connections the run opens.
	ApplyParallelism int
	// DDL is the run's --ddl ("" is the default, true): unless "false",
	// schema changes are applied to the target tables, which needs their
	// owner's privileges.
	DDL string
	// TrustTableOwners: the run's --trust-table-owners (a superuser target
	// role may write tables owned by roles that are not superusers).
	TrustTableOwners bool
	// Kafka, for the halves joined by Kafka, is the brokers: the brokers,
	// the slot's topic and the target's offset and place in it are checked
	// too (side "kafka", kafka.go), and what an apply's source role reads
	// in the schema repstream on the source (side "source").
	Kafka  kafkalog.Cluster
	Logger *slog.Logger
}

// minServer is the oldest PostgreSQL repstream supports on either side.
const minServer = 140000

// checker runs the checks of one Run.
//
// Invariant: src and tgt are nil until connected and then read-only
// sessions (default_transaction_read_only = on); r only grows.
type checker struct {
	opts     Options
	r        Report
	log      *slog.Logger
	src, tgt *pgx.Conn
	srcVer   int
	tgtVer   int
	// srcRole and tgtRole are the sessions' roles, quoted for SQL.
	srcRole, tgtRole string
}

// Run checks the pair and returns the report. The error is only for a
// cancelled context; everything the servers answer (a refused connection,
// a missing privilege) is an item of the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	defaults := config.Config{Slot: opts.Slot, Publication: opts.Publication}
	defaults.EnsureDefaults()
	opts.Slot, opts.Publication = defaults.Slot, defaults.Publication
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &checker{opts: opts, log: opts.Logger.With(slog.String("component", "check"))}
	defer c.close()
	c.src, c.srcVer = c.connect(ctx, "source", opts.Source)
	c.srcRole = c.role(ctx, c.src, "the source role")
	var tables []*schema.Table
	if c.src != nil {
		c.sourceSettings(ctx)
		tables = c.sourceTables(ctx)
		c.slot(ctx)
	}
	c.tgt, c.tgtVer = c.connect(ctx, "target", opts.Target)
	c.tgtRole = c.role(ctx, c.tgt, "the target role")
	if c.tgt != nil {
		c.targetSettings(ctx)
		if c.src != nil {
			c.targetTables(ctx, tables)
		}
		if c.src != nil {
			c.sameDatabase(ctx)
			c.bothWays(ctx)
			c.trustedSchema(ctx, "source", c.src)
		}
		if c.trustedSchema(ctx, "target", c.tgt) {
			c.stateSchema(ctx)
		}
	}
	if len(opts.Kafka.Addrs) > 0 {
		if c.src != nil {
			c.applySourceReads(ctx)
		}
		c.kafka(ctx)
	}
	if err := ctx.Err(); err != nil {
		return &c.r, fmt.Errorf("check: %w", err)
	}
	return &c.r, nil
}

// role returns the session's role quoted for SQL, or fallback.
func (c *checker) role(ctx context.Context, conn *pgx.Conn, fallback string) string {
	var r string
	if conn == nil || conn.QueryRow(ctx, "SELECT quote_ident(current_user)").Scan(&r) != nil {
		return fallback
	}
	return r
}

func (c *checker) close() {
	ctx := context.Background()
	for _, conn := range []*pgx.Conn{c.src, c.tgt} {
		if conn != nil {
			_ = conn.Close(ctx)
		}
	}
}

// connect opens a read-only session and reports the server's version.
func (c *checker) connect(ctx context.Context, side, dsn string) (*pgx.Conn, int) {
	if dsn == "" {
		c.r.add(Fail, side, "connection", "give --"+side+" DSN", "no %s given", side)
		return nil, 0
	}
	cfg, err := pgdsn.ParsePgx(dsn)
	if err != nil {
		c.r.add(Fail, side, "connection", "correct the connection string", "%v", err)
		return nil, 0
	}
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.RuntimeParams["application_name"] = "repstream check"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		c.r.add(Fail, side, "connection", "check the host, port, user, password and pg_hba.conf",
			"%s: %v", pgdsn.Describe(&cfg.Config), pgdsn.RedactError(err))
		return nil, 0
	}
	var num int
	var version string
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int, current_setting('server_version')").Scan(&num, &version); err != nil {
		c.r.add(Fail, side, "connection", "", "read the server version: %v", err)
		_ = conn.Close(ctx)
		return nil, 0
	}
	if num < minServer {
		c.r.add(Fail, side, "server version", "use PostgreSQL 14 or later", "PostgreSQL %s is older than 14", version)
	} else {
		c.r.add(OK, side, "server version", "", "PostgreSQL %s (%s)", version, pgdsn.Describe(&cfg.Config))
	}
	return conn, num
}

// setting reads one server setting; "" with an item when it cannot.
func (c *checker) setting(ctx context.Context, conn *pgx.Conn, side, name string) (string, bool) {
	var v string
	if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
		c.r.add(Fail, side, name, "", "cannot read it: %v", err)
		return "", false
	}
	return v, true
}

func (c *checker) intSetting(ctx context.Context, conn *pgx.Conn, side, name string) (int64, bool) {
	v, ok := c.setting(ctx, conn, side, name)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		c.r.add(Fail, side, name, "", "not a number: %q", v)
		return 0, false
	}
	return n, true
}

func (c *checker) sourceSettings(ctx context.Context) {
	const side = "source"
	if v, ok := c.setting(ctx, c.src, side, "wal_level"); ok {
		if v == "logical" {
			c.r.add(OK, side, "wal_level", "", "logical")
		} else {
			c.r.add(Fail, side, "wal_level", "set wal_level = logical in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart the source",
				"wal_level=%s: logical decoding needs wal_level=logical", v)
		}
	}

	var slotExists, slotActive bool
	_ = c.src.QueryRow(ctx, "SELECT true, active FROM pg_replication_slots WHERE slot_name = $1", c.opts.Slot).Scan(&slotExists, &slotActive)
	if maxSlots, ok := c.intSetting(ctx, c.src, side, "max_replication_slots"); ok {
		var used int64
		_ = c.src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&used)
		switch free := maxSlots - used; {
		case slotExists:
			c.r.add(OK, side, "max_replication_slots", "", "%d, %d in use (slot %s exists)", maxSlots, used, c.opts.Slot)
		case free <= 0:
			c.r.add(Fail, side, "max_replication_slots", "raise max_replication_slots and restart the source, or drop an unused slot",
				"%d, all in use: the run cannot create slot %s", maxSlots, c.opts.Slot)
		default:
			c.r.add(OK, side, "max_replication_slots", "", "%d, %d free", maxSlots, free)
		}
	}
	if maxSenders, ok := c.intSetting(ctx, c.src, side, "max_wal_senders"); ok {
		var used int64
		_ = c.src.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication").Scan(&used)
		switch free := maxSenders - used; {
		case free <= 0 && !slotActive:
			c.r.add(Fail, side, "max_wal_senders", "raise max_wal_senders and restart the source",
				"%d, all in use: the run cannot start a walsender", maxSenders)
		default:
			c.r.add(OK, side, "max_wal_senders", "", "%d, %d free", maxSenders, max(free, 0))
		}
	}
	if v, ok := c.setting(ctx, c.src, side, "max_slot_wal_keep_size"); ok {
		if v == "-1" {
			c.r.add(Warn, side, "max_slot_wal_keep_size", "set a limit the source's disk can hold, e.g. ALTER SYSTEM SET max_slot_wal_keep_size = '50GB' (reload): past it the slot is lost and needs a new initial copy, instead of the source's disk filling up",
				"-1: unbounded WAL retention; while repstream is stopped or behind, the slot keeps every WAL segment")
		} else {
			c.r.add(OK, side, "max_slot_wal_keep_size", "", "%s", v)
		}
	}
	if v, ok := c.setting(ctx, c.src, side, "wal_sender_timeout"); ok {
		if v == "0" {
			c.r.add(Warn, side, "wal_sender_timeout", "set wal_sender_timeout (default 60s): a dead connection then releases the slot",
				"0: a walsender whose repstream died unnoticed keeps the slot active for ever")
		} else {
			c.r.add(OK, side, "wal_sender_timeout", "", "%s (repstream reports its position every --status-interval, 10s by default: keep this larger)", v)
		}
	}
	if v, ok := c.setting(ctx, c.src, side, "logical_decoding_work_mem"); ok {
		c.r.add(OK, side, "logical_decoding_work_mem", "", "%s server default; repstream's walsender uses --decoding-work-mem (16MB by default), beyond which a transaction streams before it commits", v)
	}

	var user string
	var repl, super bool
	if err := c.src.QueryRow(ctx, "SELECT rolname, rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&user, &repl, &super); err != nil {
		c.r.add(Fail, side, "role", "", "cannot read the current role: %v", err)
	} else if repl || super {
		c.r.add(OK, side, "role "+user, "", "has the REPLICATION attribute%s", map[bool]string{true: " (superuser)", false: ""}[super])
	} else if err := c.tryReplication(ctx); err == nil {
		c.r.add(OK, side, "role "+user, "", "no REPLICATION attribute in the catalog, but the server accepts its replication connection (a managed service's grant, e.g. rds_replication)")
	} else {
		c.r.add(Fail, side, "role "+user, "ALTER ROLE "+c.srcRole+" REPLICATION",
			"lacks the REPLICATION attribute: its replication connection was refused: %v", err)
	}
}

// tryReplication opens and closes a replication connection to the source
// (a walsender that is asked nothing: it changes nothing).
func (c *checker) tryReplication(ctx context.Context) error {
	cfg, err := pgdsn.Parse(c.opts.Source)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return pgdsn.RedactError(err)
	}
	return conn.Close(ctx)
}

// sourceTables resolves the tables to replicate and checks each on the
// source: SELECT privilege and a replica identity that carries a key.
func (c *checker) sourceTables(ctx context.Context) []*schema.Table {
	const side = "source"
	pubExists := false
	_ = c.src.QueryRow(ctx, "SELECT true FROM pg_publication WHERE pubname = $1", c.opts.Publication).Scan(&pubExists)
	var pubTables []schema.TableName
	if pubExists {
		c.publishedActions(ctx)
		rows, err := c.src.Query(ctx, "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1 AND schemaname <> 'repstream' ORDER BY 1, 2", c.opts.Publication)
		if err == nil {
			for rows.Next() {
				var n schema.TableName
				if rows.Scan(&n.Schema, &n.Name) == nil {
					pubTables = append(pubTables, n)
				}
			}
			err = rows.Err()
		}
		if err != nil {
			c.r.add(Fail, side, "publication "+c.opts.Publication, "", "cannot list its tables: %v", err)
		}
	}

	var names []schema.TableName
	switch {
	case len(c.opts.Tables) > 0:
		resolved, err := schema.ResolveTables(ctx, c.src, c.opts.Tables)
		if err != nil {
			c.r.add(Fail, side, "tables", "correct --tables", "%v", err)
			return nil
		}
		names = resolved
		if !pubExists {
			c.r.add(OK, side, "publication "+c.opts.Publication, "", "does not exist: the first run creates it from --tables (%s)", tablesText(len(names)))
		} else {
			in := map[schema.TableName]bool{}
			for _, n := range pubTables {
				in[n] = true
			}
			var missing []string
			for _, n := range names {
				if !in[n] {
					missing = append(missing, n.String())
				}
			}
			if len(missing) > 0 {
				c.r.add(Warn, side, "publication "+c.opts.Publication, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pgx.Identifier{c.opts.Publication}.Sanitize(), strings.Join(missing, ", ")),
					"exists without %s: an existing publication is used as it is, so these are not replicated", strings.Join(missing, ", "))
			} else {
				c.r.add(OK, side, "publication "+c.opts.Publication, "", "exists with %s, every table of --tables among them", tablesText(len(pubTables)))
			}
		}
	case pubExists:
		names = pubTables
		if len(names) == 0 {
			c.r.add(Warn, side, "publication "+c.opts.Publication, "add tables to the publication", "exists but has no tables: nothing would be replicated")
		} else {
			c.r.add(OK, side, "publication "+c.opts.Publication, "", "exists with %s", tablesText(len(names)))
		}
	default:
		c.r.add(Fail, side, "publication "+c.opts.Publication, "give --tables (the run creates the publication) or --publication NAME",
			"does not exist and no --tables were given: nothing to replicate")
		return nil
	}

	var tables []*schema.Table
	for _, n := range names {
		check := "table " + n.String()
		t, err := schema.LoadTable(ctx, c.src, n.Schema, n.Name)
		if err != nil {
			c.r.add(Fail, side, check, "", "%v", err)
			continue
		}
		tables = append(tables, t)
		// SELECT on some column is enough: a publication's column list may
		// be all the role can read.
		var canSelect bool
		if err := c.src.QueryRow(ctx, "SELECT has_any_column_privilege($1::oid, 'SELECT')", t.OID).Scan(&canSelect); err != nil || !canSelect {
			c.r.add(Fail, side, check, fmt.Sprintf("GRANT SELECT ON %s TO %s", n.Quoted(), c.srcRole), "the source role cannot SELECT it (the initial copy reads it)")
			continue
		}
		var rls bool
		if err := c.src.QueryRow(ctx, "SELECT row_security_active($1::oid)", t.OID).Scan(&rls); err == nil && rls {
			c.r.add(Fail, side, check, fmt.Sprintf("ALTER ROLE %s BYPASSRLS (or disable row-level security on the table)", c.srcRole),
				"row-level security policies apply to the source role: the initial copy would copy only the rows they show it (the copy refuses it)")
			continue
		}
		switch {
		case t.ReplicaIdentity == 'f':
			c.r.add(OK, side, check, "", "REPLICA IDENTITY FULL (rows matched on all columns: slower on the target than a key)")
		case len(t.IdentityKey) > 0:
			c.r.add(OK, side, check, "", "replica identity key (%s)", strings.Join(t.IdentityKey, ", "))
		case t.ReplicaIdentity == 'n':
			c.r.add(Fail, side, check, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL (or DEFAULT with a primary key)", n.Quoted()),
				"REPLICA IDENTITY NOTHING: the source refuses its UPDATEs and DELETEs once it is published")
		default:
			c.r.add(Fail, side, check, fmt.Sprintf("add a primary key, or ALTER TABLE %s REPLICA IDENTITY FULL", n.Quoted()),
				"no primary key: the source refuses its UPDATEs and DELETEs once it is published")
		}
	}
	return tables
}

// slot reports the replication slot: whether it exists, is in use, and how
// much WAL it holds back on the source.
func (c *checker) slot(ctx context.Context) {
	const side = "source"
	check := "slot " + c.opts.Slot
	var plugin, db, walStatus string
	var active bool
	var retained *int64
	err := c.src.QueryRow(ctx, `
SELECT coalesce(plugin, ''), coalesce(database, ''), active, coalesce(wal_status, ''),
       CASE WHEN restart_lsn IS NOT NULL THEN (pg_current_wal_lsn() - restart_lsn)::bigint END
FROM pg_replication_slots WHERE slot_name = $1`, c.opts.Slot).Scan(&plugin, &db, &active, &walStatus, &retained)
	if errors.Is(err, pgx.ErrNoRows) {
		c.r.add(OK, side, check, "", "does not exist yet: the first run creates it (and copies the existing rows from its snapshot)")
		return
	}
	if err != nil {
		c.r.add(Fail, side, check, "", "cannot read it: %v", err)
		return
	}
	var curDB string
	_ = c.src.QueryRow(ctx, "SELECT current_database()").Scan(&curDB)
	switch {
	case plugin != "pgoutput":
		c.r.add(Fail, side, check, "use another --slot, or drop this one if it is unused", "exists with plugin %q: repstream needs pgoutput", plugin)
		return
	case db != curDB:
		c.r.add(Fail, side, check, "use another --slot", "belongs to database %q, not %q", db, curDB)
		return
	case walStatus == "lost":
		c.r.add(Fail, side, check, "repstream drop, then run again (a new initial copy)", "wal_status lost: the WAL it needs was removed (max_slot_wal_keep_size)")
		return
	}
	ret := "unknown"
	if retained != nil {
		ret = bytesText(*retained)
	}
	level, fix := OK, ""
	note := ""
	if walStatus == "unreserved" {
		level, fix = Warn, "start repstream now: the slot is about to lose WAL it needs"
		note = "; past max_slot_wal_keep_size, the WAL it needs is removed at the next checkpoint"
	}
	activeText := "not active"
	if active {
		activeText = "active (a repstream run, or another client, streams from it)"
	}
	c.r.add(level, side, check, fix, "exists, %s, wal_status %s, retains %s of WAL%s", activeText, walStatus, ret, note)
}

func (c *checker) targetSettings(ctx context.Context) {
	const side = "target"
	var user string
	var super bool
	if err := c.tgt.QueryRow(ctx, "SELECT rolname, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&user, &super); err != nil {
		c.r.add(Fail, side, "role", "", "cannot read the current role: %v", err)
	} else {
		canSet := super
		if !super && c.tgtVer >= 150000 {
			_ = c.tgt.QueryRow(ctx, "SELECT has_parameter_privilege(current_user, 'session_replication_role', 'SET')").Scan(&canSet)
		}
		switch {
		case super:
			c.r.add(OK, side, "role "+user, "", "superuser: may SET session_replication_role")
		case canSet:
			c.r.add(OK, side, "role "+user, "", "may SET session_replication_role (GRANT SET ON PARAMETER)")
		case c.tgtVer >= 150000:
			c.r.add(Fail, side, "role "+user, "GRANT SET ON PARAMETER session_replication_role TO "+c.tgtRole+" (or make it a superuser)",
				"may not SET session_replication_role: apply sessions run with it set to replica (triggers and foreign keys not fired twice)")
		default:
			c.r.add(Fail, side, "role "+user, "make the target role a superuser",
				"not a superuser: before PostgreSQL 15 only a superuser may SET session_replication_role, which apply sessions need")
		}
		if super {
			if err := target.CheckEventTriggers(ctx, c.tgt, c.opts.TrustTableOwners); err != nil {
				c.r.add(Fail, side, "event triggers", "apply as a target role that is not a superuser, have a superuser own each trigger and its function, disable it, or run with --trust-table-owners", "%v", err)
			} else {
				c.r.add(OK, side, "event triggers", "", "none runs another role's code in repstream's DDL")
			}
		}
	}

	c.origins(ctx)

	maxConn, ok1 := c.intSetting(ctx, c.tgt, side, "max_connections")
	reserved, ok2 := c.intSetting(ctx, c.tgt, side, "superuser_reserved_connections")
	if ok1 && ok2 {
		var used int64
		_ = c.tgt.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&used)
		// The apply workers, the eager connection, and the sessions that
		// read the catalog and keep the progress record.
		need := int64(c.opts.ApplyParallelism) + 3
		free := maxConn - reserved - used
		if free < need {
			c.r.add(Fail, side, "max_connections", fmt.Sprintf("raise max_connections (restart), or lower --apply-parallelism below %d", max(free-3, 1)),
				"%d, %d free, but a run with --apply-parallelism %d needs about %d", maxConn, free, c.opts.ApplyParallelism, need)
		} else {
			c.r.add(OK, side, "max_connections", "", "%d, %d free; a run with --apply-parallelism %d needs about %d", maxConn, free, c.opts.ApplyParallelism, need)
		}
	}
}

// origins checks that the target role may mark apply's writes with
// replication origins (target.Origins.Use), and that the server has origin
// state for each session that writes: without, a capture of the target
// with --origin none passes those writes on.
func (c *checker) origins(ctx context.Context) {
	const side = "target"
	ok, err := target.OriginsAllowed(ctx, c.tgt)
	switch {
	case err != nil:
		c.r.add(Fail, side, "replication origins", "", "%v", err)
		return
	case !ok:
		c.r.add(Warn, side, "replication origins", target.OriginsGrant+c.tgtRole+" (or make it a superuser)",
			"%s", strings.TrimPrefix(target.OriginsWithout, "the target role may not use replication origins: "))
		return
	}
	setting := "max_replication_slots"
	if c.tgtVer >= 180000 {
		setting = "max_active_replication_origins"
	}
	// The apply workers, the eager session and the start's.
	need := int64(c.opts.ApplyParallelism) + 2
	if n, ok := c.intSetting(ctx, c.tgt, side, setting); ok && n < need {
		c.r.add(Warn, side, "replication origins", fmt.Sprintf("raise %s on the target (restart) to at least %d", setting, need),
			"%s is %d: a run with --apply-parallelism %d writes in about %d sessions, each with a replication origin of its own; the sessions beyond it write without one (a capture of this target passes their writes on)", setting, n, c.opts.ApplyParallelism, need)
		return
	}
	c.r.add(OK, side, "replication origins", "", "apply's writes carry a replication origin (%s<n>): a capture of this target with --origin none leaves them out", target.OriginPrefix)
}

// targetTables checks each source table's counterpart on the target.
func (c *checker) targetTables(ctx context.Context, tables []*schema.Table) {
	const side = "target"
	for _, st := range tables {
		n := st.TableName()
		check := "table " + n.String()
		tt, err := schema.LoadTable(ctx, c.tgt, n.Schema, n.Name)
		if errors.Is(err, schema.ErrTableNotFound) {
			if c.opts.CreateTables {
				c.r.add(OK, side, check, "", "missing: the run creates it (--create-tables)")
			} else {
				c.r.add(Fail, side, check, "run with --create-tables, or create it on the target", "missing")
			}
			continue
		}
		if err != nil {
			c.r.add(Fail, side, check, "", "%v", err)
			continue
		}
		typeProblems, err := schema.TypeProblems(ctx, c.src, c.tgt, st, tt)
		if err != nil {
			c.r.add(Fail, side, check, "", "%v", err)
			continue
		}
		if problems := append(schema.Incompatible(st, tt), typeProblems...); len(problems) > 0 {
			c.r.add(Fail, side, check, "alter the target table to match the source", "%s", strings.Join(problems, "; "))
			continue
		}
		var may bool
		if err := c.tgt.QueryRow(ctx, `SELECT has_any_column_privilege($1::oid, 'SELECT') AND has_table_privilege($1::oid, 'INSERT')
			AND has_table_privilege($1::oid, 'UPDATE') AND has_table_privilege($1::oid, 'DELETE') AND has_table_privilege($1::oid, 'TRUNCATE')`, tt.OID).Scan(&may); err != nil || !may {
			c.r.add(Fail, side, check, fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON %s TO %s", n.Quoted(), c.tgtRole), "the target role may not read and write it (SELECT, INSERT, UPDATE, DELETE, TRUNCATE)")
			continue
		}
		var rls bool
		if err := c.tgt.QueryRow(ctx, "SELECT row_security_active($1::oid)", tt.OID).Scan(&rls); err == nil && rls {
			c.r.add(Fail, side, check, fmt.Sprintf("ALTER ROLE %s BYPASSRLS (or disable row-level security on the table)", c.tgtRole),
				"row-level security policies apply to the target role: apply must see and write every row")
			continue
		}
		if err := target.CheckOwners(ctx, c.tgt, []schema.TableName{n}, c.opts.TrustTableOwners); err != nil {
			c.r.add(Fail, side, check, "apply as a target role that is not a superuser, have a superuser own the table, or run with --trust-table-owners", "%v", err)
			continue
		}
		if c.opts.DDL != "false" {
			var owns bool
			var owner string
			if err := c.tgt.QueryRow(ctx, `SELECT pg_has_role(current_user, c.relowner, 'USAGE') OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
				quote_ident(c.relowner::regrole::text) FROM pg_class c WHERE c.oid = $1::oid`, tt.OID).Scan(&owns, &owner); err == nil && !owns {
				c.r.add(Warn, side, check, fmt.Sprintf("ALTER TABLE %s OWNER TO %s (or GRANT %s TO %s), or run with --ddl=false", n.Quoted(), c.tgtRole, owner, c.tgtRole),
					"owned by %s: the target role cannot apply the source's schema changes to it (ALTER TABLE needs the owner): the run would stop at the first", owner)
				continue
			}
		}
		c.r.add(OK, side, check, "", "exists, columns compatible with the source")
	}
}

// sameDatabase fails when the source and the target are one database.
func (c *checker) sameDatabase(ctx context.Context) {
	if err := provision.SameDatabase(ctx, c.src, c.tgt); err != nil {
		c.r.add(Fail, "target", "not the source", "point --target at another database", "%v", err)
	}
}

// bothWays, when the target replicates into the source (a repstream
// replication into the source records the target as its source), checks
// that both servers keep commit timestamps: a run into the target is
// refused without (a row written on both sides at once would go unseen).
func (c *checker) bothWays(ctx context.Context) {
	const check = "both directions"
	id, err := provision.Identify(ctx, c.tgt)
	if err != nil {
		return // not the source (sameDatabase) says why
	}
	back, err := target.ReplicationsFrom(ctx, c.src, id.SystemID, id.DatabaseOID)
	if err != nil || len(back) == 0 {
		return
	}
	slots := make([]string, len(back))
	for i, b := range back {
		slots[i] = b.Slot
	}
	var off []string
	for _, s := range []struct {
		side string
		conn *pgx.Conn
	}{{"source", c.src}, {"target", c.tgt}} {
		if v, ok := c.setting(ctx, s.conn, s.side, "track_commit_timestamp"); ok && v != "on" {
			off = append(off, "the "+s.side)
		}
	}
	if len(off) > 0 {
		c.r.add(Fail, "target", check, "ALTER SYSTEM SET track_commit_timestamp = on on "+strings.Join(off, " and ")+", then restart it",
			"the target replicates into the source (slot %s): a run back needs track_commit_timestamp on both servers to find a row written on both sides at once, and it is off on %s",
			strings.Join(slots, ", "), strings.Join(off, " and "))
		return
	}
	c.r.add(OK, "target", check, "", "the target replicates into the source (slot %s), and both servers keep commit timestamps: a row written on both sides at once is a conflict, not overwritten",
		strings.Join(slots, ", "))
}

// trustedSchema fails when a schema repstream exists on side that another
// role could use to run its code with repstream's privileges (nothing in it
// is read then); it reports whether the schema may be used.
func (c *checker) trustedSchema(ctx context.Context, side string, conn *pgx.Conn) bool {
	if _, err := provision.CheckSchema(ctx, conn, side); err != nil {
		c.r.add(Fail, side, "schema repstream", "drop it, or give it and its objects to repstream's role", "%v", err)
		return false
	}
	return true
}

// stateSchema reports repstream's own state on the target.
func (c *checker) stateSchema(ctx context.Context) {
	const side = "target"
	var exists bool
	_ = c.tgt.QueryRow(ctx, "SELECT to_regclass('repstream.progress') IS NOT NULL").Scan(&exists)
	if !exists {
		var canCreate bool
		var db string
		_ = c.tgt.QueryRow(ctx, "SELECT has_database_privilege(current_database(), 'CREATE'), quote_ident(current_database())").Scan(&canCreate, &db)
		if canCreate {
			c.r.add(OK, side, "state schema repstream", "", "does not exist: the first run creates it")
		} else {
			c.r.add(Fail, side, "state schema repstream", fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s (or CREATE SCHEMA repstream AUTHORIZATION %s)", db, c.tgtRole, c.tgtRole),
				"does not exist and the target role may not create it")
		}
		return
	}
	var low string
	err := c.tgt.QueryRow(ctx, "SELECT low_lsn::text FROM repstream.progress WHERE slot = $1", c.opts.Slot).Scan(&low)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		c.r.add(OK, side, "state schema repstream", "", "exists, nothing recorded for slot %s yet", c.opts.Slot)
	case err != nil:
		c.r.add(Fail, side, "state schema repstream", "", "cannot read repstream.progress: %v", err)
	default:
		c.r.add(OK, side, "state schema repstream", "", "slot %s applied up to %s", c.opts.Slot, low)
	}
	if n, err := errqueue.CountParked(ctx, c.tgt, c.opts.Slot); err != nil {
		c.r.add(Warn, side, "error queue", "", "%v", err)
	} else if n > 0 {
		c.r.add(Warn, side, "error queue", "repstream errors list, then retry or skip each",
			"%d source transactions of slot %s are parked, not applied: the target lacks them", n, c.opts.Slot)
	}
	unbuilt, err := target.UnbuiltIndexes(ctx, c.tgt, c.opts.Slot)
	if err != nil {
		c.r.add(Warn, side, "indexes not built", "", "%v", err)
	}
	for _, u := range unbuilt {
		c.r.add(Warn, side, "index "+u.Index+" of "+u.Table.String(), "make what it needs on the target, then run: "+u.SQL,
			"the source's index could not be built on the target (the table replicates without it): %s", u.Error)
	}
}

func bytesText(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", b)
}

func tablesText(n int) string {
	if n == 1 {
		return "1 table"
	}
	return fmt.Sprintf("%d tables", n)
}

// publishedActions reports a publication that leaves out some kinds of
// change: the target would silently miss them.
func (c *checker) publishedActions(ctx context.Context) {
	const side = "source"
	check := "publication " + c.opts.Publication
	var ins, upd, del, trunc bool
	if err := c.src.QueryRow(ctx, "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1", c.opts.Publication).Scan(&ins, &upd, &del, &trunc); err != nil {
		c.r.add(Fail, side, check, "", "cannot read what it publishes: %v", err)
		return
	}
	var missing []string
	for _, a := range []struct {
		on   bool
		name string
	}{{ins, "insert"}, {upd, "update"}, {del, "delete"}} {
		if !a.on {
			missing = append(missing, a.name)
		}
	}
	fix := fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')", pgx.Identifier{c.opts.Publication}.Sanitize())
	switch {
	case len(missing) > 0:
		c.r.add(Fail, side, check, fix, "does not publish %s: those changes would never reach the target", strings.Join(missing, ", "))
	case !trunc:
		c.r.add(Warn, side, check, fix, "does not publish truncate: a TRUNCATE on the source would leave the target's rows")
	}
}
