package kafka

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/repstream/repstream/internal/kafkatest"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/testbin"
)

// check runs `repstream check --kafka` against db with the source DSN
// srcDSN, and returns its output and exit code.
func (e *kafkaEnv) check(srcDSN, db string) (string, int) {
	e.t.Helper()
	out, err := exec.Command(testbin.Repstream(e.t), "check", "--source", srcDSN, "--target", e.tgtC.DSN(db),
		"--slot", e.slot, "--kafka", e.brokers, "--create-tables").CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		e.t.Fatal(err)
	}
	return string(out), 0
}

// TestKafkaCheckApplySourceRole: `check --kafka` run with an apply's
// source role checks what the apply's start checks: that the role can
// read what an apply reads in the schema repstream on the source (the
// public keys that check the topic's schema-change messages among it). A
// role without the grants is a FAIL naming what it lacks and the GRANTs,
// the ones the apply's start names; granted them, the item is OK.
func TestKafkaCheckApplySourceRole(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	capt := e.startCapture("capture")
	pgtest.WaitFor(t, "the capture's public key on the source", 30*time.Second, func() (bool, error) {
		capt.alive()
		var n int
		err := e.s.QueryRow(t.Context(), "SELECT CASE WHEN to_regclass('repstream.ddl_pubkey') IS NULL THEN 0 ELSE (SELECT count(*) FROM repstream.ddl_pubkey) END").Scan(&n)
		return n > 0, err
	})
	role := e.sourceRole("checksrc_")
	roleDSN := strings.Replace(e.src.DSN(e.srcDB), "user="+pgcluster.Superuser+" ", "user="+role+" ", 1)
	db, _ := e.newTarget()

	out, code := e.check(roleDSN, db)
	line := lineWith(out, "apply's reads in schema repstream")
	if code == 0 || !strings.HasPrefix(line, "FAIL") || !strings.Contains(line, "lacks USAGE on schema repstream, SELECT on ") ||
		!strings.Contains(line, "repstream.ddl_pubkey") || strings.Contains(line, "ddl_key") {
		t.Fatalf("check --kafka with a source role that cannot read the public keys: exit %d, want a FAIL naming the grants:\n%s", code, out)
	}
	_, grants, _ := strings.Cut(line, "(fix: ")
	grants = strings.TrimSuffix(grants, ")")
	if !strings.HasPrefix(grants, "GRANT USAGE ON SCHEMA repstream TO \""+role+"\"; GRANT SELECT ON ") {
		t.Fatalf("check's fix is not the GRANTs: %q\n%s", grants, out)
	}
	t.Logf("%s", line)

	// The apply's start names the same GRANTs.
	args := e.applyArgs(db)
	for i, a := range args {
		if a == e.src.DSN(e.srcDB) {
			args[i] = roleDSN
		}
	}
	p := startProc(t, "apply (source role without grants)", args...)
	if err := exitOf(t, p, 30*time.Second); err == nil || !strings.Contains(p.out.Tail(20), grants) {
		t.Fatalf("the apply's start (exit %v) does not name check's GRANTs %q:\n%s", err, grants, p.out.Tail(20))
	}

	e.exec(grants) // as check says
	out, _ = e.check(roleDSN, db)
	if line := lineWith(out, "apply's reads in schema repstream"); !strings.HasPrefix(line, "OK") {
		t.Fatalf("check --kafka once the source role was granted what it said: want OK:\n%s", out)
	}
	capt.stop()
}

// TestKafkaCheckTargetPlace: `check --kafka` says where the target
// stands in the topic as `status --kafka` does, by LSNs, not by offsets:
// caught up, its apply running; caught up, its apply stopped, though the
// restarted capture's epoch marker and Kafka transaction markers put its
// offset below the topic's end; then, rows written since, behind the
// topic by so much WAL.
func TestKafkaCheckTargetPlace(t *testing.T) {
	t.Parallel() // see doc.go
	k := kafkatest.Shared(t)
	e := newKafkaEnv(t, strings.Join(k.Addrs(), ","))
	db, tgt := e.newTarget()
	capt := e.startCapture("capture", "--kafka-txn-timeout", "3s")
	ap := e.startApply("apply", db)
	for i := 1; i <= 20; i++ {
		e.exec("INSERT INTO ledger (id) VALUES ($1)", i)
	}
	waitSame(t, e.s, tgt, kafkaTables, 60*time.Second, capt, ap)

	// placeLine runs check and returns its line of the target's offset,
	// the offsets it names, and its exit code.
	placeLine := func() (line string, off, end int64, code int) {
		t.Helper()
		var out string
		out, code = e.check(e.src.DSN(e.srcDB), db)
		if strings.Contains(out, "records behind") {
			t.Fatalf("check judges the target by offsets:\n%s", out)
		}
		line = lineWith(out, "target's offset")
		_, place, _ := strings.Cut(line, "target's offset: ")
		var start int64
		_, _ = fmt.Sscanf(place, "%d (the topic holds %d to %d)", &off, &start, &end)
		return line, off, end, code
	}
	var line string
	pgtest.WaitFor(t, "check to say the target is caught up", 60*time.Second, func() (bool, error) {
		capt.alive()
		ap.alive()
		l, _, _, code := placeLine()
		line = l
		return code == 0 && strings.HasPrefix(l, "OK") && strings.HasSuffix(l, ": caught up with the topic"), nil
	})
	t.Logf("%s", line)

	// Its apply stopped caught up, then the capture restarted: the topic
	// gets an epoch marker and Kafka transaction markers after the
	// target's offset, and nothing it lacks: still caught up.
	ap.stop()
	capt.stop()
	capt = e.startCapture("capture again", "--kafka-txn-timeout", "3s")
	pgtest.WaitFor(t, "check to say the stopped target is caught up, records after its offset", 60*time.Second, func() (bool, error) {
		capt.alive()
		l, off, end, code := placeLine()
		line = l
		if code == 0 && strings.HasPrefix(l, "OK") && strings.HasSuffix(l, ": caught up with the topic") && end > off {
			return true, nil
		}
		return false, fmt.Errorf("%s", l)
	})
	t.Logf("%s", line)

	// Rows written and in the topic: behind.
	for i := 21; i <= 40; i++ {
		e.exec("INSERT INTO ledger (id) VALUES ($1)", i)
	}
	e.waitCaptured(capt)
	line, _, _, _ = placeLine()
	if !strings.Contains(line, ": behind the topic by ") || !strings.Contains(line, "of WAL, since a commit of ") {
		t.Fatalf("check --kafka, the target's apply stopped and rows written since: want it behind the topic by WAL: %s", line)
	}
	t.Logf("%s", line)
	capt.stop()
}
