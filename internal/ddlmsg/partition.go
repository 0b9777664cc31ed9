package ddlmsg

import (
	"errors"
	"slices"
)

// Partition messages: what repstream's partition triggers on the source
// (install/partitions.go) emit for a partitioned table published through its
// root — a repstream.ddl message of the root carrying "partition"
// (Message.Partition).
const (
	TagTruncatePartition = "TRUNCATE PARTITION"
	TagAttachPartition   = "ATTACH PARTITION"
	TagDetachPartition   = "DETACH PARTITION"
)

// PartitionChange is the partition a partition message is about.
type PartitionChange struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	// Constraint is the partition constraint on the source (as
	// pg_get_partition_constraintdef gives it; for a detach, as it was):
	// the rows of the root it holds.
	Constraint string `json:"cons"`
	// Bound is the partition bound (FOR VALUES ... or DEFAULT), PartKey the
	// partition key of its parent (pg_get_partkeydef).
	Bound   string `json:"bound"`
	PartKey string `json:"partkey"`
	// Parent is the partition's parent as the source names it
	// (schema-qualified), "" after a detach.
	Parent string `json:"parent"`
	// Rows (ATTACH): whether the table held rows when it was attached.
	Rows bool `json:"rows"`
	// StandalonePubs: the publications that publish it as a table of its
	// own (FOR ALL TABLES, FOR TABLE it, FOR TABLES IN SCHEMA its schema):
	// before an attach, those that replicated it under its own name; after
	// a detach, those that do from then on.
	StandalonePubs []string `json:"standalone_pubs"`
}

// Check returns an error if the message does not name the partition.
func (p *PartitionChange) Check() error {
	if p.Schema == "" || p.Name == "" {
		return errors.New("decode partition message: no partition name")
	}
	return nil
}

// PublishedAlone reports whether pub publishes the partition as a table of
// its own.
func (p *PartitionChange) PublishedAlone(pub string) bool {
	return slices.Contains(p.StandalonePubs, pub)
}
