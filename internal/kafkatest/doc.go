// Package kafkatest runs throwaway Apache Kafka brokers for tests: real
// brokers (KRaft combined mode, no ZooKeeper) on free ports of 127.0.0.1,
// from the jars that scripts/ensure-kafka.sh (`make kafka`) caches.
//
//	func TestX(t *testing.T) {
//		k := kafkatest.Start(t, kafkatest.Options{Brokers: 3})
//		adm := k.Admin(t)
//		cl := k.Client(t, kgo.DefaultProduceTopic("t"))
//		...
//		k.Kill(1)    // kill -9 one broker
//		k.Restart(ctx, 1) // and bring it back on its ports and data
//	}
//
// Start skips the test, saying how to fetch Kafka, when java or the cached
// jars are missing, unless REPSTREAM_REQUIRE_KAFKA is set (then it fails).
//
// A cluster lives in a temporary directory ("repstream-kafka-<name>-*"
// under os.TempDir()):
//
//	<dir>/owner                  "<pid> <start time>" of the process that made it
//	<dir>/broker-<i>/server.properties
//	<dir>/broker-<i>/log4j2.properties
//	<dir>/broker-<i>/data/       log.dirs (and the KRaft metadata log)
//	<dir>/broker-<i>/server.log  the broker's log (INFO)
//	<dir>/broker-<i>/stdout.log  the JVM's stdout and stderr
//	<dir>/broker-<i>/pid         the broker's JVM process id
//
// The brokers map a class-data-sharing archive of their classes, made once
// per JVM in the jar cache (<home>/broker-<key>.jsa, cds.go): it halves a
// broker's start.
//
// Every broker is both broker and controller (a voter of a static quorum),
// so one broker is a whole cluster and three survive the loss of one. The
// brokers run with a small fixed heap (Options.HeapMB), few threads,
// automatic topic creation off, and shortened session timeouts so that a
// killed broker is fenced, and its partitions move, within seconds.
//
// With Options.Secure, every broker also has a SASL_SSL client listener
// (SecureAddrs) with a certificate of a throwaway CA (CAFile, written in
// <dir>/ca.pem beside the brokers' <dir>/server.pem) and a SCRAM and PLAIN
// user (secure.go).
//
// The JVMs die with the test binary (PR_SET_PDEATHSIG on Linux); a directory
// left behind all the same (the test process killed between fork and exec,
// or a broker outliving its parent thread) is reaped by the next Start once
// its owner process is gone: its brokers are killed and the directory removed.
//
// Shared gives the tests that neither stop, kill nor reconfigure a broker
// one broker per test binary, closed by CloseShared (which TestMain passes
// to pgtest.Main).
//
// Files:
//
//	doc.go            this overview
//	cds.go            the brokers' class-data-sharing archive, made once per JVM and jar cache
//	cluster.go        Cluster, Options, StartCluster, Home, Available; a broker's Stop, Kill, Restart; Close; addresses, log tails, server.properties
//	kafkatest_test.go cluster ids and server.properties; one broker killed and restarted; three brokers with the leader killed (REPSTREAM_KAFKA_FAULTS)
//	procattr_linux.go sysProcAttr: a process group of its own and PR_SET_PDEATHSIG
//	procattr_other.go sysProcAttr elsewhere (!linux): a process group of its own
//	reap.go           ReapStale: stale cluster directories (pgcluster.ReapDirs), their brokers killed
//	secure.go         Secure: the SASL_SSL listener, the throwaway CA and certificates, the SCRAM and PLAIN user
//	testing.go        for tests: Start, Shared, CloseShared, Require; Client, Admin, CreateTopic, Leader
package kafkatest
