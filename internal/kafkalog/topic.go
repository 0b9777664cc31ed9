package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/change"
)

// Topic is the topic a slot's stream goes to.
func Topic(slot string) string { return "repstream." + slot }

// Brokers splits a --kafka value ("host:port,host:port").
func Brokers(s string) []string {
	var out []string
	for _, b := range strings.Split(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// NewProducer returns the capture's client: every record acknowledged by
// all in-sync replicas, idempotent (no duplicates and no reordering on
// retries), retried without limit while the brokers are away (the slot
// waits meanwhile), sent at once, its batches compressed with codec
// (Compression).
//
// It is transactional, with the topic's name as its transactional id: a
// capture session that loads its producer id (Writer.Fence) fences every
// earlier producer of the topic, whose later writes the brokers refuse.
// The records are written in Kafka transactions that a Writer commits
// every CommitEvery, only to keep them within TxnTimeout; readers read
// uncommitted records (as soon as they are acknowledged), and control
// records (the commit and abort markers) hold offsets between them.
//
// txnTimeout is the transactions' timeout (0: TxnTimeout); a Writer
// commits every CommitInterval(txnTimeout).
func NewProducer(c Cluster, topic string, txnTimeout time.Duration, codec kgo.CompressionCodec) (*kgo.Client, error) {
	if txnTimeout <= 0 {
		txnTimeout = TxnTimeout
	}
	return kgo.NewClient(c.opts(
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerBatchMaxBytes(MaxBatchBytes),
		kgo.MaxBufferedRecords(1<<20),
		kgo.MaxBufferedBytes(2*DefaultMaxInFlight+DefaultMaxRecord),
		kgo.UnknownTopicRetries(-1),
		kgo.TransactionalID(topic),
		kgo.TransactionTimeout(txnTimeout),
	)...)
}

// Compressions are the codecs the capture's batches may be compressed
// with (--kafka-compression). DefaultCompression is snappy: it moves and
// keeps about half the bytes, and on brokers beside the capture costs no
// time: on conditions' 1M-row backlog, snappy and none alternated over 6
// rounds caught up in a median 5.09 and 5.16 s, at the same CPU within
// the machine's noise (docs/bench/README.md). lz4 is as cheap; zstd
// compresses most, for a slow link or small disks; none spares the CPU
// of the capture (which compresses), of each broker (which decompresses
// every batch to validate it) and of each apply.
var Compressions = []string{"none", "snappy", "lz4", "zstd"}

const DefaultCompression = "snappy"

// Compression is the codec Compressions names ("": DefaultCompression).
func Compression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "", "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("--kafka-compression %q: one of %s", name, strings.Join(Compressions, ", "))
}

// TxnTimeout is the timeout of the capture's Kafka transactions (the
// brokers' default transaction.max.timeout.ms): brokers away for longer
// abort the open one, and the capture stops when they are back (started
// again, it goes on after what the topic holds). CommitEvery is how often
// a Writer commits: each commit first waits for the brokers to acknowledge
// what is in flight (up to 64 MiB while catching up), so not often.
const (
	TxnTimeout  = 15 * time.Minute
	CommitEvery = 30 * time.Second
)

// CommitInterval is how often a Writer commits transactions of timeout
// txnTimeout (0: TxnTimeout): CommitEvery, or a third of a shorter
// timeout.
func CommitInterval(txnTimeout time.Duration) time.Duration {
	if txnTimeout <= 0 {
		txnTimeout = TxnTimeout
	}
	return min(CommitEvery, txnTimeout/3)
}

// NewAdmin returns an admin client of c (close its underlying client).
func NewAdmin(c Cluster) (*kadm.Client, *kgo.Client, error) {
	cl, err := kgo.NewClient(c.opts()...)
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl, nil
}

// MaxBatchBytes is the largest batch the capture's producer sends: a
// topic's max.message.bytes must be at least this (the brokers' default,
// 1 MiB, is).
const MaxBatchBytes = DefaultMaxRecord + (64 << 10)

// TopicInfo is what EnsureTopic found or made. The configuration values
// are "?" when the brokers did not say (no DESCRIBE_CONFIGS).
type TopicInfo struct {
	Name              string
	Created           bool
	Partitions        int
	ReplicationFactor int
	MinInsyncReplicas string
	CleanupPolicy     string // cleanup.policy
	MaxMessageBytes   string // max.message.bytes
	RetentionMs       string // retention.ms (-1: kept for ever)
	Brokers           int
	// InSync is how many of the partition's replicas are in sync (its
	// ISR); BrokerAddrs the brokers the cluster's metadata lists now
	// (DescribeTopic), as host:port.
	InSync      int
	BrokerAddrs []string
}

func (t TopicInfo) String() string {
	return fmt.Sprintf("topic %s: %d partition, replication factor %d, min.insync.replicas %s, cleanup.policy %s, max.message.bytes %s, retention.ms %s, %d broker(s)",
		t.Name, t.Partitions, t.ReplicationFactor, t.MinInsyncReplicas, t.CleanupPolicy, t.MaxMessageBytes, t.RetentionMs, t.Brokers)
}

// Fits says why the topic cannot hold a slot's stream (nil: it can, or
// its configuration could not be read): more than one partition, records
// compacted away (cleanup.policy compact: the capture's records have no
// key, and the stream needs every one), or a max.message.bytes below
// MaxBatchBytes. Each error names the topic, the setting and the fix.
func (t TopicInfo) Fits() error {
	if t.Partitions != 1 {
		return fmt.Errorf("topic %s has %d partitions: a slot's stream needs exactly one (the source's commit order); delete it or use another slot name", t.Name, t.Partitions)
	}
	if slices.Contains(strings.Split(t.CleanupPolicy, ","), "compact") {
		return fmt.Errorf("topic %s has cleanup.policy=%s: a slot's stream needs every record, removed only by retention (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config cleanup.policy=delete), or use another slot name",
			t.Name, t.CleanupPolicy, t.Name)
	}
	if n, err := strconv.ParseInt(t.MaxMessageBytes, 10, 64); err == nil && n < MaxBatchBytes {
		return fmt.Errorf("topic %s has max.message.bytes=%d: the capture writes batches of up to %d bytes (kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config max.message.bytes=%d)",
			t.Name, n, MaxBatchBytes, t.Name, MaxBatchBytes)
	}
	return nil
}

// EnsureTopic makes the topic if it is missing: one partition (the
// source's commit order), replicated on min(3, brokers) brokers, with
// min.insync.replicas 2 when there are 3 replicas. A topic that is there
// must fit (TopicInfo.Fits).
func EnsureTopic(ctx context.Context, adm *kadm.Client, topic string) (TopicInfo, error) {
	info, err := DescribeTopic(ctx, adm, topic)
	if errors.Is(err, ErrNoTopic) {
		rf := min(3, info.Brokers)
		cfg := map[string]*string{}
		if rf >= 3 {
			two := "2"
			cfg["min.insync.replicas"] = &two
		}
		if _, err := adm.CreateTopic(ctx, 1, int16(rf), cfg, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return info, fmt.Errorf("create topic %s (1 partition, replication factor %d): %w", topic, rf, err)
		}
		if err := waitLeader(ctx, adm, topic); err != nil {
			return info, err
		}
		info, err = DescribeTopic(ctx, adm, topic)
		info.Created = true
	}
	if err != nil {
		return info, err
	}
	if err := info.Fits(); err != nil {
		return info, err
	}
	return info, nil
}

// waitLeader waits up to 30 s for a new topic's partition to have a leader.
func waitLeader(ctx context.Context, adm *kadm.Client, topic string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		tds, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if td, ok := tds[topic]; ok && td.Err == nil && len(td.Partitions) > 0 && td.Partitions[0].Leader >= 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s has no leader 30 s after its creation", topic)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// describe fills info from a topic's metadata and configuration.
func describe(ctx context.Context, adm *kadm.Client, td kadm.TopicDetail, info *TopicInfo) {
	info.Partitions = len(td.Partitions)
	if info.Partitions > 0 {
		info.ReplicationFactor = len(td.Partitions[0].Replicas)
		info.InSync = len(td.Partitions[0].ISR)
	}
	info.MinInsyncReplicas, info.CleanupPolicy, info.MaxMessageBytes, info.RetentionMs = "?", "?", "?", "?"
	if rcs, err := adm.DescribeTopicConfigs(ctx, td.Topic); err == nil {
		if rc, err := rcs.On(td.Topic, nil); err == nil {
			for _, c := range rc.Configs {
				switch c.Key {
				case "min.insync.replicas":
					info.MinInsyncReplicas = c.MaybeValue()
				case "cleanup.policy":
					info.CleanupPolicy = c.MaybeValue()
				case "max.message.bytes":
					info.MaxMessageBytes = c.MaybeValue()
				case "retention.ms":
					info.RetentionMs = c.MaybeValue()
				}
			}
		}
	}
}

// DescribeTopic reads the brokers and the topic without changing
// anything (`check --kafka`): ErrNoTopic when the topic is missing.
func DescribeTopic(ctx context.Context, adm *kadm.Client, topic string) (TopicInfo, error) {
	info := TopicInfo{Name: topic}
	bs, err := adm.ListBrokers(ctx)
	if err != nil {
		return info, fmt.Errorf("reach the Kafka brokers: %w", err)
	}
	info.Brokers = len(bs)
	for _, b := range bs {
		info.BrokerAddrs = append(info.BrokerAddrs, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	}
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return info, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return info, fmt.Errorf("%w: %s", ErrNoTopic, topic)
	}
	if td.Err != nil {
		return info, fmt.Errorf("describe topic %s: %w", topic, td.Err)
	}
	describe(ctx, adm, td, &info)
	return info, nil
}

// Offsets returns the topic's first and next offsets (partition 0).
// ErrNoTopic: the topic does not exist.
func Offsets(ctx context.Context, adm *kadm.Client, topic string) (start, end int64, err error) {
	so, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("read the offsets of topic %s: %w", topic, err)
	}
	s, ok := so.Lookup(topic, 0)
	if !ok || errors.Is(s.Err, kerr.UnknownTopicOrPartition) {
		return 0, 0, fmt.Errorf("%w: %s", ErrNoTopic, topic)
	}
	if s.Err != nil {
		return 0, 0, fmt.Errorf("read the offsets of topic %s: %w", topic, s.Err)
	}
	eo, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("read the offsets of topic %s: %w", topic, err)
	}
	e, ok := eo.Lookup(topic, 0)
	if !ok {
		return 0, 0, fmt.Errorf("read the end offset of topic %s: no answer for partition 0", topic)
	}
	if e.Err != nil {
		return 0, 0, fmt.Errorf("read the end offset of topic %s: %w", topic, e.Err)
	}
	return s.Offset, e.Offset, nil
}

