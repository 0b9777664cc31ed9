package e2e

// Bad input (issue 2): unreachable server, wrong DSN, wrong password, missing
// target table, column type mismatch, constraint violation on the target,
// dropped or foreign slot, non-empty target without --truncate, wal_level not
// logical, missing publication. Each test provokes the condition, checks that
// the error names what failed (server, table and LSN, slot) and says what to
// do, checks that what was applied before a failing transaction is still on
// the target and recorded, then fixes the cause and checks that a new run
// completes with source == target (no loss, no duplicate).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/change"
	"github.com/repstream/repstream/internal/config"
	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/snapshot"
	"github.com/repstream/repstream/internal/target"
	"github.com/repstream/repstream/internal/testbin"
)

// failFast bounds how long a run that must fail may take: a bad input is an
// error, never a hang or a retry loop.
const failFast = 20 * time.Second

// newEnvOn is newEnv on given clusters (e.g. a per-test cluster with special
// settings) instead of the shared ones.
func newEnvOn(t *testing.T, src, tgt *pgcluster.Cluster) *env {
	t.Helper()
	e := &env{t: t, src: src, tgt: tgt}
	e.srcDB = pgtest.NewDB(t, src)
	e.tgtDB = pgtest.NewDB(t, tgt)
	e.connect()
	t.Cleanup(func() {
		ctx := context.Background()
		e.Src.Close(ctx)
		e.Tgt.Close(ctx)
		if c, err := pgx.Connect(ctx, e.src.DSN(e.srcDB)); err == nil {
			_, _ = c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND NOT active")
			c.Close(ctx)
		}
	})
	return e
}

// connect (re)opens the test's own connections to both databases.
func (e *env) connect() {
	e.t.Helper()
	ctx := context.Background()
	var err error
	if e.Src, err = pgx.Connect(ctx, e.src.DSN(e.srcDB)); err != nil {
		e.t.Fatal(err)
	}
	if e.Tgt, err = pgx.Connect(ctx, e.tgt.DSN(e.tgtDB)); err != nil {
		e.t.Fatal(err)
	}
}

// mustFail runs the engine until caught up, expects an error within failFast
// and checks that its message contains every want.
func (e *env) mustFail(cfg config.Config, want ...string) error {
	e.t.Helper()
	start := time.Now()
	_, err := e.tryCatchUp(cfg)
	if err == nil {
		e.t.Fatalf("run succeeded, want an error containing %q", want)
	}
	if d := time.Since(start); d > failFast {
		e.t.Errorf("the run took %s to fail (want < %s): %v", d.Round(time.Millisecond), failFast, err)
	}
	e.t.Logf("error (as the user sees it): %v", err)
	wantInError(e.t, err, want...)
	return err
}

func wantInError(t *testing.T, err error, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
}

// knownBugs reports engine bugs found by a test's assertions (they were
// found by this file and fixed; each assertion now fails the test).
type knownBugs struct{ t *testing.T }

func (b *knownBugs) add(format string, args ...any) {
	b.t.Helper()
	b.t.Errorf("engine bug: "+format, args...)
}

func (b *knownBugs) done() {}

// srcLSN returns the source's current WAL insert position.
func (e *env) srcLSN() change.LSN {
	e.t.Helper()
	var s string
	if err := e.Src.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		e.t.Fatalf("source WAL position: %v", err)
	}
	l, err := change.ParseLSN(s)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func (e *env) progress(slot string) target.Progress {
	e.t.Helper()
	p, err := target.LoadProgress(context.Background(), e.Tgt, slot)
	if err != nil {
		e.t.Fatalf("load progress: %v", err)
	}
	return p
}

// recordedIn reports whether the target's record covers a source transaction
// whose end LSN lies in (after, upto]: the low watermark has passed after, or
// the applied set holds an end LSN in that range.
func recordedIn(p target.Progress, after, upto change.LSN) bool {
	if p.Low > after {
		return true
	}
	for _, l := range p.Applied {
		if l > after && l <= upto {
			return true
		}
	}
	return false
}

// failingTxn describes the source transaction that must fail on the target:
// its end LSN lies in (after, upto].
type failingTxn struct{ after, upto change.LSN }

// checkFailure checks the error of a run that failed on the transaction f:
// it names the table and an LSN of f, and the target does not record f as
// applied.
func (e *env) checkFailure(err error, slot, table string, f failingTxn) {
	e.t.Helper()
	wantInError(e.t, err, table)
	found := false
	for _, m := range lsnPattern.FindAllString(err.Error(), -1) {
		if l, perr := change.ParseLSN(m); perr == nil && l > f.after && l <= f.upto {
			found = true
		}
	}
	if !found {
		e.t.Errorf("error names no LSN of the failing transaction (between %s and %s):\n%v", f.after, f.upto, err)
	}
	p := e.progress(slot)
	if !p.Exists {
		e.t.Fatalf("no progress recorded for slot %q", slot)
	}
	if recordedIn(p, f.after, f.upto) {
		e.t.Errorf("the failed transaction (end in (%s, %s]) is recorded as applied: low %s, applied %v", f.after, f.upto, p.Low, p.Applied)
	}
}

