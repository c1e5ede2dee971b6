"""NVIDIA ModelOpt `MIXED_PRECISION` checkpoints: one quantisation per module, from the `quantized_layers` map.

`hf_quant_config.json` (or config.json's `quantization_config`) names `quant_algo: MIXED_PRECISION` and maps each
quantised module to its own recipe, e.g. {"model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
"model.layers.0.mlp.gate_proj": {"quant_algo": "NVFP4", "group_size": 16}}. vLLM serves it as `modelopt_mixed`
(`ModelOptMixedPrecisionConfig`, vllm/model_executor/layers/quantization/modelopt.py; `override_quantization_method`
claims any ModelOpt config whose quant_algo is MIXED_PRECISION): `get_quant_method` resolves each Linear / MoE layer's
prefix in the map (direct, packed shards such as qkv_proj ← q/k/v_proj, RoutedExperts by a child key) and builds that
algo's method; a Linear absent from the map stays unquantised (`UnquantizedLinearMethod`, 16 bits).

What each algo stores per rows × cols weight (the tensors each method's `create_weights` registers and the
checkpoint holds; ModelOpt exports them so):

- `FP8`: float8_e4m3fn weight + float32 `weight_scale` and `input_scale` (per tensor);
- `FP8_PER_CHANNEL_PER_TOKEN`: float8 weight + one float32 scale per output row;
- `FP8_PB_WO` (and the alias `FP8_BLOCK_SCALES`): float8 weight + one float32 scale per group_size² block (128);
- `NVFP4` / `W4A16_NVFP4`: two E2M1 values per byte + one float8 `weight_scale` per group_size (16) values +
  float32 `weight_scale_2` and `input_scale` (W4A16 runs the same tensors through the FP4 Marlin GEMM);
- `MXFP8`: float8 weight + one uint8 (E8M0) scale per 32 values.

Which vLLM releases load which algos (read from each release's modelopt.py): `modelopt_mixed` exists from 0.17.0
(absent at 0.16.0) with FP8 and NVFP4; W4A16_NVFP4 from 0.22.0 (absent at 0.21.0); MXFP8 by 0.26.0 (absent at
0.24.0); the block-FP8 algos by 0.30.0 (absent at 0.28.0): `MODELOPT_MIXED_ALGO_MIN_VLLM`
(vramctl.core.engines.vllm.rules), which the planner checks.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vramctl.core.engines.vllm.rules import MODELOPT_MIXED_ALGO_MIN_VLLM
from vramctl.core.errors import BadInputError
from vramctl.core.params import is_moe_layer, serving_dtype_bytes
from vramctl.core.specs import ModelSpec

MIXED_ALGO_MIN_VLLM = MODELOPT_MIXED_ALGO_MIN_VLLM
"""quant_algo → the first vLLM release that loads it in a MIXED_PRECISION checkpoint (the planner checks it)."""

_NVFP4_FAMILY = ("NVFP4", "W4A16_NVFP4")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"(?:^|\.)experts(?:\.(\d+))?(?:\.(\w+))?$")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def algo_bytes(algo: str, rows: int, cols: int, group: int | None) -> int:
    """Checkpoint bytes of one rows × cols weight in `algo` with its scales (the module docstring)."""
    n = rows * cols
    if algo in _NVFP4_FAMILY:
        return n // 2 + _cdiv(n, group or 16) + 8
    if algo == "FP8":
        return n + 8
    if algo == "FP8_PER_CHANNEL_PER_TOKEN":
        return n + 4 * rows
    if algo in ("FP8_PB_WO", "FP8_BLOCK_SCALES"):
        g = group or 128
        return n + 4 * _cdiv(rows, g) * _cdiv(cols, g)
    if algo == "MXFP8":
        return n + _cdiv(n, 32)
    raise KeyError(algo)


@dataclass(frozen=True)
class MixedLayers:
    """The map of a MIXED_PRECISION checkpoint, read and checked."""

    entries: tuple[tuple[str, str, int | None], ...]
    """(module name, quant_algo upper-cased, group_size or None) in the map's order."""

    @property
    def algos(self) -> tuple[str, ...]:
        """The distinct algos, most entries first."""
        return tuple(a for a, _ in Counter(a for _, a, _ in self.entries).most_common())