// TopicID returns the brokers' id of topic (Kafka 2.8+; "" when they give
// none): a topic deleted and made again under the same name has another,
// and its offsets start again at 0. ErrNoTopic: the topic does not exist.
func TopicID(ctx context.Context, adm *kadm.Client, topic string) (string, error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("read the id of topic %s: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	switch {
	case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return "", fmt.Errorf("%w: %s", ErrNoTopic, topic)
	case td.Err != nil:
		return "", fmt.Errorf("read the id of topic %s: %w", topic, td.Err)
	case td.ID == kadm.TopicID{}:
		return "", nil
	}
	return td.ID.String(), nil
}

// waitedOut is an error the brokers said passes, which a start check
// waited for (CheckTransactions: 30 s) and then returned, explained.
type waitedOut struct{ error }

func (w waitedOut) Unwrap() error { return w.error }

// WaitedOut reports whether err is an error the brokers said passes but
// a start check has waited out already: it names a setting to look at,
// and the half stops on it rather than wait again.
func WaitedOut(err error) bool {
	var w waitedOut
	return errors.As(err, &w)
}

// ErrNoTopic: the slot's topic does not exist.
var ErrNoTopic = errors.New("no such topic")

// TailInfo is what the last record of a topic says.
type TailInfo struct {
	Empty      bool // no record to read (new, or all past retention)
	Epoch      uint32
	LastCommit change.LSN
	Start      int64 // the first offset
	End        int64 // the next offset
	Binary     bool  // the last record's values are binary (Header.Binary)
}

