package slotstatus

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/repstream/repstream/internal/kafkalog"
)

// KafkaStatus is where one target of the Kafka mode stands in the slot's
// topic (`status --kafka`): the topic's offsets, the offset the target
// has recorded to read from again, and whether the brokers answered.
type KafkaStatus struct {
	Topic      string `json:"topic"`
	Start      int64  `json:"start_offset"` // the first offset the topic still holds
	End        int64  `json:"end_offset"`   // the next offset the capture writes
	Offset     int64  `json:"target_offset"`
	LagRecords int64  `json:"lag_records"` // End - Offset: an upper bound of what the target has not applied
	// TopicID is the brokers' id of the topic now, RecordedID the one the
	// target recorded with its copy (kafkalog.TopicID; "": none): they
	// differ when the topic was deleted and made again, and Offset is
	// one of the old topic.
	TopicID    string `json:"topic_id,omitempty"`
	RecordedID string `json:"recorded_topic_id,omitempty"`
	Error      string `json:"error,omitempty"`
}

// remade reports whether the topic is not the one the target's offset is
// of.
func (k *KafkaStatus) remade() bool {
	return k.TopicID != "" && k.RecordedID != "" && k.TopicID != k.RecordedID
}

// AddKafka reads the slot's topic from brokers into st.Kafka (an
// unreachable broker or a missing topic is recorded, for Check).
func AddKafka(ctx context.Context, st *SlotStatus, brokers kafkalog.Cluster) {
	k := &KafkaStatus{Topic: kafkalog.Topic(st.Slot), Offset: st.targetOffset, RecordedID: st.targetTopicID}
	st.Kafka = k
	adm, cl, err := kafkalog.NewAdmin(brokers)
	if err != nil {
		k.Error = err.Error()
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if k.Start, k.End, err = kafkalog.Offsets(ctx, adm, k.Topic); err != nil {
		k.Error = fmt.Sprintf("kafka %v: %v", brokers, err)
		return
	}
	if k.TopicID, err = kafkalog.TopicID(ctx, adm, k.Topic); err != nil {
		k.Error = fmt.Sprintf("kafka %v: %v", brokers, err)
		return
	}
	if k.Offset >= 0 {
		k.LagRecords = max(k.End-k.Offset, 0)
	}
}

func (k *KafkaStatus) format(w io.Writer) {
	if k.Error != "" {
		fmt.Fprintf(w, "kafka topic        %s: %s\n", k.Topic, k.Error)
		return
	}
	fmt.Fprintf(w, "kafka topic        %s: offsets %d to %d\n", k.Topic, k.Start, k.End)
	if k.Offset < 0 {
		fmt.Fprintf(w, "target's offset    none recorded (no apply --kafka has streamed to this target)\n")
		return
	}
	if k.remade() {
		fmt.Fprintf(w, "target's offset    %d, of another topic: it was deleted and made again since this target read it (id %s, now %s)\n", k.Offset, k.RecordedID, k.TopicID)
		return
	}
	fmt.Fprintf(w, "target's offset    %d (%d records behind at most)\n", k.Offset, k.LagRecords)
}

// check adds the topic's problems to v.
func (k *KafkaStatus) check(slot string, v *Verdict) {
	switch {
	case k.Error != "":
		v.Problem = "the slot's topic cannot be read: " + k.Error
	case k.remade():
		v.Problem = fmt.Sprintf("topic %s was deleted and made again since this target read it: what it had not applied went with the old one; re-seed it with `repstream drop --target-only --slot %s`, then `repstream apply`", k.Topic, slot)
	case k.Offset >= 0 && k.Offset < k.Start:
		v.Problem = fmt.Sprintf("the target's offset %d of topic %s is gone (the topic starts at %d: retention): re-seed it with `repstream drop --target-only --slot %s`, then `repstream apply`", k.Offset, k.Topic, k.Start, slot)
	}
}
