"""Each engine's memory knobs, and which knob each memory failure turns: the data behind the fallback fix values.

`fixvalues.NUMERIC_FIXES` holds hand-written rows (one label, one engine, one formula). This module generalises
them: a memory failure moves one of a few *kinds* of setting (the share of the card the engine takes, the sequences
run at once, the tokens of one step, the context a sequence may reach, the GPUs the weights are split over, …), and
every engine spells each kind its own way, with its own default. `fixvalues` turns the two tables into rows, so
that every (label, engine) pair gets a flag and a number:

1. from the setting the log printed (`{name}` read by the catalogue's settings, or `fixsettings` for the flags
   only a fix needs), moved by the label's step (halved, doubled, lowered by 0.05, …);
2. else from the engine's documented default, moved by the same step, the reason naming the default and its source;
3. else, for a setting whose default depends on the model or the card (a context length, a layer count), a stated
   starting value that makes the engine start, said so in the reason.

Sources (flag spellings and defaults, as each engine's CLI defines them):

- vLLM: `vllm/engine/arg_utils.py` `EngineArgs` and `vllm/config/{cache,scheduler,parallel}.py` (v0.11-v0.34):
  `--gpu-memory-utilization` 0.9 to 0.19, 0.92 from 0.20, 1.0 with 0.34's extensible KV cache (the logged release's
  default, from `vramctl.core.engines.vllm.rules`), `--max-num-seqs` 256 (the `LLM` class; the API server raises it on large cards),
  `--max-num-batched-tokens` 8192 (V1 API server, `_set_default_args`), `--tensor-parallel-size` 1, `--swap-space`
  4 (V0), `--max-model-len` the model's own (no fixed default).
- SGLang: `python/sglang/srt/server_args.py` `ServerArgs` (v0.4-v0.5.x): `--mem-fraction-static` 0.88 at TP 1
  (0.79-0.88 by TP size in v0.4; v0.5 derives it from the card's size), `--chunked-prefill-size` 8192,
  `--tp-size` 1, `--max-running-requests` and `--context-length` from the pool / the model (no fixed default).
- TGI: `launcher/src/main.rs` `Args` (v2-v3): `--cuda-memory-fraction` 1.0, `--max-concurrent-requests` 128,
  `--max-batch-prefill-tokens` 4096, `--num-shard` 1, `--max-total-tokens` from the model.
- TensorRT-LLM: `tensorrt_llm/commands/serve.py` (trtllm-serve) and `tensorrt_llm/llmapi/llm_args.py`
  `KvCacheConfig.free_gpu_memory_fraction` 0.9; `tensorrt_llm/builder.py` `BuildConfig`: `max_batch_size` 2048,
  `max_num_tokens` 8192; `--tp_size` 1; `--max_seq_len` from the model.
- LMDeploy: `lmdeploy/messages.py` `TurbomindEngineConfig` / `PytorchEngineConfig` and `lmdeploy/cli/utils.py`
  `ArgumentHelper` (v0.6+): `--cache-max-entry-count` 0.8, `--max-prefill-token-num` 8192, `--tp` 1,
  `--max-batch-size` by device (128-256), `--session-len` from the model.
- llama.cpp: `common/arg.cpp` / `common/common.h` (llama-server): `--ubatch-size` 512, `--batch-size` 2048,
  `--ctx-size` 4096 until 2025 (0 = the model's training context since), `--parallel` 1 (auto: 4 slots since
  2025), `--n-gpu-layers` all / auto.
- ExLlamaV2: `exllamav2/config.py` `ExLlamaV2Config` (`max_seq_len` from the model, `max_input_len` 2048).
- Ollama: `envconfig/config.go` (`OLLAMA_NUM_PARALLEL` 1, `OLLAMA_GPU_OVERHEAD` 0 bytes, `OLLAMA_MAX_LOADED_MODELS`
  3 per GPU), `api/types.go` `DefaultOptions` (`num_ctx` 2048, 4096 since v0.6.4; `num_batch` 512).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BUDGET", "CAUSE_STEPS", "EMBEDDING_ENGINES", "ENGINE_KNOBS", "ENGINE_NAMES", "STEPS", "Knob"]


@dataclass(frozen=True, slots=True)
class Knob:
    """One engine's spelling of one kind of setting."""

    flag: str
    """Exactly as the engine spells it: a CLI flag, an environment variable or a config key."""
    setting: str | None
    """The name the log's value is read under (None: the log never prints it)."""
    default: float | None = None
    """The engine's documented default (None: it depends on the model or the card)."""
    stated: float | None = None
    """Without a setting or a fixed default: a value that makes the engine start, said so in the reason."""
    default_name: str | None = None
    """The name of a default that depends on the engine's release (`fixvalues.release_defaults` puts it in the
    log's names); `default` is then the value used when the log names no release."""
    stated_note: str = ""
    kind: str = "float"
    """`float` (a ratio, 2 decimals), `int`, `bytes`."""


