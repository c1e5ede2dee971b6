#!/usr/bin/env bash
# vramctl GPU check: the measurements that need a CUDA device, in one call (< 8 minutes on an H100/H200).
#
#   1. pytest -m gpu            the gpu-marked tests (CUDA snapshots, graph capture, validate, OOM, NCCL)
#   2. profile Llama-3-8B       the seed chapter's model at the engine's default capture sizes (timed: the
#                               goal is < 20 s including CUDA initialisation), saved as a profile file
#   3. suggest + validate       the --kv-cache-memory-bytes suggestion, then proved by allocating it
#   4. profile an MoE config    Qwen3-30B-A3B, --num-layers 8 (the weights of the other layers are added
#                               linearly; see docs/profile.md)
#   5. tiers bench --device cuda, when that command exists
#
# Writes a Markdown report to $OUT/gpu-check-report.md when $OUT is set, else docs/gpu-check-report.md,
# with every step's exit code, time and the measured numbers; the raw JSON lands next to it.
# Exit status: 0 when every step passed, 4 without a CUDA device, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

REPORT_DIR="${OUT:-docs}"
REPORT="$REPORT_DIR/gpu-check-report.md"
RAW="$REPORT_DIR/gpu-check-raw"
LLAMA="${GPU_CHECK_DENSE_MODEL:-meta-llama/Meta-Llama-3-8B-Instruct}"
MOE="${GPU_CHECK_MOE_MODEL:-Qwen/Qwen3-30B-A3B}"
MOE_LAYERS="${GPU_CHECK_MOE_LAYERS:-8}"
VRAMCTL="${VRAMCTL:-vramctl}"

if ! python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu-check: no CUDA device (torch.cuda.is_available() is False); nothing to check" >&2
  exit 4
fi

mkdir -p "$REPORT_DIR" "$RAW"
failures=0
declare -a ROWS=()

# step NAME TIMEOUT_S CMD... : run with a time limit; stdout → $RAW/NAME.out, stderr → $RAW/NAME.err
step() {
  local name="$1" limit="$2"
  shift 2
  local start end rc
  start=$(date +%s.%N)
  timeout "$limit" "$@" >"$RAW/$name.out" 2>"$RAW/$name.err"
  rc=$?
  end=$(date +%s.%N)
  local secs
  secs=$(python -c "print(f'{$end - $start:.1f}')")
  ROWS+=("| $name | $rc | $secs | \`$*\` |")
  if [ "$rc" -ne 0 ]; then
    failures=$((failures + 1))
    echo "gpu-check: $name failed (exit $rc); see $RAW/$name.err" >&2
  else
    echo "gpu-check: $name ok (${secs} s)" >&2
  fi
  return 0
}

step pytest-gpu 240 python -m pytest -m gpu tests -q -rs
step profile-llama 180 "$VRAMCTL" profile "$LLAMA" --device cuda --save "$RAW/llama.json" --json
step suggest-llama 60 "$VRAMCTL" suggest --kv-cache-memory --from-profile "$RAW/llama.json" --json
step validate-llama 180 "$VRAMCTL" validate --from-profile "$RAW/llama.json" --device cuda --json
step profile-moe 180 "$VRAMCTL" profile "$MOE" --device cuda --num-layers "$MOE_LAYERS" --json
if "$VRAMCTL" tiers bench --help >/dev/null 2>&1; then
  step tiers-bench 120 "$VRAMCTL" tiers bench --device cuda --json
fi

python - "$RAW" "$REPORT" "$failures" "${ROWS[@]}" <<'PY'
import json, platform, subprocess, sys
from pathlib import Path

raw, report, failures, rows = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
GiB = 2**30

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
        ).stdout.strip()
    except Exception:
        return "nvidia-smi unavailable"

lines = ["# vramctl GPU check report", ""]
try:
    import torch
    lines.append(f"- device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, CUDA {torch.version.cuda}")
except Exception:
    pass
lines += [f"- nvidia-smi: {smi()}", f"- host: {platform.node()}", ""]
lines += ["| step | exit | seconds | command |", "| --- | ---: | ---: | --- |", *rows, ""]
for name in ("profile-llama", "profile-moe"):
    out = load(name)
    if not out:
        continue
    t = out["terms"]
    r = out["measurements"]["ranks"][0]
    lines += [
        f"## {name}: {out['model']['name']}",
        "",
        f"- wall {out['wall_seconds']} s; phases: "
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
sug = load("suggest-llama")
if sug:
    lines += ["## suggest (Llama)", "", f"- fit requested: `{sug['fit_requested']['vllm_flag']}`",
              f"- fill the card: `{sug['fill_gpu']['vllm_flag']}`",
              f"- SGLang: `{sug['fit_requested']['sglang_flags']}`",
              f"- graph pool counted once: {gib(sug['graph_bytes'])} GiB ({sug['graph_source']}); vLLM's own log "
              f"would suggest {sug['vllm_logged']['fit_requested_bytes']:,} bytes", ""]
val = load("validate-llama")
if val:
    lines += ["## validate (Llama)", "", f"- {val['verdict']}: KV {gib(val['kv_cache_memory_bytes'])} GiB, "
              f"free left {gib(val['free_left_bytes'])} GiB, tightest {gib(val['worst_free_bytes'])} GiB, "
              f"{val['graphs_captured']} graphs replayed", ""]
lines.append(f"**{'PASS' if failures == 0 else f'FAIL ({failures} step(s))'}**")
report.write_text("\n".join(lines) + "\n")
print(report)
PY

[ "$failures" -eq 0 ] || exit 1
exit 0
