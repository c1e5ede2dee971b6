"""Parameter counts of the vision towers (+ projectors) of multimodal wrappers that SigLIP / CLIP do not cover.

Each formula walks the tensors of the Hugging Face transformers implementation (4.57) of the wrapper's
`model_type`, reading only `vision_config` (and the text hidden size the projector maps to). A field the
config omits takes the transformers config class's default. vLLM loads the same tensors (its Qwen2-VL,
Qwen2.5-VL, Qwen3-VL, Llama-4 and Pixtral towers mirror them), so these counts are what the engines hold.

- Qwen2-VL (`qwen2_vl`): Conv3d patch embedding without bias; per block two LayerNorms, qkv + proj with biases,
  fc1 / fc2 (embed_dim × mlp_ratio) with biases; merger = LayerNorm + two Linear layers with biases on
  4 × embed_dim (2 × 2 spatial merge).
- Qwen2.5-VL (`qwen2_5_vl`): as Qwen2-VL with RMSNorms (no bias) and a gated MLP (gate, up, down with biases)
  of `intermediate_size`; merger output `out_hidden_size`.
- Qwen3-VL (`qwen3_vl`, `qwen3_vl_moe`): Conv3d patch embedding with bias, a learned position table of
  `num_position_embeddings`, LayerNorm blocks with fc1 / fc2 of `intermediate_size`, the merger and one
  DeepStack merger (LayerNorm on 4 × hidden) per `deepstack_visual_indexes` entry.
- Qwen3.5 (`qwen3_5`, `qwen3_5_moe`): the Qwen3-VL tower (vLLM qwen3_5.py builds `Qwen3_VisionTransformer` from
  `vision_config`); transformers' Qwen3_5VisionConfig has no `deepstack_visual_indexes` and vLLM's qwen3_vl.py
  takes `[]` when the field is absent, so no DeepStack mergers unless the config lists some.
- Llama-4 (`llama4`): unfolded patch Linear without bias, class embedding, (image/patch)² + 1 positions,
  pre / post LayerNorm, LayerNorm blocks with biased q, k, v, o and fc1 / fc2; pixel-shuffle MLP
  (intermediate → projector_input_dim → projector_output_dim, no biases) and the projector to the text width.
- Mistral-3 / Pixtral (`mistral3`, `pixtral` towers): Conv2d without bias, RMSNorm pre-norm, RMSNorm blocks with
  bias-free q, k, v, o and a gated MLP; projector = RMSNorm + 2 × 2 patch merger + two Linear layers
  (biases per `multimodal_projector_bias`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramctl.registry._fields import get_int, get_opt_int

_MERGE = 2
"""spatial_merge_size default of every tower here: 2 × 2 patches merged into one token."""


def _dense(rows: int, cols: int, *, bias: bool) -> int:
    return rows * cols + (rows if bias else 0)


def _qwen2_vl(v: Mapping[str, Any], text_hidden: int, where: str) -> int:
    dim = get_int(v, "embed_dim", where, default=1280)
    depth = get_int(v, "depth", where, default=32)
    ratio = get_int(v, "mlp_ratio", where, default=4)
    patch = get_int(v, "patch_size", where, default=14)
    temporal = get_int(v, "temporal_patch_size", where, default=2)
    channels = get_int(v, "in_chans", where, default=get_int(v, "in_channels", where, default=3))
    merge = get_int(v, "spatial_merge_size", where, default=_MERGE)
    out = get_int(v, "hidden_size", where, default=text_hidden)
    inter = dim * ratio
    block = 2 * 2 * dim + _dense(3 * dim, dim, bias=True) + _dense(dim, dim, bias=True)
    block += _dense(inter, dim, bias=True) + _dense(dim, inter, bias=True)
    wide = dim * merge * merge
    merger = 2 * dim + _dense(wide, wide, bias=True) + _dense(out, wide, bias=True)
    return channels * temporal * patch * patch * dim + depth * block + merger


def _qwen2_5_vl(v: Mapping[str, Any], text_hidden: int, where: str) -> int:
    dim = get_int(v, "hidden_size", where, default=1280)
    depth = get_int(v, "depth", where, default=32)
    inter = get_int(v, "intermediate_size", where, default=3420)
    patch = get_int(v, "patch_size", where, default=14)
    temporal = get_int(v, "temporal_patch_size", where, default=2)
    channels = get_int(v, "in_chans", where, default=get_int(v, "in_channels", where, default=3))
    merge = get_int(v, "spatial_merge_size", where, default=_MERGE)
    out = get_int(v, "out_hidden_size", where, default=text_hidden)
    block = 2 * dim + _dense(3 * dim, dim, bias=True) + _dense(dim, dim, bias=True)
    block += 2 * _dense(inter, dim, bias=True) + _dense(dim, inter, bias=True)
    wide = dim * merge * merge
    merger = dim + _dense(wide, wide, bias=True) + _dense(out, wide, bias=True)
    return channels * temporal * patch * patch * dim + depth * block + merger


def _qwen3_vl(v: Mapping[str, Any], text_hidden: int, where: str, *, deepstack_default: int = 3) -> int:
    dim = get_int(v, "hidden_size", where, default=1152)
    depth = get_int(v, "depth", where, default=27)
    inter = get_int(v, "intermediate_size", where, default=4304)
    patch = get_int(v, "patch_size", where, default=16)
    temporal = get_int(v, "temporal_patch_size", where, default=2)
    channels = get_int(v, "in_channels", where, default=3)
    merge = get_int(v, "spatial_merge_size", where, default=_MERGE)
    out = get_int(v, "out_hidden_size", where, default=text_hidden)
    positions = get_int(v, "num_position_embeddings", where, default=2304)
    deepstack = v.get("deepstack_visual_indexes")
    n_deepstack = len(deepstack) if isinstance(deepstack, list) else deepstack_default
    block = 2 * 2 * dim + _dense(3 * dim, dim, bias=True) + _dense(dim, dim, bias=True)
    block += _dense(inter, dim, bias=True) + _dense(dim, inter, bias=True)
    wide = dim * merge * merge
    mlp = _dense(wide, wide, bias=True) + _dense(out, wide, bias=True)
    merger = 2 * dim + mlp
    deepstack_mergers = n_deepstack * (2 * wide + mlp)
    embed = channels * temporal * patch * patch * dim + dim + positions * dim
    return embed + depth * block + merger + deepstack_mergers


def _llama4(v: Mapping[str, Any], text_hidden: int, where: str) -> int:
    dim = get_int(v, "hidden_size", where, default=768)
    layers = get_int(v, "num_hidden_layers", where, default=34)
    inter = get_int(v, "intermediate_size", where, default=5632)
    patch = get_int(v, "patch_size", where, default=14)
    image = get_int(v, "image_size", where, default=448)
    channels = get_int(v, "num_channels", where, default=3)
    proj_in = get_int(v, "projector_input_dim", where, default=4096)
    proj_out = get_int(v, "projector_output_dim", where, default=4096)
    vision_out = get_int(v, "vision_output_dim", where, default=7680)
    positions = (image // patch) ** 2 + 1
    block = 4 * _dense(dim, dim, bias=True) + 2 * 2 * dim
    block += _dense(inter, dim, bias=True) + _dense(dim, inter, bias=True)
    embed = channels * patch * patch * dim + dim + positions * dim + 2 * 2 * dim
    adapter = inter * proj_in + proj_in * proj_out
    return embed + layers * block + adapter + vision_out * text_hidden


def _pixtral(config: Mapping[str, Any], v: Mapping[str, Any], text_hidden: int, where: str) -> int:
    dim = get_int(v, "hidden_size", where, default=1024)
    layers = get_int(v, "num_hidden_layers", where, default=24)
    inter = get_int(v, "intermediate_size", where, default=4096)
    patch = get_int(v, "patch_size", where, default=16)
    channels = get_int(v, "num_channels", where, default=3)
    heads = get_int(v, "num_attention_heads", where, default=16)
    head_dim = get_opt_int(v, "head_dim", where) or dim // heads
    merge = get_int(config, "spatial_merge_size", where, default=_MERGE)
    bias = config.get("multimodal_projector_bias") is True
    block = 2 * dim + 4 * dim * heads * head_dim + 3 * dim * inter
    projector = dim + dim * merge * merge * dim + _dense(text_hidden, dim, bias=bias)
    projector += _dense(text_hidden, text_hidden, bias=bias)
    return channels * patch * patch * dim + dim + layers * block + projector


def vision_tower_params(config: Mapping[str, Any], text_hidden: int, where: str) -> int | None:
    """Tower + projector parameters of a wrapper this module knows (see the module docstring), else None."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return None
    wrapper = str(config.get("model_type") or "")
    kind = str(vision.get("model_type") or "")
    vwhere = f"{where}: vision_config"
    if wrapper == "qwen2_vl":
        return _qwen2_vl(vision, text_hidden, vwhere)
    if wrapper == "qwen2_5_vl":
        return _qwen2_5_vl(vision, text_hidden, vwhere)
    if wrapper in ("qwen3_vl", "qwen3_vl_moe"):
        return _qwen3_vl(vision, text_hidden, vwhere)
    if wrapper in ("qwen3_5", "qwen3_5_moe"):  # Qwen3.5's vision config has no deepstack_visual_indexes
        return _qwen3_vl(vision, text_hidden, vwhere, deepstack_default=0)
    if wrapper == "llama4":
        return _llama4(vision, text_hidden, vwhere)
    if wrapper == "mistral3" and kind in ("pixtral", ""):
        return _pixtral(config, vision, text_hidden, vwhere)
    return None
