#!/usr/bin/env bash
# Prints the directory make test's integration tests keep their servers in
# (their TMPDIR): a directory of this user's on a tmpfs (/dev/shm) when it
# has room, else $TMPDIR (or /tmp).
#
# Why: the tests start several hundred databases on a few shared servers,
# and on ext4 creating their files cost a tenth of the suite's CPU
# (the inode allocator's search past recently deleted inodes); on a tmpfs
# the integration suites took about 25% less CPU and wall time. At their
# peak the servers hold about 8 GB (databases are not dropped, and each
# shared server keeps up to 1 GB of WAL), so the tmpfs is used only with
# REPSTREAM_TEST_TMPFS_MB (12288 by default) free both on it and in memory.
#
# The directory, /dev/shm/repstream-test-<uid>, is trusted only if this
# user made it: it must be a directory, not a link, owned by this user;
# anything else there (another user's, made first) is left alone and the
# tests run in $TMPDIR. It is mode 0711: the servers' unprivileged user
# must pass through it to the clusters' own directories (0700, theirs).
# REPSTREAM_TEST_TMPFS=off keeps the tests in $TMPDIR.
set -euo pipefail

base=${REPSTREAM_TEST_TMPFS:-/dev/shm}
need_mb=${REPSTREAM_TEST_TMPFS_MB:-12288}
fallback=${TMPDIR:-/tmp}

use_fallback() {
	echo "test-tmpdir: $*: the test servers use $fallback" >&2
	echo "$fallback"
	exit 0
}

[ "$base" != off ] || use_fallback "REPSTREAM_TEST_TMPFS=off"
[ -d "$base" ] && [ -w "$base" ] || use_fallback "$base is not a writable directory"
[ "$(stat -f -c %T "$base")" = tmpfs ] || use_fallback "$base is not a tmpfs"
free_mb=$(( $(df -Pk "$base" | awk 'NR == 2 { print $4 }') / 1024 ))
[ "$free_mb" -ge "$need_mb" ] || use_fallback "$base has $free_mb MB free, less than $need_mb"
mem_mb=$(( $(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) / 1024 ))
[ "$mem_mb" -ge "$need_mb" ] || use_fallback "$mem_mb MB of memory available, less than $need_mb"

dir="$base/repstream-test-$(id -u)"
mkdir -m 0711 "$dir" 2>/dev/null || true
if [ -L "$dir" ] || [ ! -d "$dir" ] || [ "$(stat -c %u "$dir")" != "$(id -u)" ]; then
	use_fallback "$dir is not a directory of this user's"
fi
chmod 0711 "$dir"
echo "test-tmpdir: the test servers use $dir (a tmpfs)" >&2
echo "$dir"
