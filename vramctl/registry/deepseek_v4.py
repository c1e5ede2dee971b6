"""DeepSeek-V4 config.json (`model_type: deepseek_v4`, V4-Flash / V4-Pro and their Base checkpoints) → Dsv4Shape.

vLLM 0.32.0 reads `compress_ratios[layer]` (one per decoder layer, then one for the MTP layer;
`vllm/models/deepseek_v4/attention.py:233`); transformers 5's DeepseekV4Config writes `layer_types` with
`compress_rates` instead (compressed_sparse_attention 4, heavily_compressed_attention 128), read the same way.
The checkpoint is block FP8 (`quantization_config.quant_method: fp8`, which vLLM renames `deepseek_v4_fp8`:
`vllm/model_executor/models/config.py:389-410`) with MXFP4 routed experts unless `expert_dtype` says fp8
(`vllm/models/deepseek_v4/quant_config.py:27-80`, default "fp4").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramctl.core.dsv4 import Dsv4Shape
from vramctl.core.errors import BadInputError
from vramctl.registry._fields import get_int, get_mapping, get_str

_RATIO_OF_KIND = {"sliding_attention": 1, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
_SERVED_RATIOS = {1, 4, 128}
"""The ratios vLLM 0.32.0's DeepSeek-V4 layers build (attention.py:298 C4A with an indexer, compressor.py:157
asserts 4 or 128); 2 belongs to DeepSeek-V4.1 (`deepseek_v41`, not this architecture)."""


def _ratios(cfg: Mapping[str, Any], layers: int, where: str) -> tuple[int, ...]:
    raw = cfg.get("compress_ratios")
    if raw is None and isinstance(cfg.get("layer_types"), list):
        rates = {**_RATIO_OF_KIND, **(get_mapping(cfg, "compress_rates", where) or {})}
        try:
            raw = [int(rates[str(kind)]) for kind in cfg["layer_types"]]
        except (KeyError, TypeError, ValueError):
            raise BadInputError(f"{where}: a 'layer_types' entry has no compress rate") from None
    if not isinstance(raw, list) or len(raw) < layers:
        raise BadInputError(
            f"{where}: DeepSeek-V4 needs 'compress_ratios' with one entry per layer ({layers}); got "
            f"{'none' if raw is None else len(raw) if isinstance(raw, list) else type(raw).__name__}"
        )
    out = []
    for i, value in enumerate(raw[:layers]):
        if isinstance(value, bool) or not isinstance(value, int) or max(1, value) not in _SERVED_RATIOS:
            raise BadInputError(
                f"{where}: compress_ratios[{i}] = {value!r}: vLLM 0.32.0's DeepSeek-V4 serves 0/1 (window only), "
                "4 and 128"
            )
        out.append(max(1, value))
    return tuple(out)


def _expert_dtype(cfg: Mapping[str, Any], quant: Mapping[str, Any], where: str) -> str:
    value = cfg.get("expert_dtype", quant.get("expert_dtype", "fp4"))
    if value not in ("fp4", "fp8"):
        raise BadInputError(f"{where}: expert_dtype {value!r}: vLLM's DeepSeek-V4 loads 'fp4' or 'fp8' experts")
    return str(value)


def _quantized(quant: Mapping[str, Any] | None, where: str) -> bool:
    if quant is None:
        return False
    method = get_str(quant, "quant_method", where, default="")
    if method not in ("fp8", "deepseek_v4_fp8") or quant.get("moe_quant_algo"):
        raise BadInputError(
            f"{where}: a DeepSeek-V4 checkpoint quantised with {method or 'an unnamed method'}"
            f"{' / moe_quant_algo ' + str(quant['moe_quant_algo']) if quant.get('moe_quant_algo') else ''} is not "
            "modelled; vramctl sizes the published block-FP8 checkpoints (MXFP4 or FP8 experts) and 16-bit ones"
        )
    block = quant.get("weight_block_size", [128, 128])
    if block != [128, 128]:
        raise BadInputError(f"{where}: weight_block_size {block!r}: DeepSeek-V4 checkpoints use [128, 128]")
    return True


def _hash_layers(cfg: Mapping[str, Any], where: str) -> int:
    """`num_hash_layers` (the first layers route by a token-id hash table, nvidia/model.py:740-757); transformers 5
    writes `mlp_layer_types` with `hash_moe` entries instead."""
    kinds = cfg.get("mlp_layer_types")
    default = sum(1 for k in kinds if k == "hash_moe") if isinstance(kinds, list) else 0
    return get_int(cfg, "num_hash_layers", where, default=default, minimum=0)


def dsv4_shape(cfg: Mapping[str, Any], where: str) -> Dsv4Shape:
    """The shape vLLM builds DeepseekV4ForCausalLM from (vllm/models/deepseek_v4/nvidia/model.py, attention.py)."""
    layers = get_int(cfg, "num_hidden_layers", where, maximum=10_000)
    heads = get_int(cfg, "num_attention_heads", where)
    o_groups = get_int(cfg, "o_groups", where)
    head_dim = get_int(cfg, "head_dim", where)
    if (heads * head_dim) % o_groups:
        raise BadInputError(f"{where}: o_groups ({o_groups}) must divide heads × head_dim ({heads * head_dim})")
    quant = get_mapping(cfg, "quantization_config", where)
    topk_method = cfg.get("topk_method")
    return Dsv4Shape(
        hidden_size=get_int(cfg, "hidden_size", where),
        compress_ratios=_ratios(cfg, layers, where),
        num_attention_heads=heads,
        head_dim=head_dim,
        q_lora_rank=get_int(cfg, "q_lora_rank", where),
        o_lora_rank=get_int(cfg, "o_lora_rank", where),
        o_groups=o_groups,
        index_n_heads=get_int(cfg, "index_n_heads", where),
        index_head_dim=get_int(cfg, "index_head_dim", where),
        sliding_window=get_int(cfg, "sliding_window", where),
        hc_mult=get_int(cfg, "hc_mult", where),
        n_routed_experts=get_int(cfg, "n_routed_experts", where),
        n_shared_experts=get_int(cfg, "n_shared_experts", where, default=0, minimum=0),
        moe_intermediate_size=get_int(cfg, "moe_intermediate_size", where),
        num_experts_per_tok=get_int(cfg, "num_experts_per_tok", where),
        num_hash_layers=_hash_layers(cfg, where),
        vocab_size=get_int(cfg, "vocab_size", where),
        # vLLM builds e_score_correction_bias only for `topk_method: noaux_tc` (nvidia/model.py:759-768)
        noaux_tc=topk_method == "noaux_tc",
        quantized=_quantized(quant, where),
        expert_dtype=_expert_dtype(cfg, quant or {}, where),
        num_mtp_layers=get_int(cfg, "num_nextn_predict_layers", where, default=0, minimum=0),
        index_topk=get_int(cfg, "index_topk", where, default=0, minimum=0),
    )
