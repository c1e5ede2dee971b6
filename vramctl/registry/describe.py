"""JSON-ready descriptions of a ModelSpec / GpuSpec for `vramctl models` / `vramctl gpus` (keys documented in
docs/models-and-gpus.md, never renamed)."""

from __future__ import annotations

from typing import Any

from vramctl.core.params import active_param_count, num_moe_layers, param_breakdown, rank_weight_bytes
from vramctl.core.specs import GpuSpec, ModelSpec


def attention_kind(spec: ModelSpec) -> str:
    """`mla`, `hybrid` (full + sliding layers), `sliding`, or `mha` / `gqa` / `mqa` for full attention; a model with
    Mamba / linear-attention layers adds their kind (`gqa+gated_delta_net`, `gqa+mamba2`, `mla+kda`); one without
    attention layers is the state kind alone (`mamba1`, `mamba2`: pure Mamba, docs/hybrid.md)."""
    if spec.is_state_only:
        assert spec.state_space is not None
        return spec.state_space.kind
    if spec.state_space is not None:
        return f"{_full_attention_kind(spec)}+{spec.state_space.kind}"
    if spec.mla is not None:
        return "mla"
    if spec.num_sliding_layers and spec.num_full_layers:
        return "hybrid"
    if spec.num_sliding_layers:
        return "sliding"
    return _full_attention_kind(spec)


def _full_attention_kind(spec: ModelSpec) -> str:
    if spec.mla is not None:  # Kimi-Linear's full-attention layers: `mla+kda`
        return "mla"
    if spec.num_key_value_heads == spec.num_attention_heads:
        return "mha"
    return "mqa" if spec.num_key_value_heads == 1 else "gqa"


def model_to_json(spec: ModelSpec) -> dict[str, Any]:
    moe: dict[str, Any] | None = None
    if spec.moe is not None:
        moe = {
            "num_experts": spec.moe.num_experts,
            "num_experts_per_tok": spec.moe.num_experts_per_tok,
            "moe_intermediate_size": spec.moe.moe_intermediate_size,
            "num_shared_experts": spec.moe.num_shared_experts,
            "num_moe_layers": num_moe_layers(spec),
        }
    mla: dict[str, Any] | None = None
    if spec.mla is not None:
        mla = {
            "kv_lora_rank": spec.mla.kv_lora_rank,
            "qk_rope_head_dim": spec.mla.qk_rope_head_dim,
            "latent_dim": spec.mla.latent_dim,
            "q_lora_rank": spec.mla.q_lora_rank,
        }
    return {
        "id": spec.name,
        "aliases": list(spec.aliases),
        "architecture": spec.architecture,
        "attention": attention_kind(spec),
        "param_count": spec.param_count,
        "active_param_count": active_param_count(spec),
        "weight_bytes": spec.weight_bytes,
        "torch_dtype": spec.torch_dtype,
        "quantization": spec.quantization,
        "hidden_size": spec.hidden_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "sliding_window": spec.sliding_window,
        "num_sliding_layers": spec.num_sliding_layers,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "moe": moe,
        "mla": mla,
        "param_breakdown": param_parts(spec),
        "weight_bytes_per_tp_rank": weights_per_rank(spec),
        "sources": dict(spec.sources),
    }


TP_SIZES = (1, 2, 4, 8)


def param_parts(spec: ModelSpec) -> dict[str, int]:
    """Parameters by part (embedding, lm_head, attention, dense_mlp, experts, router, shared_experts, norms,
    vision); they sum to the formula's param_count. A hybrid's state layers are outside the dense formula: its
    decoder layers are one part (`decoder_layers`), the registry's exact total less the embeddings (and the vision
    tower of a VL wrapper such as Qwen3.5, its own part)."""
    parts = param_breakdown(spec)
    if spec.state_space is not None:
        hybrid = {
            "embedding": parts.embedding,
            "lm_head": parts.lm_head,
            "decoder_layers": spec.param_count - parts.embedding - parts.lm_head - parts.vision,
        }
        return {**hybrid, "vision": parts.vision} if parts.vision else hybrid
    return {
        "embedding": parts.embedding,
        "lm_head": parts.lm_head,
        "attention": parts.attention,
        "dense_mlp": parts.dense_mlp,
        "experts": parts.experts,
        "router": parts.router,
        "shared_experts": parts.shared_experts,
        "norms": parts.norms,
        "vision": parts.vision,
    }


def weights_per_rank(spec: ModelSpec) -> dict[str, int]:
    """Bytes one rank holds at tp 1, 2, 4, 8 (vocab padded to 64 rows, as vLLM loads them)."""
    return {str(tp): rank_weight_bytes(spec, tp, pad_vocab=True).total for tp in TP_SIZES}


def gpu_to_json(spec: GpuSpec) -> dict[str, Any]:
    return {
        "id": spec.name,
        "display_name": spec.display_name,
        "vendor": spec.vendor,
        "aliases": list(spec.aliases),
        "compute_capability": spec.compute_capability,
        "cuda_total_bytes": spec.cuda_total_bytes,
        "nvidia_smi_total_mib": spec.nvidia_smi_total_mib,
        "hbm_bandwidth_bytes_per_s": spec.hbm_bandwidth_bytes_per_s,
        "pcie_generation": spec.pcie_generation,
        "pcie_lanes": spec.pcie_lanes,
        "host_link_bytes_per_s": spec.host_link_bytes_per_s,
        "dense_bf16_flops": spec.dense_bf16_flops,
        "sources": dict(spec.sources),
    }
