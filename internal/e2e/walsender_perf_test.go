package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/repstream/repstream/internal/engine"
	"github.com/repstream/repstream/internal/pgcluster"
	"github.com/repstream/repstream/internal/pgcluster/pgtest"
	"github.com/repstream/repstream/internal/stats"
)

// TestPerfWalsender is a profiling aid: it loads one backlog and lets several
// clients decode it from their own slots, reporting the CPU the source's
// walsender spent for each. It separates what the server costs from what a
// client's way of reading adds. Clients (REPSTREAM_PERF_CLIENTS, comma-
// separated): repstream, recvlogical, drain (reads and discards), drain-nap
// (sleeps REPSTREAM_PERF_NAP, default 1ms, before each read), native (a
// subscription in a fresh target database), and -bin variants of the drains
// and native (pgoutput binary). A client may carry environment for its run
// after a colon (repstream:NAME=VALUE+NAME2=VALUE2), for experiments whose
// knobs are read from the environment when the engine starts; each
// repstream run gets its own slot and target database, so runs can be
// repeated and alternated. REPSTREAM_PERF_STRACE=1 writes
// `strace -c` of each walsender to /tmp/strace.<client>.<n>;
// REPSTREAM_PERF_RECORD=1 a `perf record -g` of the walsender (=all: of the
// whole machine) to /tmp/perf.<client>.<n>.data; REPSTREAM_PERF_STAT=1 logs
// `perf stat` counts of the walsender (wake-ups it does, segments it
// transmits, sends, receives, waits).
//
//	REPSTREAM_PERF_WALSENDER=100000 REPSTREAM_PERF_TXN_ROWS=1 go test -run TestPerfWalsender -v ./internal/e2e
func TestPerfWalsender(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("REPSTREAM_PERF_WALSENDER"))
	if n == 0 {
		t.Skip("set REPSTREAM_PERF_WALSENDER=<rows> to run")
	}
	per := 100
	if p, _ := strconv.Atoi(os.Getenv("REPSTREAM_PERF_TXN_ROWS")); p > 0 {
		per = p
	}
	e := newEnv(t)
	e.both(conditionsSQL)
	cfg := e.config("public.conditions")
	cfg.Memory = 256 << 20
	e.catchUp(cfg) // creates the publication and repstream's slot
	pub := cfg.Slot
	clients := []string{"drain", "recvlogical", "repstream", "drain-nap"}
	if s := os.Getenv("REPSTREAM_PERF_CLIENTS"); s != "" {
		clients = strings.Split(s, ",")
	}
	// A client may carry environment for its run after a colon:
	// repstream:NAME=VALUE+NAME2=VALUE2.
	clientEnv := make([]string, len(clients))
	for i, c := range clients {
		if name, env, ok := strings.Cut(c, ":"); ok {
			clients[i], clientEnv[i] = name, strings.ReplaceAll(env, "+", " ")
		}
		e.srcExec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slotFor(cfg.Slot, clients[i], i))
	}
	// Autovacuum of the fresh backlog would compete for the CPUs at a random
	// moment of some client's run.
	e.srcExec(`ALTER TABLE conditions SET (autovacuum_enabled = off)`)
	loadConditions(e, n, per)
	var end string
	if err := e.Src.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		t.Fatal(err)
	}
	endLSN, _ := pglogrepl.ParseLSN(end)
	for i, c := range clients {
		slot := slotFor(cfg.Slot, c, i)
		stop := make(chan struct{})
		var cpu atomic.Int64 // walsender CPU in ticks, last sample
		var vol, invol atomic.Int64
		var rec *exec.Cmd  // perf record of the walsender, REPSTREAM_PERF_RECORD
		var stat *exec.Cmd // perf stat of the walsender, REPSTREAM_PERF_STAT
		done := make(chan struct{})
		go func() {
			defer close(done)
			pid := 0
			for {
				final := false // stop: one last sample, then return
				select {
				case <-stop:
					final = true
				case <-time.After(20 * time.Millisecond):
				}
				if pid == 0 && final {
					return
				}
				if pid == 0 {
					var p *int
					if err := e.Src.QueryRow(context.Background(), `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&p); err == nil && p != nil {
						pid = *p
						if os.Getenv("REPSTREAM_PERF_RECORD") == "1" {
							rec = exec.Command("perf", "record", "-g", "-p", strconv.Itoa(pid), "-o", "/tmp/perf."+c+"."+strconv.Itoa(i)+".data")
							_ = rec.Start()
						}
						if os.Getenv("REPSTREAM_PERF_STAT") != "" {
							stat = exec.Command("perf", "stat", "-x", ",", "-e", "task-clock,context-switches,sched:sched_wakeup,net:net_dev_xmit,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait",
								"-p", strconv.Itoa(pid), "-o", "/tmp/perfstat."+c+"."+strconv.Itoa(i))
							_ = stat.Start()
						}
						if os.Getenv("REPSTREAM_PERF_STRACE") != "" {
							st := exec.Command("strace", "-c", "-p", strconv.Itoa(pid), "-o", "/tmp/strace."+c+"."+strconv.Itoa(i))
							_ = st.Start()
						}
					}
					continue
				}
				if ticks, ok := procTicks(pid); ok {
					cpu.Store(ticks)
					vol.Store(procStatus(pid, "voluntary_ctxt_switches"))
					invol.Store(procStatus(pid, "nonvoluntary_ctxt_switches"))
				}
				if final {
					return
				}
			}
		}()
		if os.Getenv("REPSTREAM_PERF_RECORD") == "all" {
			rec = exec.Command("perf", "record", "-a", "-g", "-o", "/tmp/perf."+c+"."+strconv.Itoa(i)+".data")
			_ = rec.Start()
		}
		start := time.Now()
		selfCPU0, tgtCPU0 := selfCPU(), clusterCPU(e.tgt.DataDir())
		var err error
		switch c {
		case "repstream":
			// Its own slot and a fresh target database.
			rc := cfg
			rc.UntilCaughtUp = true
			rc.Slot, rc.Publication = slot, pub
			rc.Target = e.tgt.DSN(pgtest.NewDB(t, e.tgt))
			tc, cerr := pgx.Connect(context.Background(), rc.Target)
			if cerr != nil {
				t.Fatal(cerr)
			}
			if _, cerr := tc.Exec(context.Background(), conditionsSQL); cerr != nil {
				t.Fatal(cerr)
			}
			tc.Close(context.Background())
			err = withEnv(clientEnv[i], func() error {
				return engine.New(rc, testLogger(t), stats.NewRegistry()).Run(context.Background())
			})
		case "recvlogical":
			out := filepath.Join(t.TempDir(), "out")
			bin, berr := pgcluster.BinDir()
			if berr != nil {
				t.Fatal(berr)
			}
			cmd := exec.Command(filepath.Join(bin, "pg_recvlogical"), "-d", e.src.DSN(e.srcDB), "--slot", slot, "--start",
				"-o", "proto_version=3", "-o", "publication_names="+pub, "-o", "streaming=on", "--endpos", end, "-f", out, "--no-loop", "-s", "1")
			var b []byte
			b, err = cmd.CombinedOutput()
			if err != nil {
				err = fmt.Errorf("%w: %s", err, b)
			}
		case "native", "native-bin":
			_, err = nativeCatchUp(t, e, slot, pub, end, strings.HasSuffix(c, "bin"))
		case "drain", "drain-nap", "drain-bin", "drain-nap-bin":
			err = drain(e.src.DSN(e.srcDB)+" replication=database", slot, pub, endLSN, strings.Contains(c, "nap"), strings.HasSuffix(c, "bin"))
		}
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		d := time.Since(start)
		selfCPU1, tgtCPU1 := selfCPU(), clusterCPU(e.tgt.DataDir())
		close(stop)
		<-done // after its last sample
		if rec != nil && rec.Process != nil {
			_ = rec.Process.Signal(os.Interrupt)
			_ = rec.Wait()
		}
		if stat != nil && stat.Process != nil {
			_ = stat.Process.Signal(os.Interrupt)
			_ = stat.Wait()
			if b, err := os.ReadFile("/tmp/perfstat." + c + "." + strconv.Itoa(i)); err == nil {
				t.Logf("%s perf stat of the walsender:\n%s", c, b)
			}
		}
		t.Logf("%-12s %-40s %8s  walsender CPU %.2f s, context switches %d voluntary, %d not; this process %.2f s, target cluster %.2f s", c, clientEnv[i], d.Round(time.Millisecond), float64(cpu.Load())/100, vol.Load(), invol.Load(),
			(selfCPU1 - selfCPU0).Seconds(), float64(tgtCPU1-tgtCPU0)/100)
	}
}

// nativeCatchUp subscribes a fresh database of the target to the publication
// through slot, waits until the slot has confirmed end and returns the rows
// of conditions on that target.
func nativeCatchUp(t *testing.T, e *env, slot, pub, end string, binary bool) (int64, error) {
	ctx := context.Background()
	db := pgtest.NewDB(t, e.tgt)
	conn, err := pgx.Connect(ctx, e.tgt.DSN(db))
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, conditionsSQL); err != nil {
		return 0, err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE SUBSCRIPTION native_sub CONNECTION '%s' PUBLICATION %s
		WITH (create_slot = false, slot_name = '%s', copy_data = false, streaming = on, binary = %t)`, e.src.DSN(e.srcDB), pub, slot, binary)); err != nil {
		return 0, err
	}
	defer func() {
		_, _ = conn.Exec(ctx, "ALTER SUBSCRIPTION native_sub DISABLE")
		_, _ = conn.Exec(ctx, "ALTER SUBSCRIPTION native_sub SET (slot_name = NONE)")
		_, _ = conn.Exec(ctx, "DROP SUBSCRIPTION native_sub")
	}()
	src, err := e.srcConn(ctx) // e.Src may belong to a CPU sampler
	if err != nil {
		return 0, err
	}
	defer src.Close(ctx)
	pgtest.WaitForEvery(t, "the subscription to confirm "+end, time.Hour, 20*time.Millisecond, func() (bool, error) {
		var done bool
		err := src.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn >= $1::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $2`,
			end, slot).Scan(&done)
		return done, err
	})
	var n int64
	err = conn.QueryRow(ctx, "SELECT count(*) FROM conditions").Scan(&n)
	return n, err
}

// withEnv runs f with the space-separated NAME=VALUE pairs of env set in
// the process environment and puts the previous values back after.
func withEnv(env string, f func() error) error {
	for _, kv := range strings.Fields(env) {
		k, v, _ := strings.Cut(kv, "=")
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		if had {
			defer os.Setenv(k, old)
		} else {
			defer os.Unsetenv(k)
		}
	}
	return f()
}

func slotFor(base, client string, i int) string {
	return fmt.Sprintf("%s_%s_%d", base, strings.ReplaceAll(client, "-", "_"), i)
}

// procStatus reads one counter of /proc/<pid>/status.
func procStatus(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clusterCPU is the CPU, in ticks, of the cluster whose data directory is
// dir: its postmaster, the children it reaped and those still running.
func clusterCPU(dir string) int64 {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	var total int64
	ents, _ := os.ReadDir("/proc")
	for _, de := range ents {
		pid, err := strconv.Atoi(de.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(st)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ppid, _ := strconv.Atoi(f[1])
		if pid != pm && ppid != pm {
			continue
		}
		for _, k := range []int{11, 12} {
			v, _ := strconv.ParseInt(f[k], 10, 64)
			total += v
		}
		if pid == pm {
			for _, k := range []int{13, 14} { // reaped children
				v, _ := strconv.ParseInt(f[k], 10, 64)
				total += v
			}
		}
	}
	return total
}

func procTicks(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, true
}

// drain reads the slot to endLSN and throws the data away: the cheapest
// possible client. small reads through a tiny buffer, like a slow consumer.
func drain(dsn, slot, pub string, endLSN pglogrepl.LSN, small, binary bool) error {
	ctx := context.Background()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return err
	}
	if small {
		cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
			return pgproto3.NewFrontend(bufio.NewReaderSize(&napReader{r: r, nap: napFor()}, 1<<20), w)
		}
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '3'", "publication_names '" + pub + "'", "streaming 'true'", "binary '" + strconv.FormatBool(binary) + "'"}}); err != nil {
		return err
	}
	var last pglogrepl.LSN
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 {
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, _ := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if ka.ServerWALEnd > last {
				last = ka.ServerWALEnd
			}
		case pglogrepl.XLogDataByteID:
			x, _ := pglogrepl.ParseXLogData(cd.Data[1:])
			if x.WALStart > last {
				last = x.WALStart
			}
		}
		if last >= endLSN {
			return pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: last, WALFlushPosition: last})
		}
	}
}

// napReader sleeps before every read, so that data piles up in the socket.
type napReader struct {
	r   io.Reader
	nap time.Duration
}

func (n *napReader) Read(p []byte) (int, error) {
	time.Sleep(n.nap)
	return n.r.Read(p)
}

func napFor() time.Duration {
	d, err := time.ParseDuration(os.Getenv("REPSTREAM_PERF_NAP"))
	if err != nil {
		return time.Millisecond
	}
	return d
}