var lsnPattern = regexp.MustCompile(`\b[0-9A-F]{1,8}/[0-9A-F]{1,8}\b`)

func (e *env) count(conn *pgx.Conn, sql string) int64 {
	e.t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// runInBackground runs the engine (not until caught up) and returns its
// result channel and a stop function.
func (e *env) runInBackground(cfg config.Config) (<-chan error, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- engine.New(cfg, testLogger(e.t), nil).Run(ctx) }()
	return done, cancel
}

// waitFor polls cond until it holds or timeout passes (pgtest.WaitFor).
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	pgtest.WaitFor(t, what, timeout, func() (bool, error) { return cond(), nil })
}

// waitSlotReleased waits until no walsender holds the slot: the walsender of
// a run that just returned exits a moment later, and a run started in that
// window fails with "replication slot ... is active".
func (e *env) waitSlotReleased(slot string) {
	e.t.Helper()
	waitFor(e.t, "slot "+slot+" to be released", 10*time.Second, func() bool {
		return e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+slot+"' AND active") == 0
	})
}

// freePort returns a TCP port of 127.0.0.1 nobody listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// silentServer accepts TCP connections and never answers (a server that
// hangs, or a proxy in front of a dead one). It returns its port.
func silentServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-accepted
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}

const acctSchema = `CREATE TABLE acct (id int PRIMARY KEY, n int NOT NULL, note text);`