// Tail reads the topic's last record: the epoch of the capture session
// that wrote it and the last commit the topic holds. Control records (the
// capture's Kafka transaction markers) are passed over.
func Tail(ctx context.Context, adm *kadm.Client, c Cluster, topic string) (TailInfo, error) {
	start, end, err := Offsets(ctx, adm, topic)
	if err != nil {
		return TailInfo{}, err
	}
	if end <= start {
		return TailInfo{Empty: true, Start: start, End: end}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Read back from the end, a window growing fourfold, until it holds a
	// record that is not a control record.
	for span := int64(8); ; span *= 4 {
		from := max(start, end-span)
		last, err := lastRecord(rctx, c, topic, from, end)
		if err != nil {
			return TailInfo{}, err
		}
		if last != nil {
			h, _, err := ParseHeader(last.Value)
			if err != nil {
				return TailInfo{}, fmt.Errorf("topic %s offset %d: %w", topic, last.Offset, err)
			}
			return TailInfo{Epoch: h.Epoch, LastCommit: h.LastCommit, Start: start, End: end, Binary: h.Binary}, nil
		}
		if from == start {
			return TailInfo{Empty: true, Start: start, End: end}, nil
		}
	}
}

// lastRecord reads topic from offset from to end and returns its last
// record that is not a control record (nil: none).
func lastRecord(ctx context.Context, c Cluster, topic string, from, end int64) (*kgo.Record, error) {
	cl, err := kgo.NewClient(c.opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		// from gone meanwhile (retention): from the topic's start.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var last *kgo.Record
	for next := from; next < end; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read the last records of topic %s (offsets %d to %d): %w", topic, from, end-1, err)
		}
		for _, fe := range fs.Errors() {
			return nil, fmt.Errorf("read the last records of topic %s (offsets %d to %d): %w", topic, from, end-1, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = max(next, r.Offset+1)
			if !r.Attrs.IsControl() && r.Offset < end {
				last = r
			}
		})
	}
	return last, nil
}

