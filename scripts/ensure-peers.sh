#!/usr/bin/env bash
# ensure-peers.sh — the replication tools `repstream bench --systems` compares
# with (the "peers"), for `make bench-peers`:
#   pglogical  Debian's postgresql-$PG_MAJOR-pglogical
#   pgcopydb   Debian's pgcopydb
#   pgstream   `go install github.com/xataio/pgstream@$PGSTREAM_VERSION`,
#              plus Debian's postgresql-$PG_MAJOR-wal2json (its output plugin)
#
# Installs what is missing when we are root and apt-get exists; otherwise it
# says so, and the bench skips that peer naming the install command.
# `make test` does not run it. Never fails.
#
# pgstream: the Go module proxy may refuse a version's zip (seen for v0.4.0 to
# v0.6.0 from this lab's proxy), and v0.6.0 pins github.com/bytedance/sonic
# v1.13.2, which does not compile with Go >= 1.25. Where `go install` fails the
# script says so and the bench skips pgstream; a pgstream built by hand and put
# on PATH is used as it is.
set -uo pipefail

prog=ensure-peers
PG_MAJOR=${PG_MAJOR:-15}
PGSTREAM_VERSION=${PGSTREAM_VERSION:-v0.6.0}

installable() { [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; }
updated=
apt_install() { # PACKAGE
	if [[ -z $updated ]]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1
		updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$1" >/dev/null 2>&1
}
have_pkg() { dpkg -s "$1" >/dev/null 2>&1; }

for pkg in "postgresql-$PG_MAJOR-pglogical" pgcopydb "postgresql-$PG_MAJOR-wal2json"; do
	if have_pkg "$pkg"; then
		echo "$prog: $pkg installed"
	elif installable && apt_install "$pkg"; then
		echo "$prog: installed $pkg"
	else
		echo "$prog: $pkg not available (apt-get install $pkg): the bench skips the peer that needs it"
	fi
done

gobin=$(go env GOBIN 2>/dev/null)
[[ -n $gobin ]] || gobin=$(go env GOPATH 2>/dev/null)/bin
if command -v pgstream >/dev/null 2>&1 || [[ -x $gobin/pgstream ]]; then
	echo "$prog: pgstream found: $(command -v pgstream || echo "$gobin/pgstream")"
elif go install "github.com/xataio/pgstream@$PGSTREAM_VERSION" 2>/tmp/$prog.err; then
	echo "$prog: installed pgstream $PGSTREAM_VERSION into $gobin"
else
	echo "$prog: go install github.com/xataio/pgstream@$PGSTREAM_VERSION failed:"; tail -3 /tmp/$prog.err
	echo "$prog: put a pgstream $PGSTREAM_VERSION binary on PATH to compare with it; the bench skips pgstream meanwhile"
fi
exit 0
