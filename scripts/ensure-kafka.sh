#!/usr/bin/env bash
# ensure-kafka.sh — make sure an Apache Kafka broker (KRaft mode, no
# ZooKeeper) is cached for repstream's Kafka tests (internal/kafkatest).
#
# Idempotent. Fetches org.apache.kafka:kafka_2.13 and its runtime
# dependencies from Maven Central with `mvn dependency:copy-dependencies`
# into the cache directory, together with log4j-slf4j2-impl and slf4j-api
# pinned (without an SLF4J binding the broker's logging silently goes
# nowhere). The jars land in <cache>/libs; the broker runs as
#
#	java -cp '<cache>/libs/*' kafka.Kafka server.properties
#
# and internal/kafkatest finds the cache where this script puts it:
#
#	$REPSTREAM_KAFKA_HOME, default ~/.cache/repstream/kafka-<version>
#
# <cache>/READY is written last, after every jar is in place: a fetch that
# was interrupted is redone. Needs java (17+) and mvn; installs neither
# (Debian: apt-get install openjdk-17-jre-headless maven).
#
# Prints one line saying what it found or did; exits non-zero with a message
# on failure.
set -euo pipefail

prog=ensure-kafka

# Keep in step with internal/kafkatest (Version, the log4j/slf4j pins).
KAFKA_VERSION=4.4.0
SCALA_VERSION=2.13
LOG4J_VERSION=2.26.1
SLF4J_VERSION=2.0.20

die() {
	echo "$prog: error: $*" >&2
	exit 1
}

cache=${REPSTREAM_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/repstream/kafka-$KAFKA_VERSION}
stamp="kafka_$SCALA_VERSION:$KAFKA_VERSION log4j-slf4j2-impl:$LOG4J_VERSION slf4j-api:$SLF4J_VERSION"

if [[ -f $cache/READY && $(cat "$cache/READY") == "$stamp" ]]; then
	echo "$prog: Kafka $KAFKA_VERSION cached in $cache ($(find "$cache/libs" -name '*.jar' | wc -l) jars)"
	exit 0
fi

command -v java >/dev/null 2>&1 || die "java not found (Kafka $KAFKA_VERSION needs Java 17+; Debian: apt-get install openjdk-17-jre-headless)"
command -v mvn >/dev/null 2>&1 || die "mvn not found (Debian: apt-get install maven)"
java_major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p')
if [[ -n $java_major && $java_major -lt 17 ]]; then
	die "java $java_major found; Kafka $KAFKA_VERSION brokers need Java 17+"
fi

mkdir -p "$cache"
rm -f "$cache/READY"
cat >"$cache/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by repstream's scripts/ensure-kafka.sh: the jars of a Kafka
     broker for tests, fetched with mvn dependency:copy-dependencies. -->
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 https://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>repstream.test</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_$SCALA_VERSION</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-api</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>$SLF4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF

echo "$prog: fetching Kafka $KAFKA_VERSION (kafka_$SCALA_VERSION) into $cache ..."
start=$SECONDS
rm -rf "$cache/libs.tmp"
log=$cache/mvn.log
if ! mvn -B -q -f "$cache/pom.xml" \
	org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
	-DincludeScope=runtime -DoutputDirectory="$cache/libs.tmp" >"$log" 2>&1; then
	tail -n 30 "$log" >&2
	die "mvn dependency:copy-dependencies failed (full log: $log)"
fi
[[ -n $(find "$cache/libs.tmp" -name "kafka_$SCALA_VERSION-$KAFKA_VERSION.jar") ]] ||
	die "kafka_$SCALA_VERSION-$KAFKA_VERSION.jar missing from $cache/libs.tmp after the fetch"
rm -rf "$cache/libs"
mv "$cache/libs.tmp" "$cache/libs"
echo "$stamp" >"$cache/READY"
echo "$prog: Kafka $KAFKA_VERSION cached in $cache ($(find "$cache/libs" -name '*.jar' | wc -l) jars, $((SECONDS - start)) s)"
