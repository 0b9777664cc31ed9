package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// kafkaStatus is what the test reads of `status --kafka --format json`.
type kafkaStatus struct {
	Health     string  `json:"health"`
	Problem    string  `json:"problem"`
	LagSeconds float64 `json:"lag_seconds"`
	Kafka      *struct {
		End                int64   `json:"end_offset"`
		Offset             int64   `json:"target_offset"`
		LagRecords         int64   `json:"lag_records"`
		LastCommit         string  `json:"last_commit"`
		CaughtUp           *bool   `json:"caught_up"`
		BehindBytes        int64   `json:"behind_bytes"`
		BehindSeconds      float64 `json:"behind_seconds"`
		ProgressAgeSeconds float64 `json:"progress_age_seconds"`
		CaptureLagSeconds  float64 `json:"capture_lag_seconds"`
		Copying            bool    `json:"copying"`
		CopyAgeSeconds     float64 `json:"copy_age_seconds"`
		ApplyConnected     bool    `json:"apply_connected"`
		Error              string  `json:"error"`
	} `json:"kafka"`
	exit int    // the exit code
	text string // what --format text prints, and stderr
}

func (s kafkaStatus) caughtUp() bool {
	return s.Kafka != nil && s.Kafka.CaughtUp != nil && *s.Kafka.CaughtUp
}

func (s kafkaStatus) String() string {
	k, _ := json.Marshal(s.Kafka)
	return fmt.Sprintf("exit %d, health %s, lag_seconds %.3f, problem %q, kafka %s\n%s", s.exit, s.Health, s.LagSeconds, s.Problem, k, s.text)
}

// wait is a pgtest.WaitFor condition: ok, or not yet with s as the
// last error.
func (s kafkaStatus) wait(ok bool) (bool, error) {
	if ok {
		return true, nil
	}
	return false, fmt.Errorf("%s", s)
}

// status runs `repstream status --kafka` against db, in JSON and in text.
func (e *kafkaEnv) status(db string, extra ...string) kafkaStatus {
	e.t.Helper()
	args := append([]string{"status", "--target", e.tgtC.DSN(db), "--source", e.src.DSN(e.srcDB), "--slot", e.slot, "--kafka", e.brokers}, extra...)
	var st kafkaStatus
	out, err := exec.Command(testbin.Repstream(e.t), append(args, "--format", "json")...).Output()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		st.exit = ee.ExitCode()
	case err != nil:
		e.t.Fatal(err)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		e.t.Fatalf("status --format json: %v\n%s", err, out)
	}
	text, _ := exec.Command(testbin.Repstream(e.t), args...).CombinedOutput()
	st.text = string(text)
	return st
}

// controlRecords counts the control records (Kafka's transaction markers)
// of the env's topic from offset from to end.
func (e *kafkaEnv) controlRecords(from, end int64) int {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(e.brokers, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.topic(): {0: kgo.NewOffset().At(from)}}), kgo.KeepControlRecords())
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	defer cancel()
	n := 0
	for next := from; next < end; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			e.t.Fatalf("read topic %s from %d to %d: %v", e.topic(), from, end, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = max(next, r.Offset+1)
			if r.Offset < end && r.Attrs.IsControl() {
				n++
			}
		})
	}
	return n
}

