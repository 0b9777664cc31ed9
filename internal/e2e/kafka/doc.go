// Package kafka holds the end-to-end tests of the Kafka mode (`repstream
// capture` and `repstream apply` joined by a topic): real brokers
// (internal/kafkatest), real PostgreSQL (internal/pgcluster/pgtest), the
// repstream binary run as separate processes and killed -9 where a test
// says so. A package of its own so that `go test ./...` runs it beside
// internal/e2e rather than after it.
//
// The tests that check what arrives (schema changes, values, a foreign
// record, the topic and broker checks, fidelity), not how faults are
// timed, call t.Parallel: each has its own broker and databases, and they
// run two at a time once the fault tests are done, which keeps `make
// test` within its time.
//
// Files:
//
//	doc.go                this overview
//	main_test.go          TestMain; the helpers (the binary, process handles, checksums)
//	capture_apply_test.go one capture, two applies, kills and restarts; a trimmed offset; tables add; eager apply
//	fault_test.go         brokers down, lost, the leader killed; a topic refused (its settings, another source's stream); a 50 MB value; a foreign record; two captures; an apply killed inside a group
//	ddl_test.go           schema changes through the topic; --on-error park
//	acceptance_test.go    the check as one run on three brokers (a broker left down, kills, a target stopped while 300,000 rows come)
//	fidelity_test.go      the shapes PostgreSQL's logical-replication tests use (generated columns, TRUNCATE CASCADE, prepared and streamed transactions, partitions, a table dropped and made again); a user publication's row filter and column list, a table added to it
//	late_test.go          a target started late reads the topic from CopyStart
//	secure_test.go        TLS, SASL and ACLs
package kafka
