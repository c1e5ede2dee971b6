#!/usr/bin/env bash
# vramctl GPU check: the measurements that need a CUDA device, in one call (< 8 minutes on an H100/H200).
#
#   1. pytest -m gpu            the gpu-marked tests (CUDA snapshots, graph capture, validate, OOM, NCCL)
#   2. profile Llama-3-8B       the worked example's model at the engine's default capture sizes (timed: the
#                               goal is < 20 s including CUDA initialisation), saved as a profile file
#   3. suggest + validate       the --kv-cache-memory-bytes suggestion, then proved by allocating it
#   4. profile an MoE config    Qwen3-30B-A3B, --num-layers 8 (the weights of the other layers are added
#                               linearly; see docs/profile.md)
#   5. tiers bench --device cuda --json
#
# Every step has its own time limit, and all of them share one budget (GPU_CHECK_BUDGET_S, 450 s by
# default, so the whole check ends well inside 8 minutes): a step gets min(its limit, what is left), and a
# step with under 15 s left is skipped and reported as such. A step that fails or times out does not stop
# the others. The report is written at the end, and also when the script is interrupted (Ctrl-C, a
# scheduler's SIGTERM): it always holds every step run so far and the numbers of those that passed.
#
# Writes a Markdown report to $OUT/gpu-check-report.md when $OUT is set, else docs/gpu-check-report.md,
# with every step's exit code, time and the measured numbers; the raw output of each step lands in
# gpu-check-raw/ next to it.
# Exit status: 0 when every step passed, 4 without a CUDA device, 2 when a needed package is missing (nothing
# written in either case), 1 otherwise.
#
# Knobs (environment): GPU_CHECK_DENSE_MODEL, GPU_CHECK_MOE_MODEL, GPU_CHECK_MOE_LAYERS, GPU_CHECK_BUDGET_S,
# GPU_CHECK_STEPS (a subset of: pytest-gpu profile-llama suggest-llama validate-llama profile-moe
# tiers-bench), GPU_CHECK_DEVICE (default cuda; `cpu` is a dry run of the script itself, used by its tests),
# GPU_CHECK_ARGS (extra flags for every profile / validate, e.g. a --device-memory for the dry run),
# PYTHON (default: python3, else python), VRAMCTL (default: "$PYTHON -m vramctl").
#
# Nothing needs installing: the checkout itself is put first on PYTHONPATH and run as `python -m vramctl`,
# so the check runs on a GPU machine with no network (torch, typer, rich and pyyaml must be importable;
# pynvml from nvidia-ml-py is used when present). What is missing is named before any step runs (exit 2).
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-$(command -v python3 || command -v python || echo python3)}"
# the code under test is this checkout, not whatever vramctl an environment has installed elsewhere
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

REPORT_DIR="${OUT:-docs}"
REPORT="$REPORT_DIR/gpu-check-report.md"
RAW="$REPORT_DIR/gpu-check-raw"
LLAMA="${GPU_CHECK_DENSE_MODEL:-meta-llama/Meta-Llama-3-8B-Instruct}"
MOE="${GPU_CHECK_MOE_MODEL:-Qwen/Qwen3-30B-A3B}"
MOE_LAYERS="${GPU_CHECK_MOE_LAYERS:-8}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-450}"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
STEPS="${GPU_CHECK_STEPS:-pytest-gpu profile-llama suggest-llama validate-llama profile-moe tiers-bench}"
read -r -a EXTRA <<<"${GPU_CHECK_ARGS:-}"
read -r -a VRAMCTL_CMD <<<"${VRAMCTL:-$PYTHON -m vramctl}"
MIN_STEP_S=15

