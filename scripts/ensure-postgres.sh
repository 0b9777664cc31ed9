#!/usr/bin/env bash
# ensure-postgres.sh — make sure PostgreSQL server binaries (initdb, pg_ctl,
# postgres) are installed, for repstream's tests, demo and benchmarks.
#
# Idempotent. Looks where internal/pgcluster.BinDir looks: $REPSTREAM_PG_BINDIR,
# the highest /usr/lib/postgresql/*/bin, `pg_config --bindir`, then PATH. If
# nothing is found it installs Debian's `postgresql` package non-interactively
# (with sudo when not root) and stops the distribution's default cluster that
# the package starts: repstream runs its own throwaway clusters.
#
# Prints one line saying what it found or did; exits non-zero with a message
# on failure.
set -euo pipefail

prog=ensure-postgres

die() {
	echo "$prog: error: $*" >&2
	exit 1
}

# has_server_bins DIR: DIR holds executable initdb, pg_ctl and postgres.
has_server_bins() {
	local d=$1
	[[ -n $d && -x $d/initdb && -x $d/pg_ctl && -x $d/postgres ]]
}

# find_bindir: print the server bin dir, or return 1.
find_bindir() {
	if [[ -n ${REPSTREAM_PG_BINDIR:-} ]]; then
		echo "$REPSTREAM_PG_BINDIR"
		return 0
	fi
	local d
	if [[ -d /usr/lib/postgresql ]]; then
		# Highest major version first (numeric sort handles 9.6 < 10 < 15).
		while read -r d; do
			if has_server_bins "/usr/lib/postgresql/$d/bin"; then
				echo "/usr/lib/postgresql/$d/bin"
				return 0
			fi
		done < <(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | grep -E '^[0-9]+(\.[0-9]+)?$' | sort -t. -k1,1nr -k2,2nr)
	fi
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null || true)
		if has_server_bins "$d"; then
			echo "$d"
			return 0
		fi
	fi
	if command -v initdb >/dev/null 2>&1; then
		d=$(dirname "$(command -v initdb)")
		if has_server_bins "$d"; then
			echo "$d"
			return 0
		fi
	fi
	return 1
}

describe() {
	local d=$1 v
	v=$("$d/postgres" --version 2>/dev/null || echo "postgres (version unknown)")
	echo "$v in $d"
}

# An explicit choice is never overridden by an installation.
if [[ -n ${REPSTREAM_PG_BINDIR:-} ]] && ! has_server_bins "$REPSTREAM_PG_BINDIR"; then
	die "REPSTREAM_PG_BINDIR=$REPSTREAM_PG_BINDIR lacks initdb, pg_ctl or postgres"
fi

if bindir=$(find_bindir); then
	echo "$prog: found $(describe "$bindir"), nothing to do"
	exit 0
fi

# Not found: install Debian's package.
command -v apt-get >/dev/null 2>&1 ||
	die "no PostgreSQL server binaries found and apt-get is not available; install PostgreSQL server binaries (initdb, pg_ctl, postgres) and/or set REPSTREAM_PG_BINDIR"

sudo=()
if [[ $(id -u) -ne 0 ]]; then
	command -v sudo >/dev/null 2>&1 ||
		die "no PostgreSQL server binaries found; installing them needs root, and sudo is not available (run as root: apt-get install postgresql)"
	sudo=(sudo -n)
fi

log=$(mktemp "${TMPDIR:-/tmp}/ensure-postgres.XXXXXX.log")
export DEBIAN_FRONTEND=noninteractive
if ! { "${sudo[@]}" apt-get update && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; } >"$log" 2>&1; then
	tail -n 20 "$log" >&2 || true
	die "installing the postgresql package failed (full log: $log)"
fi

# The package creates and starts a default cluster ("main"); repstream does
# not use it. Stop whatever default clusters run; absence is fine.
stopped=""
if command -v pg_lsclusters >/dev/null 2>&1; then
	while read -r ver name _port status _rest; do
		if [[ $status == online* ]]; then
			if "${sudo[@]}" pg_ctlcluster "$ver" "$name" stop >>"$log" 2>&1; then
				stopped+=" $ver/$name"
			fi
		fi
	done < <(pg_lsclusters --no-header 2>/dev/null || true)
fi

bindir=$(find_bindir) || die "installed the postgresql package but still found no server binaries (log: $log)"
rm -f "$log"
if [[ -n $stopped ]]; then
	echo "$prog: installed $(describe "$bindir"); stopped the default cluster(s):$stopped"
else
	echo "$prog: installed $(describe "$bindir"); no default cluster left running"
fi
