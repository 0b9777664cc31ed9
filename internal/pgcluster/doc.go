// Package pgcluster starts throwaway PostgreSQL clusters for the demo, the
// tests and the benchmarks.
//
// A cluster is a fresh data directory made by initdb in a temporary directory
// ("repstream-pg-<name>-*" under os.TempDir()), served by a postmaster that
// pg_ctl starts on a free TCP port of 127.0.0.1, with trust authentication for
// the superuser "postgres" and wal_level=logical. Layout of the directory:
//
//	<dir>/data/            PGDATA (postgresql.conf includes repstream.conf)
//	<dir>/data/repstream.conf  the settings written by Start
//	<dir>/server.log       the server log (pg_ctl -l)
//	<dir>/owner            "<pid> <start time>" of the process that made it
//	<dir>/.s.PGSQL.<port>  the Unix socket
//
// initdb refuses to run as root, so when the process runs as root the server
// programs run as the unprivileged OS user "postgres" (created by Debian's
// postgresql package) and the directory is chowned to it. Start does not
// create that user: install the postgresql package (scripts/ensure-postgres.sh)
// or run `useradd -r -M -s /usr/sbin/nologin postgres`.
//
// Usage:
//
//	c, err := pgcluster.Start(ctx, pgcluster.Options{Name: "src"})
//	if err != nil { ... }
//	defer c.Remove(context.Background())
//	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
//
// Tests should use the pgtest subpackage, which removes clusters on cleanup.
//
// Start copies a data directory made once by initdb and shared by all
// processes (<tmp>/repstream-pgtemplate-<key>, ~40 MB, rebuilt after a day),
// which halves start time (≈0.4 s instead of ≈1 s). Environment:
//
//	REPSTREAM_PG_BINDIR=<dir>    use these server binaries (see BinDir)
//	REPSTREAM_PG_NO_TEMPLATE=1   run initdb for every cluster
//
// A process killed before removing its clusters leaves postmasters behind;
// ReapStale (called by pgtest.Main) stops and deletes them once their owner
// process is gone.
//
// Files:
//
//	doc.go           this overview
//	bindir.go        BinDir: where the server binaries are (REPSTREAM_PG_BINDIR, /usr/lib/postgresql/*/bin, pg_config, PATH)
//	cluster.go       Cluster, Options, Start; Stop, Crash, Restart, Remove; DSN, SocketDSN, ReplicationDSN, URL, Connect, Exec, CreateDatabase
//	cluster_test.go  (package pgcluster_test) start and settings, crash and restart, two clusters, ReapStale, no template, failed and cancelled starts, a port taken; BenchmarkStartRemove
//	internal_test.go names, DSNs and URLs, settings, REPSTREAM_PG_BINDIR, the server version, log tails, owner files, port conflicts
//	reap.go          owner files (WriteOwner) and the reaping of stale directories: ReapStale, ReapDirs
//	template.go      the initdb template that Start copies (REPSTREAM_PG_NO_TEMPLATE turns it off)
package pgcluster
