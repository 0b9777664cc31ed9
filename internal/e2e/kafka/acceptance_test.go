package kafka

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// TestKafkaAcceptance is issue 30's check as one run, on three brokers:
// one capture, two applies into two databases with --create-tables, a live
// workload with a 200,000-row transaction; a broker killed and left down,
// the capture and one apply killed -9 and restarted, one target stopped
// while the source writes 300,000 more rows (the slot must not wait for
// it), then started again. Both targets end equal to the source row for
// row, with no insert applied twice.
func TestKafkaAcceptance(t *testing.T) {
	if testing.Short() || os.Getenv("REPSTREAM_KAFKA_FAULTS") == "" {
		t.Skip("starts three brokers: set REPSTREAM_KAFKA_FAULTS=1 to run it")
	}
	k := kafkatest.Start(t, kafkatest.Options{Brokers: 3})
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	e.exec("CREATE TABLE bulk (id int PRIMARY KEY, payload text)")
	tables := append(kafkaTables[:3:3], tableOrder{"bulk", "id"})
	dbA, tgtA := e.newTarget()
	dbB, tgtB := e.newTarget()
	capt := e.startCapture("capture", "--decoding-work-mem", "1MB")
	apA := e.startApply("apply A", dbA)
	apB := e.startApply("apply B", dbB)
	l := startKafkaLoad(t, e.src.DSN(e.srcDB), 5*time.Millisecond, 10)
	l.waitLoad(200, 60*time.Second)
	waitLedger(t, tgtA, l.next.Load()-1, 90*time.Second, capt, apA, apB)
	waitLedger(t, tgtB, l.next.Load()-1, 90*time.Second, capt, apA, apB)

	// The large transaction, then a broker killed and left down.
	e.exec("INSERT INTO bulk SELECT g, repeat(md5(g::text), 2) FROM generate_series(1, 200000) g")
	victim := k.Leader(t, e.topic(), 0)
	if err := k.Kill(victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker %d (the partition's leader) killed and left down", victim)
	l.waitLoad(200, 60*time.Second)
	// check --kafka names the broker down and the replica out of sync
	// (it said "OK brokers: 2 reachable at" all three, and the topic OK).
	// (Once the controller has seen it go: its session times out.)
	var out []byte
	pgtest.WaitForEvery(t, "check --kafka to name the broker down", 60*time.Second, time.Second, func() (bool, error) {
		ck := exec.Command(testbin.Repstream(t), "check", "--kafka", e.brokers, "--source", e.src.DSN(e.srcDB), "--target", e.tgtC.DSN(dbA), "--slot", e.slot)
		out, _ = ck.CombinedOutput()
		return strings.Contains(string(out), "not among them: "+k.Addrs()[victim]) && strings.Contains(string(out), "2 of its 3 replicas in sync"), nil
	})

	// The capture and apply A killed -9 and started again.
	capt.kill()
	apA.kill()
	l.waitLoad(100, 60*time.Second)
	capt = e.startCapture("capture (restarted)", "--decoding-work-mem", "1MB")
	apA = e.startApply("apply A (restarted)", dbA)

	// Target B stopped while the source writes 300,000 more rows: the slot
	// does not wait for it.
	apB.stop()
	e.exec("INSERT INTO bulk SELECT g, 'while B is stopped' FROM generate_series(200001, 500000) g")
	var wal string
	if err := e.s.QueryRow(t.Context(), "SELECT pg_current_wal_lsn()::text").Scan(&wal); err != nil {
		t.Fatal(err)
	}
	pgtest.WaitFor(t, "the slot to confirm "+wal+" with target B stopped", 90*time.Second, func() (bool, error) {
		capt.alive()
		var ok bool
		err := e.s.QueryRow(t.Context(), "SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1", e.slot, wal).Scan(&ok)
		return ok, err
	})
	apB = e.startApply("apply B (restarted)", dbB)
	l.waitLoad(100, 60*time.Second)
	l.halt()
	waitSame(t, e.s, tgtA, tables, 180*time.Second, capt, apA, apB)
	waitSame(t, e.s, tgtB, tables, 180*time.Second, capt, apA, apB)
	capt.stop()
	apA.stop()
	apB.stop()
}
