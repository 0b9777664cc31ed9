// Package ddlmsg is the wire format of the schema-change messages that
// repstream's triggers on the source emit: the event trigger (install/ddl.go)
// and the partition triggers (install/partitions.go) send, inside the
// transaction that changed a table, pg_logical_emit_message(true,
// 'repstream.ddl', content) (change.DDLPrefix): the message's JSON, signed
// with the source's HMAC key (sign.go).
//
// A message is decoded for the pipeline in one place: change.NewDDL
// (capture, and the Kafka writer's renames) and a spill file's read-back
// (queue) call Change.ParseDDL, and the change.OpDDL change carries the
// result (Change.DDL) next to the JSON; in Kafka mode capture also parses
// one before the topic, to follow partition changes. Capture routes by it,
// apply (apply.TableFilter) and the target (target/ddl.go,
// target/partition.go) read it; the statements it becomes are schema's
// (schema.AlterSQL, schema.CreateSQLFromDDL).
//
// It imports nothing of repstream: the source side and the target side
// share it.
//
// Files:
//
//	doc.go             this overview
//	ddlmsg.go          Message, Table, Column, EnumChange, CompositeChange: the JSON of a message; Parse, Check, SessionSettings
//	partition.go       PartitionChange: a partition's ATTACH, DETACH or TRUNCATE
//	sign.go            Sign, Verify, Strip: the signature that tells the trigger's messages from forged ones
//	topicsign.go       TopicKey, SignTopic, VerifyTopic: a Kafka topic's messages signed anew by the capture with Ed25519, which applies check without the HMAC key
//	ddlmsg_test.go     Parse and Check of table and partition messages; PubRelRemade
//	sign_test.go       Sign and Verify, a golden signature, FuzzVerify (testdata/fuzz)
//	topicsign_test.go  SignTopic and VerifyTopic, forged and unknown keys, ParsePublicKey
package ddlmsg