// TestBadInputUnreachableServer: nothing listens on the source's or the
// target's port, or the server accepts and never answers. The error names the
// side and host:port, and comes at once; with the right address the run
// completes.
func TestBadInputUnreachableServer(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(acctSchema)
	e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 50) g`)
	cfg := e.config("public.acct")
	dead := freePort(t)
	deadDSN := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable", dead, e.srcDB)
	silent := silentServer(t)
	silentDSN := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable connect_timeout=1", silent, e.srcDB)

	for _, tc := range []struct {
		name         string
		source, targ string
		want         []string
	}{
		{"source refused", deadDSN, "", []string{"source", "host=127.0.0.1", "port=" + strconv.Itoa(dead), "connection refused"}},
		{"target refused", "", strings.Replace(deadDSN, e.srcDB, e.tgtDB, 1), []string{"target", "host=127.0.0.1", "port=" + strconv.Itoa(dead), "connection refused"}},
		{"source silent, connect_timeout", silentDSN, "", []string{"source", "host=127.0.0.1", "port=" + strconv.Itoa(silent), "timeout"}},
		{"target silent, connect_timeout", "", strings.Replace(silentDSN, e.srcDB, e.tgtDB, 1), []string{"target", "host=127.0.0.1", "port=" + strconv.Itoa(silent), "timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.source != "" {
				c.Source = tc.source
			}
			if tc.targ != "" {
				c.Target = tc.targ
			}
			e := *e
			e.t = t
			e.mustFail(c, tc.want...)
			if n := e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'"); n != 0 {
				t.Errorf("a failed connection left a replication slot behind")
			}
		})
	}
	// Fixed: the right addresses.
	e.catchUp(cfg)
	e.assertSame("acct", "id")
}

// TestBadInputWrongDSN: malformed connection strings and a database that does
// not exist. The error says which side and what is wrong, and never shows a
// password.
func TestBadInputWrongDSN(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(acctSchema)
	cfg := e.config("public.acct")
	const secret = "s3cretPassw0rd"
	port := strconv.Itoa(e.src.Port())
	for _, tc := range []struct {
		name         string
		source, targ string
		want         []string
	}{
		{"source bad port", "host=127.0.0.1 port=notaport user=postgres password=" + secret, "", []string{"source", "port"}},
		{"target bad port", "", "host=127.0.0.1 port=notaport user=postgres password=" + secret, []string{"target", "invalid connection string"}},
		{"source bad URL", "postgres://postgres:" + secret + "@127.0.0.1:" + port + "/db?sslmode=bogus", "", []string{"source", "sslmode"}},
		{"target bad URL", "", "postgres://postgres:" + secret + "@127.0.0.1:" + port + "/db?sslmode=bogus", []string{"target", "sslmode"}},
		{"source no such database", "host=127.0.0.1 port=" + port + " user=postgres password=" + secret + " dbname=no_such_db sslmode=disable", "",
			[]string{"source", "port=" + port, "no_such_db", "does not exist"}},
		{"target no such database", "", "host=127.0.0.1 port=" + strconv.Itoa(e.tgt.Port()) + " user=postgres password=" + secret + " dbname=no_such_db sslmode=disable",
			[]string{"target", "port=" + strconv.Itoa(e.tgt.Port()), "no_such_db", "does not exist"}},
		{"source empty", " ", "", []string{"source"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.source != "" {
				c.Source = strings.TrimSpace(tc.source)
			}
			if tc.targ != "" {
				c.Target = tc.targ
			}
			e := *e
			e.t = t
			err := e.mustFail(c, tc.want...)
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the password:\n%v", err)
			}
			if strings.Contains(tc.name, "bad port") && !strings.Contains(err.Error(), "invalid port") {
				t.Errorf("the error does not say what is wrong with the DSN (\"invalid port\"): %v", err)
			}
		})
	}
	e.catchUp(cfg)
	e.assertSame("acct", "id")
}

// TestBadInputWrongPassword: a cluster that requires scram-sha-256 for a role
// with a password. A wrong password on either side is a clear error that
// names the server and the user and does not show the password; the right
// one replicates.
func TestBadInputWrongPassword(t *testing.T) {
	t.Parallel() // own clusters
	c := pgtest.Cluster(t, pgcluster.Options{Name: "scram", Fast: true})
	e := newEnvOn(t, c, c)
	e.both(acctSchema)
	e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 20) g`)
	ctx := context.Background()
	const user, right, wrong = "rs_user", "R1ght-pass", "Wr0ng-pass"
	e.srcExec(`SET password_encryption = 'scram-sha-256'; CREATE ROLE ` + user + ` LOGIN SUPERUSER REPLICATION PASSWORD '` + right + `'`)
	hba := filepath.Join(c.DataDir(), "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	rules := fmt.Sprintf("host all %[1]s 127.0.0.1/32 scram-sha-256\nhost replication %[1]s 127.0.0.1/32 scram-sha-256\n", user)
	if err := os.WriteFile(hba, append([]byte(rules), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	e.srcExec(`SELECT pg_reload_conf()`)
	dsn := func(db, pw string) string {
		return fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=disable", c.Port(), user, pw, db)
	}
	waitFor(t, "pg_hba.conf reload", 10*time.Second, func() bool {
		conn, err := pgx.Connect(ctx, dsn(e.srcDB, wrong))
		if err == nil {
			conn.Close(ctx)
			return false
		}
		return true
	})

	cfg := e.config("public.acct")
	cfg.Source, cfg.Target = dsn(e.srcDB, right), dsn(e.tgtDB, right)
	port := "port=" + strconv.Itoa(c.Port())
	t.Run("source", func(t *testing.T) {
		bad := cfg
		bad.Source = dsn(e.srcDB, wrong)
		e := *e
		e.t = t
		err := e.mustFail(bad, "source", "host=127.0.0.1", port, "user="+user, "password authentication failed")
		if strings.Contains(err.Error(), wrong) {
			t.Errorf("the error shows the password:\n%v", err)
		}
	})
	t.Run("target", func(t *testing.T) {
		bad := cfg
		bad.Target = dsn(e.tgtDB, wrong)
		e := *e
		e.t = t
		err := e.mustFail(bad, "target", "host=127.0.0.1", port, "password authentication failed")
		if !strings.Contains(err.Error(), user) {
			t.Errorf("error does not name the user %q:\n%v", user, err)
		}
		if strings.Contains(err.Error(), wrong) {
			t.Errorf("the error shows the password:\n%v", err)
		}
	})
	// Fixed: the right password, for the admin, replication, copy and apply connections.
	e.catchUp(cfg)
	e.srcExec(`UPDATE acct SET n = -n WHERE id % 3 = 0`)
	e.catchUp(cfg)
	e.assertSame("acct", "id")
}

// TestBadInputWalLevel: a source with wal_level=replica is refused with what
// to change; once it is logical, the run completes.
func TestBadInputWalLevel(t *testing.T) {
	t.Parallel() // own clusters
	c := pgtest.Cluster(t, pgcluster.Options{Name: "walreplica", Fast: true, Settings: map[string]string{"wal_level": "replica"}})
	e := newEnvOn(t, c, pgtest.Shared(t, "target"))
	e.both(acctSchema)
	e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 20) g`)
	cfg := e.config("public.acct")
	e.mustFail(cfg, "wal_level=replica", "wal_level=logical", "restart")

	e.srcExec(`ALTER SYSTEM SET wal_level = logical`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.Src.Close(ctx)
	e.Tgt.Close(ctx)
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e.connect()
	e.catchUp(cfg)
	e.srcExec(`INSERT INTO acct VALUES (100, 100)`)
	e.catchUp(cfg)
	e.assertSame("acct", "id")
}

// TestBadInputPublication: without --tables the publication must exist; a
// --tables pattern must match a table.
func TestBadInputPublication(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(acctSchema)
	e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 20) g`)
	cfg := e.config()
	e.mustFail(cfg, fmt.Sprintf("publication %q does not exist", cfg.Slot), "--tables")

	nomatch := e.config("public.nope*")
	e.mustFail(nomatch, `"public.nope*"`, "matches no table")
	if n := e.count(e.Src, "SELECT count(*) FROM pg_publication"); n != 0 {
		t.Errorf("a failed run left %d publication(s)", n)
	}

	// Fixed: either create the publication or give --tables.
	e.srcExec(`CREATE PUBLICATION ` + cfg.Slot + ` FOR TABLE acct`)
	e.catchUp(cfg)
	e.srcExec(`DELETE FROM acct WHERE id < 5`)
	e.catchUp(cfg)
	e.assertSame("acct", "id")
}