# the kinds of setting a memory failure moves
BUDGET = "budget"  # the share of the card (or of the free memory) the engine takes for weights + KV
SEQS = "seqs"  # sequences / requests run at once
TOKENS = "tokens"  # tokens of one forward step (prefill chunk, batched tokens, physical batch)
CONTEXT = "context"  # the longest sequence the KV cache is sized for
PARALLEL = "parallel"  # GPUs the weights are split over
LAYERS = "layers"  # layers offloaded to the GPU (llama.cpp)
GRAPHS = "graphs"  # the largest batch captured in a CUDA graph
OVERHEAD = "overhead"  # memory kept outside the engine's estimate (Ollama)
MODELS = "models"  # models kept loaded at once (Ollama)

ENGINE_KNOBS: dict[str, dict[str, Knob]] = {
    "vllm": {
        BUDGET: Knob(
            "--gpu-memory-utilization", "gpu_memory_utilization", 0.9, default_name="vllm_default_utilization"
        ),
        SEQS: Knob("--max-num-seqs", "max_num_seqs", 256, kind="int"),
        TOKENS: Knob("--max-num-batched-tokens", "max_num_batched_tokens", 8192, kind="int"),
        CONTEXT: Knob(
            "--max-model-len",
            "max_model_len",
            stated=8192,
            stated_note="vLLM's default is the model's own context, which the log does not print",
            kind="int",
        ),
        PARALLEL: Knob("--tensor-parallel-size", "tensor_parallel_size", 1, kind="int"),
    },
    "sglang": {
        BUDGET: Knob("--mem-fraction-static", "mem_fraction_static", 0.88),
        SEQS: Knob("--max-running-requests", "max_running_requests", kind="int"),
        TOKENS: Knob("--chunked-prefill-size", "chunked_prefill_size", 8192, kind="int"),
        CONTEXT: Knob(
            "--context-length",
            "max_model_len",
            stated=8192,
            stated_note="SGLang's default is the model's own context, which the log does not print",
            kind="int",
        ),
        PARALLEL: Knob("--tp-size", "tensor_parallel_size", 1, kind="int"),
        GRAPHS: Knob("--cuda-graph-max-bs", "cuda_graph_max_bs", kind="int"),
    },
    "tgi": {
        BUDGET: Knob("--cuda-memory-fraction", "cuda_memory_fraction", 1.0),
        SEQS: Knob("--max-concurrent-requests", None, 128, kind="int"),
        TOKENS: Knob("--max-batch-prefill-tokens", "max_batch_prefill_tokens", 4096, kind="int"),
        CONTEXT: Knob(
            "--max-total-tokens",
            "max_total_tokens",
            stated=4096,
            stated_note="TGI's default follows the model's context, which the log does not print",
            kind="int",
        ),
        PARALLEL: Knob("--num-shard", "num_shard", 1, kind="int"),
    },
    "trtllm": {
        BUDGET: Knob("--kv_cache_free_gpu_memory_fraction", "free_gpu_memory_fraction", 0.9),
        SEQS: Knob("--max_batch_size", "max_batch_size", 2048, kind="int"),
        TOKENS: Knob("--max_num_tokens", "max_num_tokens", 8192, kind="int"),
        CONTEXT: Knob(
            "--max_seq_len",
            "max_seq_len",
            stated=8192,
            stated_note="TensorRT-LLM deduces the default from the model's config, which the log does not print",
            kind="int",
        ),
        PARALLEL: Knob("--tp_size", "tensor_parallel_size", 1, kind="int"),
    },
    "lmdeploy": {
        BUDGET: Knob("--cache-max-entry-count", "cache_max_entry_count", 0.8),
        SEQS: Knob(
            "--max-batch-size",
            "max_batch_size",
            stated=64,
            stated_note="LMDeploy's default depends on the device (128-256)",
            kind="int",
        ),
        TOKENS: Knob("--max-prefill-token-num", "max_prefill_token_num", 8192, kind="int"),
        CONTEXT: Knob(
            "--session-len",
            "session_len",
            stated=8192,
            stated_note="LMDeploy's default is the model's own context, which the log does not print",
            kind="int",
        ),
        PARALLEL: Knob("--tp", "tensor_parallel_size", 1, kind="int"),
    },
    "llamacpp": {
        CONTEXT: Knob(
            "--ctx-size",
            "ctx_size",
            stated=4096,
            stated_note="llama-server's default was 4096 until 2025; since, 0 takes the model's whole training context",
            kind="int",
        ),
        SEQS: Knob(
            "--parallel",
            "n_parallel",
            stated=1,
            stated_note="one slot: the KV cache holds one sequence (llama-server's auto setting makes 4)",
            kind="int",
        ),
        TOKENS: Knob("--ubatch-size", "n_ubatch", 512, kind="int"),
        LAYERS: Knob(
            "--n-gpu-layers",
            "n_gpu_layers",
            stated=0,
            stated_note="no layer on the GPU always loads; raise it until the model no longer fits",
            kind="int",
        ),
    },
    # ExLlamaV2 (a library; TabbyAPI's config.yml spells its keys the same): exllamav2/config.py ExLlamaV2Config
    # max_seq_len (the model's context by default) and max_input_len (2048: the longest chunk of one forward pass)
    "exllamav2": {
        CONTEXT: Knob(
            "max_seq_len",
            "max_seq_len",
            stated=4096,
            stated_note="ExLlamaV2 sizes its cache for the model's own context, which the log does not print",
            kind="int",
        ),
        TOKENS: Knob("max_input_len", "max_input_len", 2048, kind="int"),
    },
    "ollama": {
        CONTEXT: Knob(
            "num_ctx",
            "num_ctx",
            stated=2048,
            stated_note="Ollama's default num_ctx was 2048 until v0.6.4, 4096 since",
            kind="int",
        ),
        SEQS: Knob(
            "OLLAMA_NUM_PARALLEL",
            "ollama_num_parallel",
            stated=1,
            stated_note="one request at a time: Ollama sizes the KV cache for num_ctx x OLLAMA_NUM_PARALLEL",
            kind="int",
        ),
        TOKENS: Knob("num_batch", "num_batch", 512, kind="int"),
        OVERHEAD: Knob(
            "OLLAMA_GPU_OVERHEAD",
            "ollama_gpu_overhead",
            stated=1 << 30,
            stated_note="1 GiB (bytes) kept free per GPU beside Ollama's estimate (its default is 0)",
            kind="bytes",
        ),
        MODELS: Knob(
            "OLLAMA_MAX_LOADED_MODELS",
            "ollama_max_loaded_models",
            stated=1,
            stated_note="one model on the GPU at a time (Ollama's default keeps up to 3 per GPU)",
            kind="int",
        ),
    },
}

