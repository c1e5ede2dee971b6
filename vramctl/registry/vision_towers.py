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

from vramctl.core.specs import VisionTowerSpec
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


# --- the tower's shape for the engines' encoder profiling (vramctl.core.engines.vllm.multimodal) -----------------

QWEN2_VL_MAX_PIXELS = 12_845_056
"""`max_pixels` of the Qwen2-VL / Qwen2.5-VL image processor as the checkpoints ship it (preprocessor_config.json of
Qwen/Qwen2-VL-7B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct: 12845056 = 16,384 tokens of 28 × 28 pixels); config.json
does not carry it, `--mm-processor-kwargs '{"max_pixels": N}'` overrides it."""
QWEN3_VL_MAX_PIXELS = 16_777_216
"""`size.longest_edge` of the Qwen3-VL image processor (preprocessor_config.json of Qwen/Qwen3-VL-8B-Instruct:
16,384 tokens of 32 × 32 pixels)."""
QWEN3_VL_VIDEO_MAX_PIXELS = 25_165_824
"""`size.longest_edge` of the Qwen3-VL video processor (video_preprocessor_config.json), over a temporal pair."""
LLAVA_NEXT_PINPOINTS: tuple[tuple[int, int], ...] = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))
"""transformers' LlavaNextConfig default `image_grid_pinpoints` (4.57)."""
LLAMA4_MAX_PATCHES = 16
"""Llama4ImageProcessor's default `max_patches` (transformers 4.57): tiles per image, a global tile besides."""


def _pinpoints(config: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    raw = config.get("image_grid_pinpoints")
    if isinstance(raw, list) and raw and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and x > 0 for x in p) for p in raw
    ):
        return tuple((int(p[0]), int(p[1])) for p in raw)
    return LLAVA_NEXT_PINPOINTS


