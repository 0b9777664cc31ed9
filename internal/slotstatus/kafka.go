package slotstatus

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/stats"
	"github.com/repstream/repstream/internal/target"
)

// KafkaStatus is where one target of the Kafka mode stands in the slot's
// topic (`status --kafka`): the topic's offsets and last commit, the
// offset the target has recorded to read from again, whether it holds
// everything the topic holds, and whether the brokers answered.
//
// Whether a target is caught up is judged by LSNs, never by offsets: the
// capture's Kafka transactions put a commit marker (a control record, one
// offset) in the topic every 30 s, so a target that has applied every
// record stays behind the end offset by them. Every record's header says
// the end LSN of the last commit the topic holds up to it (kafkalog.Tail);
// a target whose low watermark (every transaction ending at or before it
// applied) is at or past the tail's is caught up.
type KafkaStatus struct {
	Topic      string `json:"topic"`
	Start      int64  `json:"start_offset"` // the first offset the topic still holds
	End        int64  `json:"end_offset"`   // the next offset the capture writes
	Offset     int64  `json:"target_offset"`
	LagRecords int64  `json:"lag_records"` // End - Offset: an upper bound of what the target has not applied (Kafka's transaction markers included)
	// LastCommit is the end LSN of the last commit the topic holds (its
	// last record's header), "" when it holds no record.
	LastCommit string `json:"last_commit,omitempty"`
	// CaughtUp: the target has applied every transaction the topic holds
	// (its low watermark is at or past LastCommit). Judged only when the
	// target has recorded an offset of this topic.
	CaughtUp bool `json:"caught_up"`
	// BehindBytes is the WAL from the target's low watermark to
	// LastCommit: 0 when caught up.
	BehindBytes int64 `json:"behind_bytes"`
	// BehindSeconds is the age of the oldest commit the topic holds that
	// the target lacks (its source commit timestamp against this
	// machine's clock): 0 when caught up, -1 when unknown (not found near
	// the target's offset).
	BehindSeconds float64 `json:"behind_seconds"`
	// ProgressAgeSeconds is how long ago the target's progress record last
	// advanced (repstream.progress.updated_at: its low watermark or its
	// offset moved), -1 when unknown.
	ProgressAgeSeconds float64 `json:"progress_age_seconds"`
	// CaptureLagSeconds is the slot's flush lag: how far the capture (the
	// topic) is behind the source, -1 when no capture streams.
	CaptureLagSeconds float64 `json:"capture_lag_seconds"`
	// TopicID is the brokers' id of the topic now, RecordedID the one the
	// target recorded with its copy (kafkalog.TopicID; "": none): they
	// differ when the topic was deleted and made again, and Offset is
	// one of the old topic.
	TopicID    string `json:"topic_id,omitempty"`
	RecordedID string `json:"recorded_topic_id,omitempty"`
	Error      string `json:"error,omitempty"`

	copying bool // the target's initial copy, or a table's, is under way
}

// remade reports whether the topic is not the one the target's offset is
// of.
func (k *KafkaStatus) remade() bool {
	return k.TopicID != "" && k.RecordedID != "" && k.TopicID != k.RecordedID
}

// judged reports whether the target's place in this topic is known: it
// recorded an offset of it, and the brokers answered.
func (k *KafkaStatus) judged() bool {
	return k.Error == "" && k.Offset >= 0 && !k.remade()
}

// judge sets CaughtUp and BehindBytes from the topic's last commit (0: the
// topic holds none) and the target's low watermark.
func (k *KafkaStatus) judge(lastCommit, low change.LSN) {
	k.CaughtUp = low >= lastCommit
	k.BehindBytes = 0
	if !k.CaughtUp {
		k.BehindBytes = int64(lastCommit - low)
	}
}

