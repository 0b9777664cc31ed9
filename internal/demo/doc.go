// Package demo runs repstream end to end on two throwaway clusters: a live
// `conditions` workload on the source, replication to the target, a check
// that both match, and a summary.
//
// Run (`repstream demo`) starts a source and a target cluster, copies a
// first tenth of the rows through the initial copy and inserts the rest,
// with a few updates and deletes, while the engine runs in this process;
// it prints a progress line a second, waits until everything the source
// committed is applied, and compares the row count and md5 of both sides.
// RunKafka (`repstream demo --kafka`) does the same through a throwaway
// Kafka broker: one capture, one apply per target database, one target
// stopped and started again, both verified table by table. Either returns
// an error if anything fails, including a target that does not match.
//
// Files:
//
//	doc.go   this overview
//	demo.go  Options, Run and its workload
//	kafka.go RunKafka: the capture and the two applies, their steps, the progress line and the verification
package demo
