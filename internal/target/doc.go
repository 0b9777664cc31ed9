// Package target is the target-database side of apply: connecting with the
// session settings apply needs, the progress state that makes apply exactly
// once (repstream.progress and repstream.applied, written in the same target
// transaction as the data), and the Writer that turns captured changes into
// text COPY for inserts and pipelined prepared statements for updates and
// deletes.
//
// Values are never decoded: pgoutput's text output forms pass straight into
// COPY rows and into text-format statement parameters whose types the server
// infers. That needs the same text conventions on both sides, which Connect
// sets (DateStyle ISO, IntervalStyle postgres, extra_float_digits 3, UTF8).
package target