def read_mixed_layers(quant: Mapping[str, Any], where: str) -> MixedLayers:
    """`quantized_layers` of a MIXED_PRECISION quantization config (or of its `quantization` block), each entry a
    known algo; a missing or empty map is refused as vLLM refuses it ("MIXED_PRECISION quant_algo requires a
    non-empty 'quantized_layers' mapping")."""
    raw = quant.get("quantized_layers")
    if isinstance(quant.get("quantization"), dict):
        raw = quant["quantization"].get("quantized_layers", raw)
    if isinstance(raw, dict) and isinstance(raw.get("quantized_layers"), dict):
        raw = raw["quantized_layers"]  # the nested form of vLLM PR #35047's example
    if not isinstance(raw, dict) or not raw:
        raise BadInputError(
            f"{where}: ModelOpt MIXED_PRECISION needs a non-empty 'quantized_layers' map (module → quant_algo); "
            "vLLM refuses the checkpoint without one"
        )
    known = ", ".join(MIXED_ALGO_MIN_VLLM)
    entries: list[tuple[str, str, int | None]] = []
    for name, recipe in raw.items():
        algo = recipe.get("quant_algo") if isinstance(recipe, dict) else None
        if not isinstance(name, str) or not isinstance(algo, str) or not algo:
            raise BadInputError(
                f"{where}: quantized_layers entry {str(name)[:80]!r} must be an object with a 'quant_algo' string"
            )
        algo = algo.upper()
        if algo not in MIXED_ALGO_MIN_VLLM:
            raise BadInputError(
                f"{where}: quantized_layers entry {name[:80]!r} has quant_algo {algo[:40]!r}, which no vLLM release "
                f"loads in a MIXED_PRECISION checkpoint (it loads {known})"
            )
        group = recipe.get("group_size")
        if group is not None and (not isinstance(group, int) or isinstance(group, bool) or group <= 0):
            raise BadInputError(f"{where}: quantized_layers entry {name[:80]!r}: group_size must be a positive integer")
        entries.append((name, algo, group))
    return MixedLayers(tuple(entries))


def _attention_shape(spec: ModelSpec, proj: str) -> tuple[int, int] | None:
    hidden, heads = spec.hidden_size, spec.num_attention_heads
    mla = spec.mla
    if mla is not None:
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        q_in = mla.q_lora_rank or hidden
        shapes = {
            "q_proj": (heads * qk, hidden),
            "q_a_proj": (mla.q_lora_rank or 0, hidden),
            "q_b_proj": (heads * qk, q_in),
            "kv_a_proj_with_mqa": (mla.kv_lora_rank + mla.qk_rope_head_dim, hidden),
            "kv_b_proj": (heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank),
            "o_proj": (hidden, heads * mla.v_head_dim),
        }
        found = shapes.get(proj)
        return found if found and found[0] else None
    q = heads * spec.head_dim
    if spec.architecture.startswith(("Qwen3Next", "Qwen3_5")) and not spec.attention_out_gate:
        q_rows = 2 * q  # q_proj also emits the output gate (Qwen3NextAttention, vLLM qwen3_next.py)
    else:
        q_rows = q
    kv = spec.num_key_value_heads * spec.head_dim
    shapes = {
        "q_proj": (q_rows, hidden),
        "k_proj": (kv, hidden),
        "v_proj": (kv, hidden),
        "qkv_proj": (q_rows + 2 * kv, hidden),
        "o_proj": (hidden, q),
    }
    return shapes.get(proj)


def _mlp_shape(inter: int, hidden: int, proj: str) -> tuple[int, int] | None:
    return {
        "gate_proj": (inter, hidden),
        "up_proj": (inter, hidden),
        "w1": (inter, hidden),
        "w3": (inter, hidden),
        "gate_up_proj": (2 * inter, hidden),
        "down_proj": (hidden, inter),
        "w2": (hidden, inter),
    }.get(proj)


