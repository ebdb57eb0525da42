#!/usr/bin/env bash
# CI load test: start `attnserve serve` on CPU on a free 127.0.0.1 port, offer a steady mix of
# /forecast and /encode requests over every attention backend for 20 s, fail on any non-2xx
# response (or a p99 over the bound below), stop the server. Reports: loadtest/results/ci/.
#
#   bash loadtest/ci.sh            # from anywhere; uses .venv/bin/python unless PY is set
#
# ATTNSERVE_CI_MODELS picks the models the server loads (fewer = faster start on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PY:-.venv/bin/python}"
MODELS="${ATTNSERVE_CI_MODELS:-all-MiniLM-L6-v2,informer-etth1-h24}"

exec timeout --kill-after=10 110 "$PY" loadtest/run.py \
    --start-server --device cpu --models "$MODELS" --ready-timeout 60 \
    --users 4 --rps 4 --duration 20s --stop-timeout 10 \
    --max-texts 4 --max-p99-ms 15000 \
    --results loadtest/results/ci
