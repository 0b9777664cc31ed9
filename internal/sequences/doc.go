// Package sequences copies sequence positions from the source to the target.
//
// Logical decoding does not carry sequences: a replicated table's serial or
// identity column arrives with its values, but the sequence behind it stays
// at its start on the target, and the first insert there after a cutover
// collides. Sync sets each target sequence to the source's position, as
// pgcopydb and PostgreSQL 18's REFRESH SEQUENCES do.
//
// Which sequences: those the replicated tables use — owned by one of their
// columns (serial, identity) or named in one of their column defaults
// (nextval('s')).
//
// A target sequence is never moved backwards: if the target is already
// ahead (it handed out values itself), it is kept and reported, because
// setting it back would hand out values that already exist there.
//
// Used lists a set of tables' sequences on the source, Sync sets them on
// the target (reading and checking them all before changing one), and
// CreateSQL gives the statement that recreates a missing one.
//
// Files:
//
//	doc.go            this overview
//	sequences.go      Used, Sync (Result, Action, Position; a target ahead kept), CreateSQL
//	sequences_test.go aheadOf: which target positions are ahead, ascending and descending
package sequences
