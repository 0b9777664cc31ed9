package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// What each half needs on the topic (Kafka ACL operations): the capture
// reads its end (Tail) and writes it; an apply reads it.
var (
	CaptureTopicOps = []kadm.ACLOperation{kadm.OpDescribe, kadm.OpRead, kadm.OpWrite}
	ApplyTopicOps   = []kadm.ACLOperation{kadm.OpDescribe, kadm.OpRead}
)

// ErrAccess is wrapped by the errors of CheckTopicAccess and
// CheckTransactionalID: the brokers refuse this client's principal
// something repstream needs (Kafka ACLs).
var ErrAccess = errors.New("not allowed by the brokers' ACLs")

// TopicAccess returns the operations the brokers allow this client's
// principal on topic (the Metadata request's authorized operations, KIP-430:
// it reads, it changes nothing), and known = false when they do not say.
// Brokers without an authorizer allow, and report, every operation.
func TopicAccess(ctx context.Context, adm *kadm.Client, topic string) (ops []kadm.ACLOperation, known bool, err error) {
	md, err := adm.Metadata(kadm.WithAuthorizedOps(ctx), topic)
	if err != nil {
		if errors.Is(err, kerr.TopicAuthorizationFailed) {
			return nil, true, nil // not even DESCRIBE
		}
		return nil, false, fmt.Errorf("reach the Kafka brokers: %w", err)
	}
	td, ok := md.Topics[topic]
	if !ok {
		return nil, false, nil
	}
	if errors.Is(td.Err, kerr.TopicAuthorizationFailed) {
		return nil, true, nil
	}
	if errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return nil, false, fmt.Errorf("topic %s: %w", topic, ErrNoTopic)
	}
	if td.Err != nil {
		return nil, false, fmt.Errorf("topic %s: %w", topic, td.Err)
	}
	if len(td.AuthorizedOperations) == 0 {
		return nil, false, nil // omitted: brokers older than 2.3
	}
	return td.AuthorizedOperations, true, nil
}

// CheckTopicAccess checks, changing nothing, that the brokers allow this
// client's principal every operation of need on topic (CaptureTopicOps,
// ApplyTopicOps); role names the half in the error ("capture", "apply").
// Brokers that do not say pass: the half finds out when it is refused.
func CheckTopicAccess(ctx context.Context, adm *kadm.Client, topic, role string, need []kadm.ACLOperation) error {
	have, known, err := TopicAccess(ctx, adm, topic)
	if err != nil || !known {
		return err
	}
	var missing []string
	for _, op := range need {
		if !slices.Contains(have, op) && !slices.Contains(have, kadm.OpAll) {
			missing = append(missing, op.String())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the %s's principal may not %s topic %s: grant it the ACLs %s on the topic (kafka-acls.sh --add --allow-principal User:<its user> --operation <each> --topic %s)",
		ErrAccess, role, strings.Join(missing, ", "), topic, strings.Join(missing, " and "), topic)
}

// CheckTransactionalID checks that the brokers let this client's principal
// use the capture's transactional id (the topic's name): it starts a
// producer with that id, which needs the ACLs WRITE and DESCRIBE on it,
// and closes it. That fences any producer of an earlier capture of the
// topic, so call it only where no capture of the slot can be running (its
// slot does not exist yet).
func CheckTransactionalID(ctx context.Context, c Cluster, topic string, txnTimeout time.Duration) error {
	prod, err := NewProducer(c, topic, txnTimeout, kgo.NoCompression())
	if err != nil {
		return err
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, _, err := prod.ProducerID(ctx); err != nil {
		err = TxnError(topic, err)
		if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			err = fmt.Errorf("%w: %w", ErrAccess, err)
		}
		return err
	}
	return nil
}
