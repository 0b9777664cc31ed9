// Package syncbuf is a byte buffer safe for concurrent use: where tests
// keep what an engine's goroutines or a child process log, to show its
// last lines when they fail.
//
// Files:
//
//	doc.go          this overview
//	syncbuf.go      Buffer: Write, String, Tail
//	syncbuf_test.go Tail, and writers at once (go test -race)
package syncbuf
