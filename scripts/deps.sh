#!/usr/bin/env bash
# Installs, from Debian's packages, the tools the test suite drives besides
# Go: headless Chromium (the dashboard's browser tests) with a font so that
# screenshots are legible, promtool (checks and unit tests of the alert
# rules; Debian ships it in the prometheus package), and Python's venv
# module (the conformance run installs schemathesis into a venv). Helm needs nothing
# here: deploy/helm/check builds it from Go modules.
#
# Idempotent and quick when everything is there: nothing is fetched unless
# a tool is missing, and apt-get update runs only then. Needs root (or sudo)
# only to install. Services: the prometheus package would start a
# Prometheus server on :9090 where services run; a policy-rc.d is put in
# place for the install so that nothing is started (we need only promtool).
#
#   scripts/deps.sh            # install what is missing
#   scripts/deps.sh --check    # exit 1 if something is missing, install nothing
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]] || need+=(fonts-dejavu-core)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# Python's venv module (with ensurepip) for the conformance run's
# schemathesis, which scripts/conformance.sh installs from PyPI.
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)

if [[ ${#need[@]} -eq 0 ]]; then
  echo "deps: chromium, fonts-dejavu-core, promtool and python3-venv are installed"
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "deps: missing: ${need[*]} (run scripts/deps.sh as root)" >&2
  exit 1
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "deps: need root to install ${need[*]}" >&2; exit 1; }
  sudo=(sudo)
fi

echo "deps: installing ${need[*]}"
# Start no service during the install (restored afterwards if we made it).
made_policy=""
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${sudo[@]}" chmod 0755 /usr/sbin/policy-rc.d
  made_policy=1
fi
cleanup() { if [[ -n "$made_policy" ]]; then "${sudo[@]}" rm -f /usr/sbin/policy-rc.d; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
  || "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}"   # again, loudly, to show why

# If a Prometheus server got started anyway (a system whose init ignores
# policy-rc.d), stop it: only the promtool binary is wanted.
if [[ " ${need[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
  "${sudo[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
fi

if ! command -v chromium >/dev/null || ! command -v promtool >/dev/null || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  echo "deps: install did not provide chromium, promtool and python3-venv" >&2
  exit 1
fi
echo "deps: $(chromium --version 2>/dev/null | head -n1); $(promtool --version 2>&1 | head -n1)"
