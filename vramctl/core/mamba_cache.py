"""How many blocks of a hybrid model's recurrent-state groups one request holds: vLLM's `mamba_cache_mode`.

A MambaSpec group (Mamba2 / Gated DeltaNet / KDA layers) takes `page × (1 + num_speculative_blocks)` per request
with `mamba_cache_mode = "none"` and `page × (2 + num_speculative_blocks + num_prefill_checkpoint_blocks)` with
`"align"` (vLLM 0.32's Mamba2 layers set num_prefill_checkpoint_blocks = 1, `VllmRules.mamba2_prefill_checkpoint`) (`MambaSpec.max_memory_usage_bytes`, `vllm/v1/kv_cache_interface.py`, vLLM 0.15.0 - 0.32.0): the
state of the last step and the one being written, so that a prefix-cache hit can resume at a block boundary.
The block pool, the number of blocks and the bytes per block do not change; the blocks a max_model_len request
takes do, and with them the maximum concurrency, the KV cache size in tokens and the "To serve at least one
request" check.

Which mode runs:

- vLLM 0.28.0 and later turn prefix caching on for hybrid models by default
  (`EngineArgs._set_default_chunked_prefill_and_prefix_caching_args`, `vllm/engine/arg_utils.py`:
  `default_prefix_caching = model_config.is_prefix_caching_supported`; `ModelConfig.is_prefix_caching_supported`,
  `vllm/config/model.py`: "Generative hybrid models support prefix caching.") and, with prefix caching on, set
  the mode to "align" (`MambaModelConfig.verify_and_update_config`, `vllm/model_executor/models/config.py`:
  "Mamba cache mode is set to 'align' ... by default when prefix caching is enabled"). Checked against the
  running CPU build of 0.32.0 (tests/engine/cases.yaml, `qwen3-next-hybrid-default`: 1,024 blocks, 14 per
  request, 74,898 tokens, 73.14x).
- Up to 0.27 hybrids kept prefix caching off by default (`default_prefix_caching = ... and not
  model_config.is_hybrid`, `vllm/engine/arg_utils.py`, 0.26.0 / 0.27.0; `ModelConfig.is_prefix_caching_supported`
  returns False for "hybrid", `vllm/config/model.py`, 0.12.0 - 0.20.2): mode "none". What `--enable-prefix-caching`
  does there depends on the version (`VllmRules.mamba_state_blocks`): 0.10.2 - 0.11 switch it off for every hybrid
  ("none"); 0.12 - 0.14 keep it only for classes with mamba prefix caching (the Mamba1 / Mamba2 hybrids, whose
  state group then takes cdiv(max_model_len, block) blocks on a chunk-aligned block: not modelled) and switch it
  off for the others ("none"); 0.15 - 0.27 choose "all" for those classes (not modelled) and "align" for the others
  (Gated DeltaNet, KDA, short convolution), the mode modelled here.
- `--no-enable-prefix-caching` always gives "none" ("Mamba cache mode is set to 'none' when prefix caching is
  disabled").
- `--mamba-cache-mode` (0.15 →; `VllmRules.mamba_cache_modes`: none / align / all to 0.31, none / align from 0.32)
  only acts with prefix caching on: "none" is vLLM's default and is replaced as above; "align" stays; "all" stays
  for a class with mamba prefix caching (SupportsMambaPrefixCaching: the Mamba1 / Mamba2 hybrids) and falls back to
  "align" for the others ("Hybrid or mamba-based model detected without support for prefix caching with Mamba
  cache 'all' mode: falling back to 'align' mode", `MambaModelConfig.verify_and_update_config`, `[0.15.0]
  vllm/model_executor/models/config.py:332-350`, `[0.20.2] :351-382`, `[0.31.0] :640-656`).
- Mode "all" (0.15 - 0.31) keeps a state block per mamba block of the request: cdiv(max_model_len, mamba block)
  (+ num_speculative_blocks from 0.24, `VllmRules.mamba_all_speculative_blocks`), and aligns the attention block to
  the Mamba chunk: mamba block = attention block = lcm(chunk, kernel alignment) × cdiv(cdiv(mamba page, attention
  bytes per token), lcm(chunk, kernel alignment)), chunk = `--mamba-block-size` or the config's mamba chunk size
  (`_align_hybrid_block_size`, `[0.20.2] vllm/platforms/interface.py:585-595`, `[0.31.0] :965-974`;
  vramctl.core.kv.hybrid_kv). Planned for hybrids with attention layers; for a model of state layers only it stays
  `unmodelled`.
"""

from __future__ import annotations

__all__ = ["mamba_cache_mode", "state_blocks_per_request"]

_BLOCKS = {"none": 1, "align": 2}


def mamba_cache_mode(
    align_by_default: bool,
    enable_prefix_caching: bool | None,
    *,
    state_blocks_rule: str = "mode",
    class_caches_all: bool = False,
    speculative_align: bool = False,
    requested: str | None = None,
) -> str:
    """`none`, `align` or `all`, or `unmodelled` (0.12 - 0.14's per-block state; planned as `none`).
    `align_by_default`: the version's `VllmRules.hybrid_prefix_caching_default` (0.28 →); `state_blocks_rule`: its
    `VllmRules.mamba_state_blocks`; `class_caches_all`: the model class has mamba prefix caching
    (SupportsMambaPrefixCaching: the Mamba1 / Mamba2 hybrids); `speculative_align`: speculative decoding is on and
    the version (0.20 →) then gives such a class 'align' instead of 'all' ("Mamba cache mode is set to 'align' for
    %s by default when prefix caching and speculative decoding are enabled", `MambaModelConfig.verify_and_update_config`,
    `[0.20.0] / [0.20.2] vllm/model_executor/models/config.py:351-361`; not in 0.19.0); `requested`:
    `--mamba-cache-mode` (already checked against the version's choices)."""
    if enable_prefix_caching is False:
        return "none"
    if not (align_by_default or enable_prefix_caching):
        return "none"
    if state_blocks_rule == "page":
        return "none"  # 0.10.2 - 0.11: prefix caching switched off for every hybrid
    if state_blocks_rule == "mamba-block":
        return "unmodelled" if class_caches_all else "none"
    if requested == "all":
        return "all" if class_caches_all else "align"
    if requested == "align" or align_by_default:
        return "align"
    if class_caches_all:
        return "align" if speculative_align else "all"
    return "align"


def state_blocks_per_request(
    mode: str,
    prefill_checkpoint_blocks: int = 0,
    *,
    max_model_len: int = 0,
    mamba_block_size: int = 0,
) -> int:
    """Blocks one request holds in each state group (no speculative decoding); `prefill_checkpoint_blocks`: the
    layers' `num_prefill_checkpoint_blocks` (1 for vLLM 0.32's Mamba2 layers), counted in "align" mode only; mode
    "all": cdiv(max_model_len, mamba_block_size)."""
    if mode == "all" and mamba_block_size:
        return -(-max_model_len // mamba_block_size)
    return _BLOCKS.get(mode, 1) + (prefill_checkpoint_blocks if mode == "align" else 0)