def _state_shape(spec: ModelSpec, proj: str) -> tuple[int, int] | None:
    st, hidden = spec.state_space, spec.hidden_size
    if st is None:
        return None
    if st.kind == "gated_delta_net":
        key, value = st.n_groups * st.state_size, st.num_heads * st.head_dim
        return {
            "in_proj_qkv": (2 * key + value, hidden),
            "in_proj_z": (value, hidden),
            "in_proj_qkvz": (2 * key + 2 * value, hidden),
            "in_proj_ba": (2 * st.num_heads, hidden),
            "in_proj_b": (st.num_heads, hidden),
            "in_proj_a": (st.num_heads, hidden),
            "out_proj": (hidden, value),
        }.get(proj)
    if st.kind == "mamba2":
        inner = st.intermediate_size
        return {
            "in_proj": (2 * inner + 2 * st.n_groups * st.state_size + st.num_heads, hidden),
            "out_proj": (hidden, inner),
        }.get(proj)
    return None


def module_shape(spec: ModelSpec, name: str) -> tuple[int, int, int] | None:
    """(rows, cols, copies) of the Linear weight a quantized_layers key names, from the spec's shapes; None for a
    module whose shape vramctl does not know. `lm_head`; below `layers.N.`: attention projections (self_attn /
    attention / attn), dense MLP (mlp / feed_forward), shared experts, routed experts (one expert's projection, or
    the whole `experts` module: every expert's gate / up / down), Gated DeltaNet (linear_attn) and Mamba2 (mixer)
    projections."""
    hidden = spec.hidden_size
    if name == "lm_head" or name.endswith(".lm_head"):
        return spec.vocab_size, hidden, 1
    found = _LAYER.search(name)
    if found is None:
        return None
    layer, rest = int(found.group(1)), found.group(2)
    if layer >= spec.num_hidden_layers:
        return None
    parts = rest.split(".")
    proj = parts[-1]
    moe = spec.moe
    expert = _EXPERT.search(rest)
    if expert is not None and "shared_expert" not in rest:
        if moe is None or not is_moe_layer(spec, layer):
            return None
        inter = moe.moe_intermediate_size
        if expert.group(2) is None:  # the whole routed-experts module: gate + up + down of every expert
            return inter, hidden, 3 * moe.num_experts if spec.mlp_gated else 2 * moe.num_experts
        shape = _mlp_shape(inter, hidden, expert.group(2))
        if shape is None:
            return None
        return shape[0], shape[1], 1 if expert.group(1) is not None else moe.num_experts
    if "shared_expert" in rest:
        if moe is None or not moe.num_shared_experts:
            return None
        shape = _mlp_shape(moe.shared_expert_intermediate_size * moe.num_shared_experts, hidden, proj)
        return (*shape, 1) if shape else None
    block = parts[0] if len(parts) > 1 else ""
    if block in ("self_attn", "attention", "attn"):
        shape = _attention_shape(spec, proj)
    elif block in ("mlp", "feed_forward"):
        shape = _mlp_shape(spec.intermediate_size, hidden, proj) if not is_moe_layer(spec, layer) else None
    elif block in ("linear_attn", "mixer"):
        shape = _state_shape(spec, proj)
    else:
        shape = None
    return (*shape, 1) if shape else None


def mixed_saving_bytes(spec: ModelSpec, mixed: MixedLayers, where: str) -> int:
    """Bytes the map's quantised modules save against the same modules in 16 bits (the serving dtype): subtracted
    from the checkpoint's 16-bit total. A key vramctl cannot size is refused in one line naming it. Keys for the
    MTP layers (`mtp.…`) are left out: a plain serve does not load them."""
    high = serving_dtype_bytes(spec)
    saving = 0
    for name, algo, group in mixed.entries:
        if name.startswith("mtp.") or ".mtp." in name:
            continue
        shape = module_shape(spec, name)
        if shape is None:
            raise BadInputError(
                f"{where}: quantized_layers names {name[:100]!r} ({algo}), a module whose shape vramctl cannot tell "
                "from config.json; plan it with --model on a folder with its safetensors headers"
            )
        rows, cols, copies = shape
        saving += copies * (rows * cols * high - algo_bytes(algo, rows, cols, group))
    return saving