// TestKafkaStatusStoppedApply: `status --kafka` judges a target by the
// LSNs, not the offsets. Caught up, its apply stopped, it says so though
// its offset stays below the topic's end by the capture's Kafka
// transaction markers (the capture restarted meanwhile, committing every
// second: --kafka-txn-timeout 3s), and --max-inactive leaves an idle
// caught-up target alone. The source written to then, the
// target is behind the topic's last commit: its lag is the age of the
// oldest commit it lacks, not the capture's (the slot's flush lag, about
// 0: the capture runs on), and --max-inactive flags it (exit 2) though
// the slot stays active through the capture. Its apply started again, it
// is caught up again.
func TestKafkaStatusStoppedApply(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	tgtDB, tgt := e.newTarget()
	capt := e.startCapture("capture", "--kafka-txn-timeout", "3s")
	ap := e.startApply("apply", tgtDB)
	insert := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			e.exec("INSERT INTO ledger (id) VALUES ($1)", i)
		}
	}
	// Its copy done, rows that come through the topic.
	pgtest.WaitFor(t, "the apply's copy done and its offset recorded", 60*time.Second, func() (bool, error) {
		ap.alive()
		var n int
		err := tgt.QueryRow(t.Context(), "SELECT count(*) FROM repstream.progress WHERE slot = $1 AND snapshot = 'done' AND kafka_offset >= 0", e.slot).Scan(&n)
		return n == 1, err
	})
	insert(1, 20)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)

	// Caught up, its apply running: it has read past the markers.
	var st kafkaStatus
	pgtest.WaitFor(t, "status to say the target is caught up", 60*time.Second, func() (bool, error) {
		capt.alive()
		ap.alive()
		st = e.status(tgtDB, "--max-inactive", "1s")
		return st.wait(st.caughtUp() && st.exit == 0 && st.Health == "ok")
	})
	// Its apply stopped caught up, then the capture restarted: the topic
	// gets an epoch marker and Kafka transaction markers the target never
	// read (its offset stays behind the end), and nothing it lacks. Idle
	// for longer than --max-inactive: healthy.
	ap.stop()
	capt.stop()
	capt = e.startCapture("capture again", "--kafka-txn-timeout", "3s")
	pgtest.WaitFor(t, "status to say the stopped target is caught up, markers after it, idle for 2 s", 60*time.Second, func() (bool, error) {
		capt.alive()
		st = e.status(tgtDB, "--max-inactive", "1s")
		if st.Kafka == nil || st.Kafka.Error != "" {
			return st.wait(false)
		}
		return st.wait(st.caughtUp() && st.Kafka.LagRecords > 0 && st.Kafka.ProgressAgeSeconds >= 2 && e.controlRecords(st.Kafka.Offset, st.Kafka.End) > 0)
	})
	if st.exit != 0 || st.Health != "ok" || st.Kafka.BehindBytes != 0 || st.Kafka.BehindSeconds != 0 || !strings.Contains(st.text, "caught up with the topic") {
		t.Fatalf("a caught-up target, stopped: %s", st)
	}
	t.Logf("caught up, stopped, %d transaction markers after its offset: %s", e.controlRecords(st.Kafka.Offset, st.Kafka.End), st)

	// The source written to: behind, and stale after --max-inactive.
	insert(21, 40)
	e.waitCaptured(capt)
	st = e.status(tgtDB, "--max-inactive", "1h")
	if st.exit != 0 || st.caughtUp() || st.Kafka == nil || st.Kafka.BehindBytes <= 0 || !strings.Contains(st.text, "behind the topic by") {
		t.Fatalf("a stopped target, rows written since: want it behind the topic, healthy under --max-inactive 1h: %s", st)
	}
	pgtest.WaitFor(t, "status --max-inactive 2s to flag the stopped target", 60*time.Second, func() (bool, error) {
		capt.alive()
		st = e.status(tgtDB, "--max-inactive", "2s")
		return st.wait(st.exit == 2)
	})
	if st.caughtUp() || st.Kafka.BehindBytes <= 0 || st.Kafka.BehindSeconds < 2 || st.LagSeconds != st.Kafka.BehindSeconds ||
		st.Health != "fail" || !strings.Contains(st.Problem, "has not advanced for") || !strings.Contains(st.Problem, "is its repstream apply running?") {
		t.Fatalf("a stopped target behind for more than --max-inactive: want its lag the age of its oldest missing commit and a failure: %s", st)
	}
	if st.Kafka.CaptureLagSeconds >= st.LagSeconds {
		t.Fatalf("the target's lag %.3f s is not above the capture's %.3f s: %s", st.LagSeconds, st.Kafka.CaptureLagSeconds, st)
	}
	t.Logf("stopped: %s", st)

	// Started again: caught up again, healthy.
	ap = e.startApply("apply again", tgtDB)
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)
	pgtest.WaitFor(t, "status to say the target is caught up again", 30*time.Second, func() (bool, error) {
		ap.alive()
		st = e.status(tgtDB, "--max-inactive", "2s")
		return st.wait(st.caughtUp() && st.exit == 0 && st.Health == "ok")
	})
	ap.stop()
	capt.stop()
}