ENGINE_NAMES = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tgi": "TGI",
    "trtllm": "TensorRT-LLM",
    "lmdeploy": "LMDeploy",
    "llamacpp": "llama.cpp",
    "ollama": "Ollama",
    "exllamav2": "ExLlamaV2",
}

EMBEDDING_ENGINES = frozenset({"ray", "lmcache"})
"""Runtimes that host a serving engine (vLLM's on Ray, LMCache inside vLLM): their logs take vLLM's rows after
their own, like a log that names no engine."""

# one step: (expression over X, words, how a value is rounded)
STEPS: dict[str, tuple[str, str]] = {
    "halve": ("floor(X / 2)", "halved"),
    "halve-ratio": ("floor2(X / 2)", "halved"),
    "double": ("2 * X", "doubled"),
    "lower-0.1": ("floor2(X - 0.1)", "minus 0.1"),
    "lower-0.05": ("floor2(X - 0.05)", "minus 0.05"),
    "lower-0.03": ("floor2(X - 0.03)", "minus 0.03"),
    "raise-0.05": ("min(0.95, floor2(X + 0.05))", "plus 0.05 (at most 0.95)"),
    "stated": ("X", ""),
}

_NOT_HOST_TIER = "startup-check weights-load profiling graph-capture kv-alloc serving unknown"
# a model refused at the start-up check for want of HOST memory (Ollama's `model requires more system memory`, its
# llm/server.go): fewer GPU layers or more GPU overhead move more of the model into the RAM that is short
_NOT_STARTUP = "weights-load profiling graph-capture kv-alloc serving host-tier unknown"

