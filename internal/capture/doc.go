// Package capture owns the replication connection to the source: it starts
// pgoutput streaming from a slot, decodes every message, hands row changes to
// the queue per source transaction, and acknowledges the slot with the
// durable low watermark.
//
// Files:
//
//	capture.go    Capture, Options: the receive loop, decoding, transactions and streams, standby status (a silent link: checkSilence; a source shutting down that waits for it: stoppingSource), the raw sink (capture --kafka; schema-change messages signed anew with Options.TopicKey) and Decoder (apply --kafka)
//	ddl.go        schema-change messages: checked (signed by repstream's trigger: ddlContent; read from a topic, checked with the published Ed25519 keys: topicContent, and one that does not verify is an error: notFromCapture, beforeTopicSigning), queued as OpDDL; Relation versions and renames
//	lowat.go      the socket's receive low-water mark while the stream is busy or gathering
//	reader.go     coalescingReader: larger reads after a large one
//	origin.go     originFilter: --origin none (Options.SkipOrigins) before PostgreSQL 16: the transactions an Origin message marks are left out, their commits kept (16+: pgoutput's origin option)
//	monitoring.go the reader's busy and idle states for the stage statistics
package capture
