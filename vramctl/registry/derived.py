"""A pre-quantised checkpoint named after a bundled model, planned from that base when its own config is unavailable.

`Lorbus/Qwen3.6-27B-int4-AutoRound`, `Qwen/Qwen2.5-72B-Instruct-AWQ`, `RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic`,
`neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8`: the name is a bundled model's name (or alias, any org) followed
by a quantisation marker. Online, the Hub's config.json and safetensors headers give the exact bytes and this module is
never used. When the config cannot be had (offline, not in the HF cache, no network, HTTP 401 / 404, no
huggingface_hub), `derive_from_name` plans the bundled base with the quantisation the marker names, using the
quantiser's documented defaults (`SCHEMES`, each with its source): group size, bits, and the modules its default recipe
leaves in 16 bits (embeddings, lm_head and MoE routers always; vLLM builds those with `quant_config=None` or
ReplicatedLinear without quantisation, vllm/model_executor/layers/vocab_parallel_embedding.py, fused_moe/layer.py).

The weights get a band (`DerivedCheckpoint.weight_band_bytes`): tensors the bundled formula does not split into Linear
layers (a vision tower, a hybrid's Gated DeltaNet / Mamba mixers) may or may not be quantised by a given recipe, so the
estimate sits halfway between both and the band covers either; plus `LAYOUT_BAND` for the scale / zero-point layout
details a name does not fix (scale dtype, per-channel vs block scales, zero points, g_idx).

A name whose prefix is not a bundled model, or whose suffix is not made only of recognised marker words, returns None:
the caller keeps its one-line "unknown model" / Hub error.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, replace
from typing import Any

from vramctl.core.params import (
    _rank_bytes,
    bnb_double_quant_saving,
    gated_query_params,
    quant_part_bytes,
    serving_dtype_bytes,
    state_mixer_linear_params,
    weight_bytes_from_spec,
)
from vramctl.core.specs import DerivedCheckpoint, ModelSpec, exact_numbers_hint
from vramctl.core.units import format_gib
from vramctl.registry._catalog import MODELS
from vramctl.registry.catalog_models import model_at

LAYOUT_BAND = 0.02
"""±2 % of the derived weights for layout details a name does not fix: float32 vs 16-bit scales, per-channel vs
128 × 128 block FP8 scales (< 0.1 %), AWQ / GPTQ / auto-round zero points and g_idx (< 1 % of a 4-bit Linear at group
128). The derived-vs-exact errors of the checkpoints bundled both ways are far inside it (docs/accuracy.md)."""

_SEPARATORS = re.compile(r"[-_.]")
_GROUP = re.compile(r"^(?:g|gs)(\d{1,4})$|^(\d{1,4})g$")

MARKER_WORDS = frozenset(
    {
        "awq", "gptq", "fp8", "w8a8", "w4a16", "w8a16", "nvfp4", "fp4", "mxfp4", "autoround", "auto", "round",
        "bnb", "nf4", "int4", "int8", "4bit", "8bit", "dynamic", "static", "block", "quantized", "gemm", "gemv",
        "marlin", "sym", "asym",
    }
)  # fmt: skip
"""Words a quantisation marker is made of (case-insensitive); a group tag `g128` / `gs128` / `128g` too."""


@dataclass(frozen=True)
class Scheme:
    """One quantiser's default layout as a `quantization_config`, in words, and the sources of its defaults."""

    method: str
    quantization_config: dict[str, Any]
    defaults: str
    state_mixers: bool | None = None
    """A hybrid's state-mixer projections (Gated DeltaNet in_proj_qkvz / out_proj, Mamba in_proj / out_proj): True when
    the quantiser's default recipe packs them like every other Linear of the decoder blocks; None when recipes differ
    (llm-compressor's examples ignore `linear_attn` for some models and not others), so the estimate sits halfway
    and the band covers both."""


def _compressed_tensors(weights: dict[str, Any], ignore: list[str], fmt: str) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
        "ignore": ignore,
    }


