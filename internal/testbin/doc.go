// Package testbin gives the tests that run repstream as a process (kill
// -9, SIGTERM, peak memory, the command line) its binary: make test's,
// built from this tree just before ($REPSTREAM_TEST_BINARY), else one
// built once per test process, which Remove deletes at the end.
//
// Files:
//
//	doc.go      this overview
//	testbin.go  Repstream, Path, Remove
package testbin
