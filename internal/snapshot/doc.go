// Package snapshot copies the rows that exist when a slot is created, from
// the slot's exported snapshot, so that streaming from the slot's consistent
// point continues exactly where the copy ends.
//
// Files:
//
//	snapshot.go   Copy (the tables, largest first, in pieces on Workers connections that each import the snapshot), Options, Result; CheckTargets and HasRows (a target table's rows, refused or emptied before a copy); SourceError
//	ranges.go     tidRange: a large table split into ranges of heap blocks, copied in parallel
//	pipe.go       chunkPipe: COPY data from the source's COPY TO to the target's COPY FROM in full CopyData messages
//	freeze.go     a table copied in one piece is copied with COPY FREEZE into a table emptied in the same transaction
//	published.go  what a publication sends of a table (row filter, column list): PublishedColumns, publishedShape
//	progress.go   the copy's figures per table (its stats component, the planner's size as its estimate)
package snapshot