# label -> the knobs it turns, in order: (kind, step, phases or "")
CAUSE_STEPS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "gpu-util-exceeds-free-memory": (
        (MODELS, "stated", ""),
        (BUDGET, "lower-0.1", ""),
        (OVERHEAD, "stated", ""),
        (CONTEXT, "halve", ""),
    ),
    "version-regression": ((BUDGET, "lower-0.05", ""), (OVERHEAD, "stated", ""), (CONTEXT, "halve", "")),
    "weights-do-not-fit": (
        (PARALLEL, "double", ""),
        (LAYERS, "halve", _NOT_STARTUP),
        (OVERHEAD, "stated", _NOT_STARTUP),
        (CONTEXT, "halve", "startup-check"),
    ),
    "no-kv-cache-memory": ((BUDGET, "raise-0.05", ""), (CONTEXT, "halve", ""), (SEQS, "halve", "")),
    "kv-cache-too-small-for-max-model-len": ((CONTEXT, "halve", ""), (SEQS, "halve", "")),
    "kv-pool-overcommit": ((BUDGET, "lower-0.05", ""), (CONTEXT, "halve", ""), (OVERHEAD, "stated", "")),
    "multi-gpu-imbalance": ((BUDGET, "lower-0.1", ""), (OVERHEAD, "stated", ""), (CONTEXT, "halve", "")),
    "batch-budget-too-large": ((TOKENS, "halve", ""), (SEQS, "halve", ""), (CONTEXT, "halve", "")),
    "sampler-warmup-oom": ((SEQS, "halve", ""), (TOKENS, "halve", "")),
    "multimodal-profiling-oom": ((SEQS, "halve", ""), (CONTEXT, "halve", ""), (TOKENS, "halve", "")),
    "cuda-graph-capture-oom": (
        (GRAPHS, "halve", ""),
        (BUDGET, "lower-0.05", ""),
        (OVERHEAD, "stated", ""),
        (SEQS, "halve", ""),
        (TOKENS, "halve", ""),
    ),
    "logprobs-spike": ((TOKENS, "halve", ""), (SEQS, "halve", "")),
    "activation-spike": ((TOKENS, "halve", ""), (BUDGET, "lower-0.05", ""), (OVERHEAD, "stated", "")),
    "allocator-fragmentation": ((BUDGET, "lower-0.05", ""), (TOKENS, "halve", "")),
    "kv-pool-exhausted-runtime": ((SEQS, "halve", ""), (CONTEXT, "halve", "")),
    # a leak is fixed by an upgrade; a lower budget only buys time (the headroom it fills more slowly)
    "memory-leak": ((BUDGET, "lower-0.05", _NOT_HOST_TIER), (SEQS, "halve", _NOT_HOST_TIER)),
    "non-torch-allocation-oom": ((BUDGET, "lower-0.05", ""), (OVERHEAD, "stated", ""), (TOKENS, "halve", "")),
    "attention-workspace-overflow": ((TOKENS, "halve", ""),),
}


def markdown_tables() -> str:
    """The two tables as docs/explain-oom.md prints them (a test keeps them in step)."""
    lines = [
        "| engine | kind | flag | read from the log as | default, else stated value |",
        "| --- | --- | --- | --- | --- |",
    ]
    for engine, knobs in ENGINE_KNOBS.items():
        for kind, knob in knobs.items():
            if knob.default is not None:
                start = f"{knob.default:g}"
            elif knob.stated is not None:
                start = f"stated {knob.stated:g}"
            else:
                start = "(only the log's)"
            setting = f"`{knob.setting}`" if knob.setting else "(never printed)"
            lines.append(f"| {ENGINE_NAMES[engine]} | {kind} | `{knob.flag}` | {setting} | {start} |")
    lines += ["", "| label | settings moved, in order (step) |", "| --- | --- |"]
    for cause, steps in CAUSE_STEPS.items():
        moved = ", ".join(
            f"{kind} ({step}{_phases_note(phases)})" for kind, step, phases in steps
        )
        lines.append(f"| `{cause}` | {moved} |")
    return "\n".join(lines)


def _phases_note(phases: str) -> str:
    """How the knob table prints a row's phase restriction."""
    if not phases:
        return ""
    if phases == _NOT_HOST_TIER:
        return "; not host-tier"
    if phases == _NOT_STARTUP:
        return "; not at the start-up check"
    return "; only " + ", ".join(phases.split())
