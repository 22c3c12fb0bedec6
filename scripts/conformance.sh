#!/usr/bin/env bash
# Conformance of the quota protocol: schemathesis (pinned with its
# dependencies in scripts/conformance/requirements.txt, installed from PyPI
# into scripts/.venv, ignored by git) generates requests
# from docs/quota-protocol.yaml, valid and invalid, and checks every answer
# of a running daemon against the spec: status codes, bodies, headers,
# 405 with Allow, rejection of what the spec refuses, acceptance of what it
# allows. Four runs, each bounded (--max-examples), about a minute in all:
#
#   a daemon with tokens, called with no token, a producer token, an admin token;
#   a daemon without tokens (loopback, where that is allowed).
#
# The daemon watches LAGBRIDGE_KAFKA_BOOTSTRAP when set (scripts/test.sh
# sets it), else an address where nothing answers (the protocol is served
# either way). Exit status: schemathesis's, 0 when every run has zero
# failures.
#
#   scripts/conformance.sh              # install if needed, run
#   scripts/conformance.sh --install    # install only
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=scripts/.venv
REQUIREMENTS=scripts/conformance/requirements.txt   # schemathesis 4.32.5 and its dependencies, pinned
MAX_EXAMPLES=${CONFORMANCE_MAX_EXAMPLES:-25}

# (Re)install when the venv is missing or was made from other pins.
want=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
if [[ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" != "$want" ]] || ! "$VENV/bin/schemathesis" --version >/dev/null 2>&1; then
  echo "== conformance: installing $REQUIREMENTS into $VENV (PyPI)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --index-url https://pypi.org/simple \
    --only-binary=:all: -r "$REQUIREMENTS"
  echo "$want" >"$VENV/.requirements.sha256"
fi
[[ "${1:-}" == "--install" ]] && exit 0

work=$(mktemp -d)
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/lagbridge" ./cmd/lagbridge
kafka=${LAGBRIDGE_KAFKA_BOOTSTRAP:-127.0.0.1:1}
producer_token=conformance-producer-$RANDOM$RANDOM$RANDOM
admin_token=conformance-admin-$RANDOM$RANDOM$RANDOM

# start CONFIG: runs the daemon on a free loopback port; sets base.
start() {
  "$work/lagbridge" run --config "$1" >"$work/daemon.log" 2>&1 &
  pid=$!
  base=""
  for _ in $(seq 100); do
    addr=$(sed -n 's/.*lagbridge running.* listen=\([^ ]*\).*/\1/p' "$work/daemon.log" | head -n1)
    if [[ -n "$addr" ]]; then base="http://$addr"; return; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "conformance: the daemon did not start:" >&2
  cat "$work/daemon.log" >&2
  exit 1
}

stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

# run NAME [HEADER]: one schemathesis run against $base.
run() {
  local name=$1; shift
  echo "== conformance: $name"
  SCHEMATHESIS_HOOKS=scripts/conformance/hooks.py "$VENV/bin/schemathesis" run docs/quota-protocol.yaml \
    --url "$base" --max-examples "$MAX_EXAMPLES" --request-timeout 10 --workers 1 \
    --seed "${CONFORMANCE_SEED:-1}" --warnings off --no-color "$@"
}

cat >"$work/tokens.yaml" <<YAML
listen: 127.0.0.1:0
kafka: [{cluster: conformance, brokers: ["$kafka"], groups: {include: ["conformance-none"]}}]
quota:
  policies: [{name: all, maxAge: 30s}]
  auth:
    tokens: [{token: $producer_token, producers: ["*"], maxIds: 100000}]
    adminTokens: [$admin_token]
YAML
start "$work/tokens.yaml"
run "tokens on, no token"
run "tokens on, a producer token" --header "Authorization: Bearer $producer_token"
run "tokens on, an admin token" --header "Authorization: Bearer $admin_token"
stop

cat >"$work/open.yaml" <<YAML
listen: 127.0.0.1:0
kafka: [{cluster: conformance, brokers: ["$kafka"], groups: {include: ["conformance-none"]}}]
quota:
  policies: [{name: all, maxAge: 30s}]
YAML
start "$work/open.yaml"
run "no tokens (loopback)"
stop
echo "== conformance: every run passed"
