"""SGLang's knobs that `ServeSettings` does not carry (server args, env vars) and measured overrides."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from vramctl.core.engines.sglang.rules import DEFAULT_SWA_FULL_TOKENS_RATIO

Role = Literal["null", "prefill", "decode"]


@dataclass(frozen=True)
class SglangOptions:
    """SGLang knobs that ServeSettings does not carry (server args / env vars), and measured overrides."""

    version: str | None = None
    """The SGLang version when ServeSettings.engine is `both` (its engine_version is then vLLM's)."""
    disaggregation_mode: Role = "null"
    dp_size: int = 1
    enable_dp_attention: bool = False
    moe_a2a_backend: str | None = None
    """`--moe-a2a-backend deepep` adds the DeepEP reserve."""
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_layers: int | None = None
    """Layers of an EAGLE / standalone draft that reuses the target's attention shape (EAGLE: usually 1)."""
    speculative_draft_weight_bytes: int | None = None
    """The draft model's checkpoint bytes (charged to the KV budget from 0.5.18)."""
    speculative_draft_model_path: str | None = None
    """`--speculative-draft-model-path`: the CLI loads it and sets the two fields above
    (vramctl.core.engines.sglang.speculative)."""
    post_capture_kv_sizing: bool = False
    """Env `SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1` (default off; `python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23))."""
    attention_backend: str | None = None
    dsa_decode_backend: str | None = None
    """`--dsa-decode-backend` (`--nsa-decode-backend` before 0.5.18) of a DeepSeek-V3.2 (DSA) model; None = SGLang's
    default for the KV dtype and GPU (`vramctl.core.engines.sglang.pool.dsa_defaults`)."""
    disable_prefill_graph: bool = False
    """`--cuda-graph-backend-prefill disabled`."""
    enable_piecewise_cuda_graph: bool = False
    """0.5.9 – 0.5.15 `--enable-piecewise-cuda-graph`."""
    prefill_graph_breakable: bool = True
    """The prefill graph backend is BREAKABLE (BCG), the CUDA default in 0.5.18 / 0.5.23."""
    device: str = "cuda"
    dcp_size: int = 1
    enable_memory_saver: bool = False
    swa_full_tokens_ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO
    disable_hybrid_swa_memory: bool = False
    vit_layers: int | None = None
    """Vision tower depth of a multimodal model (VLM adjustment, `python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23) item 4); None = text model."""
    vit_hidden_size: int | None = None
    free_before_load_bytes: int | None = None
    """Measured `Load weight begin. avail mem=` (pre_model_load_memory); replaces the estimate."""
    free_after_load_bytes: int | None = None
    """Measured `Load weight end. avail mem=`; replaces pre − weights."""
    # Hybrid (Mamba2 / Gated DeltaNet) models: SGLang's mamba pool flags (see `mamba_pool`, docs/hybrid.md).
    max_mamba_cache_size: int | None = None
    """`--max-mamba-cache-size`: state slots; None = the ratio split of the rest memory."""
    mamba_ssm_dtype: str | None = None
    """`--mamba-ssm-dtype` (SGLANG_MAMBA_SSM_DTYPE): float32, bfloat16 or float16; None = the config's, else float32."""
    mamba_full_memory_ratio: float = 0.9
    """`--mamba-full-memory-ratio`: the mamba pool gets rest × r / (1 + r)."""
    disable_radix_cache: bool = False
    """`--disable-radix-cache`: one state slot per request (ratio 1) and --max-running-requests sizes the pool."""

    def with_changes(self, **changes: Any) -> SglangOptions:
        return replace(self, **changes)