// TestKafkaStatusStoppedCopy: an apply killed -9 during its initial copy
// leaves a target that has applied nothing (its record says the copy
// runs); `status --kafka --max-inactive` flags it once the copy's record
// has not changed for that long, naming the target and saying how to go
// on, while a copy under way (its apply connected, blocked on one table)
// is not flagged however long it takes. Started again, the apply finishes
// the copy and the target is healthy.
func TestKafkaStatusStoppedCopy(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	e.exec("CREATE TABLE big (id int PRIMARY KEY, v text); INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 1000) g")
	tgtDB, tgt := e.newTarget()
	capt := e.startCapture("capture")

	// The copy of big held up: a session holds the source table locked,
	// so the copy's COPY of it waits.
	lock, err := pgx.Connect(t.Context(), e.src.DSN(e.srcDB))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.Background())
	if _, err := lock.Exec(t.Context(), "BEGIN; LOCK TABLE big IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	ap := e.startApply("apply", tgtDB)
	pgtest.WaitFor(t, "the initial copy under way, big not copied", 60*time.Second, func() (bool, error) {
		ap.alive()
		var n int
		err := tgt.QueryRow(t.Context(), `SELECT CASE WHEN to_regclass('repstream.tables') IS NULL THEN 0 ELSE
			(SELECT count(*) FROM repstream.progress p, repstream.tables b WHERE p.slot = $1 AND p.snapshot = 'running'
			 AND b.slot = $1 AND b.table_name = 'big' AND b.state = 'copying') END`, e.slot).Scan(&n)
		return n == 1, err
	})
	// Under way for longer than --max-inactive: not flagged.
	time.Sleep(2500 * time.Millisecond)
	ap.alive()
	st := e.status(tgtDB, "--max-inactive", "1s")
	if st.exit != 0 || st.Kafka == nil || !st.Kafka.Copying || !st.Kafka.ApplyConnected || st.Kafka.CopyAgeSeconds < 1 ||
		!strings.Contains(st.text, "target's copy      under way") {
		t.Fatalf("a copy under way for more than --max-inactive, its apply connected: want it healthy: %s", st)
	}

	// Killed during the copy: flagged once its record is 1 s old.
	ap.kill()
	if _, err := lock.Exec(t.Context(), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "status --max-inactive 1s to flag the stopped copy", 30*time.Second, func() (bool, error) {
		capt.alive()
		st = e.status(tgtDB, "--max-inactive", "1s")
		return st.wait(st.exit == 2)
	})
	if st.Health != "fail" || !strings.Contains(st.Problem, "the initial copy of the target database \""+tgtDB+"\"") ||
		!strings.Contains(st.Problem, "has not progressed for") || !strings.Contains(st.Problem, "start `repstream apply --slot "+e.slot+"` for this target again") ||
		!strings.Contains(st.text, "target's copy      stopped") {
		t.Fatalf("an apply killed during its initial copy: want status to flag it, naming the target: %s", st)
	}
	t.Logf("stopped copy: %s", st.Problem)

	// Started again: it finishes the copy; healthy.
	ap = e.startApply("apply again", tgtDB)
	waitSame(t, e.s, tgt, append(kafkaTables, tableOrder{"big", "id"}), 60*time.Second, capt, ap)
	pgtest.WaitFor(t, "status to say the target is healthy again", 30*time.Second, func() (bool, error) {
		ap.alive()
		st = e.status(tgtDB, "--max-inactive", "1s")
		return st.wait(st.exit == 0 && st.Health == "ok" && !strings.Contains(st.text, "target's copy"))
	})
	ap.stop()
	capt.stop()
}
