// Package change is the shared vocabulary of the pipeline: log positions,
// relations, tuples, row changes and transactions. Tuples stay in pgoutput's
// wire form (TupleData), read in place by a non-allocating iterator. A
// schema change travels as a change too (OpDDL), carrying its message's
// JSON and its parsed form (package ddlmsg). Of repstream it imports only
// ddlmsg, which imports nothing of repstream, so every stage can depend on it.
//
// Files:
//
//	doc.go         this overview
//	change.go      Op, Change, TxnInfo; the OpDDL change: DDLPrefix, NewDDL, ParseDDL, DDLContent; Size for the queue's budget
//	lsn.go         LSN, ParseLSN: a WAL position and its "X/Y" form
//	relation.go    Relation, Column, the replica identities; QuotedName, KeyColumns, HasKey, QuoteIdent; TextOnly (types that cannot travel in binary)
//	tuple.go       Tuple, TupleIter, the value kinds; ValidateTuple, AppendTuple
//	change_test.go LSN round trip, tuple iteration and validation (FuzzValidateTuple)
package change
