package schema

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
)

// Partition messages: what repstream's partition triggers on the source
// (engine/partitions.go) emit for a partitioned table published through its
// root — a repstream.ddl message of the root carrying "partition".
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

// TableName returns the partition's schema-qualified name.
func (p *PartitionChange) TableName() TableName { return TableName{Schema: p.Schema, Name: p.Name} }

// PublishedAlone reports whether pub publishes the partition as a table of
// its own.
func (p *PartitionChange) PublishedAlone(pub string) bool {
	return slices.Contains(p.StandalonePubs, pub)
}

// ParsePartitionChange returns the partition of a partition message, nil
// for any other schema-change message.
func ParsePartitionChange(b []byte) (*PartitionChange, error) {
	var m struct {
		Partition *PartitionChange `json:"partition"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode partition message: %w", err)
	}
	if m.Partition != nil && (m.Partition.Schema == "" || m.Partition.Name == "") {
		return nil, fmt.Errorf("decode partition message: no partition name")
	}
	return m.Partition, nil
}

var hashOID = regexp.MustCompile(`satisfies_hash_partition\('\d+'::oid`)

// HashPartition reports whether a partition constraint is a hash
// partition's: it names its parent by OID (satisfies_hash_partition), so it
// means nothing on another server.
func HashPartition(constraint string) bool { return hashOID.MatchString(constraint) }

// SamePartitionConstraint reports whether two partition constraints (of the
// source and of the target) hold the same rows: the same text, the OIDs of
// hash partitions' parents aside.
func SamePartitionConstraint(a, b string) bool {
	norm := func(s string) string { return hashOID.ReplaceAllString(s, "satisfies_hash_partition(PARENT") }
	return norm(a) == norm(b)
}
