// Package pgtest gives tests throwaway PostgreSQL clusters (see pgcluster).
//
//	func TestMain(m *testing.M) { pgtest.Main(m) } // needed for Shared
//
//	func TestX(t *testing.T) {
//		c := pgtest.Shared(t, "src")     // one per test binary and name
//		db := pgtest.NewDB(t, c)          // fresh database per test
//		conn, _ := pgx.Connect(ctx, c.DSN(db))
//	}
//
// Missing PostgreSQL binaries fail the test with a message telling to run
// `make test` (which installs them); set REPSTREAM_SKIP_PG=1 to skip instead.
//
// Cluster gives a test a cluster of its own, removed at its cleanup; Main
// removes the shared ones after the tests, and on SIGINT or SIGTERM those
// of running tests too. WaitFor is the integration tests' poller.
//
// Files:
//
//	doc.go         this overview
//	pgtest.go      Main, Cluster, Shared, NewDB, DefaultParallel, WaitFor, WaitForEvery; the registry of clusters
//	pgtest_test.go Shared and NewDB, removal at cleanup, database names, missing binaries (fail or skip), SIGINT removing the clusters
package pgtest
