package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/syncbuf"
	"github.com/repstream/repstream/internal/testbin"
)

// pwCluster is a cluster where role pwRole must log in over TCP with its
// password (scram-sha-256); the superuser keeps trust for the test's own
// connections.
const (
	pwRole     = "pwapp"
	pwPassword = "Pw-s3cret-q7Zx9" // distinctive: searched for in every output
)

// childEnv is this process's environment without PG* and REPSTREAM_*
// variables, with HOME an empty directory (no ~/.pgpass), plus extra.
func childEnv(t *testing.T, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "REPSTREAM_") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HOME="+t.TempDir()), extra...)
}

// TestPasswordsOffTheCommandLine (issue 27 item 7): with the password only in
// a passfile (the passfile key, PGPASSFILE), PGPASSWORD, REPSTREAM_SOURCE /
// REPSTREAM_TARGET or the YAML config, run (its snapshot, replication,
// apply and --http probe connections) and check connect to a server that
// requires it; the process's command line, readable by every user through
// /proc, never holds it, and neither does anything it prints, a failed
// login included.
func TestPasswordsOffTheCommandLine(t *testing.T) {
	t.Parallel() // own clusters
	bin := testbin.Repstream(t)
	c := pgtest.Cluster(t, pgcluster.Options{Name: "pw", Fast: true,
		HBA: []string{"host all " + pwRole + " 127.0.0.1/32 scram-sha-256"}})
	ctx := t.Context()
	if err := c.Exec(ctx, "postgres", "SET password_encryption = 'scram-sha-256'; CREATE ROLE "+pwRole+" SUPERUSER LOGIN PASSWORD '"+pwPassword+"'"); err != nil {
		t.Fatal(err)
	}
	srcDB := pgtest.NewDB(t, c)
	if err := c.Exec(ctx, srcDB, `CREATE TABLE pw (id int PRIMARY KEY, v text); INSERT INTO pw SELECT g, md5(g::text) FROM generate_series(1, 100) g`); err != nil {
		t.Fatal(err)
	}
	dsn := func(db string) string { // no password
		return fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s sslmode=disable", c.Port(), db, pwRole)
	}
	withPassword := func(db string) string {
		u := url.URL{Scheme: "postgres", User: url.UserPassword(pwRole, pwPassword),
			Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())), Path: "/" + db, RawQuery: "sslmode=disable"}
		return u.String()
	}
	// The server does require the password.
	if conn, err := pgx.Connect(ctx, dsn(srcDB)+" passfile=/nonexistent"); err == nil {
		conn.Close(ctx)
		t.Fatal("the role logs in without its password: the test would prove nothing")
	}
	passfile := filepath.Join(t.TempDir(), "pgpass")
	if err := os.WriteFile(passfile, []byte(fmt.Sprintf("127.0.0.1:%d:*:%s:%s\n", c.Port(), pwRole, pwPassword)), 0o600); err != nil {
		t.Fatal(err)
	}

	for i, tc := range []struct {
		name string
		env  []string
		argv func(src, tgt string) []string // src, tgt: the databases
	}{
		{name: "passfile key", argv: func(src, tgt string) []string {
			return []string{"--source", dsn(src) + " passfile=" + passfile, "--target", dsn(tgt) + " passfile=" + passfile}
		}},
		{name: "PGPASSFILE", env: []string{"PGPASSFILE=" + passfile}, argv: func(src, tgt string) []string {
			return []string{"--source", dsn(src), "--target", dsn(tgt)}
		}},
		{name: "REPSTREAM_SOURCE and REPSTREAM_TARGET", argv: nil},
	} {
		streamedID := 1001 + i // one row inserted while each run streams
		t.Run(tc.name, func(t *testing.T) {
			tgtDB := pgtest.NewDB(t, c)
			slot := "pw_" + strings.TrimPrefix(tgtDB, "t_")
			if len(slot) > 63 {
				slot = slot[:63]
			}
			env := tc.env
			var conn []string
			if tc.argv != nil {
				conn = tc.argv(srcDB, tgtDB)
			} else {
				env = []string{"REPSTREAM_SOURCE=" + withPassword(srcDB), "REPSTREAM_TARGET=" + withPassword(tgtDB)}
			}
			httpAddr := freeAddr(t)
			argv := append([]string{"run"}, conn...)
			argv = append(argv, "--slot", slot, "--tables", "public.pw", "--create-tables",
				"--spill-dir", filepath.Join(t.TempDir(), "spill"), "--http", httpAddr, "--log-level", "debug")
			cmd := exec.Command(bin, argv...)
			cmd.Env = childEnv(t, env...)
			var out syncbuf.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			stopped := false
			defer func() {
				if !stopped {
					_ = cmd.Process.Kill()
					<-exited
				}
			}()

			// Start returns once the child has entered execve, which
			// releases the parent before the new image's argv is set up:
			// until then /proc/<pid>/cmdline reads empty. Wait for it.
			var cmdline []byte
			pgtest.WaitFor(t, "the run's command line in /proc", 10*time.Second, func() (bool, error) {
				select {
				case err := <-exited:
					stopped = true
					t.Fatalf("run exited at once: %v\n%s", err, out.Tail(30))
				default:
				}
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
				if err != nil {
					return false, err
				}
				cmdline = b
				if len(b) == 0 {
					return false, fmt.Errorf("/proc/%d/cmdline is empty", cmd.Process.Pid)
				}
				return true, nil
			})
			if !bytes.Contains(cmdline, []byte(slot)) {
				t.Fatalf("/proc/%d/cmdline = %q: not the run's", cmd.Process.Pid, cmdline)
			}
			if bytes.Contains(cmdline, []byte(pwPassword)) {
				t.Errorf("the password is in /proc/%d/cmdline: %q", cmd.Process.Pid, cmdline)
			}

			// The copy and the stream (snapshot, replication and apply
			// connections) reach the target, and the --http probes'
			// connections to both sides are up.
			src, err := c.Connect(ctx, srcDB)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close(ctx)
			tgt, err := c.Connect(ctx, tgtDB)
			if err != nil {
				t.Fatal(err)
			}
			defer tgt.Close(ctx)
			inserted := false
			pgtest.WaitFor(t, "the copy, then a streamed row, on the target with the probes up", 20*time.Second, func() (bool, error) {
				select {
				case err := <-exited:
					stopped = true
					t.Fatalf("run exited early: %v\n%s", err, out.Tail(30))
				default:
				}
				var srcCount, n int
				_ = src.QueryRow(ctx, "SELECT count(*) FROM pw").Scan(&srcCount)
				_ = tgt.QueryRow(ctx, "SELECT count(*) FROM pw").Scan(&n) // the table appears with the copy
				up := probesUp(httpAddr)
				if n == srcCount && n > 0 && up {
					if inserted {
						return true, nil
					}
					if _, err := src.Exec(ctx, "INSERT INTO pw VALUES ($1, 'streamed')", streamedID); err != nil {
						t.Fatal(err)
					}
					inserted = true
				}
				return false, fmt.Errorf("target has %d of %d rows (streamed row inserted: %v), probes up: %v:\n%s", n, srcCount, inserted, up, out.Tail(30))
			})
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err = <-exited:
				stopped = true
			case <-time.After(20 * time.Second):
				t.Fatalf("run did not stop on SIGTERM:\n%s", out.Tail(30))
			}
			if err != nil {
				t.Errorf("run after SIGTERM: %v\n%s", err, out.Tail(30))
			}
			if all := out.Tail(1 << 20); strings.Contains(all, pwPassword) {
				t.Errorf("the password is in run's output:\n%s", all)
			} else {
				t.Logf("run's output (%d lines), no password in it", strings.Count(all, "\n"))
			}
		})
	}

	// check, with the password in PGPASSWORD, then in the YAML config.
	tgtDB := pgtest.NewDB(t, c)
	if err := c.Exec(ctx, tgtDB, `CREATE TABLE pw (id int PRIMARY KEY, v text)`); err != nil {
		t.Fatal(err)
	}
	checkArgs := []string{"check", "--slot", "pw_check", "--tables", "public.pw"}
	yaml := filepath.Join(t.TempDir(), "repstream.yaml")
	if err := os.WriteFile(yaml, []byte(fmt.Sprintf("source: %q\ntarget: %q\n", withPassword(srcDB), withPassword(tgtDB))), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		argv []string
	}{
		{name: "PGPASSWORD", env: []string{"PGPASSWORD=" + pwPassword}, argv: []string{"--source", dsn(srcDB), "--target", dsn(tgtDB)}},
		{name: "YAML config", argv: []string{"--config", yaml}},
	} {
		out, err := runWithEnv(t, bin, childEnv(t, tc.env...), append(checkArgs, tc.argv...)...)
		if err != nil || !strings.Contains(out, "OK    target  table public.pw") {
			t.Errorf("check, password in %s: %v\n%s", tc.name, err, out)
		}
		if strings.Contains(out, pwPassword) {
			t.Errorf("check, password in %s: the password is in the output:\n%s", tc.name, out)
		}
	}

	// A wrong password is refused, and neither it nor the DSN is printed.
	const wrong = "Wr0ng-pw-k2Lm"
	bad := func(db string) string { return strings.Replace(withPassword(db), pwPassword, wrong, 1) }
	for _, argv := range [][]string{
		append(checkArgs, "--source", bad(srcDB), "--target", bad(tgtDB)),
		{"run", "--source", bad(srcDB), "--target", bad(tgtDB), "--slot", "pw_wrong", "--tables", "public.pw", "--log-level", "debug"},
	} {
		out, err := runWithEnv(t, bin, childEnv(t), argv...)
		if err == nil || !strings.Contains(out, "password authentication failed") {
			t.Errorf("%s with a wrong password: %v, want a failed login\n%s", argv[0], err, out)
		}
		if strings.Contains(out, wrong) {
			t.Errorf("%s with a wrong password prints it:\n%s", argv[0], out)
		}
		t.Logf("%s with a wrong password: %s", argv[0], lastLine(out))
	}
}

// runWithEnv runs the binary with env and returns its combined output.
func runWithEnv(t *testing.T, bin string, env []string, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// freeAddr is a free 127.0.0.1 port's address.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// probesUp reports whether the --http endpoint on addr says the monitor's
// probe connections to the source and the target are up.
func probesUp(addr string) bool {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return err == nil && resp.StatusCode == http.StatusOK &&
		bytes.Contains(b, []byte(`repstream_connection_up{side="source"} 1`)) &&
		bytes.Contains(b, []byte(`repstream_connection_up{side="target"} 1`))
}
