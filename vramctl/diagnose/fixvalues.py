"""A flag with a number for every memory failure: values from the log's settings, else from the engine's defaults.

The catalogue's fixes are computed from the numbers of the failing message (free, total, requested, the KV
terms). Many real logs print none of them, or only a setting; `complete_fixes` then adds (or fills in) one
fix per label whose value comes, in this order, from

1. the setting the log printed (non-default args, Namespace, ServerArgs, a command line): halve a token /
   sequence budget, move a utilisation by a fixed step, double a parallel size;
2. the engine's documented default when the log does not print the setting, said so in the reason.

The table is data (`NUMERIC_FIXES`): one row per (label, flag), tried in order; the first row whose value
can be computed wins. The hand-written rows (`HAND_FIXES`) come first; then the rows generated from
`fixknobs` (every engine's spelling and default of each kind of setting, and the kinds each label moves), so that
every label gets a number on every engine. A log that names no engine, or only a runtime that hosts one (Ray,
LMCache), takes vLLM's rows after its own; an Ollama log (`ollama` among the names, set by `fixsettings`) takes
Ollama's before llama.cpp's. A row that steps a setting must move it (`moves`). Defaults, with their sources:

- vLLM `--gpu-memory-utilization`: the logged release's default (`release_defaults`, from
  `vramctl.core.engines.vllm.rules`: 0.9 to 0.19, 0.92 from 0.20, 1.0 with 0.34's extensible KV cache), 0.9 when
  the log names no release (`vllm/config/cache.py` `CacheConfig.gpu_memory_utilization`), `--max-num-seqs` 256 (`SchedulerConfig.max_num_seqs`, the `LLM` class and
  smaller GPUs; the API server uses 1024 on 70 GiB+ cards since 0.8), `--max-num-batched-tokens` 8192 for the
  V1 API server (`EngineArgs._set_default_args_v1`, v0.11.0), `--swap-space` 4 GiB (`CacheConfig.swap_space`,
  V0), `VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE` 394 MiB (`vllm/envs.py`, v0.11.0).
- SGLang `SGLANG_FLASHINFER_WORKSPACE_SIZE` 384 MiB (`python/sglang/srt/environ.py`, v0.5.x), `--hicache-ratio`
  2.0 (`server_args.py`).
- LMCache `max_local_cpu_size` 5.0 GB (`lmcache/v1/config.py`, `LMCACHE_MAX_LOCAL_CPU_SIZE`).
- SGLang `--chunked-prefill-size` 8192 on large GPUs (`python/sglang/srt/server_args.py`
  `_handle_gpu_memory_settings`, v0.5.x; 2048-4096 on small ones).
- TGI `--max-batch-prefill-tokens` 4096 (`launcher/src/main.rs`, v2.x).
- Ray `RAY_memory_usage_threshold` 0.95 (`src/ray/common/ray_config_def.h`, `memory_usage_threshold`).

Values are written plainly (no thousands separators) so that they paste into a command line.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vramctl.diagnose.facts import compile_expression, evaluate, fill
from vramctl.diagnose.fixknobs import (
    BUDGET,
    CAUSE_STEPS,
    EMBEDDING_ENGINES,
    ENGINE_KNOBS,
    ENGINE_NAMES,
    STEPS,
)

__all__ = [
    "HAND_FIXES",
    "NUMERIC_FIXES",
    "NumericFix",
    "complete_fixes",
    "foreign_flag",
    "is_numeric_value",
    "plain_value",
]


# vLLM's spellings of its flags. A fix written without an engine uses them (vLLM's, and vLLM's under a framework that
# embeds it); an engine with its own command line does not take them, and its own rows below offer its own flag.
_VLLM_FLAGS = frozenset(
    {
        "--max-model-len",
        "--gpu-memory-utilization",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--enforce-eager",
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--quantization",
        "--swap-space",
        "--kv-cache-memory-bytes",
        "--limit-mm-per-prompt",
        "--cpu-offload-gb",
    }
)
# Per engine, the vLLM spellings its CLI does not accept: SGLang python/sglang/srt/server_args.py (v0.5.x) spells them
# --context-length, --mem-fraction-static, --max-running-requests, --chunked-prefill-size, --disable-cuda-graph (it
# has --quantization, --tp-size and --cpu-offload-gb); LMDeploy lmdeploy/cli/utils.py ArgumentHelper (--session-len,
# --tp, --cache-max-entry-count, --max-batch-size, --model-format), TGI launcher/src/main.rs (--max-total-tokens,
# --num-shard, --quantize, --cuda-memory-fraction), llama.cpp common/arg.cpp (-c, -ngl, --tensor-split), ExLlamaV2 and
# TensorRT-LLM's trtllm-build (--tp_size, --max_seq_len) take none of them.
_FOREIGN_FLAGS: dict[str, frozenset[str]] = {
    "sglang": frozenset(
        {
            "--max-model-len",
            "--gpu-memory-utilization",
            "--max-num-seqs",
            "--max-num-batched-tokens",
            "--enforce-eager",
            "--swap-space",
            "--kv-cache-memory-bytes",
            "--limit-mm-per-prompt",
        }
    ),
    "lmdeploy": _VLLM_FLAGS,
    "tgi": _VLLM_FLAGS,
    "llamacpp": _VLLM_FLAGS,
    "exllamav2": _VLLM_FLAGS,
    "trtllm": _VLLM_FLAGS,
    # Ollama's runner is llama.cpp's, configured through a Modelfile / API options and OLLAMA_* variables
    "ollama": _VLLM_FLAGS,
}


def foreign_flag(flag: str | None, engine: str | None) -> bool:
    """True when `flag` is vLLM's spelling and the log's engine has its own command line without it."""
    return flag is not None and engine is not None and flag in _FOREIGN_FLAGS.get(engine, frozenset())


@dataclass(frozen=True, slots=True)
class NumericFix:
    """One row: for `cause`, set `flag` to `value` (an expression over the log's facts and settings)."""

    cause: str
    flag: str
    engines: tuple[str, ...]
    """The engines whose flag this is; `vllm` rows also apply when the log names no engine."""
    value: str
    """Expression; unknown names make the row not apply (the next row is tried)."""
    action: str
    reason: str
    phases: tuple[str, ...] = ()
    """Only in these phases (empty: any)."""
    kind: str = "float"
    """`float` (2 decimals), `int`, `bytes` (an integer number of bytes) or `Gi` (a Kubernetes quantity, whole GiB)."""
    moves: str = ""
    """`up:NAME` / `down:NAME` (several, space-separated): the value must be above / below the log's NAME (a step that
    would not move it is no fix: 0.95 is no raise of 0.97)."""


def _row(
    cause: str,
    flag: str,
    engines: str,
    value: str,
    action: str,
    reason: str,
    *,
    phases: str = "",
    kind: str = "float",
    moves: str = "",
) -> NumericFix:
    return NumericFix(
        cause, flag, tuple(engines.split()), value, action, reason, tuple(phases.split()), kind, moves
    )


_FROM_LOG = "from the log's setting"
NUMERIC_FIXES: tuple[NumericFix, ...] = (
    # ---- start-up budget: the utilisation must fit under what is free
    _row(
        "gpu-util-exceeds-free-memory",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(gpu_memory_utilization - 0.1)",
        "lower the utilisation so that u x total fits beside the other processes",
        f"{_FROM_LOG} {{gpu_memory_utilization}} minus 0.1 (the log does not print the free memory)",
    ),
    _row(
        "gpu-util-exceeds-free-memory",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(vllm_default_utilization - 0.1)",
        "lower the utilisation so that u x total fits beside the other processes",
        "{vllm_default_words} minus 0.1 (the log prints neither the utilisation nor the free memory)",
        moves="down:vllm_default_utilization",
    ),
    _row(
        "gpu-util-exceeds-free-memory",
        "--mem-fraction-static",
        "sglang",
        "floor2(mem_fraction_static - 0.1)",
        "lower the static fraction so that it fits beside the other processes",
        f"{_FROM_LOG} {{mem_fraction_static}} minus 0.1",
    ),
    _row(
        "version-regression",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(gpu_memory_utilization - 0.05)",
        "lower the utilisation a little (the newer stack uses more memory before the budget), or pin the version that worked",
        f"{_FROM_LOG} {{gpu_memory_utilization}} minus 0.05",
    ),
    _row(
        "version-regression",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(vllm_default_utilization - 0.05)",
        "lower the utilisation a little (the newer stack uses more memory before the budget), or pin the version that worked",
        "{vllm_default_words} minus 0.05",
        moves="down:vllm_default_utilization",
    ),
    _row(
        "version-regression",
        "--mem-fraction-static",
        "sglang",
        "floor2(mem_fraction_static - 0.05)",
        "lower the static fraction a little, or pin the version that worked",
        f"{_FROM_LOG} {{mem_fraction_static}} minus 0.05",
    ),
    # ---- the weights: more GPUs
    _row(
        "weights-do-not-fit",
        "--tensor-parallel-size",
        "vllm",
        "2 * tensor_parallel_size",
        "spread the weights over twice the GPUs",
        f"{_FROM_LOG} {{tensor_parallel_size}} doubled",
        kind="int",
    ),
    _row(
        "weights-do-not-fit",
        "--tensor-parallel-size",
        "vllm",
        "2",
        "spread the weights over two GPUs (or more)",
        "the log prints no parallel size: the default 1 GPU doubled",
        kind="int",
    ),
    _row(
        "weights-do-not-fit",
        "--tp-size",
        "sglang",
        "2 * tensor_parallel_size",
        "spread the weights over twice the GPUs",
        f"{_FROM_LOG} {{tensor_parallel_size}} doubled",
        kind="int",
    ),
    _row(
        "weights-do-not-fit",
        "--tp-size",
        "sglang",
        "2",
        "spread the weights over two GPUs (or more)",
        "the log prints no parallel size: the default 1 GPU doubled",
        kind="int",
    ),
    # TGI shards the model over `--num-shard` GPUs (docs/source/basic_tutorials/launcher.md, v2.x); LMDeploy over
    # `--tp` (lmdeploy/cli/utils.py ArgumentHelper.tp, v0.6+)
    _row(
        "weights-do-not-fit",
        "--num-shard",
        "tgi",
        "2 * num_shard",
        "spread the weights over twice the GPUs",
        f"{_FROM_LOG} {{num_shard}} doubled",
        kind="int",
    ),
    _row(
        "weights-do-not-fit",
        "--num-shard",
        "tgi",
        "2",
        "spread the weights over two GPUs (or more)",
        "the log prints no shard count: the default 1 GPU doubled",
        kind="int",
    ),
    _row(
        "weights-do-not-fit",
        "--tp",
        "lmdeploy",
        "2 * tensor_parallel_size",
        "spread the weights over twice the GPUs",
        f"{_FROM_LOG} {{tensor_parallel_size}} doubled",
        kind="int",
    ),
    _row(
        "weights-do-not-fit",
        "--tp",
        "lmdeploy",
        "2",
        "spread the weights over two GPUs (or more)",
        "the log prints no parallel size: the default 1 GPU doubled",
        kind="int",
    ),
    # ---- the KV budget
    _row(
        "no-kv-cache-memory",
        "--gpu-memory-utilization",
        "vllm",
        "min(0.95, floor2(gpu_memory_utilization + 0.05))",
        "RAISE the utilisation: the KV cache gets what is left of the budget",
        f"{_FROM_LOG} {{gpu_memory_utilization}} plus 0.05 (at most 0.95)",
    ),
    _row(
        "no-kv-cache-memory",
        "--gpu-memory-utilization",
        "vllm",
        "min(0.95, floor2(vllm_default_utilization + 0.05))",
        "RAISE the utilisation: the KV cache gets what is left of the budget",
        "{vllm_default_words} plus 0.05 (at most 0.95)",
        moves="up:vllm_default_utilization",
    ),
    _row(
        "no-kv-cache-memory",
        "--mem-fraction-static",
        "sglang",
        "min(0.95, floor2(mem_fraction_static + 0.05))",
        "RAISE the static fraction: the KV pool gets what is left of it",
        f"{_FROM_LOG} {{mem_fraction_static}} plus 0.05",
    ),
    _row(
        "no-kv-cache-memory",
        "--ctx-size",
        "llamacpp",
        "floor(ctx_size / 2)",
        "halve the context the KV cache is sized for",
        f"{_FROM_LOG} {{ctx_size}} halved",
        kind="int",
    ),
    # the engine printed its KV cache size in tokens: no sequence can be longer
    _row(
        "kv-cache-too-small-for-max-model-len",
        "--max-model-len",
        "vllm",
        "kv_tokens",
        "cap the context length at what the KV cache holds",
        "the KV cache holds {kv_tokens} tokens (the engine's own line)",
        kind="int",
        moves="down:max_model_len",
    ),
    _row(
        "kv-cache-too-small-for-max-model-len",
        "--context-length",
        "sglang",
        "kv_tokens",
        "cap the context length at what the KV pool holds",
        "the KV pool holds {kv_tokens} tokens (the engine's own line)",
        kind="int",
        moves="down:max_model_len",
    ),
    _row(
        "kv-cache-too-small-for-max-model-len",
        "--max-model-len",
        "vllm",
        "floor(max_model_len / 2)",
        "halve the context length (the log does not print the length the KV cache holds)",
        f"{_FROM_LOG} {{max_model_len}} halved",
        kind="int",
    ),
    _row(
        "kv-cache-too-small-for-max-model-len",
        "--context-length",
        "sglang",
        "floor(max_model_len / 2)",
        "halve the context length",
        f"{_FROM_LOG} {{max_model_len}} halved",
        kind="int",
    ),
    # LMDeploy sizes a session's KV for `session_len` (lmdeploy/messages.py TurbomindEngineConfig.session_len, v0.6+):
    # halve it; TGI's longest request is `--max-total-tokens`
    _row(
        "no-kv-cache-memory",
        "--session-len",
        "lmdeploy",
        "floor(session_len / 2)",
        "halve the context a session's KV cache is sized for",
        f"{_FROM_LOG} {{session_len}} halved",
        kind="int",
    ),
    _row(
        "kv-cache-too-small-for-max-model-len",
        "--session-len",
        "lmdeploy",
        "floor(session_len / 2)",
        "halve the context a session's KV cache is sized for",
        f"{_FROM_LOG} {{session_len}} halved",
        kind="int",
    ),
    _row(
        "kv-cache-too-small-for-max-model-len",
        "--max-total-tokens",
        "tgi",
        "floor(max_total_tokens / 2)",
        "halve the longest request (prompt + output) the KV cache must hold",
        f"{_FROM_LOG} {{max_total_tokens}} halved",
        kind="int",
    ),
    _row(
        "gpu-util-exceeds-free-memory",
        "--cuda-memory-fraction",
        "tgi",
        "floor2(cuda_memory_fraction - 0.1)",
        "leave the memory other processes hold: lower the share of the card TGI takes",
        f"{_FROM_LOG} {{cuda_memory_fraction}} minus 0.1",
    ),
    _row(
        "gpu-util-exceeds-free-memory",
        "--cuda-memory-fraction",
        "tgi",
        "0.9",
        "leave the memory other processes hold: lower the share of the card TGI takes",
        "TGI's default is 1.0 (the whole card)",
    ),
    _row(
        "gpu-util-exceeds-free-memory",
        "--cache-max-entry-count",
        "lmdeploy",
        "floor2(cache_max_entry_count / 2)",
        "halve the share of free memory the KV blocks take",
        f"{_FROM_LOG} {{cache_max_entry_count}} halved",
    ),
    _row(
        "gpu-util-exceeds-free-memory",
        "--cache-max-entry-count",
        "lmdeploy",
        "0.4",
        "halve the share of free memory the KV blocks take",
        "half of LMDeploy's default 0.8",
    ),
    _row(
        "kv-pool-overcommit",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(gpu_memory_utilization - 0.03)",
        "lower the utilisation a little so the pool allocation fits",
        f"{_FROM_LOG} {{gpu_memory_utilization}} minus 0.03",
    ),
    _row(
        "kv-pool-overcommit",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(vllm_default_utilization - 0.03)",
        "lower the utilisation a little so the pool allocation fits",
        "{vllm_default_words} minus 0.03",
        moves="down:vllm_default_utilization",
    ),
    _row(
        "kv-pool-overcommit",
        "--max-total-tokens",
        "sglang",
        "floor(max_total_tokens / 2)",
        "halve the KV pool the engine allocates",
        f"{_FROM_LOG} {{max_total_tokens}} halved",
        kind="int",
    ),
    _row(
        "kv-pool-overcommit",
        "--mem-fraction-static",
        "sglang",
        "floor2(mem_fraction_static - 0.03)",
        "lower the static fraction a little",
        f"{_FROM_LOG} {{mem_fraction_static}} minus 0.03",
    ),
    # LMDeploy TurboMind: the KV blocks take cache_max_entry_count of the free memory (0.8 by default since v0.2.1,
    # lmdeploy/messages.py TurbomindEngineConfig; docs/en/faq.md "OOM": lower it)
    _row(
        "kv-pool-overcommit",
        "--cache-max-entry-count",
        "lmdeploy",
        "floor2(cache_max_entry_count / 2)",
        "halve the share of free memory the KV blocks take",
        f"{_FROM_LOG} {{cache_max_entry_count}} halved",
    ),
    _row(
        "kv-pool-overcommit",
        "--cache-max-entry-count",
        "lmdeploy",
        "0.4",
        "halve the share of free memory the KV blocks take",
        "half of LMDeploy's default 0.8",
    ),
    # ---- warm-up / profiling: the token and sequence budgets
    _row(
        "batch-budget-too-large",
        "--max-num-batched-tokens",
        "vllm",
        "floor(max_num_batched_tokens / 2)",
        "halve the token budget of one forward pass",
        f"{_FROM_LOG} {{max_num_batched_tokens}} halved",
        kind="int",
    ),
    _row(
        "batch-budget-too-large",
        "--max-num-batched-tokens",
        "vllm",
        "4096",
        "lower the token budget of one forward pass (with chunked prefill)",
        "half of vLLM V1's API-server default 8192",
        kind="int",
    ),
    _row(
        "batch-budget-too-large",
        "--chunked-prefill-size",
        "sglang",
        "floor(chunked_prefill_size / 2)",
        "halve the prefill chunk",
        f"{_FROM_LOG} {{chunked_prefill_size}} halved",
        kind="int",
    ),
    _row(
        "batch-budget-too-large",
        "--chunked-prefill-size",
        "sglang",
        "4096",
        "lower the prefill chunk",
        "half of SGLang's default 8192 on large GPUs",
        kind="int",
    ),
    _row(
        "batch-budget-too-large",
        "--max-batch-prefill-tokens",
        "tgi",
        "floor(max_batch_prefill_tokens / 2)",
        "halve the prefill token budget",
        f"{_FROM_LOG} {{max_batch_prefill_tokens}} halved",
        kind="int",
    ),
    _row(
        "batch-budget-too-large",
        "--max-batch-prefill-tokens",
        "tgi",
        "2048",
        "lower the prefill token budget",
        "half of TGI's default 4096",
        kind="int",
    ),
    # llama.cpp: the compute buffers follow the physical batch n_ubatch (common/common.h default 512; -ub)
    _row(
        "batch-budget-too-large",
        "--ubatch-size",
        "llamacpp",
        "floor(n_ubatch / 2)",
        "halve the physical batch the compute buffers are sized for",
        f"{_FROM_LOG} {{n_ubatch}} halved",
        kind="int",
    ),
    _row(
        "batch-budget-too-large",
        "--ubatch-size",
        "llamacpp",
        "256",
        "halve the physical batch the compute buffers are sized for",
        "half of llama.cpp's default n_ubatch 512",
        kind="int",
    ),
    _row(
        "sampler-warmup-oom",
        "--max-num-seqs",
        "vllm",
        "floor(max_num_seqs / 2)",
        "halve the number of sequences",
        f"{_FROM_LOG} {{max_num_seqs}} halved",
        kind="int",
    ),
    _row(
        "sampler-warmup-oom",
        "--max-num-seqs",
        "vllm",
        "128",
        "lower the number of sequences: the sampler warm-up holds max_num_seqs x vocab fp32 logits",
        "half of vLLM's default 256 (the API server uses 1024 on 70 GiB+ cards: 128 is below both)",
        kind="int",
    ),
    _row(
        "multimodal-profiling-oom",
        "--max-model-len",
        "vllm",
        "floor(max_model_len / 2)",
        "halve the context the dummy multimodal inputs are sized for",
        f"{_FROM_LOG} {{max_model_len}} halved",
        kind="int",
    ),
    _row(
        "multimodal-profiling-oom",
        "--max-num-seqs",
        "vllm",
        "floor(max_num_seqs / 2)",
        "halve the sequences the profiling batch holds",
        f"{_FROM_LOG} {{max_num_seqs}} halved",
        kind="int",
    ),
    _row(
        "multimodal-profiling-oom",
        "--max-num-seqs",
        "vllm",
        "32",
        "fewer sequences in the profiling batch (and --limit-mm-per-prompt for fewer items)",
        "well below vLLM's default 256: the encoder profiling scales with the dummy batch",
        kind="int",
    ),
    _row(
        "cuda-graph-capture-oom",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(gpu_memory_utilization - 0.03)",
        "lower the utilisation so the graph pool fits beside the KV cache",
        f"{_FROM_LOG} {{gpu_memory_utilization}} minus 0.03",
    ),
    _row(
        "cuda-graph-capture-oom",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(vllm_default_utilization - 0.03)",
        "lower the utilisation so the graph pool fits beside the KV cache",
        "{vllm_default_words} minus 0.03",
        moves="down:vllm_default_utilization",
    ),
    _row(
        "cuda-graph-capture-oom",
        "--mem-fraction-static",
        "sglang",
        "floor2(mem_fraction_static - 0.03)",
        "lower the static fraction so the graphs fit",
        f"{_FROM_LOG} {{mem_fraction_static}} minus 0.03",
    ),
    _row(
        "cuda-graph-capture-oom",
        "--cuda-graph-max-bs",
        "sglang",
        "floor(cuda_graph_max_bs / 2)",
        "capture fewer batch sizes",
        f"{_FROM_LOG} {{cuda_graph_max_bs}} halved",
        kind="int",
    ),
    _row(
        "cuda-graph-capture-oom",
        "--cuda-graph-max-bs",
        "sglang",
        "64",
        "capture fewer batch sizes (the graph pool grows with them)",
        "below SGLang's defaults (160-256 on large GPUs)",
        kind="int",
    ),
    # ---- serving: transient tensors scale with the tokens of one step
    _row(
        "logprobs-spike",
        "--max-num-batched-tokens",
        "vllm",
        "floor(max_num_batched_tokens / 2)",
        "halve the tokens per step: prompt logprobs hold tokens x vocab fp32 logits",
        f"{_FROM_LOG} {{max_num_batched_tokens}} halved",
        kind="int",
    ),
    _row(
        "logprobs-spike",
        "--max-num-batched-tokens",
        "vllm",
        "2048",
        "fewer tokens per step (chunked prefill): prompt logprobs hold tokens x vocab fp32 logits",
        "a quarter of vLLM V1's API-server default 8192",
        kind="int",
    ),
    _row(
        "logprobs-spike",
        "--chunked-prefill-size",
        "sglang",
        "floor(chunked_prefill_size / 2)",
        "halve the prefill chunk: logprobs hold tokens x vocab fp32 logits",
        f"{_FROM_LOG} {{chunked_prefill_size}} halved",
        kind="int",
    ),
    _row(
        "logprobs-spike",
        "--chunked-prefill-size",
        "sglang",
        "2048",
        "smaller prefill chunks: logprobs hold tokens x vocab fp32 logits",
        "a quarter of SGLang's default 8192",
        kind="int",
    ),
    _row(
        "activation-spike",
        "--max-num-batched-tokens",
        "vllm",
        "floor(max_num_batched_tokens / 2)",
        "halve the tokens of one step: the transient tensors scale with them",
        f"{_FROM_LOG} {{max_num_batched_tokens}} halved",
        kind="int",
    ),
    _row(
        "activation-spike",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(gpu_memory_utilization - 0.05)",
        "keep more activation headroom: lower the utilisation",
        f"{_FROM_LOG} {{gpu_memory_utilization}} minus 0.05",
    ),
    _row(
        "activation-spike",
        "--max-num-batched-tokens",
        "vllm",
        "4096",
        "fewer tokens per step (chunked prefill): the transient tensors scale with them",
        "half of vLLM V1's API-server default 8192",
        kind="int",
    ),
    _row(
        "activation-spike",
        "--chunked-prefill-size",
        "sglang",
        "floor(chunked_prefill_size / 2)",
        "halve the prefill chunk",
        f"{_FROM_LOG} {{chunked_prefill_size}} halved",
        kind="int",
    ),
    _row(
        "activation-spike",
        "--chunked-prefill-size",
        "sglang",
        "4096",
        "smaller prefill chunks",
        "half of SGLang's default 8192",
        kind="int",
    ),
    _row(
        "activation-spike",
        "--max-batch-prefill-tokens",
        "tgi",
        "floor(max_batch_prefill_tokens / 2)",
        "halve the prefill token budget",
        f"{_FROM_LOG} {{max_batch_prefill_tokens}} halved",
        kind="int",
    ),
    # LMDeploy's prefill chunk (`--max-prefill-token-num`, TurbomindEngineConfig.max_prefill_token_num default 8192 in
    # lmdeploy/messages.py, v0.6+) bounds the transient tensors of one forward
    _row(
        "activation-spike",
        "--max-prefill-token-num",
        "lmdeploy",
        "floor(max_prefill_token_num / 2)",
        "halve the tokens of one prefill chunk: the transient tensors scale with them",
        f"{_FROM_LOG} {{max_prefill_token_num}} halved",
        kind="int",
    ),
    _row(
        "activation-spike",
        "--max-prefill-token-num",
        "lmdeploy",
        "4096",
        "halve the tokens of one prefill chunk: the transient tensors scale with them",
        "half of LMDeploy's default 8192",
        kind="int",
    ),
    _row(
        "activation-spike",
        "--max-batch-prefill-tokens",
        "tgi",
        "2048",
        "lower the prefill token budget: the transient tensors scale with it",
        "half of TGI's default 4096",
        kind="int",
    ),
    _row(
        "allocator-fragmentation",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(gpu_memory_utilization - 0.03)",
        "and leave the allocator some slack: lower the utilisation a little",
        f"{_FROM_LOG} {{gpu_memory_utilization}} minus 0.03",
    ),
    _row(
        "allocator-fragmentation",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(vllm_default_utilization - 0.03)",
        "and leave the allocator some slack: lower the utilisation a little",
        "{vllm_default_words} minus 0.03",
        moves="down:vllm_default_utilization",
    ),
    _row(
        "kv-pool-exhausted-runtime",
        "--max-running-requests",
        "sglang",
        "floor(max_running_requests / 2)",
        "halve the requests run at once",
        f"{_FROM_LOG} {{max_running_requests}} halved",
        kind="int",
    ),
    # SGLang's batch lines print how many requests ran when the pool ran out (`#running-req: N`): half of them
    _row(
        "kv-pool-exhausted-runtime",
        "--max-running-requests",
        "sglang",
        "max(1, floor(running_reqs / 2))",
        "cap the requests run at once below the batch that filled the pool",
        "half of the {running_reqs} requests the last batch line shows running",
        kind="int",
    ),
    # nothing printed: plan for more decode growth before admitting requests (SGLang's default
    # schedule_conservativeness 1.0, python/sglang/srt/server_args.py)
    _row(
        "kv-pool-exhausted-runtime",
        "--schedule-conservativeness",
        "sglang",
        "1.3",
        "reserve more of the pool for decoding before admitting new requests",
        "SGLang's default 1.0 raised by 0.3",
    ),
    _row(
        "kv-pool-exhausted-runtime",
        "--max-num-seqs",
        "vllm",
        "floor(max_num_seqs / 2)",
        "halve the sequences run at once",
        f"{_FROM_LOG} {{max_num_seqs}} halved",
        kind="int",
    ),
    _row(
        "kv-pool-exhausted-runtime",
        "--max-num-seqs",
        "vllm",
        "128",
        "fewer sequences at once",
        "half of vLLM's default 256",
        kind="int",
    ),
    _row(
        "non-torch-allocation-oom",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(gpu_memory_utilization - 0.05)",
        "leave memory outside the KV budget for library buffers: lower the utilisation",
        f"{_FROM_LOG} {{gpu_memory_utilization}} minus 0.05",
    ),
    _row(
        "non-torch-allocation-oom",
        "--gpu-memory-utilization",
        "vllm",
        "floor2(vllm_default_utilization - 0.05)",
        "leave memory outside the KV budget for library buffers: lower the utilisation",
        "{vllm_default_words} minus 0.05",
        moves="down:vllm_default_utilization",
    ),
    _row(
        "non-torch-allocation-oom",
        "--mem-fraction-static",
        "sglang",
        "floor2(mem_fraction_static - 0.05)",
        "leave memory outside the static budget: lower the fraction",
        f"{_FROM_LOG} {{mem_fraction_static}} minus 0.05",
    ),
    # ---- attention workspace: FlashInfer's buffer is a fixed size (vllm/envs.py)
    _row(
        "attention-workspace-overflow",
        "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE",
        "vllm",
        "max(2 * 394 * MiB, ceil(buffer_request_bytes / MiB) * 2 * MiB)",
        "enlarge FlashInfer's workspace (bytes)",
        "at least twice what the failing buffer asked for ({buffer_request_bytes} bytes)",
        kind="bytes",
    ),
    _row(
        "attention-workspace-overflow",
        "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE",
        "vllm",
        "2 * 394 * MiB",
        "enlarge FlashInfer's workspace (bytes)",
        "twice vLLM's default of 394 MiB",
        kind="bytes",
    ),
    _row(
        "attention-workspace-overflow",
        "SGLANG_FLASHINFER_WORKSPACE_SIZE",
        "sglang",
        "max(2 * 384 * MiB, ceil(buffer_request_bytes / MiB) * 2 * MiB)",
        "enlarge FlashInfer's workspace (bytes)",
        "at least twice what the failing buffer asked for ({buffer_request_bytes} bytes)",
        kind="bytes",
    ),
    _row(
        "attention-workspace-overflow",
        "SGLANG_FLASHINFER_WORKSPACE_SIZE",
        "sglang",
        "2 * 384 * MiB",
        "enlarge FlashInfer's workspace (bytes)",
        "twice SGLang's default of 384 MiB",
        kind="bytes",
    ),
    # ---- host memory
    _row(
        "host-pinned-memory-failure",
        "LMCACHE_MAX_LOCAL_CPU_SIZE",
        "lmcache",
        "max_local_cpu_size / 2",
        "halve the pinned CPU buffer (GB)",
        f"{_FROM_LOG} {{max_local_cpu_size}} halved",
    ),
    _row(
        "host-pinned-memory-failure",
        "LMCACHE_MAX_LOCAL_CPU_SIZE",
        "lmcache",
        "2.5",
        "halve the pinned CPU buffer (GB)",
        "half of LMCache's default 5.0",
    ),
    _row(
        "host-pinned-memory-failure",
        "--hicache-ratio",
        "sglang",
        "hicache_ratio / 2",
        "halve the host KV pool (a ratio of the GPU pool)",
        f"{_FROM_LOG} {{hicache_ratio}} halved",
    ),
    _row(
        "host-pinned-memory-failure",
        "--hicache-ratio",
        "sglang",
        "1",
        "halve the host KV pool (a ratio of the GPU pool)",
        "half of SGLang's default 2.0",
    ),
    _row(
        "host-kv-buffer-exhausted",
        "LMCACHE_MAX_LOCAL_CPU_SIZE",
        "lmcache",
        "2 * max_local_cpu_size",
        "double the CPU buffer (GB)",
        f"{_FROM_LOG} {{max_local_cpu_size}} doubled",
    ),
    _row(
        "host-kv-buffer-exhausted",
        "LMCACHE_MAX_LOCAL_CPU_SIZE",
        "lmcache",
        "10",
        "double the CPU buffer (GB)",
        "twice LMCache's default 5.0",
    ),
    _row(
        "host-kv-buffer-exhausted",
        "--hicache-ratio",
        "sglang",
        "2 * hicache_ratio",
        "double the host KV pool (a ratio of the GPU pool)",
        f"{_FROM_LOG} {{hicache_ratio}} doubled",
    ),
    _row(
        "host-kv-buffer-exhausted",
        "--hicache-ratio",
        "sglang",
        "4",
        "double the host KV pool (a ratio of the GPU pool)",
        "twice SGLang's default 2.0",
    ),
    _row(
        "host-swap-space-exhausted",
        "--swap-space",
        "vllm",
        "2 * swap_space",
        "double the CPU swap space (GiB per GPU)",
        f"{_FROM_LOG} {{swap_space}} doubled",
    ),
    _row(
        "host-swap-space-exhausted",
        "--swap-space",
        "vllm",
        "8",
        "double the CPU swap space (GiB per GPU)",
        "twice vLLM's default 4",
    ),
    _row(
        "host-pinned-memory-failure",
        "--swap-space",
        "vllm",
        "floor(swap_space / 2)",
        "halve the pinned CPU swap space (GiB per GPU)",
        f"{_FROM_LOG} {{swap_space}} halved",
    ),
    # a container killed at its cgroup limit (Kubernetes `OOMKilled`): raise the limit the log printed by half
    _row(
        "host-oom-killer",
        "resources.limits.memory",
        "any",
        "ceil(1.5 * container_memory_limit_bytes / GiB)",
        "raise the container's memory limit (the pod spec's resources.limits.memory) by half",
        "the log's container memory limit {container_memory_limit_bytes:gib} plus half",
        kind="Gi",
    ),
    # the kernel's line names what the killed process held (`anon-rss:…kB`): a limit half as large again
    _row(
        "host-oom-killer",
        "resources.limits.memory",
        "any",
        "ceil(1.5 * anon_rss_bytes / GiB)",
        "give the container (the pod spec's resources.limits.memory; docker run --memory) room for what the process held",
        "the killed process held {anon_rss_bytes:gib} of host RAM (the kernel's anon-rss) plus half",
        kind="Gi",
    ),
    # Ray's object store takes 30 % of the node's RAM by default (python/ray/_private/ray_constants.py
    # DEFAULT_OBJECT_STORE_MEMORY_PROPORTION); the memory monitor counts it: half of it leaves the workers room
    _row(
        "host-oom-killer",
        "--object-store-memory",
        "ray",
        "floor(0.15 * host_total_bytes)",
        "give Ray's workers more of the node: a smaller object store (ray start --object-store-memory, bytes)",
        "half of Ray's default object store, 30 % of the node's {host_total_bytes:gib}",
        kind="bytes",
    ),
    _row(
        "host-oom-killer",
        "RAY_memory_usage_threshold",
        "ray",
        "0.98",
        "if Ray's memory monitor killed the worker, raise its threshold (or give the node more RAM)",
        "Ray kills workers above this host-memory fraction; its default is 0.95",
    ),
    _row(
        "host-oom-killer",
        "--max-parallel-loading-workers",
        "vllm",
        "1",
        "load the checkpoint one worker at a time (each rank otherwise reads its shards into host RAM at once)",
        "the kernel ended a worker while the weights were loading; by default every rank loads at once",
        phases="weights-load startup-check",
        kind="int",
    ),
    # vLLM V0 pins swap_space GiB of host RAM per GPU worker for the CPU KV cache right after profiling
    # (vllm/worker/cache_engine.py CacheEngine._allocate_kv_cache on "cpu"; CacheConfig swap_space default 4)
    _row(
        "host-oom-killer",
        "--swap-space",
        "vllm",
        "floor(swap_space / 2)",
        "halve the CPU swap space each worker pins in host RAM when the KV cache is created",
        f"{_FROM_LOG} {{swap_space}} GiB per GPU halved",
        phases="profiling kv-alloc graph-capture",
        kind="int",
    ),
    _row(
        "host-oom-killer",
        "--swap-space",
        "vllm",
        "2",
        "halve the CPU swap space each worker pins in host RAM when the KV cache is created (vLLM V0)",
        "half of vLLM V0's default 4 GiB per GPU",
        phases="profiling kv-alloc graph-capture",
        kind="int",
    ),
    # a leak in the host KV tier: a smaller CPU buffer takes longer to fill the host (LMCache's default 5.0 GB,
    # SGLang's --hicache-ratio 2.0); the leak itself needs the upgrade
    _row(
        "memory-leak",
        "LMCACHE_MAX_LOCAL_CPU_SIZE",
        "lmcache vllm",
        "max_local_cpu_size / 2",
        "buy time until the leak is fixed (upgrade, or report it): halve the CPU buffer (GB)",
        f"{_FROM_LOG} {{max_local_cpu_size}} halved",
        phases="host-tier",
    ),
    _row(
        "memory-leak",
        "LMCACHE_MAX_LOCAL_CPU_SIZE",
        "lmcache vllm",
        "2.5",
        "buy time until the leak is fixed (upgrade, or report it): halve the CPU buffer (GB)",
        "half of LMCache's default 5.0",
        phases="host-tier",
    ),
    _row(
        "memory-leak",
        "--hicache-ratio",
        "sglang",
        "1",
        "buy time until the leak is fixed (upgrade, or report it): halve the host KV pool",
        "half of SGLang's default 2.0",
        phases="host-tier",
    ),
    # vLLM V0 pins --swap-space GiB per GPU (CacheConfig.swap_space default 4, vllm/config.py)
    _row(
        "host-pinned-memory-failure",
        "--swap-space",
        "vllm",
        "2",
        "halve the pinned CPU swap space (GiB per GPU)",
        "half of vLLM V0's default 4 GiB per GPU",
        kind="int",
    ),
    # vLLM's own CPU offloading of the KV cache (--kv-offloading-size GiB, vllm/config/cache.py, v0.11+)
    _row(
        "host-kv-buffer-exhausted",
        "--kv-offloading-size",
        "vllm",
        "2 * kv_offloading_size",
        "double the CPU buffer the KV cache is offloaded to (GiB)",
        f"{_FROM_LOG} {{kv_offloading_size}} doubled",
    ),
    _row(
        "host-kv-buffer-exhausted",
        "LMCACHE_MAX_LOCAL_CPU_SIZE",
        "vllm",
        "10",
        "double LMCache's CPU buffer (GB; the offload layer vLLM runs for a host KV tier)",
        "twice LMCache's default 5.0",
    ),
    # vLLM's CPU weight offload (--cpu-offload-gb GiB per GPU) is host RAM each worker holds
    _row(
        "host-oom-killer",
        "--cpu-offload-gb",
        "vllm sglang",
        "floor(cpu_offload_gb / 2)",
        "halve the weights each worker keeps in host RAM",
        f"{_FROM_LOG} {{cpu_offload_gb}} GiB halved",
        kind="int",
    ),
    _row(
        "host-oom-killer",
        "--kv-offloading-size",
        "vllm",
        "floor(kv_offloading_size / 2)",
        "halve the host RAM the KV cache is offloaded to (GiB)",
        f"{_FROM_LOG} {{kv_offloading_size}} halved",
        kind="int",
    ),
    # no host number but the weights this rank loaded (`Model loading took X GiB`, SGLang's `mem usage=X GB`): a
    # container's memory cgroup counts the page cache of the checkpoint files it reads (safetensors are mmap'd) as
    # well as the process, so a limit under twice the shard is the usual kill; a floor, not a measurement
    _row(
        "host-oom-killer",
        "resources.limits.memory",
        "any",
        "max(16, ceil(2 * weights_bytes / GiB))",
        "give the container (the pod spec's resources.limits.memory; docker run --memory) at least this much",
        "twice the {weights_bytes:gib} of weights the log says this rank loaded (at least 16Gi): the container's"
        " memory counts the checkpoint's page cache as well as the process",
        kind="Gi",
    ),
)


_KIND_ACTIONS: dict[str, tuple[str, str]] = {
    # kind -> (action when the value goes down, action when it goes up)
    "budget": (
        "lower the share of the card {engine} takes (leave room outside its budget)",
        "RAISE the share of the card {engine} takes: the KV cache gets what is left of it",
    ),
    "seqs": ("run fewer sequences at once", "run more sequences at once"),
    "tokens": ("fewer tokens per forward step: the transient tensors scale with them", ""),
    "context": ("cap the context the KV cache is sized for", ""),
    "parallel": ("", "spread the weights over more GPUs"),
    "layers": ("offload fewer layers to the GPU (the rest run on the CPU)", ""),
    "graphs": ("capture CUDA graphs for fewer batch sizes", ""),
    "overhead": ("", "keep memory free beside the engine's own estimate"),
    "models": ("keep one model loaded on the GPU at a time", ""),
}


RELEASE_DEFAULT_NAMES = frozenset(
    knob.default_name for knobs in ENGINE_KNOBS.values() for knob in knobs.values() if knob.default_name
)
"""The names `release_defaults` adds (a row over one of them is a default row, not a setting row)."""

_VLLM_BUDGET = ENGINE_KNOBS["vllm"][BUDGET]
"""vLLM's `--gpu-memory-utilization` knob: its `default` (0.9, that of 0.6-0.19, the releases most logs without a
version banner come from) is the one a log that names no release takes."""


def release_defaults(names: Mapping[str, Any], engine: str | None, version: str | None) -> dict[str, Any]:
    """`names` with the defaults that depend on the engine's release: `vllm_default_utilization` (vLLM's
    `--gpu-memory-utilization` when unset: `VllmRules.default_utilization`, or 1.0 where the extensible KV cache
    sizes the pool, unless the log sets `kv_cache_memory_bytes`) and `vllm_default_words` (how a reason names it).
    A log that names no vLLM release takes the knob's own default (`_VLLM_BUDGET`)."""
    util = _VLLM_BUDGET.default
    assert util is not None  # fixknobs gives vLLM's budget knob its default
    words = f"vLLM's default {util:g}"
    if version and engine in (None, "vllm", *EMBEDDING_ENGINES):
        from vramctl.core.engines.vllm import rules as vllm_rules
        from vramctl.core.errors import BadInputError

        try:
            rules = vllm_rules.rules_for(version)
        except (BadInputError, ValueError):
            rules = None
        if rules is not None:
            extensible = rules.extensible_kv_cache and not names.get("kv_cache_memory_bytes")
            util = vllm_rules.EXTENSIBLE_DEFAULT_UTILIZATION if extensible else rules.default_utilization
            shown = f"{util:.1f}" if util == int(util) else f"{util:g}"
            words = f"vLLM {version}'s default {shown}" + (" (its extensible KV cache)" if extensible else "")
    return {**names, "vllm_default_utilization": util, "vllm_default_words": words}


def _knob_rows() -> tuple[NumericFix, ...]:
    """The rows of `fixknobs`: per label, the knobs it turns; per engine, its spelling, the log's setting, then the
    default (or a stated value)."""
    rows: list[NumericFix] = []
    for cause, steps in CAUSE_STEPS.items():
        for kind, step, phases in steps:
            for engine, knobs in ENGINE_KNOBS.items():
                knob = knobs.get(kind)
                if knob is None:
                    continue
                name = ENGINE_NAMES[engine]
                if step == "halve" and knob.kind == "float":
                    step = "halve-ratio"
                formula, words = STEPS[step]
                up = step in ("double", "raise-0.05") or kind == "overhead"
                action = _KIND_ACTIONS[kind][1 if up else 0].format(engine=name)
                if cause == "memory-leak":
                    action = f"buy time until the leak is fixed (upgrade, or report it): {action}"
                row_kind = knob.kind
                # the step over the log's setting, then over a default that depends on the release (an expression
                # over it, computed when the fix is made)
                named: list[tuple[str, str]] = []
                if knob.setting is not None and step != "stated":
                    named.append((knob.setting, f"{_FROM_LOG} {{{knob.setting}}} {words}"))
                if knob.default_name is not None and step != "stated":
                    named.append(
                        (knob.default_name, f"{knob.flag} is {{vllm_default_words}} where the log does not print it; {words}")
                    )
                for name, reason in named:
                    rows.append(
                        _row(
                            cause,
                            knob.flag,
                            engine,
                            formula.replace("X", name),
                            action,
                            reason,
                            phases=phases,
                            kind=row_kind,
                            moves=f"{'up' if up else 'down'}:{name}",
                        )
                    )
                if knob.default_name is not None and step != "stated":
                    continue
                if knob.default is not None and step != "stated":
                    value = evaluate(compile_expression(formula.replace("X", repr(float(knob.default)))), {})
                    if (
                        value is None
                        or value <= 0
                        or (up and value <= knob.default)
                        or (not up and value >= knob.default)
                    ):
                        continue
                    shown = _format(float(value), row_kind)
                    default = _format(float(knob.default), row_kind)
                    reason = f"{knob.flag} is {name}'s default {default} where the log does not print it; {words}: {shown}"
                elif knob.stated is not None:
                    shown = _format(float(knob.stated), row_kind)
                    reason = f"a stated starting value {shown} (the log prints no {knob.flag}; {knob.stated_note})"
                else:
                    continue
                rows.append(_row(cause, knob.flag, engine, shown, action, reason, phases=phases, kind=row_kind))
    return tuple(rows)


VALUE_NOTE = "value: "
"""Starts the part of a reason that says where a value not printed in the failing message came from."""

_NUMBER_RE = re.compile(r"^[+-]?\d[\d,_]*(?:\.\d+)?$")
_NUMERIC_WORD_RE = re.compile(r"^(?:\d+(?:\.\d+)?[a-zA-Z]{0,3}|[a-z_]+:\d+)$")
_SEPARATED_RE = re.compile(r"(?<=\d)[,_](?=\d{3}(?:\D|$))")


def plain_value(value: str) -> str:
    """`205,728` -> `205728`: a value without thousands separators pastes into a command line."""
    if _NUMBER_RE.match(value.strip()):
        return _SEPARATED_RE.sub("", value.strip())
    return value


def is_numeric_value(value: object) -> bool:
    """A fix value that is a number (`0.85`, `4096`) or a size with a unit (`16g`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    return isinstance(value, str) and bool(_NUMBER_RE.match(value) or _NUMERIC_WORD_RE.match(value))


def _format(value: float, kind: str) -> str:
    if kind in ("int", "bytes"):
        return str(int(value))
    if kind == "Gi":  # a Kubernetes quantity
        return f"{int(value)}Gi"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _applies(row: NumericFix, engine: str, phase: str) -> bool:
    if row.phases and phase not in row.phases:
        return False
    return engine in row.engines or "any" in row.engines


def _engine_order(engine: str | None, names: Mapping[str, Any]) -> tuple[str, ...]:
    """Whose rows are tried, in order: the engine's own; Ollama's before llama.cpp's when the log is Ollama's (it
    runs llama.cpp but takes its settings as environment variables and model options); vLLM's for a log that names no
    engine or only a runtime that hosts one (Ray, LMCache)."""
    if engine is None:
        return ("vllm",)
    if engine == "llamacpp" and names.get("ollama"):
        return ("ollama", "llamacpp")
    if engine in EMBEDDING_ENGINES:
        return (engine, "vllm")
    return (engine,)


def _moves(row: NumericFix, value: float, names: Mapping[str, Any]) -> bool:
    for condition in row.moves.split():
        direction, _, name = condition.partition(":")
        current = names.get(name)
        if not isinstance(current, (int, float)) or isinstance(current, bool):
            continue
        if not (value > current if direction == "up" else value < current):
            return False
    return True


def numeric_fix(
    cause: str, phase: str, names: Mapping[str, Any], engine: str | None, version: str | None = None
) -> tuple[str, str, str, str] | None:
    """(flag, value, action, reason) of the first row of `cause` whose value the log's facts give; `version` is the
    engine release the log names (it decides the defaults of `release_defaults`)."""
    names = release_defaults(names, engine, version)
    for who in _engine_order(engine, names):
        for row in NUMERIC_FIXES:
            if row.cause != cause or not _applies(row, who, phase):
                continue
            value = evaluate(_COMPILED[row.value], names)
            if value is None or isinstance(value, bool) or value < 0:
                continue
            if value == 0 and row.value != "0":  # zero only as a stated value (no layer on the GPU)
                continue
            if (
                row.kind in ("int", "bytes") and int(value) < 1 and row.value != "0"
            ):  # a count rounds to at least 1
                continue
            if (
                row.kind == "float"
                and ("utilization" in row.flag or "fraction" in row.flag)
                and not 0.05 <= value <= 0.99
            ):
                continue
            if not _moves(row, float(value), names):
                continue
            reason = fill(row.reason, names)
            if reason is None:
                continue
            return row.flag, _format(float(value), row.kind), row.action, reason
    return None


def complete_fixes(
    cause: str,
    phase: str,
    names: Mapping[str, Any],
    engine: str | None,
    fixes: Sequence[Any],
    make: Any,
    version: str | None = None,
) -> list[Any]:
    """The fixes, with a flag and a number added where none of them has one (`make(action, flag, value, reason)`
    builds a fix). A fix for the same flag without a value is replaced in place; otherwise the number goes second.
    A valueless raise of vLLM's utilisation is dropped where the release's default already takes the whole card and
    the log prints no utilisation (0.34's extensible KV cache: there is nothing to raise)."""
    out = list(fixes)
    if _whole_card_default(names, engine, version):
        out = [
            f
            for f in out
            if not (f.flag == "--gpu-memory-utilization" and f.value is None and f.action.startswith("RAISE"))
        ]
    if any(f.flag and is_numeric_value(f.value) for f in out):
        return out
    found = numeric_fix(cause, phase, names, engine, version)
    if found is None:
        return out
    flag, value, action, reason = found
    for i, f in enumerate(out):
        if f.flag == flag and f.value is None:
            out[i] = make(action, flag, value, f"{f.reason}; {VALUE_NOTE}{reason}")
            return out
    advice = make(action, flag, value, f"{VALUE_NOTE}{reason}")
    # the catalogue's first (most specific) fix stays first; the number comes right after it
    return [*out[:1], advice, *out[1:]]


def _whole_card_default(names: Mapping[str, Any], engine: str | None, version: str | None) -> bool:
    """The log prints no utilisation and the release's default is the whole card (`release_defaults`)."""
    if names.get("gpu_memory_utilization") is not None:
        return False
    return float(release_defaults(names, engine, version)["vllm_default_utilization"]) >= 1.0


_MOVES = (
    (re.compile(r"^(?:min\(0\.\d+, )?floor2\((\w+) \+ "), "up"),
    (re.compile(r"^2 \* (\w+)$"), "up"),
    (re.compile(r"^floor2?\((\w+) (?:-|/) "), "down"),
    (re.compile(r"^(\w+) / 2$"), "down"),
)


def _with_moves(rows: tuple[NumericFix, ...]) -> tuple[NumericFix, ...]:
    """A hand-written row that steps a setting must move it (0.95 is no raise of 0.97); a constant row after it (the
    engine's default moved) must move the same setting the same way when the log prints it."""
    out: list[NumericFix] = []
    last: dict[tuple[str, str], str] = {}
    for row in rows:
        key = (row.cause, row.flag)
        if not row.moves:
            for pattern, direction in _MOVES:
                m = pattern.match(row.value)
                if m is not None:
                    row = dataclasses.replace(row, moves=f"{direction}:{m.group(1)}")
                    break
            else:
                if _NUMBER_RE.match(row.value) and key in last:
                    row = dataclasses.replace(row, moves=last[key])
        if row.moves.partition(":")[2] in RELEASE_DEFAULT_NAMES:
            # a release default moved: it must also move the log's setting when the log prints it
            if key in last and last[key] not in row.moves.split():
                row = dataclasses.replace(row, moves=f"{row.moves} {last[key]}")
        elif row.moves:
            last[key] = row.moves
        out.append(row)
    return tuple(out)


HAND_FIXES = _with_moves(NUMERIC_FIXES)
"""The hand-written rows (docs/explain-oom.md lists each)."""
NUMERIC_FIXES = _with_moves(NUMERIC_FIXES + _knob_rows())
"""The hand-written rows first (one label, one engine, its own formula), then the rows of `fixknobs`."""
_COMPILED: dict[str, ast.Expression] = {row.value: compile_expression(row.value) for row in NUMERIC_FIXES}
