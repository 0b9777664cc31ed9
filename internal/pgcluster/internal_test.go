package pgcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestSanitizeName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "cluster"},
		{"src", "src"},
		{"TestFoo/sub case", "TestFoo_sub_case"},
		{"a-b_c9", "a-b_c9"},
		{"ünï", "__n__"}, // bytes, not runes: ü and ï are 2 bytes each
		{strings.Repeat("x", 100), strings.Repeat("x", 24)},
	}
	for _, tt := range tests {
		if got := sanitizeName(tt.in); got != tt.want {
			t.Errorf("sanitizeName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDSNAndURLParse(t *testing.T) {
	c := &Cluster{name: "x", port: 54321}
	for _, db := range []string{"", "postgres", "My DB", `it's`, `back\slash`, "ünïcode", "a/b?c#d"} {
		want := db
		if want == "" {
			want = "postgres"
		}
		for _, s := range []string{c.DSN(db), c.URL(db), c.ReplicationDSN(db)} {
			cfg, err := pgx.ParseConfig(s)
			if err != nil {
				t.Errorf("db %q: parse %q: %v", db, s, err)
				continue
			}
			if cfg.Database != want || cfg.Host != "127.0.0.1" || cfg.Port != 54321 ||
				cfg.User != Superuser || cfg.TLSConfig != nil {
				t.Errorf("db %q: %q parsed as db=%q host=%s port=%d user=%s tls=%v",
					db, s, cfg.Database, cfg.Host, cfg.Port, cfg.User, cfg.TLSConfig != nil)
			}
		}
		if rp := c.ReplicationDSN(db); !strings.HasSuffix(rp, " replication=database") {
			t.Errorf("ReplicationDSN(%q) = %q", db, rp)
		}
	}
}

func TestSettings(t *testing.T) {
	s := settings(5555, "/tmp/d", Options{Fast: true, Settings: map[string]string{"wal_level": "replica", "work_mem": "1MB"}})
	want := map[string]string{
		"port": "5555", "unix_socket_directories": "/tmp/d", "listen_addresses": "127.0.0.1",
		"wal_level": "replica", "work_mem": "1MB", "fsync": "off", "full_page_writes": "off",
		"max_wal_senders": "20", "max_replication_slots": "20", "max_worker_processes": "24",
		"max_logical_replication_workers": "12", "max_sync_workers_per_subscription": "4",
		"shared_buffers": "128MB", "max_wal_size": "4GB", "checkpoint_timeout": "30min",
		"logging_collector": "off",
	}
	for k, v := range want {
		if s[k] != v {
			t.Errorf("settings[%s] = %q, want %q", k, s[k], v)
		}
	}
	if _, ok := s["synchronous_commit"]; ok {
		t.Error("Fast must not set synchronous_commit")
	}
	slow := settings(1, "/d", Options{})
	if _, ok := slow["fsync"]; ok {
		t.Error("fsync set without Fast")
	}
	if slow["wal_level"] != "logical" {
		t.Errorf("default wal_level = %q", slow["wal_level"])
	}
}

func TestBinDirEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvBinDir, dir)
	_, err := BinDir()
	if !errors.Is(err, ErrNoBinaries) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("BinDir with empty %s: err = %v, want ErrNoBinaries naming the dir", EnvBinDir, err)
	}
	for _, name := range serverBinaries {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := BinDir()
	if err != nil || got != dir {
		t.Fatalf("BinDir() = %q, %v; want %q", got, err, dir)
	}
	// Not executable: rejected.
	if err := os.Chmod(filepath.Join(dir, "pg_ctl"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := BinDir(); err == nil || !strings.Contains(err.Error(), "pg_ctl") {
		t.Fatalf("BinDir with non-executable pg_ctl: err = %v", err)
	}
}

func TestReadVersion(t *testing.T) {
	tests := []struct {
		content string
		want    int
		wantErr bool
	}{
		{"15\n", 15, false},
		{"9.6\n", 9, false},
		{"x\n", 0, true},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readVersion(dir)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("readVersion(%q) = %d, %v; want %d, err %v", tt.content, got, err, tt.want, tt.wantErr)
		}
	}
	if _, err := readVersion(t.TempDir()); err == nil {
		t.Error("readVersion without PG_VERSION: no error")
	}
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		b.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := tail(path, 3), "line 98\nline 99\nline 100"; got != want {
		t.Errorf("tail = %q, want %q", got, want)
	}
	if got := tail(filepath.Join(t.TempDir(), "none"), 3); !strings.Contains(got, "no server log") {
		t.Errorf("tail of missing file = %q", got)
	}
}

func TestOwner(t *testing.T) {
	dir := t.TempDir()
	if alive, known := ownerAlive(dir); alive || known {
		t.Errorf("no owner file: alive=%v known=%v", alive, known)
	}
	if err := writeOwner(dir); err != nil {
		t.Fatal(err)
	}
	if alive, known := ownerAlive(dir); !alive || !known {
		t.Errorf("own process: alive=%v known=%v", alive, known)
	}
	// Same pid, different start time: the pid was reused, the owner is gone.
	pid := strconv.Itoa(os.Getpid())
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(pid+" 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if procStartTime(os.Getpid()) != "" {
		if alive, known := ownerAlive(dir); alive || !known {
			t.Errorf("reused pid: alive=%v known=%v", alive, known)
		}
	}
}

func TestPortConflict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	first := "LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use\nFATAL:  could not create any TCP/IP sockets\n"
	second := "FATAL:  configuration file contains errors\n"
	if err := os.WriteFile(path, []byte(first+second), 0o644); err != nil {
		t.Fatal(err)
	}
	if !portConflict(path, 0) {
		t.Error("conflict in the log not seen")
	}
	if portConflict(path, int64(len(first))) {
		t.Error("conflict of an earlier attempt taken for the last attempt's")
	}
	if portConflict(filepath.Join(t.TempDir(), "none"), 0) {
		t.Error("missing log taken for a conflict")
	}
	if fileSize(path) != int64(len(first+second)) || fileSize(filepath.Join(t.TempDir(), "none")) != 0 {
		t.Error("fileSize wrong")
	}
}
