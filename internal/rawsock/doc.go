// Package rawsock reads and writes the engine's database sockets, and
// Kafka mode's connections to the brokers (kafkalog), without telling
// the Go scheduler that a system call is under way.
//
// Why: every read or write through package net enters a "blocking" system
// call (runtime.entersyscall), and when the whole process was idle the
// runtime's monitor thread (sysmon) sleeps deeply and is woken by that entry
// — a futex wake-up, a 20 µs nap and another futex sleep, several context
// switches for a call that never blocks (the sockets are non-blocking: a
// read that finds nothing returns EAGAIN and the goroutine parks in the
// netpoller). A replication engine at a steady 1,000 transactions a second
// goes idle and wakes a few times per transaction, so this was most of its
// CPU: measured with `repstream bench fly --rate 1000`, 7.7 context switches
// per transaction and 3.3–3.7 CPU-s per 20 s, of which a third in
// finish_task_switch under nanosleep and futex (golang/go#18236 is the
// runtime's side of it).
//
// A Conn issues read(2) and write(2) as raw system calls on the
// non-blocking socket, inside syscall.RawConn's Read and Write, which park
// the goroutine in the netpoller on EAGAIN and keep the connection's
// deadlines, close and error semantics. Raw system calls are only right
// for calls that cannot block: on a non-blocking socket read and write
// copy what fits and return.
//
// Files:
//
//	doc.go          this overview
//	rawsock.go      Conn (Read and Write as raw read(2) and write(2)), Wrap, Dial, SetsockoptInt
//	rawsock_test.go Conn keeps net.Conn's semantics (deadlines, Close, io.EOF, large writes); Wrap leaves other connections; BenchmarkPingPong against a plain connection
package rawsock
