package slotstatus

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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
	// Copying: the target's initial copy, or a table's, is under way, or
	// stopped halfway (its progress record says the copy runs, or a table
	// is pending or copying). CopyAgeSeconds is how long ago the record of
	// its copies last changed (target.CopyAge: a table's copy begun or
	// done; -1 when not copying or unknown). ApplyConnected: an apply of
	// the slot has a session on the target (target.ApplyConnected: its
	// apply sessions, or its start's through its initial copy); a copy
	// without one is stopped.
	Copying        bool    `json:"copying"`
	CopyAgeSeconds float64 `json:"copy_age_seconds"`
	ApplyConnected bool    `json:"apply_connected"`

	target   string // the target's name for people (SlotStatus.targetName)
	copyWhat string // what is copied, for people: "the initial copy", or the tables'
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
		Copying:        st.targetProg.Exists && (st.targetProg.Snapshot == target.SnapshotRunning || len(st.TablesNotCopied) > 0),
		CopyAgeSeconds: st.copyAge, ApplyConnected: st.applyConnected, target: st.targetName,
		copyWhat: "the initial copy"}
	if st.targetProg.Snapshot != target.SnapshotRunning {
		k.copyWhat = "the copy of " + strings.Join(st.TablesNotCopied, ", ")
	}
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

// TargetInTopic reads, as `status --kafka` does (AddKafka), where the
// target tgt of slot stands in the slot's topic on brokers: for `check
// --kafka`. Its CaptureLagSeconds is unknown (-1): it reads nothing of
// the source.
func TargetInTopic(ctx context.Context, tgt *pgx.Conn, slot string, brokers kafkalog.Cluster) (*KafkaStatus, error) {
	st := SlotStatus{Slot: slot, LagSeconds: -1}
	if err := readTarget(ctx, tgt, &st); err != nil {
		return nil, err
	}
	AddKafka(ctx, &st, brokers)
	return st.Kafka, nil
}

// Remade reports whether the topic is not the one the target's offset is
// of: it was deleted and made again since the target read it.
func (k *KafkaStatus) Remade() bool { return k.remade() }

// Place says where a judged target stands against the topic's last
// commit, as status prints it: caught up, or behind by so much WAL, since
// a commit of what age, its progress last advanced when.
func (k *KafkaStatus) Place() string {
	advanced := "unknown"
	if k.ProgressAgeSeconds >= 0 {
		advanced = seconds(k.ProgressAgeSeconds) + " ago"
	}
	switch {
	case k.CaughtUp:
		return "caught up with the topic"
	case k.BehindSeconds >= 0:
		return fmt.Sprintf("behind the topic by %s of WAL, since a commit of %s ago; its progress last advanced %s",
			stats.HumanBytes(k.BehindBytes), seconds(k.BehindSeconds), advanced)
	default:
		return fmt.Sprintf("behind the topic by %s of WAL; its progress last advanced %s", stats.HumanBytes(k.BehindBytes), advanced)
	}
}

// CopyState says where the target's copy stands ("": none under way):
// under way, or stopped (no apply of the slot connected to the target),
// and how long ago its record last changed.
func (k *KafkaStatus) CopyState() string {
	if !k.Copying {
		return ""
	}
	changed := ""
	if k.CopyAgeSeconds >= 0 {
		changed = fmt.Sprintf(", its record last changed %s ago", seconds(k.CopyAgeSeconds))
	}
	if k.ApplyConnected {
		return "under way (the initial copy, or a table's)" + changed
	}
	return "stopped: no repstream apply of the slot is connected to the target" + changed
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
	if c := k.CopyState(); c != "" {
		fmt.Fprintf(w, "target's copy      %s\n", c)
	}
	if k.Offset < 0 {
		fmt.Fprintf(w, "target's offset    none recorded (no apply --kafka has streamed to this target)\n")
		return
	}
	if k.remade() {
		fmt.Fprintf(w, "target's offset    %d, of another topic: it was deleted and made again since this target read it (id %s, now %s)\n", k.Offset, k.RecordedID, k.TopicID)
		return
	}
	fmt.Fprintf(w, "target's offset    %d\n", k.Offset)
	fmt.Fprintf(w, "target             %s\n", k.Place())
}

// check adds the topic's problems to v: the topic unreadable, the
// target's offset gone from it or of a topic deleted since, or a target
// stale for maxInactive (stale).
func (k *KafkaStatus) check(slot string, maxInactive time.Duration, v *Verdict) {
	switch {
	case k.Error != "":
		v.Problem = "the slot's topic cannot be read: " + k.Error
	case k.remade():
		v.Problem = fmt.Sprintf("topic %s was deleted and made again since this target read it: what it had not applied went with the old one; re-seed it with `repstream drop --target-only --slot %s`, then `repstream apply --truncate`", k.Topic, slot)
	case k.Offset >= 0 && k.Offset < k.Start:
		v.Problem = fmt.Sprintf("the target's offset %d of topic %s is gone (the topic starts at %d: retention): re-seed it with `repstream drop --target-only --slot %s`, then `repstream apply --truncate`", k.Offset, k.Topic, k.Start, slot)
	case k.copyStopped(maxInactive):
		v.Problem = fmt.Sprintf("%s of the target %s (slot %q) has not progressed for %s (more than --max-inactive %s), and no repstream apply of the slot is connected to it: "+
			"its apply stopped; start `repstream apply --slot %s` for this target again: it goes on with the copy, keeping the tables it finished",
			k.copyWhat, k.target, slot, seconds(k.CopyAgeSeconds), maxInactive, slot)
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
// (the target's first, or a table's) advances nothing either: not judged
// here, but by copyStopped.
func (k *KafkaStatus) stale(maxInactive time.Duration) bool {
	limit := maxInactive.Seconds()
	return maxInactive > 0 && k.judged() && !k.CaughtUp && !k.Copying &&
		k.ProgressAgeSeconds >= limit && (k.BehindSeconds < 0 || k.BehindSeconds >= limit)
}

// copyStopped reports whether (maxInactive > 0) the target's copy (its
// initial copy, or a table's) has not progressed for maxInactive and no
// apply of the slot is connected to the target: its apply stopped
// during the copy. A copy under way changes its record only when a table
// begins or ends, so a connected apply copying a large table is never
// called stopped.
func (k *KafkaStatus) copyStopped(maxInactive time.Duration) bool {
	return maxInactive > 0 && k.Copying && !k.ApplyConnected && k.CopyAgeSeconds >= maxInactive.Seconds()
}