missing=$("$PYTHON" - <<'PY' 2>&1
import importlib.util
need = ["torch", "typer", "rich", "yaml", "pytest", "hypothesis"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
  echo "gpu-check: $PYTHON lacks: $missing (install them, or carry their wheels: docs/gpu-check.md)" >&2
  exit 2
fi

if [ "$DEVICE" = "cuda" ] || [[ "$DEVICE" == cuda:* ]]; then
  if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-check: no CUDA device (torch.cuda.is_available() is False); nothing to check" >&2
    exit 4
  fi
fi

mkdir -p "$REPORT_DIR" "$RAW"
failures=0
declare -a ROWS=()
START_S=$(date +%s)
REPORTED=0

wants() { [[ " $STEPS " == *" $1 "* ]]; }

# step NAME LIMIT_S CMD... : run with a time limit (capped by the budget left); stdout → $RAW/NAME.out,
# stderr → $RAW/NAME.err; a row for the report either way.
step() {
  local name="$1" limit="$2"
  shift 2
  wants "$name" || return 0
  local left=$((BUDGET_S - ($(date +%s) - START_S)))
  if [ "$left" -lt "$MIN_STEP_S" ]; then
    ROWS+=("| $name | skipped | 0.0 | budget spent (${left} s of ${BUDGET_S} s left): \`$*\` |")
    failures=$((failures + 1))
    echo "gpu-check: $name skipped: the ${BUDGET_S} s budget is spent" >&2
    return 0
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  local start end rc secs
  start=$(date +%s.%N)
  # in the background + wait, so that Ctrl-C / SIGTERM reach the trap at once (timeout runs its command in
  # a process group of its own: the terminal's SIGINT does not reach it, and a foreground child would
  # hold the trap until the step ended)
  timeout -k 10 "$limit" "$@" >"$RAW/$name.out" 2>"$RAW/$name.err" </dev/null &
  CURRENT_PID=$!
  CURRENT_STEP=$name
  wait "$CURRENT_PID"
  rc=$?
  CURRENT_PID=""
  end=$(date +%s.%N)
  secs=$("$PYTHON" -c "print(f'{$end - $start:.1f}')")
  local what="\`$*\`"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    what="timed out after ${limit} s: $what"
  fi
  ROWS+=("| $name | $rc | $secs | $what |")
  if [ "$rc" -ne 0 ]; then
    failures=$((failures + 1))
    echo "gpu-check: $name failed (exit $rc); see $RAW/$name.err" >&2
  else
    echo "gpu-check: $name ok (${secs} s)" >&2
  fi
  return 0
}

write_report() {
  [ "$REPORTED" -eq 1 ] && return 0
  REPORTED=1
  "$PYTHON" - "$RAW" "$REPORT" "$failures" "$1" "$(($(date +%s) - START_S))" "$BUDGET_S" "${ROWS[@]}" <<'PY'
import json, platform, subprocess, sys
from pathlib import Path

raw, report = Path(sys.argv[1]), Path(sys.argv[2])
failures, status, elapsed, budget, rows = int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7:]
GiB = 2**30
GOAL_S = 20.0

def load(name):
    try:
        return json.loads((raw / f"{name}.out").read_text())
    except Exception:
        return None

def gib(x):
    return f"{x / GiB:.2f}"

def smi():
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        ).stdout.strip() or "nvidia-smi printed nothing"
    except Exception:
        return "nvidia-smi unavailable"

def section(title, build):
    """One report section; a step whose JSON lacks a key still leaves the rest of the report."""
    try:
        return build()
    except Exception as exc:
        return [f"## {title}", "", f"- (could not summarise: {type(exc).__name__}: {exc})", ""]

lines = ["# vramctl GPU check report", ""]
try:
    import torch
    if torch.cuda.is_available():
        lines.append(f"- device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, CUDA {torch.version.cuda}")
    else:
        lines.append(f"- device: none (dry run); torch {torch.__version__}")
except Exception:
    pass
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
except Exception:
    commit = "?"
lines += [f"- nvidia-smi: {smi()}", f"- host: {platform.node()}; commit {commit or '?'}",
          f"- {elapsed} s of the {budget} s budget used; {status}", ""]
lines += ["| step | exit | seconds | command |", "| --- | ---: | ---: | --- |", *rows, ""]

def profile_section(name):
    out = load(name)
    if not out:
        return []
    def build():
        t = out["terms"]
        r = out["measurements"]["ranks"][0]
        wall = float(out["wall_seconds"])
        goal = "" if name != "profile-llama" else (
            f" (goal < {GOAL_S:.0f} s: {'met' if wall < GOAL_S else 'NOT met'}; the step's row adds the "
            "Python and torch import)")
        return [
            f"## {name}: {out['model']['name']}",
            "",
            f"- wall {wall:.1f} s{goal}; phases: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in r["phase_seconds"].items()),
            f"- total {gib(out['capacity_bytes'])} GiB, requested {gib(out['requested_bytes'])} GiB",
            f"- weights {gib(t['weights']['bytes'])} GiB (tensors {gib(r['weight_tensor_bytes'])} GiB built, "
            f"{r['layers_built']}/{r['layers_total']} layers), non-torch {gib(t['non_torch']['bytes'])} GiB, "
            f"activation peak {gib(t['activation_peak']['bytes'])} GiB",
            f"- CUDA graphs: estimate {gib(r['cuda_graph_estimate_bytes'])} GiB, actual pool "
            f"{gib(r['cuda_graph_actual_bytes'])} GiB over {len(r['cuda_graph_samples_bytes'])} captures",
            f"- KV {gib(out['kv_cache_bytes'])} GiB = {out['num_blocks']:,} blocks, {out['kv_tokens']:,} tokens, "
            f"{out['max_concurrency']}x; verdict {out['verdict']}",
            f"- SGLang: mfs {out['sglang']['mem_fraction_static']}, {out['sglang']['max_total_num_tokens']:,} tokens",
            "",
        ]
    return section(name, build)

for name in ("profile-llama", "profile-moe"):
    lines += profile_section(name)

sug = load("suggest-llama")
if sug:
    lines += section("suggest (Llama)", lambda: [
        "## suggest (Llama)", "", f"- fit requested: `{sug['fit_requested']['vllm_flag']}`",
        f"- fill the card: `{sug['fill_gpu']['vllm_flag']}`",
        f"- SGLang: `{sug['fit_requested']['sglang_flags']}`",
        f"- graph pool counted once: {gib(sug['graph_bytes'])} GiB ({sug['graph_source']}); vLLM's own log "
        f"would suggest {sug['vllm_logged']['fit_requested_bytes']:,} bytes", ""])
val = load("validate-llama")
if val:
    lines += section("validate (Llama)", lambda: [
        "## validate (Llama)", "", f"- {val['verdict']}: KV {gib(val['kv_cache_memory_bytes'])} GiB, "
        f"free left {gib(val['free_left_bytes'])} GiB, tightest {gib(val['worst_free_bytes'])} GiB, "
        f"{val['graphs_captured']} graphs replayed", ""])
bench = load("tiers-bench")
if bench:
    lines += ["## tiers bench", "", "```json", json.dumps(bench, indent=1)[:3000], "```", ""]
for row in rows:
    name = row.split("|")[1].strip()
    err = raw / f"{name}.err"
    if "| 0 |" not in row and err.exists():
        tail = err.read_text(errors="replace").strip().splitlines()[-8:]
        if tail:
            lines += [f"## {name}: last lines of stderr", "", "```", *tail, "```", ""]
verdict = "PASS" if failures == 0 and status == "complete" else f"FAIL ({failures} step(s) failed or skipped)"
if status != "complete":
    verdict = f"PARTIAL ({status}; {failures} step(s) failed or skipped so far)"
lines.append(f"**{verdict}**")
report.write_text("\n".join(lines) + "\n")
print(report)
PY
}

