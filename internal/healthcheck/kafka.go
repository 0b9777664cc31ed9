package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/repstream/repstream/internal/kafkalog"
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
	c.kafkaOffset(ctx, adm, topic)
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
// topic.
func (c *checker) kafkaOffset(ctx context.Context, adm *kadm.Client, topic string) {
	if c.tgt == nil {
		return
	}
	var off int64
	var id string // kafka_topic_id (targets of earlier versions have no such column)
	err := c.tgt.QueryRow(ctx, "SELECT kafka_offset, coalesce(to_jsonb(p)->>'kafka_topic_id', '') FROM repstream.progress p WHERE slot = $1", c.opts.Slot).Scan(&off, &id)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || err == nil && off < 0:
		c.r.add(OK, "kafka", "target's offset", "", "none recorded: no apply has streamed to this target yet")
		return
	case err != nil:
		c.r.add(Warn, "kafka", "target's offset", "", "cannot read it from repstream.progress: %v", err)
		return
	}
	start, end, err := kafkalog.Offsets(ctx, adm, topic)
	if err != nil {
		c.r.add(Fail, "kafka", "target's offset", "", "read the topic's offsets: %v", err)
		return
	}
	reseed := fmt.Sprintf("re-seed this target: `repstream drop --target-only --slot %s`, then `repstream apply`", c.opts.Slot)
	if now, err := kafkalog.TopicID(ctx, adm, topic); err == nil && id != "" && now != "" && now != id {
		c.r.add(Fail, "kafka", "target's offset", reseed,
			"%d, of another topic: %s was deleted and made again since this target read it (id %s, now %s)", off, topic, id, now)
		return
	}
	if off < start {
		c.r.add(Fail, "kafka", "target's offset", reseed,
			"%d, gone from the topic (it starts at %d: retention)", off, start)
		return
	}
	c.r.add(OK, "kafka", "target's offset", "", "%d of %d to %d (%d records behind at most)", off, start, end, max(end-off, 0))
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
