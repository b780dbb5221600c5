#!/usr/bin/env bash
# Set up a fresh machine for rackscale.
#   scripts/bootstrap.sh core   -> .venv with the light core (enough for `rackscale demo`)
#   scripts/bootstrap.sh test   -> also the system services the integration tests run for real
#                                  (PostgreSQL, Slurm + munge, Chromium, Prometheus) and every Python extra
# Idempotent: what is already installed is left alone, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-core}
PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip

if [ "$mode" = test ]; then
  need=()
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || need+=(postgresql)
  command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm)
  command -v munged >/dev/null 2>&1 || need+=(munge)
  command -v patch >/dev/null 2>&1 || need+=(patch)  # make mutation re-checks survivors
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  # prometheus scrapes `rackscale serve` in its test; promtool (same package) checks and
  # unit-tests deploy/prometheus/rackscale.rules.yml
  { command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
  # the lab: ip and tc for namespaces, veths, bridges and shaping; setpriv for the no-root test
  command -v tc >/dev/null 2>&1 || need+=(iproute2)
  command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
  if [ ${#need[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing system packages: ${need[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  # torch is pinned to 2.13.0 (the CPU wheel on this workplace's disk); see pyproject.toml.
  pip install -q -e '.[all]'
  # the server's tests render the dashboard's Jinja2 templates (the server extra, in all)
  .venv/bin/python -c 'import fastapi, jinja2, playwright' \
    || { echo "the server extra did not install (fastapi, jinja2, playwright)" >&2; exit 1; }
else
  pip install -q -e .
fi