CURRENT_PID=""
CURRENT_STEP=""
on_signal() {
  echo "gpu-check: interrupted; stopping ${CURRENT_STEP:-the check} and writing the partial report" >&2
  if [ -n "$CURRENT_PID" ]; then
    kill -TERM "$CURRENT_PID" 2>/dev/null
    wait "$CURRENT_PID" 2>/dev/null
    ROWS+=("| $CURRENT_STEP | interrupted | - | stopped by $1 |")
    failures=$((failures + 1))
  fi
  write_report "interrupted by $1"
  exit 1
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

# Limits: pytest 150 + profile 90 + suggest 30 + validate 90 + MoE 90 + bench 60 = 510 s, capped by the
# 450 s budget; the expected total on an H100/H200 is ~3 minutes.
step pytest-gpu 150 "$PYTHON" -m pytest -m gpu tests -q -rs -p no:cacheprovider
step profile-llama 90 "${VRAMCTL_CMD[@]}" profile "$LLAMA" --device "$DEVICE" "${EXTRA[@]}" --save "$RAW/llama.json" --json
step suggest-llama 30 "${VRAMCTL_CMD[@]}" suggest --kv-cache-memory --from-profile "$RAW/llama.json" --json
step validate-llama 90 "${VRAMCTL_CMD[@]}" validate --from-profile "$RAW/llama.json" --device "$DEVICE" "${EXTRA[@]}" --json
step profile-moe 90 "${VRAMCTL_CMD[@]}" profile "$MOE" --device "$DEVICE" "${EXTRA[@]}" --num-layers "$MOE_LAYERS" --json
step tiers-bench 60 "${VRAMCTL_CMD[@]}" tiers bench --device "$DEVICE" --json

write_report complete
[ "$failures" -eq 0 ] || exit 1
exit 0