def scheme_for(words: frozenset[str], group: int | None, *, moe: bool) -> Scheme | None:
    """The quantisation a marker's words name, with its quantiser's defaults; None when they name none or several."""
    eight = bool(words & {"int8", "8bit"})
    ct_ignore = ["lm_head", "re:.*mlp.gate$"] if moe else ["lm_head"]
    llmc = (
        "llm-compressor's preset scheme (compressed-tensors src/compressed_tensors/quantization/quant_scheme.py "
        "PRESET_SCHEMES) with its examples' recipe ignore=['lm_head'] (+ 're:.*mlp.gate$' for MoE routers)"
    )
    if "awq" in words:
        bits, g = (8 if eight else 4), group or 128
        return Scheme(
            f"AWQ int{bits}, group {g}, zero point (GEMM)",
            {"quant_method": "awq", "bits": bits, "group_size": g, "zero_point": True, "version": "gemm"},
            "AutoAWQ's quant_config defaults w_bit 4, q_group_size 128, zero_point True, version GEMM (awq/models/"
            "_config.py AwqConfig); decoder Linears only, MoE router kept (awq/models/mixtral.py "
            "modules_to_not_convert ['gate'])",
        )
    if "gptq" in words:
        bits, g = (8 if eight else 4), group or 128
        return Scheme(
            f"GPTQ int{bits}, group {g}",
            {"quant_method": "gptq", "bits": bits, "group_size": g, "desc_act": False, "sym": True},
            "transformers GPTQConfig defaults group_size 128, desc_act False, sym True (src/transformers/utils/"
            "quantization_config.py); lm_head not quantised (GPTQModel / AutoGPTQ lm_head=False); every Linear of "
            "the decoder blocks packed, a hybrid's Gated DeltaNet in_proj_qkv / in_proj_z / out_proj included "
            "(in_proj_a / in_proj_b, the vision tower and the MTP module in 16 bits, as the public GPTQModel "
            "Qwen3.5 / 3.6 checkpoints list them)",
            state_mixers=True,
        )
    if "autoround" in words or {"auto", "round"} <= words:
        bits, g = (8 if eight else 4), group or 128
        return Scheme(
            f"auto-round int{bits}, group {g}, symmetric",
            {"quant_method": "auto-round", "bits": bits, "group_size": g, "sym": True,
             "packing_format": "auto_round:auto_gptq"},
            "intel/auto-round AutoRound defaults bits 4, group_size 128, sym True (auto_round/autoround.py); lm_head "
            "kept in 16 bits by default; every Linear of the text decoder blocks packed, a hybrid's Gated DeltaNet "
            "in_proj_qkv / in_proj_z / out_proj included, the vision tower not ('By default, AutoRound only "
            "quantizes the text module of VLMs', auto_round/mllm/README.md); vLLM serves it through AutoRoundConfig "
            "(vllm/model_executor/layers/quantization/auto_round.py; INCConfig, quantization/inc/inc.py, 0.32: a "
            "Linear is packed when its prefix is in block_name_to_quantize)",
            state_mixers=True,
        )  # fmt: skip
    if "w4a16" in words:
        g = group or 128
        return Scheme(
            f"compressed-tensors W4A16 (int4, group {g}, symmetric)",
            _compressed_tensors(
                {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": g},
                ct_ignore,
                "pack-quantized",
            ),
            f"W4A16 = {llmc}: int4 weights, group 128, symmetric",
        )
    if "fp8" in words:
        if "dynamic" in words or "w8a8" in words:
            return Scheme(
                "compressed-tensors FP8 dynamic (FP8 weights, one scale per output channel)",
                _compressed_tensors(
                    {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"},
                    ct_ignore,
                    "float-quantized",
                ),
                f"FP8_DYNAMIC = {llmc}: FP8 E4M3 weights with per-channel scales, dynamic per-token activations",
            )
        if "static" in words:
            return Scheme(
                "compressed-tensors FP8 (FP8 weights, one scale per tensor)",
                _compressed_tensors(
                    {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor"},
                    ct_ignore,
                    "float-quantized",
                ),
                f"FP8 = {llmc}: FP8 E4M3 weights with per-tensor scales, static activations",
            )
        return Scheme(
            "FP8 E4M3 in 128 × 128 blocks",
            {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
            "the block-FP8 layout of the official FP8 releases (Qwen3 / Qwen3.5 -FP8, DeepSeek-V3): quant_method fp8, "
            "weight_block_size [128, 128], float32 scale per block (vLLM Fp8Config, vllm/model_executor/layers/"
            "quantization/fp8.py); embeddings, lm_head, norms, routers in 16 bits",
        )
    if "w8a8" in words or "w8a16" in words:
        return Scheme(
            "compressed-tensors INT8 (int8 weights, one scale per output channel)",
            _compressed_tensors(
                {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}, ct_ignore, "int-quantized"
            ),
            f"{'W8A8' if 'w8a8' in words else 'W8A16'} = {llmc}: int8 weights, per-channel scales",
        )
    if "mxfp4" in words:
        if not moe:
            return None  # vLLM's mxfp4 method quantises FusedMoE experts only (Mxfp4Config.get_quant_method)
        return Scheme(
            "MXFP4 experts (4-bit E2M1, one E8M0 scale per 32)",
            {"quant_method": "mxfp4", "modules_to_not_convert": ["self_attn", "mlp.router", "embed_tokens",
                                                                  "lm_head"]},
            "vLLM Mxfp4Config (vllm/model_executor/layers/quantization/mxfp4.py): FusedMoE expert weights in MXFP4, "
            "attention, router, embeddings and lm_head in 16 bits (gpt-oss's quantization_config)",
        )  # fmt: skip
    if "nvfp4" in words or "fp4" in words:
        return Scheme(
            "NVFP4 (4-bit E2M1, one FP8 scale per 16 + a float32 global scale)",
            _compressed_tensors(
                {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group", "group_size": 16},
                ct_ignore,
                "nvfp4-pack-quantized",
            ),
            f"NVFP4 = {llmc}; the same bytes as NVIDIA ModelOpt's NVFP4_DEFAULT_CFG (block 16, FP8 scales; lm_head and "
            "routers disabled by _default_disabled_quantizer_cfg, modelopt/torch/quantization/config.py)",
        )
    if "bnb" in words or "nf4" in words:
        if "8bit" in words:
            return Scheme(
                "bitsandbytes LLM.int8 (int8 weights, one float32 scale per row)",
                {"quant_method": "bitsandbytes", "load_in_8bit": True},
                "transformers BitsAndBytesConfig(load_in_8bit=True) (src/transformers/utils/quantization_config.py); "
                "lm_head kept (get_keys_to_not_convert)",
            )
        return Scheme(
            "bitsandbytes NF4 with double quantisation",
            {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
             "bnb_4bit_use_double_quant": True},
            "the `-bnb-4bit` uploads (unsloth's naming) save BitsAndBytesConfig(load_in_4bit=True, nf4, "
            "bnb_4bit_use_double_quant=True): 4-bit weights, a uint8 absmax per 64 + float32 per 256 blocks; lm_head "
            "kept (transformers get_keys_to_not_convert)",
        )  # fmt: skip
    return None


@dataclass(frozen=True)
class NameMatch:
    base_path: Any
    base_name: str
    marker: str
    words: frozenset[str]
    group: int | None


def match_name(name: str) -> NameMatch | None:
    """`org/<bundled name><sep><marker words>` → the bundled profile and the marker; None otherwise.

    The longest prefix that is a bundled name (or alias) wins; every word after it must be a marker word
    (`MARKER_WORDS`, or a group tag `g128`)."""
    text = name.strip().split("@", 1)[0]
    if not text or text.count("/") > 1 or ":" in text:
        return None
    stem = text.rsplit("/", 1)[-1]
    cuts = [m.start() for m in _SEPARATORS.finditer(stem)]
    for cut in reversed(cuts):
        suffix = stem[cut + 1 :]
        words = [w for w in _SEPARATORS.split(suffix.lower()) if w]
        if not words:
            continue
        if not all(w in MARKER_WORDS or _GROUP.match(w) for w in words):
            return None  # a longer suffix holds this non-marker word too
        prefix = stem[:cut]
        path = MODELS.find(text[: len(text) - len(stem)] + prefix) if "/" in text else None
        path = path or MODELS.find(prefix)
        if path is None or model_at(path).quantization:  # `Qwen3-0.6B-FP8` + `-dynamic`: keep looking for the base
            continue
        groups = [g for w in words for g in _GROUP.findall(w)]
        group = next((int(a or b) for a, b in groups), None)
        return NameMatch(path, prefix, suffix, frozenset(w for w in words if not _GROUP.match(w)), group)
    return None


def _derived_bytes(
    base: ModelSpec, quantised: ModelSpec, config: dict[str, Any], state_mixers: bool | None = None
) -> tuple[int, int]:
    """(weight bytes, band): the base's exact 16-bit total with the formula's Linear layers quantised.

    What the dense formula does not book (the base's exact total minus the formula's) is split where the layout is
    known: a gated attention's q_proj gate rows (`gated_query_params`) are packed with the attention; a hybrid's
    state-mixer projections (`state_mixer_linear_params`) are packed when the scheme's default recipe packs them
    (`Scheme.state_mixers`) and otherwise sit halfway between kept and packed, as does the rest (conv weights,
    norms, a projection a recipe may keep). The vision tower is in the formula, in 16 bits (kept by the quantisers'
    default recipes)."""
    from vramctl.registry.models import _kept_parts

    plain = replace(quantised, quantization=None, quant_bits=None, quant_group_size=None, weight_bytes=0)
    high, packed = quant_part_bytes(plain), quant_part_bytes(quantised)
    formula_total = weight_bytes_from_spec(plain)
    if base.state_space is not None and base.num_hidden_layers:
        # the dense formula books attention in every layer; only the attention layers have it
        share = 1 - base.num_state_layers / base.num_hidden_layers
        formula_total -= round(high["attention"] * (1 - share))
        high["attention"] = round(high["attention"] * share)
        packed["attention"] = round(packed["attention"] * share)
    for part, fraction in _kept_parts(config, quantised).items():
        if part in packed:  # not STATE_MIXERS: the state mixers are `state_mixers` here
            packed[part] = round(packed[part] * (1 - fraction) + high[part] * fraction)
    linear_16, linear_q = sum(high.values()), sum(packed.values())
    ratio = linear_q / linear_16 if linear_16 else 1.0
    attention_ratio = packed["attention"] / high["attention"] if high["attention"] else ratio
    exact = base.weight_bytes or formula_total
    outside = max(0, exact - formula_total)  # state mixers, gate rows, conv weights: see the docstring
    element = serving_dtype_bytes(plain)
    gate = min(outside, gated_query_params(base) * element)
    mixers = min(outside - gate, base.num_state_layers * (state_mixer_linear_params(base) or 0) * element)
    unsure = outside - gate - (mixers if state_mixers else 0)  # halfway between kept and packed
    top = exact - linear_16 + linear_q - round(gate * (1 - attention_ratio))
    if state_mixers:
        top -= round(mixers * (1 - ratio))
    if (quantised.quantization or "") == "bitsandbytes" and quantised.quant_bits == 4:
        top -= bnb_double_quant_saving(quantised)
    bottom = top - round(unsure * (1 - ratio))
    ends = _rank_bytes(plain, 1, False)
    kept = ends.embedding + ends.lm_head  # 16 bits in every recipe
    floor = kept + round((exact - kept) * ratio)  # everything but the embeddings quantised
    if linear_16 > exact - kept or bottom < floor - round(LAYOUT_BAND * exact):
        # the dense formula's split does not fit this model's layers (Nemotron-H's MLP-only and Mamba layers):
        # the ratio spec_from_config gives a pre-quantised hybrid config, with a band down to everything quantised
        weights = quantised.weight_bytes
        return weights, max(round(LAYOUT_BAND * weights), abs(weights - floor))
    weights = (top + bottom) // 2
    return weights, (top - bottom) // 2 + round(LAYOUT_BAND * weights)


def _matched(name: str) -> tuple[NameMatch, ModelSpec, Scheme, dict[str, Any]] | None:
    """(the name's match, the bundled base, the marker's scheme, the base's config with that quantization_config), or
    None when the name is not `<bundled unquantised name><marker of one method>`."""
    found = match_name(name)
    if found is None:
        return None
    base = model_at(found.base_path)
    if base.quantization:  # already a quantised checkpoint: a second marker is not a layout
        return None
    scheme = scheme_for(found.words, found.group, moe=base.moe is not None)
    if scheme is None:
        return None
    config = copy.deepcopy(dict(MODELS.document(found.base_path)["config"]))
    config["quantization_config"] = copy.deepcopy(scheme.quantization_config)
    return found, base, scheme, config


def derived_config(name: str) -> dict[str, Any] | None:
    """The config a derived plan is built from (the base's config.json fields + the inferred quantization_config),
    for `--hf-overrides`; None when `derive_from_name` would return None."""
    matched = _matched(name)
    return None if matched is None else matched[3]


def derive_from_name(name: str, why: str) -> ModelSpec | None:
    """The bundled base of a pre-quantised checkpoint's name with the marker's quantisation applied (see the module
    docstring), or None when the name is not `<bundled name><marker>` or the marker names no single method."""
    from vramctl.registry.models import spec_from_config

    matched = _matched(name)
    if matched is None:
        return None
    found, base, scheme, config = matched
    where = f"{base.name} (bundled) + {scheme.method}"
    checkpoint = name.strip().split("@", 1)[0]
    quantised = spec_from_config(config, where=where, name=checkpoint, param_count=base.param_count)
    weights, band = _derived_bytes(base, quantised, config, scheme.state_mixers)
    derived = DerivedCheckpoint(
        checkpoint=checkpoint,
        base=base.name,
        method=scheme.method,
        marker=found.marker,
        why=why,
        weight_band_bytes=band,
        defaults=scheme.defaults,
    )
    sources = (
        ("config", f"{base.name} (bundled profile): its config.json fields, + the quantization_config {scheme.method}"),
        (
            "derived_from",
            f"{checkpoint}'s own config.json was not read ({why}): planned as the bundled {base.name} quantised with "
            f"{scheme.method}, inferred from '{found.marker}' in the name; defaults: {scheme.defaults}",
        ),
        (
            "weight_bytes",
            f"{format_gib(weights)} ± {format_gib(band)}: {base.name}'s 16-bit total with its Linear layers in "
            f"{scheme.method}; tensors outside them (vision tower, state mixers) halfway between kept and quantised",
        ),
        ("param_count", f"{base.name}'s"),
        ("exact_numbers", exact_numbers_hint(checkpoint)),
    )
    return replace(quantised, weight_bytes=weights, sources=sources, aliases=(), derived=derived)
