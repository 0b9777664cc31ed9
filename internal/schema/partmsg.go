package schema

import "regexp"

// Partition messages (ddlmsg.PartitionChange): the partition constraints
// they carry, compared with the target's.

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
