"""The settings only a fix needs, read again from the log when the number would otherwise be a default.

The catalogue reads the settings its rules decide with (vLLM / SGLang / TGI / LMDeploy flags and args lines). The
fix values of `fixknobs` also use settings no rule needs: llama.cpp's context, slots and offloaded layers, Ollama's
environment and options, TensorRT-LLM's KV fraction and batch limits, vLLM's CPU offload. When the fix explain-oom
found rests on an engine's default or a stated value, the log (a file up to `MAX_PLAN_LOG_BYTES`, the same bound as
the plan-checked fix) is read once more for these lines only, and the fix is computed again from what it printed.

| name | read from (as the engine prints it) |
| --- | --- |
| `ctx_size` | llama.cpp `--ctx-size N` / `-c N` on a command line, `n_ctx = N` / `n_ctx_per_seq = N` (llama_context, src/llama-context.cpp) |
| `n_parallel` | `--parallel N` / `-np N`, `n_seq_max = N` (llama_context) |
| `n_gpu_layers` | `--n-gpu-layers N` / `-ngl N`, `offloaded N/M layers to GPU`, `offloading N repeating layers to GPU` (llama-model.cpp `load_tensors`) |
| `n_ubatch` | `--ubatch-size N` / `-ub N`, `n_ubatch = N` (llama_context) |
| `ollama` | the word `ollama` (its server and runner lines) |
| `num_ctx`, `ollama_num_parallel`, `num_batch` | Ollama's runner command (`--ctx-size` is num_ctx x OLLAMA_NUM_PARALLEL, `--parallel`, `--batch-size`) and its `server config` map (`OLLAMA_NUM_PARALLEL:N`, envconfig/config.go) |
| `free_gpu_memory_fraction` | TensorRT-LLM `free_gpu_memory_fraction=0.9` / `--kv_cache_free_gpu_memory_fraction 0.9` |
| `max_batch_size`, `max_num_tokens` | TensorRT-LLM / LMDeploy `max_batch_size=N`, `--max_batch_size N`, `max_num_tokens` |
| `cpu_offload_gb`, `kv_offloading_size` | vLLM / SGLang `cpu_offload_gb` / `--cpu-offload-gb`, `kv_offloading_size` / `--kv-offloading-size` |
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ["FIX_SETTINGS", "read_fix_settings"]

_N = r"(\d+(?:\.\d+)?)"
# name -> patterns (the first group is the value); later lines win (the setting in force at the failure)
FIX_SETTINGS: dict[str, tuple[str, ...]] = {
    "ctx_size": (rf"(?:--ctx-size|(?<![\w-])-c)[ =]{_N}\b", rf"\bn_ctx(?:_per_seq)?\s*=\s*{_N}\b"),
    "n_parallel": (rf"(?:--parallel|(?<![\w-])-np)[ =]{_N}\b", rf"\bn_seq_max\s*=\s*{_N}\b"),
    "n_gpu_layers": (
        rf"(?:--n-gpu-layers|(?<![\w-])-ngl)[ =]{_N}\b",
        rf"\boffloaded {_N}/\d+ layers to GPU",
        rf"\boffloading {_N} repeating layers to GPU",
    ),
    "n_ubatch": (rf"(?:--ubatch-size|(?<![\w-])-ub)[ =]{_N}\b", rf"\bn_ubatch\s*=\s*{_N}\b"),
    "n_batch": (rf"(?:--batch-size|(?<![\w-])-b)[ =]{_N}\b",),
    "ollama_num_parallel_env": (rf"\bOLLAMA_NUM_PARALLEL[:=]{_N}\b",),
    "free_gpu_memory_fraction": (
        rf"(?:free_gpu_memory_fraction['\"]?\s*[:=]\s*|--kv_cache_free_gpu_memory_fraction[ =]){_N}",
    ),
    "max_batch_size": (rf"(?:max_batch_size['\"]?\s*[:=]\s*|--max_batch_size[ =]|--max-batch-size[ =]){_N}",),
    "max_num_tokens": (rf"(?:max_num_tokens['\"]?\s*[:=]\s*|--max_num_tokens[ =]){_N}",),
    "cpu_offload_gb": (rf"(?:cpu_offload_gb['\"]?\s*[:=]\s*|--cpu-offload-gb[ =]){_N}",),
    "kv_offloading_size": (rf"(?:kv_offloading_size['\"]?\s*[:=]\s*|--kv-offloading-size[ =]){_N}",),
}
_WORDS = (
    rb"ctx-size|n_ctx|-c |-np |--parallel|n_seq_max|n-gpu-layers|-ngl|offload|ubatch|n_ubatch|batch-size|-b |"
    rb"OLLAMA_NUM_PARALLEL|[Oo]llama|free_gpu_memory_fraction|max_batch_size|max-batch-size|max_num_tokens|"
    rb"cpu_offload_gb|cpu-offload-gb|kv_offloading_size|kv-offloading-size"
)
_COMPILED = {name: tuple(re.compile(p) for p in patterns) for name, patterns in FIX_SETTINGS.items()}
_OLLAMA = re.compile(r"(?i)\bollama\b|ollama_llama_server|OLLAMA_")


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


def read_fix_settings(source: object, max_bytes: int) -> dict[str, Any]:
    """The fix-only settings the log prints (empty for a stream, a missing file or one over `max_bytes`)."""
    if not isinstance(source, (str, os.PathLike)) or str(source) == "-" or not os.path.isfile(source):
        return {}
    if os.path.getsize(source) > max_bytes:
        return {}
    from vramctl.diagnose.reader import iter_matching_lines

    found: dict[str, Any] = {}
    for line in iter_matching_lines(source, re.compile(_WORDS)):
        text = line.text
        if _OLLAMA.search(text):
            found["ollama"] = True
        for name, patterns in _COMPILED.items():
            for pattern in patterns:
                m = pattern.search(text)
                if m is not None:
                    found[name] = _number(m.group(1))
                    break
    if found.get("ollama"):
        # Ollama's runner gets --ctx-size = num_ctx x OLLAMA_NUM_PARALLEL and --parallel = OLLAMA_NUM_PARALLEL
        parallel = found.get("n_parallel") or found.get("ollama_num_parallel_env")
        if isinstance(parallel, int) and parallel >= 1:
            found["ollama_num_parallel"] = parallel
            if isinstance(found.get("ctx_size"), int):
                found["num_ctx"] = found["ctx_size"] // parallel
        if "n_batch" in found:
            found["num_batch"] = found["n_batch"]
    found.pop("ollama_num_parallel_env", None)
    return found


def _from_default(reason: str) -> bool:
    from vramctl.diagnose.fixvalues import VALUE_NOTE

    note = reason.partition(VALUE_NOTE)[2]
    return bool(note) and ("default" in note or "stated" in note)


def refine_fixes(
    cause: str,
    phase: str,
    facts: dict[str, Any],
    engine: str | None,
    fixes: tuple[Any, ...],
    source: object,
    max_bytes: int,
    make: Any,
    version: str | None = None,
) -> tuple[Any, ...] | None:
    """The fixes with a default-based number computed again from the fix-only settings the log prints, or None when
    nothing changes (no such fix, no such setting, the same answer). `make(action, flag, value, reason)`."""
    from vramctl.diagnose.fixvalues import VALUE_NOTE, numeric_fix

    at = next(
        (i for i, f in enumerate(fixes) if f.flag and f.value is not None and _from_default(f.reason)),
        None,
    )
    if at is None:
        return None
    extra = read_fix_settings(source, max_bytes)
    if not extra:
        return None
    names = {**extra, **facts}
    found = numeric_fix(cause, phase, names, engine, version)
    if found is None:
        return None
    flag, value, action, reason = found
    old = fixes[at]
    if (flag, value) == (old.flag, str(old.value)) and reason in old.reason:
        return None
    advice = make(action, flag, value, f"{VALUE_NOTE}{reason}")
    rest = [f for i, f in enumerate(fixes) if i != at and not (f.flag == flag and f.value is None)]
    return (*rest[:at], advice, *rest[at:])
