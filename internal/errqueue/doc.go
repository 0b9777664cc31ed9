// Package errqueue is the error queue on the target (repstream.errors,
// created by target.EnsureState): source transactions that apply parked
// (--on-error park) or skipped on request, and what `repstream errors`
// does with them — list, show, retry (re-apply as the transaction stands
// now) and skip — plus the skip requests of `repstream errors skip --lsn`.
//
// The transaction's changes are kept in pgoutput's own tuple format
// (codec.go), so a retry applies exactly what the source sent, through the
// same target.Writer apply uses; show renders the values as text (text.go).
//
// Files:
//
//	doc.go         this overview
//	store.go       Entry; List, Get, CountParked, ParkedIDs, Retry, Skip, RequestSkip
//	codec.go       Encoder, Encode, Decode, Decoded: a parked transaction's changes as JSON (repstream.errors.changes)
//	text.go        Texts: values, keys and rows rendered for people
//	codec_test.go  round trip, rejected encodings (FuzzDecode), key and row text, binary taken from the relation
package errqueue
