"""A Gemma-4 text config (`gemma4_text`, `gemma4_unified_text`; the `text_config` of Gemma4ForConditionalGeneration /
`gemma4_unified`) → Gemma4Shape, with transformers 5.19's `Gemma4TextConfig.__post_init__` defaults
(transformers/models/gemma4/configuration_gemma4.py:160-223): `layer_types` 5 sliding : 1 full when absent, the last
layer forced to full attention, `per_layer_config` for the full layers = head_dim `global_head_dim` (512) and, with
`attention_k_eq_v`, num_key_value_heads `num_global_key_value_heads`. vLLM 0.32.0 reads `per_layer_config`
(gemma4.py:578-580).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.core.gemma4 import FULL, SLIDING, Gemma4Shape
from vramctl.registry._fields import get_bool, get_int

_LAYERS_MAX = 10_000


def _layer_types(cfg: Mapping[str, Any], layers: int, where: str) -> tuple[str, ...]:
    raw = cfg.get("layer_types")
    if raw is None:
        kinds = [SLIDING if (i + 1) % 6 else FULL for i in range(layers)]
    elif not isinstance(raw, list) or len(raw) != layers or any(k not in (SLIDING, FULL) for k in raw):
        raise BadInputError(
            f"{where}: Gemma-4 'layer_types' must list {layers} entries of sliding_attention / full_attention"
        )
    else:
        kinds = [str(k) for k in raw]
    kinds[-1] = FULL  # Gemma4TextConfig forces the last layer to full attention
    return tuple(kinds)


def _per_layer(cfg: Mapping[str, Any], kinds: tuple[str, ...], where: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    head_dim = get_int(cfg, "head_dim", where)
    kv = get_int(cfg, "num_key_value_heads", where)
    overrides: dict[str, Any] = {"head_dim": get_int(cfg, "global_head_dim", where, default=512)}
    global_kv = cfg.get("num_global_key_value_heads")
    if cfg.get("attention_k_eq_v", False) and global_kv is not None:
        overrides["num_key_value_heads"] = get_int(cfg, "num_global_key_value_heads", where)
    explicit = cfg.get("per_layer_config")
    by_layer: dict[int, Mapping[str, Any]] = {}
    if isinstance(explicit, Mapping):  # to_dict() writes zero-padded string keys ("05")
        try:
            by_layer = {int(k): v for k, v in explicit.items() if isinstance(v, Mapping)}
        except ValueError:
            raise BadInputError(f"{where}: per_layer_config keys must be layer indices") from None
    dims, heads = [], []
    for i, kind in enumerate(kinds):
        entry: Mapping[str, Any] = by_layer.get(i, {})
        if not isinstance(explicit, Mapping) and kind == FULL:
            entry = overrides
        dims.append(int(entry.get("head_dim", head_dim)))
        heads.append(int(entry.get("num_key_value_heads", kv)))
    return tuple(dims), tuple(heads)


def gemma4_shape(cfg: Mapping[str, Any], where: str, *, dtype_bytes: int = 2) -> Gemma4Shape:
    """The shape vLLM 0.32.0 builds Gemma4ForCausalLM / the wrappers' language model from."""
    if cfg.get("quantization_config") is not None:
        raise BadInputError(
            f"{where}: a quantised Gemma-4 checkpoint is not modelled (vramctl sizes Gemma-4's 16-bit weights module "
            "by module); plan the bf16 checkpoint, or pass --weights-gib with the loaded size"
        )
    if cfg.get("attention_bias"):
        raise BadInputError(f"{where}: Gemma-4 with attention_bias is not modelled (no published checkpoint has it)")
    if cfg.get("use_bidirectional_attention") == "all":
        raise BadInputError(
            f"{where}: Gemma-4 with use_bidirectional_attention 'all' (a non-causal encoder; transformers halves its "
            "window) is not modelled"
        )
    layers = get_int(cfg, "num_hidden_layers", where, maximum=_LAYERS_MAX)
    kinds = _layer_types(cfg, layers, where)
    dims, heads = _per_layer(cfg, kinds, where)
    shared = get_int(cfg, "num_kv_shared_layers", where, default=0, minimum=0)
    if shared and not all(kind in kinds[: layers - shared] for kind in set(kinds[layers - shared:])):
        raise BadInputError(f"{where}: a KV-shared Gemma-4 layer has no earlier layer of its kind to read KV from")
    experts = cfg.get("num_experts")
    ple = cfg.get("hidden_size_per_layer_input") or 0
    return Gemma4Shape(
        hidden_size=get_int(cfg, "hidden_size", where),
        vocab_size=get_int(cfg, "vocab_size", where),
        num_attention_heads=get_int(cfg, "num_attention_heads", where),
        layer_types=kinds,
        head_dims=dims,
        kv_heads=heads,
        k_eq_v=get_bool(cfg, "attention_k_eq_v", where),
        num_kv_shared_layers=shared,
        intermediate_size=get_int(cfg, "intermediate_size", where),
        sliding_window=get_int(cfg, "sliding_window", where, default=512),
        use_double_wide_mlp=get_bool(cfg, "use_double_wide_mlp", where),
        hidden_size_per_layer_input=get_int(cfg, "hidden_size_per_layer_input", where) if ple else 0,
        vocab_size_per_layer_input=get_int(cfg, "vocab_size_per_layer_input", where, default=262_144) if ple else 0,
        num_experts=get_int(cfg, "num_experts", where) if experts is not None else 0,
        moe_intermediate_size=(
            get_int(cfg, "moe_intermediate_size", where) if experts is not None else 0
        ),
        top_k_experts=get_int(cfg, "top_k_experts", where) if experts is not None else 0,
        tie_word_embeddings=get_bool(cfg, "tie_word_embeddings", where, default=True),
        dtype_bytes=dtype_bytes,
    )
