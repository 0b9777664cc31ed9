// Command repstream replicates PostgreSQL changes from a source to a target
// through logical decoding. See `repstream --help`.
//
// It is only the entry point: main runs internal/cli's Run with the
// command line, stdout and stderr, under a context that SIGINT or SIGTERM
// cancels, and exits with the code Run returns.
//
// Files:
//
//	doc.go  this overview
//	main.go main: signal handling, cli.Run, the exit code
package main