// TestBadInputNonEmptyTarget: the initial copy refuses a non-empty target
// table without --truncate, before creating the slot and without touching the
// target's rows; with --truncate it replaces them.
func TestBadInputNonEmptyTarget(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(acctSchema)
	e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 30) g`)
	e.tgtExec(`INSERT INTO acct VALUES (1, -1, 'stale'), (999, 999, 'stale')`)
	cfg := e.config("public.acct")
	err := e.mustFail(cfg, "public.acct", "--truncate")
	if !errors.Is(err, snapshot.ErrTargetNotEmpty) {
		t.Errorf("error does not wrap snapshot.ErrTargetNotEmpty: %v", err)
	}
	if n := e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'"); n != 0 {
		t.Errorf("the refused run created the replication slot")
	}
	if n := e.count(e.Tgt, "SELECT count(*) FROM acct WHERE note = 'stale'"); n != 2 {
		t.Errorf("the refused run changed the target's rows: %d stale rows left, want 2", n)
	}

	cfg.Truncate = true
	e.catchUp(cfg)
	e.srcExec(`UPDATE acct SET note = 'x' WHERE id = 1`)
	e.catchUp(cfg)
	e.assertSame("acct", "id")

	t.Run("publication ownership", func(t *testing.T) {
		// The refused run created the publication; the record must say so,
		// or `repstream drop` leaves it behind.
		var created bool
		if err := e.Tgt.QueryRow(context.Background(), "SELECT created_publication FROM repstream.progress WHERE slot = $1", cfg.Slot).Scan(&created); err != nil {
			t.Fatal(err)
		}
		if !created {
			t.Errorf("a run that created the publication and then failed (non-empty target) lost that fact: " +
				"`repstream drop` would leave the publication behind")
		}
	})
}

// TestBadInputMissingTargetTable: a published table that is missing on the
// target is reported before anything is created; a table dropped on the
// target while streaming fails the run with the table and the LSN, keeping
// what was applied before.
func TestBadInputMissingTargetTable(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	t.Run("at start", func(t *testing.T) {
		e := newEnv(t)
		e.both(`CREATE TABLE a (id int PRIMARY KEY, v text)`)
		e.srcExec(`CREATE TABLE b (id int PRIMARY KEY, v text)`)
		e.srcExec(`INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 10) g; INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 10) g`)
		cfg := e.config("public.*")
		e.mustFail(cfg, "public.b", "missing on the target", "--create-tables")
		if n := e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'"); n != 0 {
			t.Errorf("the refused run created the replication slot")
		}
		// Nothing else is left behind either: no publication, no
		// schema-change trigger on the source, no state on the target.
		if n := e.count(e.Src, "SELECT count(*) FROM pg_publication"); n != 0 {
			t.Errorf("the refused run left %d publication(s) on the source", n)
		}
		if n := e.count(e.Src, "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'repstream%'"); n != 0 {
			t.Errorf("the refused run left %d event trigger(s) on the source", n)
		}
		if n := e.count(e.Tgt, "SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream'"); n != 0 {
			t.Errorf("the refused run left the state schema on the target")
		}
		// Fixed: create it (by hand here; --create-tables is covered elsewhere).
		e.tgtExec(`CREATE TABLE b (id int PRIMARY KEY, v text)`)
		e.catchUp(cfg)
		e.assertSame("a", "id")
		e.assertSame("b", "id")
	})

	t.Run("dropped while streaming", func(t *testing.T) {
		e := newEnv(t)
		e.both(`CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text)`)
		e.srcExec(`INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 10) g`)
		cfg := e.config("public.*")
		cfg.ApplyParallelism = 1
		cfg.GroupMaxTxns = 1
		e.catchUp(cfg)
		e.waitSlotReleased(cfg.Slot)

		done, stop := e.runInBackground(cfg)
		defer stop()
		e.srcExec(`INSERT INTO a VALUES (11, 'streamed')`)
		waitFor(t, "row 11 on the target", 15*time.Second, func() bool {
			return e.count(e.Tgt, "SELECT count(*) FROM a WHERE id = 11") == 1
		})
		e.tgtExec(`DROP TABLE b`)
		after := e.srcLSN()
		e.srcExec(`INSERT INTO b VALUES (1, 'lost?')`)
		upto := e.srcLSN()
		e.srcExec(`INSERT INTO a VALUES (12, 'after')`)
		var err error
		select {
		case err = <-done:
		case <-time.After(failFast):
			t.Fatalf("the engine did not fail within %s after its target table was dropped", failFast)
		}
		if err == nil {
			t.Fatal("the engine stopped without an error")
		}
		t.Logf("error (as the user sees it): %v", err)
		e.checkFailure(err, cfg.Slot, "public.b", failingTxn{after, upto})
		if !strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "does not exist") && !strings.Contains(err.Error(), "which the target lacks") {
			t.Errorf("error does not say the table is missing:\n%v", err)
		}
		if n := e.count(e.Tgt, "SELECT count(*) FROM a WHERE id = 11"); n != 1 {
			t.Errorf("the row applied before the failure is gone from the target")
		}

		// The next run refuses at once, naming the table.
		e.mustFail(cfg, "public.b", "missing on the target")
		// Fixed: recreate it (it was empty when dropped).
		e.tgtExec(`CREATE TABLE b (id int PRIMARY KEY, v text)`)
		e.catchUp(cfg)
		e.assertSame("a", "id")
		e.assertSame("b", "id")
	})
}

// TestBadInputColumnTypeMismatch: a target column whose type cannot take the
// source's values fails the initial copy (naming the table; the next run
// copies it again) or the apply (naming the table and the LSN, keeping what was
// applied before); after the type is fixed the run completes.
func TestBadInputColumnTypeMismatch(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	t.Run("initial copy", func(t *testing.T) {
		e := newEnv(t)
		e.srcExec(`CREATE TABLE m (id int PRIMARY KEY, v bigint)`)
		e.tgtExec(`CREATE TABLE m (id int PRIMARY KEY, v int)`)
		// The bad value comes first and many rows follow: the target fails
		// while the source is still sending.
		e.srcExec(`INSERT INTO m SELECT g, CASE WHEN g = 1 THEN 99999999999 ELSE g END FROM generate_series(1, 50000) g`)
		cfg := e.config("public.m")
		bugs := &knownBugs{t: t}
		err := e.mustFail(cfg, "public.m")
		switch {
		case strings.Contains(err.Error(), "target copy ended"):
			bugs.add("a target-side COPY failure in the initial copy is reported as the source read error it causes " +
				"(\"read from source: target copy ended\") instead of the target's error: internal/snapshot/snapshot.go copyTable " +
				"checks the source goroutine's error (the pipe closed by the failed target COPY) before the target's")
		case !strings.Contains(err.Error(), "out of range for type integer"):
			t.Errorf("error does not give the cause (out of range for type integer):\n%v", err)
		case !strings.Contains(err.Error(), "column"):
			bugs.add("a type error in the initial copy does not name the column (PgError.Where has it: \"COPY m, line 1, column v\"): %v", err)
		}

		e.tgtExec(`ALTER TABLE m ALTER v TYPE bigint`)
		// The interrupted copy is not taken as complete: the next run
		// copies the table again (from a new snapshot) and goes on.
		e.catchUp(cfg)
		e.srcExec(`UPDATE m SET v = v * 1000 WHERE id < 10`)
		e.catchUp(cfg)
		e.assertSame("m", "id")
		bugs.done()
	})

	t.Run("preflight", func(t *testing.T) {
		// A column of another kind of type is reported before anything
		// changes; a text column on the target takes anything.
		e := newEnv(t)
		e.srcExec(`CREATE TABLE m (id int PRIMARY KEY, v text, n int)`)
		e.tgtExec(`CREATE TABLE m (id int PRIMARY KEY, v int, n text)`)
		cfg := e.config("public.m")
		err := e.mustFail(cfg, `public.m: column "v" is text on the source but integer on the target`)
		if strings.Contains(err.Error(), `column "n"`) {
			t.Errorf("an integer column into a text column was reported: %v", err)
		}
	})

	t.Run("apply", func(t *testing.T) {
		e := newEnv(t)
		e.srcExec(`CREATE TABLE m (id int PRIMARY KEY, v bigint)`)
		e.tgtExec(`CREATE TABLE m (id int PRIMARY KEY, v int)`)
		e.srcExec(`INSERT INTO m SELECT g, g FROM generate_series(1, 10) g`)
		cfg := e.config("public.m")
		cfg.ApplyParallelism, cfg.GroupMaxTxns = 1, 1
		e.catchUp(cfg)

		before1 := e.srcLSN()
		e.srcExec(`INSERT INTO m VALUES (11, 11)`)
		e.srcExec(`UPDATE m SET v = -v WHERE id <= 3`)
		after := e.srcLSN()
		e.srcExec(`INSERT INTO m VALUES (12, 12), (13, 99999999999), (14, 14)`)
		upto := e.srcLSN()
		e.srcExec(`INSERT INTO m VALUES (15, 15)`)

		err := e.mustFail(cfg, "out of range for type integer", "99999999999")
		e.checkFailure(err, cfg.Slot, "public.m", failingTxn{after, upto})
		bugs := &knownBugs{t: t}
		if !strings.Contains(err.Error(), "column") {
			bugs.add("a type error in a COPY apply does not name the column (PgError.Where has it: \"COPY m, line 2, column v\"; " +
				"internal/target/writer.go copyOut uses it only for the line number)")
		}
		p := e.progress(cfg.Slot)
		if !recordedIn(p, before1, after) {
			t.Errorf("the transactions applied before the failure are not recorded: low %s, applied %v (want an end LSN in (%s, %s])", p.Low, p.Applied, before1, after)
		}
		if n := e.count(e.Tgt, "SELECT count(*) FROM m WHERE id = 11 OR (id <= 3 AND v < 0)"); n != 4 {
			t.Errorf("the transactions applied before the failure are not all on the target (%d of 4 rows)", n)
		}
		if n := e.count(e.Tgt, "SELECT count(*) FROM m WHERE id >= 12"); n != 0 {
			t.Errorf("%d rows of the failed or later transactions are on the target", n)
		}

		e.tgtExec(`ALTER TABLE m ALTER v TYPE bigint`)
		e.catchUp(cfg)
		e.assertSame("m", "id")
		bugs.done()
	})
}

// TestBadInputConstraintViolation: a constraint that exists only on the
// target rejects a change. The error names the table and the LSN; the
// transactions before it stay applied and recorded; after the constraint is
// dropped the run completes with no loss and no duplicate — also with
// parallel workers, where later independent transactions may already be
// committed.
func TestBadInputConstraintViolation(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	const check = "ALTER TABLE acct ADD CONSTRAINT only_on_target CHECK (n < 1000)"
	const unique = "ALTER TABLE acct ADD CONSTRAINT only_on_target UNIQUE (note)"
	const drop = "ALTER TABLE acct DROP CONSTRAINT only_on_target"
	for _, tc := range []struct {
		name        string
		parallelism int
		order       config.CommitOrder
		setup, fix  string // target SQL: after the initial copy, and to repair
		bad         string // the source transaction the target rejects
		want        []string
		ordered     bool // transactions before the bad one are committed when it fails
	}{
		{"check insert p1", 1, "full", check, drop, "INSERT INTO acct VALUES (100, 5000), (101, 1)",
			[]string{"insert", "violates check constraint \"only_on_target\""}, true},
		{"check update p4-full", 4, "full", check, drop, "UPDATE acct SET n = 5000 WHERE id = 7",
			[]string{"update", "violates check constraint \"only_on_target\""}, true},
		{"unique insert p4-dependent", 4, "dependent", unique, drop, "INSERT INTO acct VALUES (100, 1, 'dup'), (101, 2, 'dup')",
			[]string{"insert", "duplicate key value violates unique constraint \"only_on_target\""}, false},
		// A row that exists only on the target (written there by someone else).
		{"key conflict p4-full", 4, "full", "INSERT INTO acct VALUES (100, 0, 'target only')", "DELETE FROM acct WHERE id = 100",
			"INSERT INTO acct VALUES (100, 5000)",
			[]string{"insert", "duplicate key value violates unique constraint \"acct_pkey\""}, true},
		// The same row, inserted and deleted in one transaction on the
		// source: --collapse (the default) folded that into nothing, and
		// the target kept its row in silence.
		{"key conflict folded p1", 1, "full", "INSERT INTO acct VALUES (100, 0, 'target only')", "DELETE FROM acct WHERE id = 100",
			"INSERT INTO acct VALUES (100, 5000); DELETE FROM acct WHERE id = 100",
			[]string{"insert", "duplicate key value violates unique constraint \"acct_pkey\""}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.both(acctSchema)
			e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 10) g`)
			cfg := e.config("public.acct")
			cfg.ApplyParallelism, cfg.CommitOrder, cfg.GroupMaxTxns = tc.parallelism, tc.order, 1
			e.catchUp(cfg)
			e.tgtExec(tc.setup)

			before1 := e.srcLSN()
			e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(11, 20) g`)
			e.srcExec(`UPDATE acct SET n = n + 1 WHERE id <= 5`)
			after := e.srcLSN()
			e.srcExec(tc.bad)
			upto := e.srcLSN()
			for i := 0; i < 5; i++ { // later, independent transactions
				e.srcExec(fmt.Sprintf(`INSERT INTO acct VALUES (%d, 1)`, 200+i))
			}

			err := e.mustFail(cfg, tc.want...)
			e.checkFailure(err, cfg.Slot, "public.acct", failingTxn{after, upto})
			if tc.ordered {
				p := e.progress(cfg.Slot)
				if !recordedIn(p, before1, after) {
					t.Errorf("the transactions applied before the failure are not recorded: low %s, applied %v (want an end LSN in (%s, %s])", p.Low, p.Applied, before1, after)
				}
				if n := e.count(e.Tgt, "SELECT count(*) FROM acct WHERE id BETWEEN 11 AND 20 OR (id <= 5 AND n = id + 1)"); n != 15 {
					t.Errorf("the transactions applied before the failure are not all on the target (%d of 15 rows)", n)
				}
			}
			if n := e.count(e.Tgt, "SELECT count(*) FROM acct WHERE id = 101 OR n = 5000 OR note = 'dup'"); n != 0 {
				t.Errorf("%d rows of the failed transaction are on the target", n)
			}

			e.tgtExec(tc.fix)
			e.catchUp(cfg)
			e.assertSame("acct", "id")
		})
	}
}

// TestBadInputSlot: a slot dropped behind repstream's back, a slot of another
// plugin, a slot of another database, and a slot in use: each is an error
// naming the slot and saying what to do.
func TestBadInputSlot(t *testing.T) {
	t.Parallel() // own databases and slots, mostly waiting: overlaps the other parallel tests, after the rest
	ctx := context.Background()
	t.Run("dropped", func(t *testing.T) {
		e := newEnv(t)
		e.both(acctSchema)
		e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 20) g`)
		cfg := e.config("public.acct")
		e.catchUp(cfg)
		e.waitSlotReleased(cfg.Slot)
		e.srcExec(`SELECT pg_drop_replication_slot($1)`, cfg.Slot)
		e.srcExec(`INSERT INTO acct VALUES (21, 21)`) // not captured by any slot: lost unless resynchronised
		e.mustFail(cfg, fmt.Sprintf("slot %q does not exist", cfg.Slot), "repstream drop --slot "+cfg.Slot)
		if n := e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"'"); n != 0 {
			t.Errorf("the refused run recreated the slot (silently skipping what happened in between)")
		}
		// Fixed as the message says: drop, then start again (the target has rows: --truncate).
		if err := engine.Drop(ctx, cfg.Source, cfg.Target, cfg.Slot, cfg.Slot, cfg.SpillDir, false, testLogger(t)); err != nil {
			t.Fatalf("drop: %v", err)
		}
		cfg.Truncate = true
		e.catchUp(cfg)
		e.srcExec(`UPDATE acct SET n = 0 WHERE id > 15`)
		e.catchUp(cfg)
		e.assertSame("acct", "id")
	})

	t.Run("other plugin", func(t *testing.T) {
		e := newEnv(t)
		e.both(acctSchema)
		cfg := e.config("public.acct")
		e.srcExec(`SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, cfg.Slot)
		e.mustFail(cfg, fmt.Sprintf("slot %q", cfg.Slot), "test_decoding", "pgoutput")
		e.srcExec(`SELECT pg_drop_replication_slot($1)`, cfg.Slot)
		e.srcExec(`INSERT INTO acct VALUES (1, 1)`)
		e.catchUp(cfg)
		e.assertSame("acct", "id")
	})

	t.Run("other database", func(t *testing.T) {
		e := newEnv(t)
		e.both(acctSchema)
		cfg := e.config("public.acct")
		other := pgtest.NewDB(t, e.src)
		if err := e.src.Exec(ctx, other, fmt.Sprintf(`SELECT pg_create_logical_replication_slot('%s', 'pgoutput')`, cfg.Slot)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.src.Exec(ctx, other, fmt.Sprintf(`SELECT pg_drop_replication_slot('%s')`, cfg.Slot)) })
		e.mustFail(cfg, fmt.Sprintf("slot %q", cfg.Slot), other)
	})

	t.Run("in use", func(t *testing.T) {
		e := newEnv(t)
		e.both(acctSchema)
		e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 20) g`)
		cfg := e.config("public.acct")
		e.catchUp(cfg)
		e.waitSlotReleased(cfg.Slot)
		done, stop := e.runInBackground(cfg)
		waitFor(t, "the first engine to stream", 15*time.Second, func() bool {
			return e.count(e.Src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '"+cfg.Slot+"' AND active") == 1
		})
		second := cfg
		second.SpillDir += "-second" // the first holds its own (TestSpillDirShared)
		e.mustFail(second, fmt.Sprintf("slot %q", cfg.Slot), "active")
		// The first engine is unaffected.
		e.srcExec(`INSERT INTO acct VALUES (21, 21)`)
		waitFor(t, "row 21 on the target", 15*time.Second, func() bool {
			return e.count(e.Tgt, "SELECT count(*) FROM acct WHERE id = 21") == 1
		})
		stop()
		if err := <-done; err != nil {
			t.Fatalf("first engine: %v", err)
		}
		e.catchUp(cfg)
		e.assertSame("acct", "id")
	})
}

