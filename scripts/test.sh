#!/usr/bin/env bash
# Runs the whole test suite: starts a real Apache Kafka 4.x (KRaft) on
# 127.0.0.1 unless LAGBRIDGE_KAFKA_BOOTSTRAP already names one, runs every Go
# test with -race and the quota protocol's conformance run
# (scripts/conformance.sh), and stops the broker it started, whatever
# happened.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages the tests drive: Chromium (the dashboard's browser test),
# promtool (alert rules), fonts for legible screenshots. Idempotent and fast
# when present.
scripts/deps.sh

started=""
if [[ -z "${LAGBRIDGE_KAFKA_BOOTSTRAP:-}" ]]; then
  echo "== real Kafka: fetching jars through Maven and starting a KRaft node on 127.0.0.1"
  integration/kafka/kafka.sh fetch
  # KAFKA_PORT=0: a free port, so a stray broker on the default port cannot collide.
  out=$(KAFKA_PORT=0 integration/kafka/kafka.sh start)
  echo "$out"
  LAGBRIDGE_KAFKA_BOOTSTRAP=$(sed -n 's/^KAFKA_BOOTSTRAP=//p' <<<"$out" | tail -n1)
  [[ -n "$LAGBRIDGE_KAFKA_BOOTSTRAP" ]] || { echo "test.sh: kafka.sh start printed no KAFKA_BOOTSTRAP" >&2; exit 1; }
  export LAGBRIDGE_KAFKA_BOOTSTRAP
  started=1
fi
cleanup() { if [[ -n "$started" ]]; then integration/kafka/kafka.sh stop >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT

# Tests that need the real broker, Chromium or promtool fail rather than skip
# when one is missing.
export LAGBRIDGE_REQUIRE_KAFKA=1 LAGBRIDGE_REQUIRE_CHROMIUM=1 LAGBRIDGE_REQUIRE_TOOLS=1
echo "== go test -race ./... (real Kafka at $LAGBRIDGE_KAFKA_BOOTSTRAP)"
go test -race -count=1 -timeout 20m ./...

# The quota protocol against its spec, with schemathesis (installed into
# scripts/.venv on first use): zero failures in every auth mode.
scripts/conformance.sh
