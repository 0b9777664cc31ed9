package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/slotstatus"
)

// kafka checks the brokers and the slot's topic (check --kafka), and the
// target's offset in it: side "kafka".
func (c *checker) kafka(ctx context.Context) {
	brokers := c.opts.Kafka
	adm, cl, err := kafkalog.NewAdmin(brokers)
	if err != nil {
		c.r.add(Fail, "kafka", "brokers", "give --kafka as host:port[,host:port...]", "%v", err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	topic := kafkalog.Topic(c.opts.Slot)
	info, err := kafkalog.DescribeTopic(ctx, adm, topic)
	switch {
	case errors.Is(err, kafkalog.ErrNoTopic):
		c.brokersLine(info, brokers)
		c.r.add(Warn, "kafka", "topic "+topic, "start `repstream capture --slot "+c.opts.Slot+"`: it makes the topic", "missing")
		c.kafkaTransactions(ctx, adm, topic)
		return
	case err != nil:
		c.r.add(Fail, "kafka", "brokers", "check the addresses and that the brokers run (a firewall, advertised.listeners)", "%v: %v", brokers, err)
		return
	}
	c.brokersLine(info, brokers)
	switch {
	case info.Fits() != nil:
		c.r.add(Fail, "kafka", "topic "+topic, "", "%v", info.Fits())
	case info.ReplicationFactor < 3 && info.Brokers >= 3:
		c.r.add(Warn, "kafka", "topic "+topic, "raise the topic's replication factor to 3 (kafka-reassign-partitions)",
			"replication factor %d on a cluster of %d brokers: losing a broker may lose the stream", info.ReplicationFactor, info.Brokers)
	case info.ReplicationFactor < 2:
		c.r.add(Warn, "kafka", "topic "+topic, "a cluster of 3 brokers keeps 3 copies (min.insync.replicas 2)",
			"one copy (replication factor 1): a lost broker loses the stream")
	case info.InSync < info.ReplicationFactor:
		c.r.add(Warn, "kafka", "topic "+topic, "bring the missing brokers back (a broker down, or behind)",
			"%d of its %d replicas in sync (min.insync.replicas %s): the capture stops writing once fewer than min.insync.replicas are", info.InSync, info.ReplicationFactor, info.MinInsyncReplicas)
	default:
		c.r.add(OK, "kafka", "topic "+topic, "", "1 partition, replication factor %d, all in sync, min.insync.replicas %s, retention.ms %s",
			info.ReplicationFactor, info.MinInsyncReplicas, info.RetentionMs)
	}
	c.kafkaTransactions(ctx, adm, topic)
	c.kafkaAccess(ctx, adm, topic)
	c.kafkaOffset(ctx)
}

// applySourceReads checks, as an apply's start does
// (install.CheckApplySourceReads), that the source role can read what an
// apply reads in the schema repstream on the source: the public keys that
// check the topic's schema-change messages among it. Not with --ddl=false
// or relation, which read none of it.
func (c *checker) applySourceReads(ctx context.Context) {
	const check = "apply's reads in schema repstream"
	if c.opts.DDL == "false" || c.opts.DDL == "relation" {
		return
	}
	made, err := install.CheckApplySourceReads(ctx, c.src)
	var lack *install.ApplySourceReadsError
	switch {
	case errors.As(err, &lack):
		c.r.add(Fail, "source", check, lack.Grants(),
			"the source role %s lacks %s: an apply --kafka with this source role stops at start (it checks the topic's schema-change messages with the public keys in repstream.ddl_pubkey)", lack.Role, lack.Missing())
	case err != nil:
		c.r.add(Warn, "source", check, "", "%v", err)
	case !made:
		c.r.add(OK, "source", check, "", "none yet (repstream.ddl_pubkey is made by the capture's first start with the event trigger): checked again by the apply's start")
	default:
		c.r.add(OK, "source", check, "", "the source role %s may read what an apply reads there (the public keys in repstream.ddl_pubkey among it)", c.srcRole)
	}
}

// kafkaAccess checks what the brokers' ACLs let this principal do on the
// topic: an apply needs to read it.
func (c *checker) kafkaAccess(ctx context.Context, adm *kadm.Client, topic string) {
	ops, known, err := kafkalog.TopicAccess(ctx, adm, topic)
	switch {
	case err != nil:
		c.r.add(Warn, "kafka", "access", "", "cannot read this principal's ACLs on topic %s: %v", topic, err)
		return
	case !known:
		c.r.add(Warn, "kafka", "access", "", "the brokers do not say what this principal may do on topic %s", topic)
		return
	}
	if err := kafkalog.CheckTopicAccess(ctx, adm, topic, "apply", kafkalog.ApplyTopicOps); err != nil {
		c.r.add(Fail, "kafka", "access", "grant the apply's principal READ and DESCRIBE on the topic", "%v", err)
		return
	}
	names := make([]string, len(ops))
	for i, op := range ops {
		names[i] = op.String()
	}
	c.r.add(OK, "kafka", "access", "", "this principal may %s topic %s", strings.Join(names, ", "), topic)
}

// kafkaTransactions checks that the brokers can hold the capture's Kafka
// transactions (its producer fences earlier captures with them).
func (c *checker) kafkaTransactions(ctx context.Context, adm *kadm.Client, topic string) {
	if err := kafkalog.TransactionStateFits(ctx, adm, topic, 0); err != nil {
		c.r.add(Fail, "kafka", "transactions", "set transaction.state.log.replication.factor and transaction.state.log.min.isr to at most the number of brokers", "%v", err)
		return
	}
	c.r.add(OK, "kafka", "transactions", "", "the brokers can hold the capture's (transactional id %s)", topic)
}

// kafkaOffset checks that the offset the target recorded is still in the
// topic, of the same topic, and says where the target stands as `status
// --kafka` does (slotstatus.TargetInTopic): caught up with the topic's
// last commit, or behind it by so much WAL, judged by LSNs (the capture's
// Kafka transaction markers take offsets, so offsets cannot say it).
func (c *checker) kafkaOffset(ctx context.Context) {
	const check = "target's offset"
	if c.tgt == nil {
		return
	}
	var state bool
	if err := c.tgt.QueryRow(ctx, "SELECT to_regclass('repstream.progress') IS NOT NULL").Scan(&state); err != nil {
		c.r.add(Warn, "kafka", check, "", "cannot read repstream.progress: %v", err)
		return
	}
	var k *slotstatus.KafkaStatus
	if state {
		var err error
		if k, err = slotstatus.TargetInTopic(ctx, c.tgt, c.opts.Slot, c.opts.Kafka); err != nil {
			c.r.add(Warn, "kafka", check, "", "%v", err)
			return
		}
	}
	if k != nil && k.Copying {
		if k.ApplyConnected {
			c.r.add(OK, "kafka", "target's copy", "", "%s", k.CopyState())
		} else {
			c.r.add(Warn, "kafka", "target's copy", fmt.Sprintf("start `repstream apply --slot %s` for this target again: it goes on with the copy", c.opts.Slot), "%s", k.CopyState())
		}
	}
	reseed := fmt.Sprintf("re-seed this target: `repstream drop --target-only --slot %s`, then `repstream apply --truncate`", c.opts.Slot)
	switch {
	case k == nil || k.Offset < 0:
		c.r.add(OK, "kafka", check, "", "none recorded: no apply has streamed to this target yet")
	case k.Error != "":
		c.r.add(Fail, "kafka", check, "", "%s", k.Error)
	case k.Remade():
		c.r.add(Fail, "kafka", check, reseed,
			"%d, of another topic: %s was deleted and made again since this target read it (id %s, now %s)", k.Offset, k.Topic, k.RecordedID, k.TopicID)
	case k.Offset < k.Start:
		c.r.add(Fail, "kafka", check, reseed,
			"%d, gone from the topic (it starts at %d: retention)", k.Offset, k.Start)
	default:
		c.r.add(OK, "kafka", check, "", "%d (the topic holds %d to %d): %s", k.Offset, k.Start, k.End, k.Place())
	}
}

// brokersLine says which brokers the cluster's metadata lists now: not
// the addresses given (a broker down is still among those), and warns
// about a given address that is not one of them.
func (c *checker) brokersLine(info kafkalog.TopicInfo, given kafkalog.Cluster) {
	var missing []string
	for _, a := range given.Addrs {
		if !slices.Contains(info.BrokerAddrs, a) {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 && len(missing) < len(given.Addrs) {
		c.r.add(Warn, "kafka", "brokers", "start the brokers at those addresses again, or leave them out of --kafka",
			"%d in the cluster (%s); not among them: %s", info.Brokers, strings.Join(info.BrokerAddrs, ","), strings.Join(missing, ","))
		return
	}
	c.r.add(OK, "kafka", "brokers", "", "%d reachable (%s)", info.Brokers, strings.Join(info.BrokerAddrs, ","))
}