// TestBadInputCLI: through the built binary, a failure exits non-zero with
// the message on stderr, and a successful `run --until-caught-up` exits 0.
func TestBadInputCLI(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	bin := testbin.Repstream(t)
	e := newEnv(t)
	e.srcExec(acctSchema)
	e.srcExec(`INSERT INTO acct SELECT g, g FROM generate_series(1, 20) g`)
	cfg := e.config("public.acct")
	cfg.StatusInterval = time.Second
	run := func(extra ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args(cfg, extra...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("run %s: %v\n%s", bin, err, stderr.String())
		}
		return code, stderr.String()
	}

	code, stderr := run("--until-caught-up")
	if code == 0 {
		t.Fatalf("exit code 0 with the target table missing; stderr:\n%s", stderr)
	}
	last := lastLine(stderr)
	if !strings.HasPrefix(last, "repstream: ") || !strings.Contains(last, "public.acct") || !strings.Contains(last, "--create-tables") {
		t.Errorf("stderr's last line is not the error naming the table and the fix: %q", last)
	}

	code, stderr = run("--until-caught-up", "--create-tables")
	if code != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr)
	}
	e.assertSame("acct", "id")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestBadInputKeylessTable: a table without a primary key or replica
// identity that repstream would publish is refused before anything is
// left behind — once published, the source would refuse its UPDATEs and
// DELETEs; after REPLICA IDENTITY FULL it replicates.
func TestBadInputKeylessTable(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE keyed (id int PRIMARY KEY); CREATE TABLE logs (at timestamptz, line text)`)
	e.srcExec(`INSERT INTO logs VALUES (now(), 'one'), (now(), 'two')`)
	cfg := e.config("public.*")
	e.mustFail(cfg, "public.logs", "no primary key", "REPLICA IDENTITY FULL")
	if n := e.count(e.Src, "SELECT count(*) FROM pg_publication"); n != 0 {
		t.Errorf("the refused run left %d publication(s) on the source", n)
	}
	e.srcExec(`UPDATE logs SET line = line || '!'`) // the source still takes updates
	e.srcExec(`ALTER TABLE logs REPLICA IDENTITY FULL`)
	e.catchUp(cfg)
	e.srcExec(`UPDATE logs SET line = 'changed' WHERE line = 'one!'`)
	e.catchUp(cfg)
	e.assertSame("logs", "line")
}

// TestBadInputSlotOfAnotherDatabase: a first start whose --slot names a
// slot of another database of the source's cluster (two databases, both
// with the default name). The start made the publication, the event
// trigger and the state on both sides, then failed at the slot and,
// taking the start for a resumed one, left them all (and `drop` failed the
// same way). Now it stops first, having made nothing.
func TestBadInputSlotOfAnotherDatabase(t *testing.T) {
	t.Parallel() // own databases and slot; no server restarts
	e := newEnv(t)
	e.both(`CREATE TABLE t (id int PRIMARY KEY)`)
	cfg := e.config("public.t")
	e.catchUp(cfg)

	other := envOn(t, e.src, pgtest.NewDB(t, e.src), e.tgt, pgtest.NewDB(t, e.tgt))
	other.both(`CREATE TABLE t (id int PRIMARY KEY)`)
	cfg2 := other.config("public.t")
	cfg2.Slot = cfg.Slot // the other database's
	other.mustFail(cfg2, "replication slot \""+cfg.Slot+"\" belongs to database", "use another --slot")
	for side, c := range map[string]*pgx.Conn{"source": other.Src, "target": other.Tgt} {
		if n := other.count(c, `SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'repstream') + (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_event_trigger)`); n != 0 {
			t.Errorf("%s: %d objects (schema repstream, publications, event triggers) left by the failed start", side, n)
		}
	}
}