// NextEpoch is the epoch of a capture session after one that wrote tail:
// higher than every epoch the topic has held, also when retention has
// removed them all (the clock's seconds).
func NextEpoch(tail TailInfo, now time.Time) uint32 {
	return max(tail.Epoch+1, uint32(now.Unix()))
}

// transactionsHint says what brokers need for the capture's transactions.
const transactionsHint = "their transaction.state.log.replication.factor and transaction.state.log.min.isr must be at most the number of brokers (1 for a single broker)"

// TxnError explains an error of the brokers to the capture's
// transactional producer (transactional id txnID), naming what to change.
func TxnError(txnID string, err error) error {
	var hint string
	switch {
	case errors.Is(err, kerr.CoordinatorNotAvailable), errors.Is(err, kerr.NotEnoughReplicas):
		hint = transactionsHint
	case errors.Is(err, kerr.InvalidTransactionTimeout):
		hint = "the brokers' transaction.max.timeout.ms is below the capture's transaction timeout (--kafka-txn-timeout, 15m by default): raise it, or lower --kafka-txn-timeout"
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		hint = fmt.Sprintf("the capture's principal needs the ACLs WRITE and DESCRIBE on the transactional id %s", txnID)
	default:
		return fmt.Errorf("the Kafka brokers cannot serve the capture's transactions (transactional id %s): %w", txnID, err)
	}
	return fmt.Errorf("the Kafka brokers cannot serve the capture's transactions (transactional id %s): %w; %s", txnID, err, hint)
}

