package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/install"
	"github.com/repstream/repstream/internal/kafkalog"
	"github.com/repstream/repstream/internal/stats"
)

// Status reports the running engine's positions.
func (e *Engine) Status() stats.LiveStatus {
	s := stats.LiveStatus{Slot: e.cfg.Slot, UptimeSeconds: time.Since(e.start).Seconds()}
	if wm := e.watermark(); wm != nil {
		s.AppliedLow = wm.Low().String()
		s.FlushedLSN = wm.Flush().String()
		s.PendingTxns = wm.Pending()
	}
	if snap, ok := e.stats.Snapshot().Component("capture"); ok {
		s.ReceivedLSN = change.LSN(snap.Gauges["received_lsn"]).String()
	}
	if e.stopAt != 0 {
		s.StopAt = e.stopAt.String()
	}
	s.LiveMonitoring = e.liveMonitoring()
	if e.cfg.Role != config.RoleRun {
		s.Role = string(e.cfg.Role)
		e.kafkaStatus(&s)
	}
	return s
}

// ProgressLine summarises two snapshots of the registry in one line.
func ProgressLine(prev, cur stats.Snapshot) string {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		dt = 1
	}
	rate := func(name string, f func(stats.ComponentSnapshot) int64) float64 {
		a, _ := prev.Component(name)
		b, _ := cur.Component(name)
		return float64(f(b)-f(a)) / dt
	}
	items := func(c stats.ComponentSnapshot) int64 { return c.Items }
	var applied, appliedTxns float64
	for _, c := range cur.Components {
		if strings.HasPrefix(c.Name, "apply.") || c.Name == "eager" { // eager apply counts too
			applied += rate(c.Name, items)
			appliedTxns += rate(c.Name, func(c stats.ComponentSnapshot) int64 { return c.Txns })
		}
	}
	q, _ := cur.Component("queue")
	sp, _ := cur.Component("spill")
	capt, _ := cur.Component("capture")
	line := fmt.Sprintf("capture %s changes/s | queue %s in memory, %d txns waiting | spilled %s | apply %s rows/s, %s txns/s",
		human(rate("capture", items)), stats.HumanBytes(q.Gauges["memory_bytes"]), q.Gauges["txns_committed_pending"],
		stats.HumanBytes(sp.Bytes), human(applied), human(appliedTxns))
	// What the slot has sent and not had acknowledged: a run's (its
	// capture acknowledges); an apply --kafka reads a topic and
	// acknowledges nothing to a slot (its received position less a
	// flushed one never set grew without bound).
	flushed, ok := capt.Gauges["flushed_lsn"]
	if !ok {
		return line
	}
	lag := max(capt.Gauges["received_lsn"]-flushed, 0)
	return line + " | unacknowledged " + stats.HumanBytes(lag)
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fK", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fK", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// Drop removes what repstream made for slot on both sides (install.Drop).
func Drop(ctx context.Context, sourceDSN, targetDSN, slot, publication, spillDir string, trust bool, log *slog.Logger) error {
	return install.Drop(ctx, sourceDSN, targetDSN, slot, publication, spillDir, trust, log)
}

// Flushed returns the position acknowledged as applied (0 before Run starts streaming).
func (e *Engine) Flushed() change.LSN {
	wm := e.watermark()
	if wm == nil {
		return 0
	}
	return wm.Flush()
}

// DropKafka takes a replication of the Kafka mode down (`drop --kafka`):
// each target's state first when cfg.Target names one (refused while its
// apply runs), then what the capture made on the source (the slot,
// refused while the capture runs; the event trigger's registration; the
// publication if repstream made it), then the topic, so that the slot's
// name can serve a new replication (a capture refuses a topic with records
// and no slot). The brokers are reached, the principal's right to delete
// the topic checked and the slot looked at before anything is removed.
// The capture processes must be stopped first: one waiting to reconnect
// holds no walsender, and would make the slot and the topic again.
func DropKafka(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	kc, err := KafkaCluster(cfg)
	if err != nil {
		return err
	}
	adm, cl, err := kafkalog.NewAdmin(kc)
	if err != nil {
		return err
	}
	defer cl.Close()
	topic := kafkalog.Topic(cfg.Slot)
	if _, _, err := kafkalog.Offsets(ctx, adm, topic); err == nil {
		// Deleted last: one this principal may not delete would leave
		// the replication half taken down.
		if err := kafkalog.CheckTopicAccess(ctx, adm, topic, "drop", []kadm.ACLOperation{kadm.OpDelete}); err != nil {
			return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
		}
	} else if !errors.Is(err, kafkalog.ErrNoTopic) {
		return fmt.Errorf("kafka %s: %w", cfg.Kafka, err)
	}
	if err := install.CheckSlotIdle(ctx, cfg.Source, cfg.Slot); err != nil {
		return err
	}
	if cfg.Target != "" {
		if err := install.DropTarget(ctx, cfg.Target, cfg.Slot, cfg.SpillDir, cfg.TrustTableOwners, log); err != nil {
			return err
		}
	}
	if err := install.DropCapture(ctx, cfg.Source, cfg.Slot, cfg.Publication, log); err != nil {
		return err
	}
	rs, err := adm.DeleteTopics(ctx, topic)
	if err == nil {
		err = rs.Error()
	}
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		log.Info("no topic to delete", "topic", topic)
	case err != nil:
		return fmt.Errorf("kafka %s: delete topic %s (the rest is dropped: only the topic is left; delete.topic.enable on the brokers?): %w", cfg.Kafka, topic, err)
	default:
		// The brokers delete it in the background: wait until they no
		// longer list it, so that a capture of the same name started
		// next makes it anew.
		for waited := time.Duration(0); ; waited += 200 * time.Millisecond {
			if _, err := kafkalog.TopicID(ctx, adm, topic); errors.Is(err, kafkalog.ErrNoTopic) {
				break
			}
			if waited >= 30*time.Second {
				return fmt.Errorf("kafka %s: topic %s still listed 30 s after its deletion", cfg.Kafka, topic)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		log.Info("deleted the topic", "topic", topic)
	}
	return nil
}