// AddKafka reads the slot's topic from brokers into st.Kafka (an
// unreachable broker or a missing topic is recorded, for Check): its
// offsets and its tail's last commit, and, for a target behind it, the
// oldest commit that target lacks. st.LagSeconds becomes the target's:
// the capture's when the target holds all the topic holds, the age of
// the oldest commit it lacks otherwise (unknown when not found).
func AddKafka(ctx context.Context, st *SlotStatus, brokers kafkalog.Cluster) {
	k := &KafkaStatus{Topic: kafkalog.Topic(st.Slot), Offset: st.targetOffset, RecordedID: st.targetTopicID,
		BehindSeconds: -1, ProgressAgeSeconds: st.progressAge, CaptureLagSeconds: st.LagSeconds,
		copying: st.targetProg.Snapshot == target.SnapshotRunning || len(st.TablesNotCopied) > 0}
	st.Kafka = k
	// The slot's lag is the capture's; the target's is said below, or
	// unknown.
	st.LagSeconds, st.unknownLag = -1, "the target's place in the topic is unknown"
	adm, cl, err := kafkalog.NewAdmin(brokers)
	if err != nil {
		k.Error = err.Error()
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	tail, err := kafkalog.Tail(ctx, adm, brokers, k.Topic)
	if err != nil {
		k.Error = fmt.Sprintf("kafka %v: %v", brokers, err)
		return
	}
	k.Start, k.End = tail.Start, tail.End
	if !tail.Empty {
		k.LastCommit = tail.LastCommit.String()
	}
	if k.TopicID, err = kafkalog.TopicID(ctx, adm, k.Topic); err != nil {
		k.Error = fmt.Sprintf("kafka %v: %v", brokers, err)
		return
	}
	if k.Offset >= 0 {
		k.LagRecords = max(k.End-k.Offset, 0)
	}
	if !k.judged() {
		return
	}
	k.judge(tail.LastCommit, st.targetProg.Low)
	if k.CaughtUp {
		k.BehindSeconds = 0
		st.LagSeconds, st.unknownLag = k.CaptureLagSeconds, "no capture streams from the slot"
		return
	}
	st.unknownLag = "behind the topic; the oldest commit it lacks was not found near its offset"
	if k.Offset < k.Start {
		return // gone from the topic: Check says so
	}
	c, found, err := kafkalog.FirstMissingCommit(ctx, brokers, k.Topic, k.Offset, k.End, st.targetProg.IsApplied)
	if err != nil {
		st.unknownLag = "behind the topic; " + err.Error()
		return
	}
	if found {
		k.BehindSeconds = max(time.Since(c.Time).Seconds(), 0)
		st.LagSeconds = k.BehindSeconds
	}
}

// seconds prints a number of seconds as a duration, to the second.
func seconds(s float64) string {
	return (time.Duration(s) * time.Second).String()
}

func (k *KafkaStatus) format(w io.Writer) {
	if k.Error != "" {
		fmt.Fprintf(w, "kafka topic        %s: %s\n", k.Topic, k.Error)
		return
	}
	last := "no commit yet"
	if k.LastCommit != "" {
		last = "last commit " + k.LastCommit
	}
	fmt.Fprintf(w, "kafka topic        %s: offsets %d to %d, %s\n", k.Topic, k.Start, k.End, last)
	capture := "unknown (no capture streams from the slot)"
	if k.CaptureLagSeconds >= 0 {
		capture = fmt.Sprintf("%.3f s (the topic behind the source)", k.CaptureLagSeconds)
	}
	fmt.Fprintf(w, "capture lag        %s\n", capture)
	if k.Offset < 0 {
		fmt.Fprintf(w, "target's offset    none recorded (no apply --kafka has streamed to this target)\n")
		return
	}
	if k.remade() {
		fmt.Fprintf(w, "target's offset    %d, of another topic: it was deleted and made again since this target read it (id %s, now %s)\n", k.Offset, k.RecordedID, k.TopicID)
		return
	}
	fmt.Fprintf(w, "target's offset    %d (%d records behind at most)\n", k.Offset, k.LagRecords)
	advanced := "unknown"
	if k.ProgressAgeSeconds >= 0 {
		advanced = seconds(k.ProgressAgeSeconds) + " ago"
	}
	switch {
	case k.CaughtUp:
		fmt.Fprintf(w, "target             caught up with the topic\n")
	case k.BehindSeconds >= 0:
		fmt.Fprintf(w, "target             behind the topic by %s of WAL, since a commit of %s ago; its progress last advanced %s\n",
			stats.HumanBytes(k.BehindBytes), seconds(k.BehindSeconds), advanced)
	default:
		fmt.Fprintf(w, "target             behind the topic by %s of WAL; its progress last advanced %s\n", stats.HumanBytes(k.BehindBytes), advanced)
	}
}

// check adds the topic's problems to v: the topic unreadable, the
// target's offset gone from it or of a topic deleted since, or a target
// stale for maxInactive (stale).
func (k *KafkaStatus) check(slot string, maxInactive time.Duration, v *Verdict) {
	switch {
	case k.Error != "":
		v.Problem = "the slot's topic cannot be read: " + k.Error
	case k.remade():
		v.Problem = fmt.Sprintf("topic %s was deleted and made again since this target read it: what it had not applied went with the old one; re-seed it with `repstream drop --target-only --slot %s`, then `repstream apply`", k.Topic, slot)
	case k.Offset >= 0 && k.Offset < k.Start:
		v.Problem = fmt.Sprintf("the target's offset %d of topic %s is gone (the topic starts at %d: retention): re-seed it with `repstream drop --target-only --slot %s`, then `repstream apply`", k.Offset, k.Topic, k.Start, slot)
	case k.stale(maxInactive):
		since := ""
		if k.BehindSeconds >= 0 {
			since = fmt.Sprintf(", lacks a commit of %s ago", seconds(k.BehindSeconds))
		}
		v.Problem = fmt.Sprintf("the target of slot %q has not advanced for %s (more than --max-inactive %s)%s and is %s of WAL behind topic %s (its last commit %s): is its repstream apply running?",
			slot, seconds(k.ProgressAgeSeconds), maxInactive, since, stats.HumanBytes(k.BehindBytes), k.Topic, k.LastCommit)
	}
}

// stale reports whether (maxInactive > 0) the target is behind the topic,
// its progress has not advanced for maxInactive and the oldest commit it
// lacks is at least that old (when it was found): its apply is stopped,
// or stuck. The commit's age keeps a running apply from being called
// stale while it applies a large transaction that came after a long quiet
// time (its progress does not advance until that commit). A copy under way
// (the target's first, or a table's) advances nothing either: not judged.
func (k *KafkaStatus) stale(maxInactive time.Duration) bool {
	limit := maxInactive.Seconds()
	return maxInactive > 0 && k.judged() && !k.CaughtUp && !k.copying &&
		k.ProgressAgeSeconds >= limit && (k.BehindSeconds < 0 || k.BehindSeconds >= limit)
}
