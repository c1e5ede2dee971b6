"""vLLM's scheduler and CUDA-graph defaults by version and card: max_num_batched_tokens / max_num_seqs before and
after the user's flags (`vllm/engine/arg_utils.py`) and the capture sizes (`vllm/config/vllm.py`)."""

from __future__ import annotations

from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.errors import BadInputError
from vramctl.core.specs import GpuSpec
from vramctl.core.units import GiB


def _is_a100(gpu: GpuSpec) -> bool:
    text = f"{gpu.name} {gpu.display_name}".lower()
    return "a100" in text


def _is_gb10(gpu: GpuSpec) -> bool:
    text = f"{gpu.name} {gpu.display_name}".lower()
    return "gb10" in text and "gb100" not in text


def default_scheduler_limits(
    gpu: GpuSpec | None,
    version: str,
    entrypoint: str = "server",
    world_size: int = 1,
    *,
    max_model_len: int | None = None,
    enable_chunked_prefill: bool | None = None,
    enable_lora: bool = False,
    sliding_window: bool = False,
) -> tuple[int, int]:
    """Default (max_num_batched_tokens, max_num_seqs) before the user's flags (`vllm/engine/arg_utils.py` (vLLM v0.33.0)).

    V1 (0.8 →), `vllm/engine/arg_utils.py:2940-3039`:
      ≥160 GiB (from 0.12, see `has_large_gpu_tier`): 16384 / 1024 for both entry points;
      ≥70 GiB, not A100, not GB10: LLM class 16384 / 1024, OpenAI server 8192 / 1024;
      otherwise (or the device unknown): LLM class 8192 / 256, server 2048 / 256.
    V0 (< 0.8): max_num_seqs 256; batched tokens max(max_model_len, 2048) without chunked prefill, 2048 with
      it (`[0.6.6.post1] vllm/config.py:1427-1442`); V0 turned chunked prefill on by itself for contexts
      above 32K — `use_long_context = max_model_len > 32768` (vllm/engine/arg_utils.py, 0.6-0.10
      `_set_default_args_v0`), so 32768 itself does not — except with LoRA, a sliding window or speculative
      decoding; the server default was then 512 (datapoints 117, 128 of the collected real start-up logs).
    `world_size` matters only for the CPU backend (not planned here); it is accepted for the signature.
    """
    del world_size
    if entrypoint not in ("server", "llm"):
        raise BadInputError(f"entrypoint {entrypoint!r}: expected 'server' or 'llm'")
    if rules_for(version).v0:
        seqs = 256
        long_context = (
            max_model_len is not None and max_model_len > 32768 and not enable_lora and not sliding_window
        )
        chunked = enable_chunked_prefill if enable_chunked_prefill is not None else long_context
        if chunked:
            tokens = 512 if long_context and enable_chunked_prefill is None else 2048
        else:
            tokens = max(max_model_len or 2048, 2048)
        return tokens, seqs
    server = entrypoint == "server"
    total = gpu.cuda_total_bytes if gpu is not None else 0
    if gpu is not None and total >= 160 * GiB and rules_for(version).large_gpu_tier:
        return 16384, 1024
    if gpu is not None and total >= 70 * GiB and not _is_a100(gpu) and not _is_gb10(gpu):
        return (8192 if server else 16384), 1024
    return (2048 if server else 8192), 256


def apply_scheduler_caps(
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    *,
    user_batched_tokens: bool,
    chunked_prefill: bool = True,
) -> tuple[int, int]:
    """vLLM's adjustments after the table (`vllm/engine/arg_utils.py` (vLLM v0.33.0)): without chunked prefill the batch must hold a whole
    prompt (max(max_model_len, default)); batched tokens are capped at max_num_seqs × max_model_len; then
    max_num_seqs = min(max_num_seqs, max_num_batched_tokens)."""
    tokens = max_num_batched_tokens
    if not chunked_prefill and not user_batched_tokens:
        tokens = max(tokens, max_model_len)
    if not user_batched_tokens:
        tokens = min(tokens, max_num_seqs * max_model_len)
    seqs = min(max_num_seqs, tokens)
    return tokens, seqs


def _is_blackwell_datacenter(gpu: GpuSpec | None) -> bool:
    if gpu is None or not gpu.compute_capability:
        return False
    return gpu.compute_capability.split(".")[0] == "10"


def default_max_capture_size(max_num_seqs: int, max_num_batched_tokens: int, gpu: GpuSpec | None) -> int:
    """`max_cudagraph_capture_size` = min(max_num_seqs × 2, 512) (1024 on SM100), capped at
    max_num_batched_tokens (`vllm/config/vllm.py:2398-2620`, 0.33.0; uniform_decode_query_len = 1)."""
    limit = 1024 if _is_blackwell_datacenter(gpu) else 512
    return max(1, min(max_num_seqs * 2, limit, max_num_batched_tokens))


