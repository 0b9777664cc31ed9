// Package e2e tests repstream end to end against real PostgreSQL clusters
// started by the tests: a shared source and target cluster per test binary,
// a fresh database pair per test.
//
// The clusters come from internal/pgcluster/pgtest: pgtest.Shared hands
// every test the same "source" and "target" cluster (started at first use,
// removed by pgtest.Main after the run), and pgtest.NewDB makes each test
// its own database on each (newEnv); a test that restarts, stops or
// reconfigures a server, or cuts its link, starts one of its own
// (pgtest.Cluster). Most tests call t.Parallel: TestMain raises
// -test.parallel, unless given, to twice the CPUs, since the tests mostly
// wait. The engine runs in the test's process (env.catchUp, env.start), or
// as the repstream binary where a test needs a separate process (kill -9,
// exit codes, peak RSS).
//
// scripts/test-versions.sh runs a core of these tests (its default list,
// or the pattern in VERSION_TESTS) with a source of one PostgreSQL major
// and a target of another, for each SRC:TGT pair it is given (every pair
// of 14 to 18 by default).
//
// Files:
//
//	doc.go                         this overview
//	harness_test.go                TestMain; env (a test's source and target databases) and the helpers: catchUp, start, checksums, the binary
//	badinput_test.go               bad input fails fast and says what: unreachable servers, wrong DSNs and passwords, wal_level, publications, slots, target tables, the CLI
//	cascade_test.go                a cascade A -> B -> C with the event trigger, and dropping B -> C
//	checkddl_test.go               check warns that a target role not owning a table cannot apply schema changes
//	cli_test.go                    status and drop; the /status and /metrics endpoints
//	collapse_test.go               hot keys folded within groups, for every parallelism and commit order
//	conflict_park_test.go          --on-error stop and errors skip --lsn; --on-error park, errors list, retry and skip
//	conflict_test.go               transactions independent by key but not by another unique index, applied in parallel
//	copycut_test.go                the source's link cut during the initial copy: reconnect and copy again
//	copydrift_test.go              a copy refuses a source table changed since the target's was made; a restart stops where the target would round
//	copyranges_test.go             large tables copied in ctid ranges at once; a range copy interrupted
//	createtables_test.go           --create-tables: user types, defaults and sequences, replica identity, incompatible target tables, undone on a failed start
//	ddl_ctas_test.go               CREATE TABLE ... AS and SELECT INTO in a published schema; their rows with no schema-change message
//	ddl_drop_test.go               DROP TABLE ... CASCADE with target-only dependents; a key of an extension's type
//	ddl_inherit_test.go            inheritance parents altered and their rows changed; composite types altered
//	ddl_relation_eager_test.go     --ddl=relation: an ADD COLUMN inside a large transaction applied eagerly
//	ddl_relation_test.go           --ddl=relation: added columns' defaults, retypes, user types, serials, domains; --ddl=false stops
//	ddl_relation_types_test.go     --ddl=relation: an enum or composite type altered on the source
//	ddl_schema_move_test.go        ALTER SCHEMA ... RENAME and SET SCHEMA, also inside streamed transactions
//	ddl_setlogged_test.go          SET LOGGED takes a table up; SET UNLOGGED after the source's crash
//	ddl_subxact_test.go            schema changes and rows in savepoints of streamed transactions rolled back, also concurrently
//	ddl_test.go                    schema changes through the event trigger: the main run, retypes, session settings, new types, volatile defaults, generated columns, enums renamed
//	eager_progress_test.go         eager apply's row counter rises while a large transaction is sent
//	fault_test.go                  one engine under load through server restarts and crashes, links cut and frozen, SIGTERM
//	faultproxy_test.go             the fault proxy itself with a pgx connection to PostgreSQL
//	fidelity_test.go               GENERATED ALWAYS identity target keys; composite-type keys
//	findslot_test.go               admin commands without --slot find the target's one replication
//	freeze_test.go                 the initial copy with COPY FREEZE, its fallbacks, and a kill during it
//	fullident_test.go              REPLICA IDENTITY FULL: look-alike rows, a composite holding a point
//	gucs_test.go                   the source's output settings and the target's input settings change no value
//	indexes_test.go                --create-tables recreates keys and constraints exactly; an index the target cannot build is reported
//	keymatch_test.go               a key index's own collation; a key not unique on the target (multiple_rows)
//	lockwait_test.go               a first start and an apply held up by a target lock say who holds them up
//	metrics_start_test.go          the first /metrics scrape already has every series the alerts and dashboard use
//	monitor_test.go                advise and top name an apply bottleneck; check and its privilege report
//	monitoring_test.go             the HTTP endpoint, the live page (in headless Chromium), /healthz and apply lag
//	nocolumns_test.go              a table without columns
//	origin_test.go                 A -> B and B -> A at once with --origin none
//	partition_changes_test.go      a leaf's TRUNCATE, ATTACH and DETACH PARTITION under a root publication; the partition triggers and their locks and costs
//	partition_test.go              a partitioned table through its root; publish_via_partition_root switched while running
//	password_test.go               passwords kept off the command line (passfile, PGPASSWORD, REPSTREAM_*, the YAML config)
//	perf_test.go                   a profiling aid, skipped unless REPSTREAM_PERF is set
//	pg18_test.go                   PostgreSQL 18's temporal keys and NOT NULL ... NOT VALID through --create-tables
//	privilege_test.go              the least-privilege roles: the whole pipeline, a grant missing, a privilege revoked while running
//	process_test.go                a large transaction spills within its memory budget; SIGKILL at random moments and restarts
//	pubadd_test.go                 tables added to, replaced in or left out of the publication while running, with and without the event trigger
//	rls_test.go                    row-level security on source and target tables
//	rowfilter_test.go              a user publication's row filter and column list; column lists and schema changes
//	scenario_test.go               schema changes and conflicts together, as a new user tries them
//	security_eventtrigger_test.go  a target event trigger's function run by apply's DDL
//	security_srcdomain_test.go     a domain made from the source's definition whose default the target would evaluate
//	security_target_test.go        target schema owners, operator classes, deferred indexes and generated columns as traps
//	security_test.go               hostile schemas and roles, operator and search_path hijacks, forged schema-change messages, owners' traps, a dumped source restored
//	sequences_test.go              sequences sync
//	setaside_test.go               keys and indexes set aside for the copy and rebuilt; killed, failed builds, failed first starts
//	shapes_test.go                 table shapes: odd identifiers, dropped columns, target columns in another order
//	shutdown_test.go               the source's fast shutdown not held up by repstream; a run ending while it records
//	spill_test.go                  a full spill disk stops the run; a spill directory shared by two replications
//	status_exit_test.go            status's exit codes
//	stream_test.go                 transactions streamed while in progress; eager apply, also behind a backlog
//	tablenames_test.go             --tables with commas, dots, quotes and spaces in names
//	tablesync_test.go              the initial copy resumed; tables add while running and while stopped; tables list
//	targettypes_test.go            object identifier types; target types of other names; a target domain; string columns that would cut values
//	truncate_test.go               TRUNCATE ... CASCADE RESTART IDENTITY; refused slots, publications, targets and partitions; SET UNLOGGED stops
//	typerecords_test.go            composite types changed on the target or the source between or during runs
//	types_matrix_test.go           every type of the matrix through the copy and streaming
//	types_test.go                  the types in common use, NULLs, TOAST, key changes, deletes, truncate
//	walsender_perf_test.go         a profiling aid for the source's walsenders, skipped unless REPSTREAM_PERF_WALSENDER is set
package e2e
