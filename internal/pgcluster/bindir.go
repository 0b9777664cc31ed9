package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EnvBinDir names the environment variable that, when set, selects the
// directory holding the PostgreSQL server binaries (initdb, pg_ctl, postgres).
const EnvBinDir = "REPSTREAM_PG_BINDIR"

// debianRoot is where Debian's postgresql-NN packages install their binaries.
const debianRoot = "/usr/lib/postgresql"

// serverBinaries are the programs a cluster needs; a candidate directory is
// accepted only if it holds all of them.
var serverBinaries = []string{"initdb", "pg_ctl", "postgres"}

// ErrNoBinaries is returned (wrapped) by BinDir when no PostgreSQL server
// binaries can be found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found")

// BinDir returns the directory holding the PostgreSQL server binaries.
//
// The search order is: the REPSTREAM_PG_BINDIR environment variable (if set,
// it must be valid; no fallback), the highest-numbered /usr/lib/postgresql/*/bin,
// `pg_config --bindir`, and finally the directory of initdb found in PATH. The
// error, wrapping ErrNoBinaries, names every place that was tried.
func BinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if missing := missingBinaries(dir); missing != "" {
			return "", fmt.Errorf("%w: %s=%s lacks %s", ErrNoBinaries, EnvBinDir, dir, missing)
		}
		return dir, nil
	}
	tried := []string{EnvBinDir + " (unset)"}

	for _, dir := range debianBinDirs() {
		if missingBinaries(dir) == "" {
			return dir, nil
		}
		tried = append(tried, dir)
	}
	if len(tried) == 1 {
		tried = append(tried, debianRoot+"/*/bin (none)")
	}

	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
		cancel()
		if err == nil {
			dir := strings.TrimSpace(string(out))
			if missingBinaries(dir) == "" {
				return dir, nil
			}
			tried = append(tried, "pg_config --bindir ("+dir+")")
		} else {
			tried = append(tried, "pg_config --bindir ("+err.Error()+")")
		}
	} else {
		tried = append(tried, "pg_config (not in PATH)")
	}

	if initdb, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(initdb)
		if missingBinaries(dir) == "" {
			return dir, nil
		}
		tried = append(tried, "PATH ("+dir+")")
	} else {
		tried = append(tried, "PATH (no initdb)")
	}
	return "", fmt.Errorf("%w (need %s); tried %s; run scripts/ensure-postgres.sh or `make test` to install them",
		ErrNoBinaries, strings.Join(serverBinaries, ", "), strings.Join(tried, ", "))
}

// debianBinDirs lists /usr/lib/postgresql/<major>/bin, highest major first.
func debianBinDirs() []string {
	entries, err := os.ReadDir(debianRoot)
	if err != nil {
		return nil
	}
	type cand struct {
		ver float64
		dir string
	}
	var cands []cand
	for _, e := range entries {
		v, err := strconv.ParseFloat(e.Name(), 64) // "15", also old "9.6"
		if err != nil {
			continue
		}
		cands = append(cands, cand{v, filepath.Join(debianRoot, e.Name(), "bin")})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].ver > cands[j].ver })
	dirs := make([]string, len(cands))
	for i, c := range cands {
		dirs[i] = c.dir
	}
	return dirs
}

// missingBinaries returns the comma-separated names of the server binaries
// absent from dir (not regular executable files), or "" if all are there.
func missingBinaries(dir string) string {
	var missing []string
	for _, name := range serverBinaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	return strings.Join(missing, ", ")
}