// TransactionStateFits reads, without changing anything (check --kafka),
// whether the brokers can hold the Kafka transactions of capture
// (transactional id txnID): their __transaction_state topic exists, or
// transaction.state.log.replication.factor is at most their number.
func TransactionStateFits(ctx context.Context, adm *kadm.Client, txnID string, txnTimeout time.Duration) error {
	if txnTimeout <= 0 {
		txnTimeout = TxnTimeout
	}
	bs, err := adm.ListBrokers(ctx)
	if err != nil {
		return fmt.Errorf("reach the Kafka brokers: %w", err)
	}
	if len(bs) == 0 {
		return nil
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, bs[0].NodeID)
	if err != nil || len(rcs) == 0 {
		return nil // not readable (ACLs): the capture finds out
	}
	for _, c := range rcs[0].Configs {
		switch c.Key {
		case "transaction.max.timeout.ms":
			if ms, err := strconv.ParseInt(c.MaybeValue(), 10, 64); err == nil && time.Duration(ms)*time.Millisecond < txnTimeout {
				return TxnError(txnID, fmt.Errorf("transaction.max.timeout.ms is %d: %w", ms, kerr.InvalidTransactionTimeout))
			}
		case "transaction.state.log.replication.factor":
			// Until the first transactional producer makes the topic,
			// which fails if the brokers are too few for it.
			if rf, err := strconv.Atoi(c.MaybeValue()); err == nil && rf > len(bs) && !transactionStateMade(ctx, adm) {
				return fmt.Errorf("the Kafka brokers cannot serve the capture's transactions (transactional id %s): transaction.state.log.replication.factor is %d and there are %d broker(s); %s", txnID, rf, len(bs), transactionsHint)
			}
		}
	}
	return nil
}

// transactionStateMade reports whether the brokers' __transaction_state
// topic exists, or cannot be told (a principal without DESCRIBE on it,
// where brokers have ACLs: the coordinator check follows). Asked only when
// it matters: the client keeps a refusal in its metadata cache, and kadm
// then fails the client's later metadata requests with it.
func transactionStateMade(ctx context.Context, adm *kadm.Client) bool {
	tds, err := adm.ListTopics(ctx, "__transaction_state")
	if err != nil {
		return errors.Is(err, kerr.TopicAuthorizationFailed)
	}
	td, ok := tds["__transaction_state"]
	return ok && td.Err == nil
}

// CheckTransactions makes sure the brokers serve the capture's Kafka
// transactions (transactional id txnID: the topic's name) before the
// capture makes anything (TransactionStateFits, then a coordinator found
// for txnID, up to 30 s). It fences nobody.
func CheckTransactions(ctx context.Context, adm *kadm.Client, txnID string, txnTimeout time.Duration) error {
	if err := TransactionStateFits(ctx, adm, txnID, txnTimeout); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs := adm.FindTxnCoordinators(ctx, txnID)
		r, ok := rs[txnID]
		if ok && r.Err == nil {
			return nil
		}
		err := r.Err
		if !ok {
			err = errors.New("no answer")
		}
		var ke *kerr.Error
		if errors.As(err, &ke) && !ke.Retriable {
			return TxnError(txnID, fmt.Errorf("finding its coordinator: %w", err))
		}
		if time.Now().After(deadline) {
			return waitedOut{TxnError(txnID, fmt.Errorf("finding its coordinator for 30 s: %w", err))}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
