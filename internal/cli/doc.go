// Package cli defines repstream's commands. It only wires: parsing flags and
// files into a config.Config and calling the packages that do the work.
//
// Run builds the cobra command tree (run, status, drop, check, top, advise,
// errors, tables, sequences, capture and apply, bench, demo), executes it
// and turns a command's error into the process exit code (ExitUnhealthy for
// an unhealthy `status`, else 1). The commands that talk to the databases
// share one set of connection flags, merged as flag > REPSTREAM_*
// environment variable > YAML config file > default; the admin commands of
// one replication find its slot on the target when none is named.
// BuildVersion is the version --version reports.
//
// Files:
//
//	doc.go       this overview
//	cli.go       Run, the root command, the shared settings and their resolution, run, status, drop, capture and apply; BuildVersion
//	advise.go    advise: sample a running engine's /status and name its bottleneck
//	bench.go     bench: the performance lab, with run's tuning flags passed through
//	check.go     check: the read-only health and configuration report of a source/target pair
//	demo.go      demo: the throwaway-cluster demo (internal/demo), --kafka for the Kafka one
//	errors.go    errors list, show, retry and skip: the error queue on the target
//	sequences.go sequences sync: the replicated tables' sequence positions copied to the target
//	slot.go      whether the slot was named, and finding the one replication a target holds
//	status.go    status's output (text or JSON) and verdict; exit codes
//	tables.go    tables add and tables list
//	top.go       top: one line per interval from a running engine's /status
package cli
