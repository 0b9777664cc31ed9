// Package kafka holds the end-to-end tests of the Kafka mode (`repstream
// capture` and `repstream apply` joined by a topic): real brokers
// (internal/kafkatest), real PostgreSQL (internal/pgcluster/pgtest), the
// repstream binary run as separate processes and killed -9 where a test
// says so. A package of its own so that `go test ./...` runs it beside
// internal/e2e rather than after it.
//
// Brokers: the tests that neither stop, kill nor reconfigure a broker
// share one (kafkatest.Shared, started at first use and closed by
// TestMain), each with its own slot, topic and databases: a broker's
// start costs about 5 s of two CPUs. The others start their own
// (kafkatest.Start).
//
// Most tests call t.Parallel and run two at a time after the serial ones:
// those that time a fault against a load on shared CPUs (the leader of
// three brokers killed, the acceptance run, a capture frozen past its
// walsender's timeout, an apply killed inside a group, the source's
// latency while a broker is lost) stay serial, so
// that what they time is not this package's other tests' load; so do
// those that set an environment variable (t.Setenv: the password, a
// server of its own initdb). That
// keeps `make test` within its time.
//
// Files:
//
//	doc.go                this overview
//	main_test.go          TestMain; the helpers (the binary, process handles, checksums)
//	capture_apply_test.go one capture, two applies, kills and restarts; a trimmed offset; tables add; eager apply (also of a new capture session's first large transaction behind an earlier session's backlog); apply --sync-sequences
//	fault_test.go         brokers down, lost, the leader killed; drop --kafka keeps the publications repstream did not make; a topic refused (its settings, another source's stream, a database dropped and made again under its name, an apply's source on another server whose role cannot read its system identifier); a 50 MB value; a foreign record; two captures; an apply killed inside a group
//	ddl_test.go           schema changes through the topic; --on-error park
//	forged_test.go        a forged schema change written to the topic (reusing the real Ed25519 signature, HMAC-signed, signed with another key) stops the apply, whose source role cannot read the HMAC key; one that cannot read the public keys is refused at start; one signed with the key the source replaced stops it too (the source publishes the new key alone)
//	acceptance_test.go    the check as one run on three brokers (a broker left down, kills, a target stopped while 300,000 rows come)
//	fidelity_test.go      the shapes PostgreSQL's logical-replication tests use (generated columns, TRUNCATE CASCADE, prepared and streamed transactions, partitions, a table dropped and made again); a user publication's row filter and column list, a table added to it
//	late_test.go          a target started late reads the topic from CopyStart
//	secure_test.go        TLS, SASL and ACLs
//	status_test.go        status --kafka: a target caught up, its apply stopped (markers after it), behind and stale for --max-inactive, caught up again; an apply killed -9 during its initial copy (flagged), a copy under way (not)
//	origin_test.go        capture --origin none: a transaction a replication-origin session wrote into the source stays out of the topic, those around it reach the target
//	check_test.go         check --kafka: an apply's source role without the grants on the schema repstream (FAIL, the GRANTs), the target's place in the topic by LSNs (caught up with markers after its offset, behind)
package kafka