def default_capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    gpu: GpuSpec | None,
    version: str,
    *,
    max_capture_size: int | None = None,
    decode_query_len: int = 1,
) -> tuple[int, ...]:
    """The batch sizes vLLM captures CUDA graphs for, ascending (`vllm/engine/arg_utils.py` (vLLM v0.33.0), "CUDA-graph capture sizes").

    0.12 → 0.33: [1, 2, 4] + range(8, min(max + 1, 256), 8) + range(256, max + 1, 16), plus
      max_num_batched_tokens when ≤ max and max_num_seqs (the uniform-decode size);
    0.10 – 0.11: [1, 2, 4] + multiples of 8 up to min(max_num_seqs × 2, 512);
    0.8 – 0.9 (V1): [1, 2, 4] + range(8, 513, 8) whatever max_num_seqs, filtered to ≤ max_num_batched_tokens
      (`[0.8.x] vllm/config.py _set_cudagraph_sizes`; datapoint 131 captures 0.41 GiB with max_num_seqs 1);
    V0 (< 0.8): [1, 2, 4] + multiples of 8 up to the first one ≥ max_num_seqs (capped at 512).
    The 0.10 and 0.12 boundaries are vramctl's reading of the history; the reference pins 0.11.0 and 0.33.0.

    `decode_query_len` = 1 + num_speculative_tokens with `--speculative-config` (`VllmRules.speculative_capture_sizes`):
    from 0.12 the default ceiling is min(max_num_seqs × decode_query_len × 2, 512 / 1024), and from 0.30 the uniform
    decode sizes k × decode_query_len (k in the request-count grid up to max_num_seqs) under it replace max_num_seqs.
    """
    rule = rules_for(version).capture_sizes
    if rule == "v0":
        top = (
            1
            if max_num_seqs <= 1
            else 2
            if max_num_seqs <= 2
            else 4
            if max_num_seqs <= 4
            else -(-max_num_seqs // 8) * 8
        )
        top = min(512, top)
        return tuple(s for s in (1, 2, 4, *range(8, 513, 8)) if s <= top)
    if rule == "v1-0.8":
        top = min(512, max_num_batched_tokens)
        return tuple(s for s in (1, 2, 4, *range(8, 513, 8)) if s <= top)
    if rule == "v1-0.10":
        top = max_capture_size or min(max_num_seqs * 2, 512)
        return tuple(sorted({s for s in (1, 2, 4, *range(8, top + 1, 8)) if s <= top}))
    spec_rule = rules_for(version).speculative_capture_sizes if decode_query_len > 1 else "unscaled"
    query = decode_query_len if spec_rule != "unscaled" else 1
    limit = 1024 if _is_blackwell_datacenter(gpu) else 512
    ceiling = max_capture_size or max(1, min(max_num_seqs * query * 2, limit))
    top = min(ceiling, max_num_batched_tokens)
    sizes: set[int] = {s for s in (1, 2, 4) if s <= top}
    sizes.update(range(8, min(top + 1, 256), 8))
    sizes.update(range(256, top + 1, 16))
    if max_num_batched_tokens <= top:
        sizes.add(max_num_batched_tokens)
    if query == 1:
        if max_num_seqs <= top:
            sizes.add(max_num_seqs)
    elif spec_rule == "decode-sizes" and max_capture_size is None:
        # `request_counts` and `uniform_decode_sizes`, vllm/config/vllm.py:2411-2437 (v0.32.0): decode sizes under
        # the ceiling before it is capped at max_num_batched_tokens, kept where they fit the batch
        decode = uniform_decode_sizes(max_num_seqs, query, gpu)
        sizes.update(s for s in decode if s <= ceiling and s <= max_num_batched_tokens)
    return tuple(sorted(sizes))


def uniform_decode_sizes(max_num_seqs: int, decode_query_len: int, gpu: GpuSpec | None) -> tuple[int, ...]:
    """k × decode_query_len for k in vLLM's request-count grid: 1, 2, 4, multiples of 8 below 256, multiples of 16
    from 256, and max_num_seqs itself, at most the platform's 512 (1024 on SM100) requests (`request_counts`,
    vllm/config/vllm.py:2411-2418, v0.32.0)."""
    limit = 1024 if _is_blackwell_datacenter(gpu) else 512
    most = min(max_num_seqs, limit)
    counts = {n for n in (1, 2, 4) if n <= most}
    counts.update(range(8, min(most + 1, 256), 8))
    counts.update(range(256, most + 1, 16))
    counts.add(most)
    return tuple(sorted(k * decode_query_len for k in counts))