def vision_tower_shape(config: Mapping[str, Any], text_hidden: int, where: str) -> VisionTowerSpec | None:
    """The tower's shape for the engines' encoder profiling, for the wrappers this module and SigLIP / CLIP cover;
    None for a text model or another tower (the plan then says the encoder is not modelled)."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return None
    wrapper = str(config.get("model_type") or "")
    kind = str(vision.get("model_type") or "")
    v = vision
    w = f"{where}: vision_config"
    if wrapper == "qwen2_vl":
        dim = get_int(v, "embed_dim", w, default=1280)
        return VisionTowerSpec(
            family="qwen2_vl", hidden_size=dim, intermediate_size=dim * get_int(v, "mlp_ratio", w, default=4),
            num_layers=get_int(v, "depth", w, default=32), num_heads=get_int(v, "num_heads", w, default=16),
            mlp_gated=False, patch_size=get_int(v, "patch_size", w, default=14),
            out_hidden_size=get_int(v, "hidden_size", w, default=text_hidden),
            merge=get_int(v, "spatial_merge_size", w, default=_MERGE),
            temporal_patch_size=get_int(v, "temporal_patch_size", w, default=2), max_pixels=QWEN2_VL_MAX_PIXELS,
        )
    if wrapper == "qwen2_5_vl":
        return VisionTowerSpec(
            family="qwen2_5_vl", hidden_size=get_int(v, "hidden_size", w, default=1280),
            intermediate_size=get_int(v, "intermediate_size", w, default=3420),
            num_layers=get_int(v, "depth", w, default=32), num_heads=get_int(v, "num_heads", w, default=16),
            mlp_gated=True, patch_size=get_int(v, "patch_size", w, default=14),
            out_hidden_size=get_int(v, "out_hidden_size", w, default=text_hidden),
            merge=get_int(v, "spatial_merge_size", w, default=_MERGE),
            temporal_patch_size=get_int(v, "temporal_patch_size", w, default=2), max_pixels=QWEN2_VL_MAX_PIXELS,
        )
    if wrapper in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        # the encoder output carries the DeepStack features beside the merger's: out_hidden_size × (1 + levels)
        # (`Qwen3_VisionTransformer.out_hidden_size`, vllm/model_executor/models/qwen3_vl.py:603-607 (0.32.0))
        deepstack = v.get("deepstack_visual_indexes")
        levels = len(deepstack) if isinstance(deepstack, list) else (3 if wrapper.startswith("qwen3_vl") else 0)
        return VisionTowerSpec(
            family="qwen3_vl", hidden_size=get_int(v, "hidden_size", w, default=1152),
            intermediate_size=get_int(v, "intermediate_size", w, default=4304),
            num_layers=get_int(v, "depth", w, default=27), num_heads=get_int(v, "num_heads", w, default=16),
            mlp_gated=False, patch_size=get_int(v, "patch_size", w, default=16),
            out_hidden_size=get_int(v, "out_hidden_size", w, default=text_hidden) * (1 + levels),
            merge=get_int(v, "spatial_merge_size", w, default=_MERGE),
            temporal_patch_size=get_int(v, "temporal_patch_size", w, default=2), max_pixels=QWEN3_VL_MAX_PIXELS,
            video_max_pixels=QWEN3_VL_VIDEO_MAX_PIXELS,
        )
    if wrapper == "llama4":
        image = get_int(v, "image_size", w, default=448)
        patch = get_int(v, "patch_size", w, default=14)
        ratio = v.get("pixel_shuffle_ratio", 0.5)
        shuffle = round(1 / float(ratio)) if isinstance(ratio, (int, float)) and 0 < ratio <= 1 else 2
        return VisionTowerSpec(
            family="llama4", hidden_size=get_int(v, "hidden_size", w, default=768),
            intermediate_size=get_int(v, "intermediate_size", w, default=5632),
            num_layers=get_int(v, "num_hidden_layers", w, default=34),
            num_heads=get_int(v, "num_attention_heads", w, default=16), mlp_gated=False, patch_size=patch,
            out_hidden_size=text_hidden, merge=shuffle, image_size=image,
            tokens_per_crop=(image // patch) ** 2 // (shuffle * shuffle), max_crops=LLAMA4_MAX_PATCHES,
            class_token=True,
        )
    if wrapper == "mistral3" and kind in ("pixtral", ""):
        return VisionTowerSpec(
            family="pixtral", hidden_size=get_int(v, "hidden_size", w, default=1024),
            intermediate_size=get_int(v, "intermediate_size", w, default=4096),
            num_layers=get_int(v, "num_hidden_layers", w, default=24),
            num_heads=get_int(v, "num_attention_heads", w, default=16), mlp_gated=True,
            patch_size=get_int(v, "patch_size", w, default=16), out_hidden_size=text_hidden,
            merge=get_int(config, "spatial_merge_size", where, default=_MERGE),
            image_size=get_int(v, "image_size", w, default=1024),
        )
    if kind not in ("siglip_vision_model", "clip_vision_model") or wrapper not in ("gemma3", "llava", "llava_next"):
        return None
    image = get_int(v, "image_size", w)
    patch = get_int(v, "patch_size", w)
    hidden = get_int(v, "hidden_size", w)
    inter = get_int(v, "intermediate_size", w)
    layers = get_int(v, "num_hidden_layers", w)
    heads = get_int(v, "num_attention_heads", w, default=16)
    if wrapper == "gemma3":
        tokens = get_int(config, "mm_tokens_per_image", where, default=256)
        pool = max(1, round(((image // patch) ** 2 / max(1, tokens)) ** 0.5))
        return VisionTowerSpec(
            family="siglip", hidden_size=hidden, intermediate_size=inter, num_layers=layers, num_heads=heads,
            mlp_gated=False, patch_size=patch, out_hidden_size=text_hidden, image_size=image, merge=pool,
            tokens_per_crop=tokens,
        )
    family = "llava_next" if wrapper == "llava_next" else "clip"
    return VisionTowerSpec(
        family=family, hidden_size=hidden, intermediate_size=inter, num_layers=layers, num_heads=heads,
        mlp_gated=False, patch_size=patch, out_hidden_size=text_hidden, image_size=image,
        tokens_per_crop=(image // patch) ** 2, class_token=True,
        grid_pinpoints=_pinpoints(config) if family == "llava_next" else (),
    )
