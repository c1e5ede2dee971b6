"""config.json (or a bundled profile's `config:`) → ModelSpec: ONE parser for both.

Architecture facts the config does not spell out (tensor layout for the parameter count, attention
pattern defaults) follow the Hugging Face transformers implementation of each `model_type`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vramctl.core.dsv4 import parameter_count as dsv4_parameter_count
from vramctl.core.dsv4 import weight_bytes as dsv4_weight_bytes
from vramctl.core.engines import vllm_yarn
from vramctl.core.errors import BadInputError
from vramctl.core.gemma4 import SLIDING as GEMMA4_SLIDING
from vramctl.core.gemma4 import parameter_count as gemma4_parameter_count
from vramctl.core.gemma4 import weight_bytes as gemma4_weight_bytes
from vramctl.core.params import (
    attention_params_per_layer,
    bnb_double_quant_saving,
    is_moe_layer,
    num_moe_layers,
    param_count_from_spec,
    weight_bytes_from_spec,
    weight_bytes_keeping,
)
from vramctl.core.specs import (
    DTYPE_BYTES,
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    MAMBA,
    MLP_ONLY,
    SLIDING_ATTENTION,
    MLASpec,
    ModelSpec,
    MoESpec,
    StateSpaceSpec,
)
from vramctl.registry._fields import (
    get_bool,
    get_float,
    get_int,
    get_mapping,
    get_opt_int,
    get_str_list,
)
from vramctl.registry._legacy_layouts import LEGACY_TYPES, dbrx_names, legacy_layout
from vramctl.registry._pure_mamba import (
    PURE_MAMBA_TYPES,
    pure_mamba_names,
    pure_mamba_param_count,
    pure_mamba_pattern,
)
from vramctl.registry.ct_groups import main_weights as ct_main_weights
from vramctl.registry.ct_groups import override_delta
from vramctl.registry.ct_groups import scheme as ct_scheme
from vramctl.registry.deepseek_v4 import dsv4_shape
from vramctl.registry.gemma4 import gemma4_shape
from vramctl.registry.hybrid_quant import STATE_MIXERS, gated_delta_net_bytes
from vramctl.registry.modelopt_mixed import mixed_saving_bytes, read_mixed_layers
from vramctl.registry.vision_towers import vision_tower_params, vision_tower_shape

# model_type → defaults of its transformers config class where config.json may omit the field.
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "opt", "gpt2", "bloom", "falcon"}
MAX_PARAMS = 10**15
"""1,000 T parameters: 1,000 × the largest checkpoint (Kimi-K2: 1.03 T); more means a corrupt field, and byte
counts past it no longer convert to float."""
MAX_LAYERS = 10_000
"""More decoder layers than any model has (Llama-3.1-405B: 126); a corrupt value would make per-layer loops hang."""
_OPT_POSITION_OFFSET = 2
"""transformers OPTLearnedPositionalEmbedding keeps max_position_embeddings + 2 rows."""
_QKV_BIAS_ALWAYS = {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "chatglm"}
_QK_NORM = {
    "qwen3",
    "qwen3_moe",
    "gemma3",
    "gemma3_text",
    "qwen3_vl_text",
    "qwen3_vl_moe_text",
    "exaone4",
    "lfm2",
    "lfm2_moe",
}
_QK_NORM |= {"apertus", "exaone_moe", "laguna", "afmoe"}
"""Per-head q/k RMSNorm of head_dim, always present (vLLM exaone4.py Exaone4Attention q_norm / k_norm; at vLLM 0.32
apertus.py:204, exaone_moe.py:221, afmoe.py:225, laguna.py q_norm / k_norm)."""
_UNGATED_MLP = {"apertus", "cosmos3_edge_text", "nemotron"}
"""An MLP of up + down projections without a gate (vLLM 0.32 apertus.py:89 ApertusMLP, xIELU activation;
cosmos3_edge.py:369 Cosmos3EdgeTextModel builds NemotronH's relu² MLP layers, transformers' fc1 / fc2; nemotron.py:149-156
NemotronMLP up_proj / down_proj, whose LayerNorm1P norms also carry a bias, nemotron.py:82-91)."""
_LAYERNORM_BIAS = {"nemotron"}
_LAYOUT_REFUSED = {
    "hrm_text": "its two recurrent stacks (num_layers_per_stack layers run H_cycles × (L_cycles + 1) times, one KV "
    "cache per step; vLLM hrm_text.py) are not modelled",
    "gemma3n_text": "Gemma-3n's per-layer input embeddings (vocab_size_per_layer_input × layers × "
    "hidden_size_per_layer_input), AltUp / LAuReL blocks, per-layer MLP widths and the KV its last "
    "num_kv_shared_layers layers share (vLLM gemma3n.py) are not modelled",
    "diffusion_gemma_text": "DiffusionGemma's block-diffusion decoder (vLLM 0.32 diffusion_gemma.py: non-causal "
    "canvas blocks, its own drafter loop and cache use) is not modelled; vramctl plans the causal Gemma-4 models",
    "cohere_asr": "Cohere-ASR is an encoder-decoder speech model: its audio encoder (encoder_config) and the "
    "cross-attention KV of every decoder layer (vLLM 0.32 cohere_asr.py) are not modelled",
    "whisper": "Whisper is an encoder-decoder speech model: its audio encoder (encoder_layers) and the "
    "cross-attention KV of every decoder layer (vLLM 0.32 whisper.py) are not modelled",
    "qwen2_5_omni": "Qwen2.5-Omni's thinker (a Qwen2 decoder under thinker_config.text_config) is served with its "
    "audio encoder and vision tower (vLLM qwen2_5_omni_thinker.py), whose weights vramctl does not count",
    "qwen3_omni_moe": "Qwen3-Omni's thinker (a Qwen3-MoE decoder under thinker_config.text_config) is served with "
    "its audio encoder and vision tower (vLLM qwen3_omni_moe_thinker.py), whose weights vramctl does not count",
}
"""Plain-attention model types whose layout one ModelSpec cannot describe (one line each)."""
_QK_NORM_WHOLE = {"olmo2", "minimax_m2", "olmo_hybrid"}
"""q/k RMSNorm over the whole projection, heads × head_dim and kv_heads × head_dim (vLLM olmo2.py, minimax_m2.py)."""
_QK_NORM_FLAG = {"glm4_moe": False, "cohere": True}
"""`use_qk_norm` gates the q/k norms: per head for Glm4Moe (vLLM glm4_moe.py RMSNorm(head_dim)), over
(heads, head_dim) / (kv_heads, head_dim) for Cohere (commandr.py LayerNorm(param_shape=...)); value = whole."""
_FOUR_NORMS = {"gemma2", "gemma3", "gemma3_text", "glm4", "afmoe", "muse_glimmer_text"}
"""Pre + post norms around attention and MLP (GLM-4-0414: post_self_attn_layernorm, post_mlp_layernorm; vLLM 0.32
afmoe.py:327-332 pre_mlp_layernorm / post_mlp_layernorm, muse_glimmer.py:1266-1275 pre/post_feedforward_layernorm)."""
_ONE_NORM = {"cohere", "cohere2"}
"""One input_layernorm feeding attention and MLP in parallel (vLLM commandr.py CohereDecoderLayer)."""
_NO_OUT_BIAS = {"glm4", "glm4_moe"}
"""`attention_bias` adds q/k/v biases only; o_proj has none (vLLM glm4.py, glm4_moe.py RowParallelLinear bias=False)."""
_LAYER_TYPES = {FULL_ATTENTION, SLIDING_ATTENTION}
_AS_FULL_ATTENTION = {"chunked_attention", "indexed_attention"}
"""`layer_types` kinds transformers 5 writes that the plan books as full attention: Llama-4's chunked local attention
(Llama4TextConfig; vLLM without its hybrid KV cache manager keeps every token, see docs/models-and-gpus.md) and
DeepSeek-V3.2 / GLM-MoE-DSA's `indexed_attention` (DeepseekV32Config: MLA whose indexer keys `index_topk` adds)."""
_GLOBAL_EVERY = {"gemma3": 6, "gemma3_text": 6, "cohere2": 4}
"""Default `sliding_window_pattern` of the transformers config class (Cohere2Config: 4; vLLM cohere2.py
`(layer_idx + 1) % sliding_window_pattern != 0` slides)."""
_DTYPE_ALIASES = {"float": "float32", "torch.float32": "float32", "half": "float16"}
_FP8_METHODS = {"fp8", "fbgemm_fp8"}
_SCORE_BIAS = {"glm4_moe", "minimax_m2", "kimi_linear"}
"""Routers with an `e_score_correction_bias` whatever topk_method says (transformers Glm4MoeTopkRouter,
MiniMax-M2 `use_routing_bias`, KimiLinearTopkRouter / vLLM KimiMoE: `topk_method` defaults to noaux_tc)."""


def _text_config(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Multimodal wrappers (Gemma-3, Llama-4, Qwen2-VL, ...) keep the language model under text_config."""
    text = get_mapping(config, "text_config", where)
    merged = dict(config)
    # PaliGemma / Voxtral keep a `hidden_size` (the projection width) beside their text_config: the decoder's
    # shape is the text_config's whenever the top level lacks one of its fields (transformers PaliGemmaConfig)
    if text is not None and ("hidden_size" not in config or "num_hidden_layers" not in config):
        kind = str(text.get("model_type") or _WRAPPER_TEXT_TYPE.get(str(config.get("model_type")), ""))
        defaults = {k: v for k, v in _TEXT_DEFAULTS.get(kind, {}).items() if k not in text}
        if "tie_word_embeddings" in config:  # the wrapper's own value wins over the text class default
            defaults.pop("tie_word_embeddings", None)
        merged = {**config, **defaults, **text}
        for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
            if key in config and key not in text:
                merged[key] = config[key]
        merged["architectures"] = config.get("architectures", text.get("architectures"))
        merged["_text_model_type"] = text.get("model_type") or kind or None
        if defaults:
            fields = ", ".join(f"{k}={v}" for k, v in sorted(defaults.items()))
            merged["_text_defaults"] = f"absent from text_config, transformers' {kind} defaults: {fields}"
    return merged


_CHATGLM_NAMES = {
    # ChatGLMConfig (THUDM/chatglm3-6b, glm-4-9b-chat remote code) → the names vramctl reads (vLLM chatglm.py)
    "num_layers": "num_hidden_layers",
    "ffn_hidden_size": "intermediate_size",
    "kv_channels": "head_dim",
    "padded_vocab_size": "vocab_size",
}


def _chatglm_names(config: dict[str, Any]) -> dict[str, Any]:
    """ChatGLM's own field names; KV heads = multi_query_group_num when multi_query_attention is on (vLLM
    chatglm.py GLMAttention), its dense_h_to_4h is gate + up of ffn_hidden_size and it has q/k/v biases."""
    if config.get("model_type") != "chatglm":
        return config
    out = dict(config)
    for theirs, ours in _CHATGLM_NAMES.items():
        if theirs in out and ours not in out:
            out[ours] = out[theirs]
    if out.get("multi_query_attention") and "num_key_value_heads" not in out:
        out["num_key_value_heads"] = out.get("multi_query_group_num")
    return out


def _zamba2_names(config: dict[str, Any], where: str) -> dict[str, Any]:
    """Zamba2's derived fields (Zamba2Config `__post_init__`): attention over 2 × hidden_size, head_dim = 2 ×
    hidden_size // num_attention_heads, intermediate_size 4 × hidden_size when absent, tied embeddings by default,
    max_position_embeddings 16384 with `use_long_context`. vLLM's Zamba2Attention (zamba2.py, v0.32.0) builds its
    QKVParallelLinear without a KV-head count: as many KV heads as heads."""
    if config.get("model_type") != "zamba2":
        return config
    out = dict(config)
    hidden = get_int(out, "hidden_size", where, default=2560)
    heads = get_int(out, "num_attention_heads", where, default=32)
    out["head_dim"] = 2 * hidden // heads
    out["num_key_value_heads"] = heads
    if out.get("intermediate_size") is None:
        out["intermediate_size"] = 4 * hidden
    out.setdefault("tie_word_embeddings", True)
    if get_bool(out, "use_long_context", where):
        out["max_position_embeddings"] = 16384
    return out


_NEMOTRON_H_BLOCKS = {
    # transformers 5 `layers_block_type` (and the legacy names its `remap_legacy_layer_types` maps: mamba →
    # linear_attention, attention → full_attention) → vLLM's `hybrid_override_pattern` character
    "linear_attention": "M",
    "mamba": "M",
    "full_attention": "*",
    "attention": "*",
    "mlp": "-",
    "moe": "E",
}
_NEMOTRON_H_RENAMES = {
    # NemotronHConfig `__post_init__` (transformers 5.19): the mamba_* spellings some checkpoints carry
    "mamba_n_groups": "n_groups",
    "mamba_d_conv": "conv_kernel",
    "mamba_expand": "expand",
    "mamba_conv_bias": "use_conv_bias",
    "mamba_chunk_size": "chunk_size",
}


def _longcat_names(config: dict[str, Any], where: str) -> dict[str, Any]:
    """LongCat-Flash (`longcat_flash`; vLLM 0.32.0 longcat_flash.py:249-330): each of its `num_layers` layers runs two
    MLA attentions and two dense MLPs (`ffn_hidden_size`), then one MoE (`expert_ffn_hidden_size`, `moe_topk`)
    whose router also scores `zero_expert_num` weightless identity experts. Planned as 2 × num_layers sub-layers of
    MLA attention + dense MLP (the KV: two MLA latents per layer, as vLLM's cache holds them), the MoE on every
    second sub-layer; `_longcat_param_count` adds what that shape leaves out."""
    if config.get("model_type") != "longcat_flash":
        return config
    out = dict(config)
    layers = get_int(config, "num_layers", where, maximum=MAX_LAYERS)
    get_int(config, "n_routed_experts", where)  # every layer's MoE (LongcatMoe): required, positive
    out["num_hidden_layers"] = 2 * layers
    for name, alias in (
        ("intermediate_size", "ffn_hidden_size"),
        ("moe_intermediate_size", "expert_ffn_hidden_size"),
        ("num_experts_per_tok", "moe_topk"),
    ):
        if out.get(name) is None and alias in out:  # transformers LongcatFlashConfig.attribute_map
            out[name] = out[alias]
    out["moe_layer_freq"] = 2
    out["_longcat_layers"] = layers
    return out


def _longcat_param_count(spec: ModelSpec, config: Mapping[str, Any], where: str) -> int:
    """The formula's count of the 2L sub-layer shape, plus what it leaves out per layer (vLLM longcat_flash.py):
    the dense MLP of the MoE sub-layer (3 × hidden × ffn_hidden_size), the router rows and float32 correction bias
    of the zero experts (hidden + 1 each), and the correction bias of the real experts (LongcatRouter, :148-168)."""
    assert spec.moe is not None
    layers = int(config["_longcat_layers"])
    zero = get_int(config, "zero_expert_num", where, default=0, minimum=0)
    per_layer = 3 * spec.hidden_size * spec.intermediate_size + zero * (spec.hidden_size + 1)
    if not spec.moe.score_correction_bias:
        per_layer += spec.moe.num_experts
    return param_count_from_spec(spec) + layers * per_layer


def _longcat_weight_bytes(spec: ModelSpec, config: Mapping[str, Any], where: str) -> int:
    """Unquantised: every parameter in the serving dtype, the router and its bias in float32 (LongcatMoe
    `router_params_dtype`, longcat_flash.py:190); quantised: the layout formula's bytes scaled by the exact count."""
    assert spec.moe is not None
    router = int(config["_longcat_layers"]) * (spec.hidden_size + 1) * (
        spec.moe.num_experts + get_int(config, "zero_expert_num", where, default=0, minimum=0)
    )
    if spec.quantization is None:
        size = min(2.0, spec.dtype_bytes)
        return int(spec.param_count * size + router * (4 - size))
    return round(weight_bytes_keeping(spec, {}) * spec.param_count / param_count_from_spec(spec))


def _nemotron_h_names(config: dict[str, Any], where: str) -> dict[str, Any]:
    """Nemotron-H as transformers 5 writes it: `layers_block_type`, one name per layer (linear_attention / moe /
    full_attention / mlp, or the legacy mamba / attention), instead of `hybrid_override_pattern`, and no
    `num_hidden_layers` (NemotronHConfig derives it from the list's length, transformers 5.19
    configuration_nemotron_h.py). vLLM 0.32 reads `config.hybrid_override_pattern` (nemotron_h.py
    NemotronHModel: `make_layers(len(config.hybrid_override_pattern), …)`), which transformers 5 derives from the
    list (`_list_to_pattern`), so the list becomes that string here; `num_hidden_layers` is its length."""
    kind = str(config.get("_text_model_type") or config.get("model_type") or "")
    if kind != "nemotron_h":
        return config
    out = dict(config)
    for theirs, ours in _NEMOTRON_H_RENAMES.items():
        if theirs in out and ours not in out:
            out[ours] = out.pop(theirs)
    blocks = out.get("layers_block_type")
    if blocks is not None:
        if (
            not isinstance(blocks, list)
            or not blocks
            or any(not isinstance(b, str) or b not in _NEMOTRON_H_BLOCKS for b in blocks)
        ):
            raise BadInputError(
                f"{where}: field 'layers_block_type' must list layers of "
                "'linear_attention' / 'full_attention' / 'mlp' / 'moe' (or 'mamba' / 'attention')"
            )
        out["hybrid_override_pattern"] = "".join(_NEMOTRON_H_BLOCKS[b] for b in blocks)
        out["num_hidden_layers"] = len(blocks)  # transformers 5 ignores a stale num_hidden_layers
    elif isinstance(out.get("hybrid_override_pattern"), str) and out.get("num_hidden_layers") is None:
        out["num_hidden_layers"] = len(out["hybrid_override_pattern"])
    width = out.get("intermediate_size")
    # NemotronHMLPDecoderLayer: a one-entry list is every MLP's width
    if isinstance(width, list) and len(width) == 1:
        out["intermediate_size"] = width[0]
    return out


def _lfm2_names(config: dict[str, Any], where: str) -> dict[str, Any]:
    """LFM2's own fields (Lfm2Config `__post_init__`): `block_ff_dim` is intermediate_size, `tie_embedding` is
    tie_word_embeddings; the MLP width is then adjusted as vLLM's Lfm2MLP does it (lfm2.py, v0.32.0): with
    `block_auto_adjust_ff_dim`, int(2 × width / 3) × `block_ffn_dim_multiplier`, rounded up to `block_multiple_of`."""
    if config.get("model_type") == "lfm2_moe":
        # Lfm2MoeConfig (transformers 5.19): intermediate_size is the dense layers' MLP width as is (vLLM 0.32
        # lfm2_moe.py Lfm2MoeMlp(ff_dim=config.intermediate_size), no auto-adjust); Lfm2MoeForCausalLM always ties
        # its lm_head to the embedding (`self.lm_head.tie_weights(self.model.embed_tokens)`)
        out = dict(config)
        if "tie_embedding" in out:
            out["tie_word_embeddings"] = out["tie_embedding"]
        out.setdefault("tie_word_embeddings", True)
        if not get_bool(out, "tie_word_embeddings", where):
            raise BadInputError(
                f"{where}: tie_word_embeddings false, but vLLM's Lfm2MoeForCausalLM ties the lm_head to the "
                "embedding (lfm2_moe.py); a separate lm_head would not load"
            )
        out.setdefault("num_dense_layers", 2)  # Lfm2MoeConfig default
        return out
    if config.get("model_type") != "lfm2":
        return config
    out = dict(config)
    if "block_ff_dim" in out:
        out["intermediate_size"] = out["block_ff_dim"]
    if "tie_embedding" in out:
        out["tie_word_embeddings"] = out["tie_embedding"]
    width = get_int(out, "intermediate_size", where, default=12288)
    if get_bool(out, "block_auto_adjust_ff_dim", where, default=True):
        width = int(2 * width / 3)
        multiplier = out.get("block_ffn_dim_multiplier", 1.0)
        if multiplier is not None:
            width = int(get_float(out, "block_ffn_dim_multiplier", where) * width)
        step = get_int(out, "block_multiple_of", where, default=256)
        width = step * -(-width // step)
    out["intermediate_size"] = width
    out.setdefault("tie_word_embeddings", True)  # Lfm2Config default
    return out


_LLAMA = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32}
_LLAMA.update(num_attention_heads=32, max_position_embeddings=2048, tie_word_embeddings=False)
_QWEN2_VL_TEXT = {
    "vocab_size": 152064,
    "hidden_size": 8192,
    "intermediate_size": 29568,
    "num_hidden_layers": 80,
}
_QWEN2_VL_TEXT.update(num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=32768)
_QWEN2_VL_TEXT.update(sliding_window=4096, use_sliding_window=False, tie_word_embeddings=False)
_QWEN3_5_TEXT: dict[str, Any] = {
    "vocab_size": 248320,
    "num_attention_heads": 16,
    "head_dim": 256,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
}
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers config-class defaults of the fields vramctl reads. A wrapper's saved text_config omits the
    # fields equal to them (PretrainedConfig.to_diff_dict → recursive_diff_dict), and loading fills them back
    # (LlavaConfig / Mistral3Config: CONFIG_MAPPING[model_type](**text_config); Gemma3Config, Qwen*-VL,
    # Llama4Config: sub_configs["text_config"](**text_config)). LLaVA-1.5's text_config has no hidden_size.
    "llama": _LLAMA,
    "mistral": {
        **_LLAMA,
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096 * 32,
        "sliding_window": 4096,
    },
    "qwen2": {
        **_QWEN2_VL_TEXT,
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
    },
    "qwen2_vl_text": _QWEN2_VL_TEXT,
    "qwen2_5_vl_text": _QWEN2_VL_TEXT,
    "qwen3_vl_text": {
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 128,
        "max_position_embeddings": 128000,
        "tie_word_embeddings": False,
    },
    # transformers Qwen3_5TextConfig / Qwen3_5MoeTextConfig (configuration_qwen3_5.py, configuration_qwen3_5_moe.py);
    # layer_types absent: every full_attention_interval-th (4) layer is full attention (see _hybrid_pattern)
    "qwen3_5_text": {
        **_QWEN3_5_TEXT,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 32,
        "num_key_value_heads": 4,
    },
    "qwen3_5_moe_text": {
        **_QWEN3_5_TEXT,
        "hidden_size": 2048,
        "num_hidden_layers": 40,
        "num_key_value_heads": 2,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "num_experts_per_tok": 8,
        "num_experts": 256,
    },
    "gemma3_text": {
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
        "tie_word_embeddings": True,
    },
    "llama4_text": {
        "vocab_size": 202048,
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 4096 * 32,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "tie_word_embeddings": False,
    },
}
_WRAPPER_TEXT_TYPE = {
    # the text model_type a wrapper assumes when its text_config names none
    "llava": "llama",
    "llava_next": "llama",
    "mistral3": "mistral",
    "gemma3": "gemma3_text",
    "qwen2_vl": "qwen2_vl_text",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "llama4": "llama4_text",
}


_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
"""vLLM `_get_and_verify_max_len` (vllm/config.py 0.6–0.10, vllm/config/model.py later): the smallest of these."""
_UNSCALED_ROPE = {"su", "longrope", "llama3"}
MAX_CONTEXT = 1 << 30
"""1,073,741,824 tokens: 100 × any context a config declares (Llama-4-Scout: 10,485,760); more is corrupt."""


def _length_keys(config: Mapping[str, Any], where: str) -> dict[str, int]:
    return {
        key: get_int(config, key, where, maximum=MAX_CONTEXT)
        for key in _MAX_LEN_KEYS
        if config.get(key) is not None
    }


def _unscaled_yarn_len(config: Mapping[str, Any], model_type: str, where: str, old_len: int) -> int | None:
    """vLLM ≥ 0.30's derived length of a yarn-family config (vramctl.core.engines.vllm_yarn)."""
    found = _length_keys(config, where)
    length = (found.get("model_max_length") or min(found.values())) if found else 2048
    return vllm_yarn.unscaled_yarn_len(config, model_type, length, old_len)


def _max_len(config: Mapping[str, Any], model_type: str, where: str) -> tuple[int, str | None, int | None]:
    """(context length, a note when it is not max_position_embeddings, vLLM's own length when larger), as vLLM
    derives `max_model_len` (yarn: the smaller of vLLM's and SGLang's lengths, and vLLM's as the third item).

    The smallest of `_MAX_LEN_KEYS` present, `model_max_length` winning when set (Command-R / Cohere2); none of
    them: 2048 (vLLM warns and assumes it). Then `rope_scaling` (transformers 5: `rope_parameters`), except for
    Gemma-3 whose max_position_embeddings is already scaled: a `rope_type` other than su / longrope / llama3
    multiplies by `factor` (default 1; `mrope` is patched to `default`), and `yarn` multiplies
    `original_max_position_embeddings` instead. SGLang (`get_context_length`) agrees except for yarn, where it
    keeps max_position_embeddings; the smaller of the two is kept so a plan never admits a length SGLang refuses.
    """
    found = _length_keys(config, where)
    if not found:
        return (
            2048,
            "no max_position_embeddings (or another length key) in config.json: vLLM assumes 2048",
            None,
        )
    length = found.get("model_max_length") or min(found.values())
    key = "model_max_length" if "model_max_length" in found else min(found, key=lambda k: found[k])
    note = None if key == "max_position_embeddings" else f"context length from config.json '{key}' ({length})"
    rope = config.get("rope_scaling")
    if rope is None:
        rope = config.get("rope_parameters")
    if rope is None or "gemma3" in model_type:
        return length, note, None
    if not isinstance(rope, dict):
        raise BadInputError(f"{where}: field 'rope_scaling' must be a mapping or null, got {rope!r:.40}")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if not isinstance(rope_type, str):
        raise BadInputError(
            f"{where}: field 'rope_scaling.rope_type' must be a string, got {rope_type!r:.40}"
        )
    if rope_type in _UNSCALED_ROPE or rope_type == "mrope":
        return length, note, None
    rwhere = f"{where}: rope_scaling"
    factor = get_float(rope, "factor", rwhere, default=1.0)
    if not 0 < factor <= 1024:
        raise BadInputError(f"{rwhere}: field 'factor' must be in (0, 1024], got {factor}")
    if rope_type == "yarn":
        original = get_int(rope, "original_max_position_embeddings", rwhere, default=length)
        vllm_len = int(original * factor)  # vLLM's `_get_and_verify_max_len`; SGLang keeps `length`
        scaled = min(vllm_len, length)
        if scaled != length:
            note = f"yarn: original_max_position_embeddings {original} × factor {factor:g} = {vllm_len}"
        return scaled, note, vllm_len if scaled < vllm_len <= MAX_CONTEXT else None
    scaled = int(length * factor)
    if scaled == length:
        return length, note, None
    if scaled > MAX_CONTEXT:
        raise BadInputError(
            f"{rwhere}: factor {factor:g} × {length} is an implausible context ({scaled} tokens)"
        )
    return (
        scaled,
        f"rope_scaling {rope_type} factor {factor:g} × {key} {length} (vLLM's derived max_model_len)",
        None,
    )


def _rope_cache_elements(config: Mapping[str, Any], model_type: str, rotary_dim: int) -> int:
    """Elements of vLLM's `cos_sin_cache` buffers (vllm/model_executor/layers/rotary_embedding/, `get_rope`: one
    instance per distinct set-up, shared by the layers; `[max_len, rotary_dim]` in the model dtype, allocated with
    the model so it is part of "Model loading took"). max_len: max_position_embeddings; × factor for `linear` and
    `dynamic` scaling; original_max_position_embeddings × factor for `yarn` (and DeepSeek's yarn). Gemma-3 has a
    second, unscaled rope for its local layers. gemma-3-4b: 1,048,576 × 256 + 131,072 × 256 = 0.56 GiB in bf16,
    what vLLM's log shows above the checkpoint. 0 for learned absolute positions (OPT)."""
    if model_type == "opt" or rotary_dim <= 0:
        return 0
    raw = config.get("max_position_embeddings")
    positions = raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 < raw <= MAX_CONTEXT else 0
    if not positions:
        return 0
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    length = positions
    if isinstance(rope, dict):
        kind = str(rope.get("rope_type", rope.get("type", "default")))
        factor = rope.get("factor", 1.0)
        factor = float(factor) if isinstance(factor, int | float) and 0 < factor <= 1024 else 1.0
        if kind in ("linear", "dynamic"):
            length = int(positions * factor)
        elif kind in ("yarn", "deepseek_yarn"):
            original = rope.get("original_max_position_embeddings", positions)
            base = original if isinstance(original, int) and 0 < original <= MAX_CONTEXT else positions
            length = int(base * factor)
    total = length * rotary_dim
    if "gemma3" in model_type and config.get("rope_local_base_freq") is not None:
        total += positions * rotary_dim
    return min(total, MAX_CONTEXT * 1024)


def _partial_rotary(config: Mapping[str, Any], model_type: str) -> Any:
    """`partial_rotary_factor`; Qwen3.5 keeps it in `rope_parameters`, and transformers' Qwen3_5TextConfig
    `__post_init__` defaults it to 0.25 when the config names none."""
    raw = config.get("partial_rotary_factor")
    if raw is None and model_type in _GATED_DELTA_NET and model_type != "qwen3_next":
        rope = config.get("rope_parameters")
        raw = (rope.get("partial_rotary_factor") if isinstance(rope, dict) else None) or 0.25
    return raw or 1.0


def _dtype(config: Mapping[str, Any], where: str) -> str:
    raw = config.get("torch_dtype", config.get("dtype"))
    if raw is None:
        return "bfloat16"
    if not isinstance(raw, str):
        raise BadInputError(f"{where}: field 'torch_dtype' must be a dtype name, got {raw!r}")
    name = _DTYPE_ALIASES.get(raw.lower(), raw.lower().removeprefix("torch."))
    if name not in DTYPE_BYTES:
        raise BadInputError(f"{where}: field 'torch_dtype' has unknown dtype {raw!r}")
    return name


@dataclass(frozen=True)
class _Quant:
    method: str | None = None
    bits: int | None = None
    group_size: int | None = None


def _quantization(config: Mapping[str, Any], where: str) -> _Quant:
    """`quantization_config` → method, bits per weight, group (or FP8 block) size."""
    quant = get_mapping(config, "quantization_config", where)
    if quant is None:
        return _Quant()
    qwhere = f"{where}: quantization_config"
    method = quant.get("quant_method")
    if method is None and (quant.get("load_in_4bit") or quant.get("load_in_8bit")):
        method = "bitsandbytes"
    if not isinstance(method, str) or not method:
        raise BadInputError(
            f"{where}: field 'quantization_config.quant_method' must be a string, got {method!r}"
        )
    method = method.lower()
    method = "fp8" if method in _FP8_METHODS else method
    bits: int | None = None
    group: int | None = None
    if method == "fp8":
        bits = 8
        block = quant.get("weight_block_size")
        if block is not None:
            if (
                not isinstance(block, list)
                or not block
                or not all(isinstance(b, int) and b > 0 for b in block)
            ):
                raise BadInputError(
                    f"{qwhere}: field 'weight_block_size' must be a list of positive integers"
                )
            group = block[0]
    elif method == "mxfp4":
        bits, group = 4, 32
    elif method == "bitsandbytes":
        bits = 4 if quant.get("load_in_4bit") else 8
    elif method == "compressed-tensors":
        bits, group = _compressed_tensors(quant, qwhere)
    elif method in ("modelopt", "modelopt_fp4", "quark"):
        method, bits, group = _algo_quant(method, quant, qwhere)
    else:  # awq, gptq, and other int-packed methods
        bits = get_int(quant, "bits", qwhere, default=get_int(quant, "w_bit", qwhere, default=4))
        raw_group = quant.get("group_size", quant.get("q_group_size", 128))
        if isinstance(raw_group, int) and not isinstance(raw_group, bool) and raw_group == -1:
            group = 0  # per output channel
        else:
            group = get_int({"group_size": raw_group}, "group_size", qwhere)
    return _Quant(method, bits, group)


_MODELOPT_KV_DTYPES = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}
"""vLLM's MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP (vllm/utils/torch_utils.py:68-71, 0.32.0)."""


def _checkpoint_kv_dtype(config: Mapping[str, Any]) -> str | None:
    """The KV cache dtype a ModelOpt checkpoint declares, as vLLM's `get_kv_cache_quant_algo_string` reads it
    (vllm/utils/torch_utils.py:457-509, 0.32.0): `kv_cache_scheme` (a dict: 8-bit float, not dynamic → fp8; 4-bit
    float → nvfp4) or `kv_cache_quant_algo` (FP8 → fp8_e4m3, NVFP4 → nvfp4); None when none is declared or the value
    is one vLLM falls back to `auto` for."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict) or not str(quant.get("quant_method") or "").startswith("modelopt"):
        return None
    nested = quant.get("quantization")
    inner: Mapping[str, Any] = nested if isinstance(nested, dict) else quant
    algo = (
        inner.get("kv_cache_scheme")
        or quant.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo")
        or quant.get("kv_cache_quant_algo")
    )
    if isinstance(algo, dict):
        if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
            return "fp8_e4m3"
        if algo.get("num_bits") == 4 and algo.get("type") == "float":
            return "nvfp4"
        return None
    return _MODELOPT_KV_DTYPES.get(algo.lower()) if isinstance(algo, str) else None


def _algo_quant(method: str, quant: Mapping[str, Any], where: str) -> tuple[str, int, int | None]:
    """NVIDIA ModelOpt (`quant_algo`) and AMD Quark (`global_quant_config.weight.dtype`) checkpoints.

    vLLM names a ModelOpt NVFP4 checkpoint's method `modelopt_fp4` (ModelOptNvFp4Config.override_quantization_
    method) and an FP8 one `modelopt`: NVFP4 = 4-bit E2M1 weights with one FP8 scale per 16 (group_size) plus a
    float32 global scale; FP8 = one byte per weight with a per-tensor scale. Quark: fp8 → 8 bits, fp4 / mxfp4 →
    MXFP4 (32-value blocks), int4 / int8 → int-packed with its group_size.
    """
    if method == "quark":
        glob = quant.get("global_quant_config")
        weight = glob.get("weight") if isinstance(glob, dict) else None
        dtype = str(weight.get("dtype") or "") if isinstance(weight, dict) else ""
        if dtype.startswith("fp8"):
            return "quark", 8, None
        if "fp4" in dtype:
            return "quark", 4, 32
        if dtype in ("int4", "uint4", "int8", "uint8"):
            size = weight.get("group_size") if isinstance(weight, dict) else None
            group = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None
            return "quark", 4 if "4" in dtype else 8, group
        raise BadInputError(
            f"{where}: Quark weight dtype {dtype or 'missing'!r} is not one vramctl sizes (fp8, fp4, int4, int8)"
        )
    algo = quant.get("quant_algo")
    if isinstance(algo, dict):  # hf_quant_config.json layout copied under quantization_config
        algo = algo.get("quant_algo")
    text = str(algo or "").upper()
    if text == "MIXED_PRECISION":  # one algo per module (vramctl.registry.modelopt_mixed); the spec carries the main one
        mixed = read_mixed_layers(quant, where)
        if mixed.algos[0] in ("NVFP4", "W4A16_NVFP4"):
            groups = [g for _, a, g in mixed.entries if a in ("NVFP4", "W4A16_NVFP4") and g]
            return "modelopt_mixed", 4, groups[0] if groups else 16
        return "modelopt_mixed", 8, None
    if "FP8" in text and "W4A8" not in text:
        return "modelopt", 8, None
    if "NVFP4" in text or "FP4" in text or method == "modelopt_fp4":
        group = get_int(quant, "group_size", where, default=16)
        return "modelopt_fp4", 4, group
    if "W4A8_AWQ" in text or "INT4_AWQ" in text:
        return "modelopt", 4, get_int(quant, "group_size", where, default=128)
    raise BadInputError(
        f"{where}: ModelOpt quant_algo {algo!r:.40} is not one vramctl sizes (FP8, NVFP4, W4A8_AWQ, INT4_AWQ)"
    )


_PART_NAMES = {
    # a Hugging Face module name of each part, to test the ignore entries against
    "attention": ("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj"),
    "dense_mlp": ("model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj"),
    "shared_experts": (
        "model.layers.1.mlp.shared_experts.gate_proj",
        "model.layers.1.mlp.shared_expert.gate_proj",
    ),
    "experts": ("model.layers.1.mlp.experts.0.gate_proj", "model.layers.1.block_sparse_moe.experts.0.w1"),
    STATE_MIXERS: (  # a Gated DeltaNet layer's large projections, plain and in a VL wrapper
        "model.layers.0.linear_attn.in_proj_qkv",
        "model.layers.0.linear_attn.in_proj_qkvz",
        "model.layers.0.linear_attn.out_proj",
        "model.language_model.layers.0.linear_attn.in_proj_qkv",
        "model.language_model.layers.0.linear_attn.out_proj",
    ),
}
_LAYER_ENTRY = re.compile(r"(?:^|\.)layers\.(\d+)\.(.+)$")
_DENSE_SUFFIX = re.compile(r"(?:^|\.)(?:mlp|feed_forward)\.(?:gate_proj|up_proj|down_proj|gate_up_proj)$")
_EXPERTS = re.compile(r"(?:^|\.)experts(?:\.|$)")


_STATE_PROJ = re.compile(r"(?:^|\.)linear_attn\.(?:in_proj_qkvz?|in_proj_z|out_proj)$")


def _layer_part(rest: str) -> str | None:
    """The QUANT_PARTS part (or STATE_MIXERS) a module path below `layers.N.` belongs to."""
    if _STATE_PROJ.search(rest):
        return STATE_MIXERS
    if "shared_expert" in rest:
        return "shared_experts"
    if _EXPERTS.search(rest):
        return "experts"
    if "self_attn" in rest or rest.startswith("attention"):
        return "attention"
    if _DENSE_SUFFIX.search(rest) or rest in ("mlp", "feed_forward"):  # a projection, or the whole MLP module
        return "dense_mlp"
    return None


def _ignored(entry: str, name: str) -> bool:
    """compressed-tensors `re:` patterns match from the start of the name (re.match); ModelOpt wildcards
    (`model.layers.*.self_attn*`, `*mlp.gate`) match the module or one of its parents with fnmatch
    (`ModelOptQuantConfigBase.is_layer_excluded`, vllm/model_executor/layers/quantization/modelopt.py: exact, then
    substring, then `fnmatch(prefix, pattern)`; `apply_vllm_mapper` turns `module_path*` into the module and its
    subtree); other entries match whole dotted components (AWQ's `modules_to_not_convert` "self_attn" skips every
    attention projection)."""
    if entry.startswith("re:"):
        try:
            return re.match(entry[3:], name) is not None
        except re.error:
            return False
    if "*" in entry or "?" in entry:
        parts = name.split(".")
        return any(fnmatch.fnmatchcase(".".join(parts[: i + 1]), entry) for i in range(len(parts)))
    return f".{entry.strip('.')}." in f".{name}."


def _double_quant(config: Mapping[str, Any]) -> bool:
    """A 4-bit bitsandbytes checkpoint with nested (uint8) absmax statistics."""
    quant = config.get("quantization_config")
    return (
        isinstance(quant, dict)
        and quant.get("quant_method", "bitsandbytes") == "bitsandbytes"
        and quant.get("load_in_4bit") is True
        and quant.get("bnb_4bit_use_double_quant") is True
    )


def _mtp_unquantised(config: Mapping[str, Any]) -> bool:
    """Whether vLLM builds a quantised checkpoint's MTP layers in 16 bits, by its quantization_config:

    - GPTQ: a `dynamic` entry "-:PATTERN" naming `mtp` excludes them (vLLM qwen3_5_mtp.py
      `Qwen3_5MultiTokenPredictor.__init__`: `vllm_config.quant_config = None` for the MTP layers, 0.32.0);
    - auto-round: a Linear is packed only when its prefix starts with an entry of `block_name_to_quantize` /
      `to_quant_block_names` (vLLM INCConfig, quantization/inc/config_parser.py `get_layer_config`, 0.32.0), so a
      block list without an `mtp` entry leaves the MTP layers in 16 bits (the uploads differ: some list
      `mtp.layers`, some keep the MTP block in BF16);
    - ModelOpt MIXED_PRECISION: a Linear absent from `quantized_layers` stays unquantised
      (`ModelOptMixedPrecisionConfig.get_quant_method`, vllm/model_executor/layers/quantization/modelopt.py, 0.32.0),
      so a map without `mtp.` keys leaves the MTP layers in 16 bits."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return False
    if str(quant.get("quant_algo") or "").upper() == "MIXED_PRECISION":
        layers = quant.get("quantized_layers")
        return not (isinstance(layers, dict) and any(str(k).startswith("mtp.") for k in layers))
    method = str(quant.get("quant_method") or "").lower()
    if method.startswith("gptq"):
        dynamic = quant.get("dynamic")
        return isinstance(dynamic, dict) and any(
            isinstance(k, str) and k.startswith("-:") and "mtp" in k for k in dynamic
        )
    if method in ("auto-round", "auto_round", "intel/auto-round", "inc"):
        blocks = quant.get("block_name_to_quantize", quant.get("to_quant_block_names"))
        if isinstance(blocks, str):
            blocks = blocks.split(",")
        if isinstance(blocks, list) and blocks:
            return not any(isinstance(b, str) and b.strip().startswith("mtp") for b in blocks)
    return False


def _unquantised_entries(quant: Mapping[str, Any]) -> list[str]:
    """The module names / patterns a quantization_config leaves in 16 bits:

    - compressed-tensors `ignore`, AWQ / FP8 / MXFP4 `modules_to_not_convert`, ModelOpt `exclude_modules`;
    - bitsandbytes `llm_int8_skip_modules` (unsloth's dynamic 4-bit uploads list whole layers' attention or MLP
      there): vLLM `is_layer_skipped_bnb` (vllm/model_executor/layers/quantization/bitsandbytes.py) skips a module
      when an entry equals one of its dotted components or one of its dotted prefixes;
    - GPTQModel `dynamic` keys "-:REGEX": vLLM `get_dynamic_override` (quantization/utils/gptq_utils.py) builds a
      module unquantised when the regex matches its name (re.match), kept here as `re:REGEX`."""
    entries: list[str] = []
    for key in ("ignore", "modules_to_not_convert", "exclude_modules", "llm_int8_skip_modules"):
        raw = quant.get(key)
        if isinstance(raw, list):
            entries += [e for e in raw if isinstance(e, str) and e]
    dynamic = quant.get("dynamic")
    if str(quant.get("quant_method") or "").lower().startswith("gptq") and isinstance(dynamic, dict):
        entries += [f"re:{k[2:]}" for k in dynamic if isinstance(k, str) and k.startswith("-:") and len(k) > 2]
    return entries


def _kept_parts(config: Mapping[str, Any], spec: ModelSpec) -> dict[str, float]:
    """part → fraction of its layers a quantisation config leaves in 16 bits (its `ignore` /
    `modules_to_not_convert` / `exclude_modules`). A pattern or a layer-agnostic name keeps the part in every
    layer; names of single layers (`model.layers.7.self_attn.q_proj`) keep it in the layers they name."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return {}
    entries = _unquantised_entries(quant)
    kept: dict[str, float] = {}
    per_layer: dict[str, set[int]] = {}
    for entry in entries:
        found = None if entry.startswith("re:") else _LAYER_ENTRY.search(entry)
        if found is None:
            for part, names in _PART_NAMES.items():
                if any(_ignored(entry, name) for name in names):
                    kept[part] = 1.0
            continue
        layer_part = _layer_part(found.group(2))
        if layer_part is not None and int(found.group(1)) < spec.num_hidden_layers:
            per_layer.setdefault(layer_part, set()).add(int(found.group(1)))
    moe_layers = num_moe_layers(spec)
    layers_of = {
        "attention": spec.num_hidden_layers,
        "dense_mlp": spec.num_hidden_layers - moe_layers,
        "shared_experts": moe_layers,
        "experts": moe_layers,
        STATE_MIXERS: sum(1 for kind in spec.layer_types if kind == LINEAR_ATTENTION),
    }
    for part, indices in per_layer.items():
        if part not in kept and layers_of[part]:
            kept[part] = min(1.0, len(indices) / layers_of[part])
    return kept


def _lm_head_packed(config: Mapping[str, Any], method: str | None) -> bool:
    """GPTQ / AWQ `lm_head: true` (GPTQModel quantises the lm_head on request): vLLM reads it as
    `lm_head_quantized` and builds the ParallelLMHead with the method (gptq.py / gptq_marlin.py / awq_marlin.py)."""
    quant = config.get("quantization_config")
    return (
        isinstance(quant, dict)
        and (method or "").startswith(("gptq", "awq"))
        and quant.get("lm_head") is True
    )


def _asymmetric_int(config: Mapping[str, Any]) -> bool:
    """A compressed-tensors checkpoint whose main weight scheme (registry/ct_groups.py) is an asymmetric int (`type:
    int`, `symmetric: false`): it stores a zero point per group (llm-compressor's AWQ / W4A16-asym recipes)."""
    quant = config.get("quantization_config")
    weights = ct_main_weights(quant) if isinstance(quant, dict) else None
    return weights is not None and ct_scheme(weights)[2]


def _compressed_tensors(quant: Mapping[str, Any], where: str) -> tuple[int | None, int | None]:
    """The main config group's weight scheme (the one targeting `Linear`, else the first; registry/ct_groups.py):
    num_bits and group_size (None = per channel / tensor)."""
    weights = ct_main_weights(quant)
    if weights is None:
        return None, None
    bits = get_int(weights, "num_bits", f"{where}.config_groups.weights", default=8)
    return bits, ct_scheme(weights)[1]


def _nemotron_h_moe(config: Mapping[str, Any], where: str) -> MoESpec | None:
    """Nemotron-H's `E` layers (vLLM 0.32 nemotron_h.py NemotronHMoE): n_routed_experts relu² experts (up + down, no
    gate) of moe_intermediate_size over `moe_latent_size` (else hidden_size), a router (hidden → experts) with a
    float32 `e_score_correction_bias`, n_shared_experts × moe_shared_expert_intermediate_size of shared relu² MLP;
    with a latent size, fc1_latent_proj / fc2_latent_proj (hidden ↔ latent). None without `E` layers."""
    pattern = config.get("hybrid_override_pattern")
    moe_layers = tuple(i for i, c in enumerate(pattern) if c == "E") if isinstance(pattern, str) else ()
    if not moe_layers:
        return None
    experts = get_int(config, "n_routed_experts", where)
    per_tok = get_int(config, "num_experts_per_tok", where)
    if per_tok > experts:
        raise BadInputError(
            f"{where}: field 'num_experts_per_tok' ({per_tok}) exceeds the number of experts ({experts})"
        )
    shared = get_int(config, "n_shared_experts", where, default=0, minimum=0)
    shared_width = get_int(config, "moe_shared_expert_intermediate_size", where, default=0, minimum=0)
    return MoESpec(
        num_experts=experts,
        num_experts_per_tok=per_tok,
        moe_intermediate_size=get_int(config, "moe_intermediate_size", where),
        num_shared_experts=shared,
        shared_expert_intermediate_size=shared * shared_width,
        score_correction_bias=True,
        layer_indices=moe_layers,
        gated_experts=False,
        latent_size=get_opt_int(config, "moe_latent_size", where) or 0,
    )


def _moe(config: Mapping[str, Any], model_type: str, where: str) -> MoESpec | None:
    if model_type == "nemotron_h":
        return _nemotron_h_moe(config, where)
    experts = None
    for key in ("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts"):
        if config.get(key) is not None:
            experts = get_int(config, key, where, minimum=0)
            break
    if not experts or (model_type == "jamba" and experts == 1):  # Jamba: one expert is a plain MLP
        return None
    per_tok_key = next(
        # Aria's text model: `moe_topk` (transformers AriaTextConfig, vLLM aria.py AriaTextMoELayer)
        (
            k
            for k in (
                "num_experts_per_tok",
                "experts_per_token",
                "moe_k",
                "moe_topk",
                "num_experts_per_token",
            )
            if k in config
        ),
        "num_experts_per_tok",
    )
    per_tok = get_int(config, per_tok_key, where)
    if per_tok > experts:
        raise BadInputError(
            f"{where}: field {per_tok_key!r} ({per_tok}) exceeds the number of experts ({experts})"
        )
    if config.get("moe_intermediate_size") is not None:
        expert_size = get_int(config, "moe_intermediate_size", where)
    else:  # Mixtral, gpt-oss: every layer is MoE and intermediate_size is the expert's
        expert_size = get_int(config, "intermediate_size", where)
    # EXAONE-MoE: `num_shared_experts` (transformers ExaoneMoeConfig, vLLM exaone_moe.py shared_experts); Kimi-Linear
    # too (KimiLinearConfig; its shared MLP is moe_intermediate_size × that count)
    shared_key = next(
        (k for k in ("moe_num_shared_experts", "num_shared_experts") if k in config), "n_shared_experts"
    )
    shared = get_int(config, shared_key, where, default=0, minimum=0)
    if model_type == "llama4_text":  # vLLM llama4.py Llama4MoE: one shared LlamaMLP of intermediate_size
        shared = 1
    shared_size = shared * expert_size
    shared_gate = False
    if config.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert with a sigmoid gate
        shared = 1
        shared_size = get_int(config, "shared_expert_intermediate_size", where)
        shared_gate = True
    mlp_only = get_str_list(config, "mlp_only_layers", where)
    if mlp_only:
        raise BadInputError(f"{where}: field 'mlp_only_layers' is not supported (got {len(mlp_only)} layers)")
    freq = get_int(
        config, "moe_layer_freq", where, default=get_int(config, "decoder_sparse_step", where, default=1)
    )
    # AFMoE: `num_dense_layers` (vLLM 0.32 afmoe.py:310 `moe_enabled = layer_idx >= config.num_dense_layers`)
    dense_key = "num_dense_layers" if "num_dense_layers" in config else "first_k_dense_replace"
    first_dense = get_int(config, dense_key, where, default=0, minimum=0)
    offset = 0
    if (
        model_type == "jamba"
    ):  # JambaConfig.layers_num_experts: i % expert_layer_period == expert_layer_offset
        freq = get_int(config, "expert_layer_period", where, default=2)
        offset = get_int(config, "expert_layer_offset", where, default=1, minimum=0) % freq
    if "interleave_moe_layer_step" in config:  # Llama-4: every step-th layer is MoE (Maverick: 2)
        freq = get_int(config, "interleave_moe_layer_step", where)
        # the last of each step: `(layer_idx + 1) % interleave_moe_layer_step == 0` (vllm/model_executor/models/
        # llama4.py:341-342, v0.32.0), so Maverick's MoE layers are 1, 3, 5, … (matters for pipeline stages)
        offset = freq - 1
    if "moe_layer_interval" in config or "moe_layer_start_index" in config:  # ERNIE-4.5 (vLLM ernie45_moe.py)
        freq = get_int(config, "moe_layer_interval", where, default=1)
        raw_start = config.get("moe_layer_start_index", 0)
        start_where = f"{where}: field 'moe_layer_start_index'"
        if isinstance(raw_start, list):  # ERNIE-4.5-VL: [text, vision]; the text decoder's first
            if not raw_start:
                raise BadInputError(f"{start_where} is an empty list")
            raw_start = raw_start[0]
        first_dense = get_int({"moe_layer_start_index": raw_start}, "moe_layer_start_index", where, minimum=0)
    if config.get("mlp_layer_types") is not None:
        first_dense, freq = _mlp_layer_types(config, where)
    is_gpt_oss = model_type == "gpt_oss"
    return MoESpec(
        num_experts=experts,
        num_experts_per_tok=per_tok,
        moe_intermediate_size=expert_size,
        num_shared_experts=shared,
        shared_expert_intermediate_size=shared_size,
        first_k_dense_replace=first_dense,
        moe_layer_freq=freq,
        moe_layer_offset=offset,
        router_bias=is_gpt_oss,
        expert_bias=is_gpt_oss,
        score_correction_bias=config.get("topk_method") == "noaux_tc"
        or model_type in _SCORE_BIAS
        # LFM2-MoE `use_expert_bias` (default true): gate.e_score_correction_bias (vLLM 0.32 lfm2_moe.py)
        or (model_type == "lfm2_moe" and get_bool(config, "use_expert_bias", where, default=True))
        or config.get("moe_use_aux_free") is True,
        shared_expert_gate=shared_gate,
    )


def _attention_gate(config: Mapping[str, Any], model_type: str, q_width: int, heads: int) -> int:
    """Rows of the attention output gate (ModelSpec.attention_out_gate), from vLLM 0.32: AFMoE always has a
    hidden → heads × head_dim gate_proj (afmoe.py:216); MuseGlimmer an output_gate_proj of that size unless
    `use_attn_output_gate` is false (muse_glimmer.py:488-493, 1173-1181); Laguna a g_proj when `gating` is set, one
    row per head for `true` / "per-head", heads × head_dim for "per-element" (laguna.py:327-340)."""
    if model_type == "afmoe":
        return q_width
    if model_type in ("muse_glimmer", "muse_glimmer_text"):
        return q_width if config.get("use_attn_output_gate") is not False else 0
    gating = config.get("gating") if model_type == "laguna" else None
    if gating is True or gating == "per-head":
        return heads
    return q_width if isinstance(gating, str) and gating else 0


def _mlp_layer_types(config: Mapping[str, Any], where: str) -> tuple[int, int]:
    """(first_k_dense_replace, moe_layer_freq) from transformers 5's `mlp_layer_types` ("dense" / "sparse" per layer),
    which the v5 configs write instead of first_k_dense_replace (Glm4MoeLiteConfig, LagunaConfig, ExaoneMoeConfig
    `__post_init__` at transformers 5.19: ["dense"] + ["sparse"] * (layers - 1)); a pattern the
    first-dense + every-freq-th rule cannot describe is refused."""
    kinds = get_str_list(config, "mlp_layer_types", where)
    layers = len(kinds)
    sparse = [i for i, kind in enumerate(kinds) if kind == "sparse"]
    if set(kinds) - {"dense", "sparse"} or not sparse:
        raise BadInputError(
            f"{where}: field 'mlp_layer_types' must list 'dense' / 'sparse' layers with at least one 'sparse'"
        )
    first = sparse[0]
    freq = sparse[1] - sparse[0] if len(sparse) > 1 else 1
    if sparse != [i for i in range(first, layers) if i % freq == 0]:
        raise BadInputError(
            f"{where}: field 'mlp_layer_types' has MoE layers {sparse[:6]}…, a pattern other than the first "
            "dense layers followed by every n-th layer, which vramctl cannot count"
        )
    return first, freq


def _dense_ffn_key(config: Mapping[str, Any], is_opt: bool) -> str:
    """The dense MLP's width: OPT `ffn_dim`; Llama-4 `intermediate_size_mlp` (intermediate_size is the experts');
    Qwen3.5-MoE has no dense MLP and no `intermediate_size` (Qwen3_5MoeTextConfig): its experts' width."""
    if is_opt:
        return "ffn_dim"
    kind = str(config.get("_text_model_type") or config.get("model_type"))
    if config.get("intermediate_size") is None and kind in ("qwen3_5_moe", "qwen3_5_moe_text"):
        return "moe_intermediate_size"
    return "intermediate_size_mlp" if config.get("intermediate_size_mlp") is not None else "intermediate_size"


def _mla(config: Mapping[str, Any], where: str) -> MLASpec | None:
    if config.get("kv_lora_rank") is None:
        return None
    sparse = config.get("index_topk") is not None
    return MLASpec(
        kv_lora_rank=get_int(config, "kv_lora_rank", where),
        qk_rope_head_dim=get_int(config, "qk_rope_head_dim", where),
        qk_nope_head_dim=get_int(config, "qk_nope_head_dim", where),
        v_head_dim=get_int(config, "v_head_dim", where),
        q_lora_rank=get_opt_int(config, "q_lora_rank", where),
        # `index_topk` is how vLLM recognises DeepSeek-V3.2's sparse attention (`is_v32 = hasattr(config,
        # "index_topk")`, vllm/model_executor/models/deepseek_v2.py, v0.32.0); the Indexer reads index_n_heads /
        # index_head_dim from the config without defaults, DeepseekV32Config's are 64 / 128
        indexer_head_dim=(get_opt_int(config, "index_head_dim", where) or 128) if sparse else 0,
        indexer_heads=(get_opt_int(config, "index_n_heads", where) or 64) if sparse else 0,
        indexer_topk=get_int(config, "index_topk", where) if sparse else 0,
    )


def _vision_layer(hidden: int, inter: int) -> int:
    """One ViT encoder layer: q, k, v, o with biases, fc1 + fc2 with biases, 2 LayerNorms (weight + bias)."""
    return 4 * (hidden * hidden + hidden) + (hidden * inter + inter) + (inter * hidden + hidden) + 4 * hidden


def _vision_params(config: Mapping[str, Any], text_hidden: int, where: str) -> tuple[int, str | None]:
    """(vision tower + projector parameters, a note) of a multimodal wrapper, from `vision_config`.

    SigLIP (Gemma-3: patch conv with bias, a position table, post-LayerNorm; projector = one
    vision × text matrix + an RMSNorm) and CLIP (LLaVA: class embedding, conv without bias, positions + 1,
    pre- and post-LayerNorm; projector = two Linear layers with biases, + LLaVA-NeXT's image_newline). Other
    towers are not counted and the note says so.
    """
    vision = get_mapping(config, "vision_config", where)
    if vision is None:
        return 0, None
    vwhere = f"{where}: vision_config"
    kind = str(vision.get("model_type") or "")
    wrapper = str(config.get("model_type") or "")
    tower = vision_tower_params(config, text_hidden, where)  # Qwen2/2.5/3-VL, Llama-4, Pixtral
    if tower is not None:
        return tower, None
    if kind not in ("siglip_vision_model", "clip_vision_model"):
        return 0, f"vision tower {kind or 'of unknown type'} not counted (formula covers SigLIP and CLIP)"
    hidden = get_int(vision, "hidden_size", vwhere)
    inter = get_int(vision, "intermediate_size", vwhere)
    layers = get_int(vision, "num_hidden_layers", vwhere)
    patch = get_int(vision, "patch_size", vwhere)
    image = get_int(vision, "image_size", vwhere)
    positions = (image // patch) ** 2
    total = layers * _vision_layer(hidden, inter) + 2 * hidden  # + post-LayerNorm
    if kind == "siglip_vision_model":
        total += 3 * patch * patch * hidden + hidden + positions * hidden
    else:
        total += hidden + 3 * patch * patch * hidden + (positions + 1) * hidden + 2 * hidden
    if wrapper == "gemma3":
        total += hidden * text_hidden + hidden
    elif wrapper in ("llava", "llava_next"):
        total += (hidden * text_hidden + text_hidden) + (text_hidden * text_hidden + text_hidden)
        if wrapper == "llava_next":
            total += text_hidden
    else:
        return total, f"projector of {wrapper or 'this wrapper'} not counted"
    return total, None


def _vision_shape(config: Mapping[str, Any], where: str) -> tuple[int | None, int | None]:
    """(ViT layers, ViT hidden size) of a multimodal wrapper's `vision_config`, (None, None) for a text model.

    SGLang scales a VLM's default mem_fraction_static by the tower's size (`python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23) item 4); a missing field
    is its default (24 layers, hidden 1024), so an empty `vision_config` still marks the model multimodal."""
    vision = get_mapping(config, "vision_config", where)
    if vision is None:
        return None, None
    vwhere = f"{where}: vision_config"
    layers = get_opt_int(vision, "num_hidden_layers", vwhere) or get_opt_int(vision, "depth", vwhere) or 24
    hidden = get_opt_int(vision, "hidden_size", vwhere) or get_opt_int(vision, "embed_dim", vwhere) or 1024
    return layers, hidden


def _attention_pattern(
    config: Mapping[str, Any], model_type: str, layers: int, max_pos: int, where: str
) -> tuple[tuple[str, ...], int | None]:
    """(layer_types, sliding_window) as the engines see them."""
    # Qwen2/Qwen3: the field is present but off (transformers 5 Qwen2MoeConfig writes sliding_window 0 then)
    off = config.get("use_sliding_window") is False
    window = None if off else get_opt_int(config, "sliding_window", where)
    declared = get_str_list(config, "layer_types", where)
    if declared:
        if len(declared) != layers:
            raise BadInputError(
                f"{where}: field 'layer_types' has {len(declared)} entries for {layers} num_hidden_layers"
            )
        declared = tuple(FULL_ATTENTION if k in _AS_FULL_ATTENTION else k for k in declared)
        unknown = sorted(set(declared) - _LAYER_TYPES)
        if unknown:
            raise BadInputError(f"{where}: field 'layer_types' has unsupported kind {unknown[0]!r}")
        if SLIDING_ATTENTION not in declared:
            return (), None
        if window is None:
            raise BadInputError(
                f"{where}: field 'layer_types' has sliding layers but 'sliding_window' is not set"
            )
        return declared, window
    if window is None:
        return (), None
    if model_type == "gemma2":  # transformers Gemma2: layer i slides when i is even
        return tuple(SLIDING_ATTENTION if i % 2 == 0 else FULL_ATTENTION for i in range(layers)), window
    raw_pattern = config.get("sliding_window_pattern")
    if isinstance(raw_pattern, str):  # EXAONE-4: "LLLG", L = local (sliding), G = global, repeated
        if not raw_pattern or set(raw_pattern.upper()) - {"L", "G"}:
            raise BadInputError(
                f"{where}: field 'sliding_window_pattern' must be an integer or a string of L and G, "
                f"got {raw_pattern!r:.40}"
            )
        text = raw_pattern.upper()
        kinds = (SLIDING_ATTENTION if text[i % len(text)] == "L" else FULL_ATTENTION for i in range(layers))
        return tuple(kinds), window
    if raw_pattern is not None or model_type in _GLOBAL_EVERY:
        # Gemma-3, Cohere2 (Command-A, Command-R7B): every sliding_window_pattern-th layer is global
        pattern = get_int(config, "sliding_window_pattern", where, default=_GLOBAL_EVERY.get(model_type, 1))
        kinds = (SLIDING_ATTENTION if (i + 1) % pattern else FULL_ATTENTION for i in range(layers))
        return tuple(kinds), window
    if window >= max_pos:  # a window as long as the context is full attention (Phi-3-128k: 262144)
        return (), None
    return (), window


# --- hybrid attention + Mamba2 / Gated DeltaNet models (docs/hybrid.md) ----------------------------------------
_HYBRID_REFUSED = {
    "minimax_text_01": "its lightning (linear) attention state is not modelled",
    "plamo2": "its Mamba state layers are not modelled",
}
"""model_type → why vramctl refuses it (one line each; the planned ones are _PLANNED_HYBRIDS)."""
_GATED_DELTA_NET = {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}
"""Gated DeltaNet + gated full attention, one layout (vLLM qwen3_5.py: Qwen3_5DecoderLayer builds on
Qwen3NextDecoderLayer with GatedDeltaNetAttention / Qwen3NextAttention; get_mamba_state_shape_from_config passes
the same linear_* fields to MambaStateShapeCalculator.gated_delta_net_state_shape)."""
_STATE_MARKERS = (
    "mamba_d_state",
    "ssm_state_size",
    "linear_num_value_heads",
    "hybrid_override_pattern",
    "attn_layer_period",
)
_NEMOTRON_H_CHARS = {"M": MAMBA, "*": FULL_ATTENTION, "-": MLP_ONLY, "E": MLP_ONLY}
"""vLLM nemotron_h.py `ALL_DECODER_LAYER_TYPES` (v0.32.0): M NemotronHMambaDecoderLayer, * NemotronHAttentionDecoderLayer,
- NemotronHMLPDecoderLayer, E NemotronHMoEDecoderLayer; the last two hold no cache (MoE layers are listed in
MoESpec.layer_indices)."""
_PLANNED_HYBRIDS = (
    "qwen3_next, qwen3_5, qwen3_5_moe, olmo_hybrid, nemotron_h, granitemoehybrid, kimi_linear, falcon_h1, jamba, lfm2, "
    "lfm2_moe, zamba2, bamba (vLLM ≤ 0.23); pure mamba, mamba2, falcon_mamba"
)


def _kimi_linear_pattern(
    config: Mapping[str, Any], layers: int, where: str
) -> tuple[tuple[str, ...], StateSpaceSpec]:
    """Kimi-Linear: `linear_attn_config` lists the 1-based `kda_layers` (Kimi Delta Attention) and `full_attn_layers`
    (MLA); vLLM's `KimiLinearConfig.is_kda_layer` (vllm/transformers_utils/configs/kimi_linear.py, v0.32.0) tests
    `layer_idx + 1 in kda_layers`, every other layer is MLA. The KDA state is
    `MambaStateShapeCalculator.kda_state_shape(tp, num_heads, head_dim, conv_kernel_size=short_conv_kernel_size)`
    (vllm/model_executor/layers/mamba/mamba_utils.py, v0.32.0; `KimiLinearForCausalLM.get_mamba_state_shape_from_config`,
    vllm/models/kimi_k3/nvidia/model.py): conv over num_heads × head_dim + 2 × num_heads × head_dim channels (q, k, v),
    recurrent (num_heads / tp, head_dim, head_dim)."""
    lin = get_mapping(config, "linear_attn_config", where)
    lwhere = f"{where}: linear_attn_config"
    if lin is None:
        raise _refuse_hybrid(
            "kimi_linear", where, "field 'linear_attn_config' (kda_layers, num_heads, head_dim) is missing"
        )
    raw = lin.get("kda_layers")
    if not isinstance(raw, list) or any(
        not isinstance(i, int) or isinstance(i, bool) or not 1 <= i <= layers for i in raw
    ):
        raise BadInputError(
            f"{lwhere}: field 'kda_layers' must list 1-based layer numbers from 1 to {layers}"
        )
    kda = set(raw)
    kinds = tuple(LINEAR_ATTENTION if i + 1 in kda else FULL_ATTENTION for i in range(layers))
    heads = get_int(lin, "num_heads", lwhere)
    head_dim = get_int(lin, "head_dim", lwhere)
    state = StateSpaceSpec(
        kind="kda",
        num_heads=heads,
        head_dim=head_dim,
        state_size=head_dim,
        n_groups=heads,
        conv_kernel=get_int(lin, "short_conv_kernel_size", lwhere, default=4),
        intermediate_size=heads * head_dim,
    )
    return kinds, state


def _refuse_hybrid(model_type: str, where: str, why: str) -> BadInputError:
    return BadInputError(
        f"{where}: model_type {model_type!r} is a Mamba / linear-attention hybrid that vramctl cannot plan: {why} "
        f"(planned: {_PLANNED_HYBRIDS}; see docs/hybrid.md)"
    )


def _ssm_dtype(config: Mapping[str, Any]) -> str | None:
    raw = config.get("mamba_ssm_dtype", config.get("mamba_ssm_cache_dtype"))
    return raw.lower().removeprefix("torch.") if isinstance(raw, str) and raw.lower() != "auto" else None


_ZAMBA2_DEFAULT_BLOCKS = (
    ["m"] + (["m"] * 5 + ["hybrid"]) * 7 + ["m"] * 4 + ["hybrid"] + ["m"] * 3 + ["hybrid"] + ["m"] * 2
)
"""Zamba2Config's `layers_block_type` when absent (54 layers); `m` = a Mamba2 layer."""


def _zamba2_pattern(
    config: Mapping[str, Any], layers: int, hidden: int, where: str
) -> tuple[tuple[str, ...], StateSpaceSpec]:
    """Zamba2: every layer has a Mamba2 mixer; a `hybrid` layer in `layers_block_type` also runs a shared attention
    block with a KV cache of its own (vLLM zamba2.py, v0.32.0: one Attention per hybrid layer, "KV cache is unique for
    every attention layer"). Hybrid layers are listed as attention, then Mamba. State:
    `Zamba2ForCausalLM.get_mamba_state_shape_from_config` → `mamba2_state_shape(intermediate = mamba_expand ×
    hidden_size, n_groups = mamba_ngroups, num_heads = n_mamba_heads, head_dim = mamba_headdim, mamba_d_state,
    mamba_d_conv)`; mamba_headdim = intermediate // n_mamba_heads (Zamba2Config)."""
    raw = config.get("layers_block_type")
    if raw is None:
        raw = _ZAMBA2_DEFAULT_BLOCKS
    if not isinstance(raw, list) or len(raw) != layers or not all(isinstance(k, str) for k in raw):
        raise BadInputError(
            f"{where}: field 'layers_block_type' must list {layers} entries of 'mamba' / 'hybrid'"
        )
    inner = get_int(config, "mamba_expand", where, default=2) * hidden
    heads = get_int(config, "n_mamba_heads", where, default=8)
    state = StateSpaceSpec(
        kind="mamba2",
        num_heads=heads,
        head_dim=inner // heads,
        state_size=get_int(config, "mamba_d_state", where, default=64),
        n_groups=get_int(config, "mamba_ngroups", where, default=1),
        conv_kernel=get_int(config, "mamba_d_conv", where, default=4),
        intermediate_size=inner,
        chunk_size=get_opt_int(config, "chunk_size", where),
    )
    kinds: list[str] = []
    for kind in raw:
        kinds += [FULL_ATTENTION, MAMBA] if kind == "hybrid" else [MAMBA]
    return tuple(kinds), state


def _zamba2_param_count(spec: ModelSpec, config: Mapping[str, Any], where: str) -> int:
    """Zamba2 (transformers Zamba2ForCausalLM, whose shared blocks are tied: each counted once, as the checkpoint
    stores them): every layer a Mamba2 mixer (in_proj, conv1d with bias, dt_bias, A_log, D, gated norm, out_proj;
    `add_bias_linear` biases) and its input norm; each hybrid layer a hidden × hidden `linear` and its adapters (the
    MLP's gate_up LoRA of `adapter_rank`, and q / k / v LoRAs over 2 × hidden with `use_shared_attention_adapter`);
    `num_mem_blocks` shared blocks of attention (q, k, v over 2 × hidden, o), a 2 × hidden and a hidden norm, and
    the MLP (gate_up, down); embeddings, final norm, lm_head unless tied."""
    st = spec.state_space
    assert st is not None
    h, inner, inter = spec.hidden_size, st.intermediate_size, spec.intermediate_size
    bias = get_bool(config, "add_bias_linear", where)
    conv_dim = inner + 2 * st.n_groups * st.state_size
    in_width = 2 * inner + 2 * st.n_groups * st.state_size + st.num_heads
    mamba = h * in_width + conv_dim * st.conv_kernel + conv_dim + 3 * st.num_heads + inner + inner * h
    mamba += (in_width + h if bias else 0) + h  # + the layer's input norm
    n_hybrid = spec.num_full_layers
    rank = get_int(config, "adapter_rank", where, default=128)
    adapters = h * rank + rank * 2 * inter
    if get_bool(config, "use_shared_attention_adapter", where):
        adapters += 3 * (2 * h * rank + rank * 2 * h)
    q = spec.num_attention_heads * spec.head_dim
    block = 2 * h * q + 2 * (2 * h * q) + q * h + 2 * h + h + h * 2 * inter + inter * h
    block += (2 * inter + h) if bias else 0
    blocks = get_int(config, "num_mem_blocks", where, default=1)
    total = spec.num_hidden_layers * mamba + n_hybrid * (h * h + adapters) + blocks * block
    embed = spec.vocab_size * h
    return total + embed + h + (0 if spec.tie_word_embeddings else embed)


def _lfm2_pattern(
    config: Mapping[str, Any], layers: int, hidden: int, where: str
) -> tuple[tuple[str, ...], StateSpaceSpec]:
    """LFM2: `layer_types` of `conv` / `full_attention`, else `full_attn_idxs` (Lfm2Config). A conv layer's state is
    `Lfm2ForCausalLM.get_mamba_state_shape_from_config` (vllm/model_executor/models/lfm2.py, v0.32.0) →
    `MambaStateShapeCalculator.short_conv_state_shape(tp, conv_dim, conv_L_cache)`: one conv state (conv_dim / tp,
    conv_L_cache − 1) in the model dtype (`short_conv_state_dtype`), no SSM state."""
    raw = config.get("layer_types")
    if raw is None and config.get("model_type") == "lfm2_moe":  # vLLM 0.32 lfm2_moe.py:433 indexes layer_types
        raise BadInputError(
            f"{where}: LFM2-MoE needs 'layer_types' (one 'conv' / 'full_attention' per layer): vLLM's "
            "Lfm2MoeModel reads it and Lfm2MoeConfig has no default"
        )
    if raw is None:
        idxs = config.get("full_attn_idxs")
        full = set(idxs) if isinstance(idxs, list) else set(range(layers))
        raw = ["full_attention" if i in full else "conv" for i in range(layers)]
    if not isinstance(raw, list) or len(raw) != layers or set(raw) - {"conv", "full_attention"}:
        raise BadInputError(
            f"{where}: field 'layer_types' must list {layers} entries of 'conv' / 'full_attention'"
        )
    if "full_attention" not in raw:
        raise _refuse_hybrid(
            str(config.get("model_type")),
            where,
            "'layer_types' has no full_attention layer: a model of short-convolution layers only has no "
            "attention layers to plan a KV cache for",
        )
    width = get_int(config, "conv_dim", where, default=hidden)
    state = StateSpaceSpec(
        kind="short_conv",
        num_heads=width,
        head_dim=1,
        state_size=0,
        n_groups=0,
        conv_kernel=get_int(config, "conv_L_cache", where, default=3),
        intermediate_size=width,
    )
    return tuple(MAMBA if k == "conv" else FULL_ATTENTION for k in raw), state


def _jamba_pattern(
    config: Mapping[str, Any], layers: int, hidden: int, where: str
) -> tuple[tuple[str, ...], StateSpaceSpec]:
    """Jamba: layer i is attention when i % attn_layer_period == attn_layer_offset, else Mamba1 (transformers
    JambaConfig.layers_block_type, defaults 8 / 4; vLLM jamba.py builds its layers from it). State:
    `JambaForCausalLM.get_mamba_state_shape_from_config` (vllm/model_executor/models/jamba.py, v0.32.0) →
    `MambaStateShapeCalculator.mamba1_state_shape(tp, mamba_expand × hidden_size, mamba_d_state, mamba_d_conv)`:
    conv (width / tp, kernel − 1), SSM (width / tp, mamba_d_state)."""
    period = get_int(config, "attn_layer_period", where, default=8)
    offset = get_int(config, "attn_layer_offset", where, default=4, minimum=0)
    if offset >= period:
        raise BadInputError(
            f"{where}: field 'attn_layer_offset' ({offset}) must be smaller than attn_layer_period ({period})"
        )
    width = get_int(config, "mamba_expand", where, default=2) * hidden
    state = StateSpaceSpec(
        kind="mamba1",
        num_heads=width,
        head_dim=1,
        state_size=get_int(config, "mamba_d_state", where, default=16),
        n_groups=0,
        conv_kernel=get_int(config, "mamba_d_conv", where, default=4),
        intermediate_size=width,
        ssm_dtype=_ssm_dtype(config),
    )
    return tuple(FULL_ATTENTION if i % period == offset else MAMBA for i in range(layers)), state


def _jamba_mamba_params(spec: ModelSpec, config: Mapping[str, Any], where: str) -> int:
    """One Jamba Mamba1 mixer (transformers JambaMambaMixer; vLLM MambaMixer with use_rms_norm): in_proj (hidden →
    2 × width, bias with mamba_proj_bias), depthwise conv1d (width × kernel, bias with mamba_conv_bias), x_proj (width
    → dt_rank + 2 × state), dt_proj (dt_rank → width, with bias), A_log (width × state), D (width), out_proj (width →
    hidden, bias with mamba_proj_bias), the dt / B / C RMSNorms (dt_rank, state, state); dt_rank `auto` =
    ceil(hidden / 16)."""
    st = spec.state_space
    assert st is not None
    h, width, n = spec.hidden_size, st.intermediate_size, st.state_size
    raw = config.get("mamba_dt_rank", "auto")
    dt_rank = -(-h // 16) if raw in ("auto", None) else get_int(config, "mamba_dt_rank", where)
    proj_bias = get_bool(config, "mamba_proj_bias", where)
    total = h * 2 * width + (2 * width if proj_bias else 0)
    total += width * st.conv_kernel + (
        width if get_bool(config, "mamba_conv_bias", where, default=True) else 0
    )
    total += width * (dt_rank + 2 * n) + dt_rank * width + width + width * n + width
    total += width * h + (h if proj_bias else 0) + dt_rank + 2 * n
    return total


def _bamba_pattern(
    config: Mapping[str, Any], layers: int, hidden: int, where: str
) -> tuple[tuple[str, ...], StateSpaceSpec]:
    """Bamba: layer i is attention when it is in `attn_layer_indices`, else Mamba2 (transformers
    BambaConfig.layers_block_type; vLLM bamba.py builds its decoder layers from it). State:
    `BambaForCausalLM.get_mamba_state_shape_from_config` (vllm/model_executor/models/bamba.py, 0.10.2 – 0.23.0) →
    `mamba2_state_shape` with intermediate = mamba_expand × hidden_size, mamba_n_heads heads of mamba_d_head
    (`auto`: intermediate // heads, BambaConfig), mamba_n_groups, mamba_d_state, mamba_d_conv."""
    raw = config.get("attn_layer_indices") or []
    if not isinstance(raw, list) or any(
        not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < layers for i in raw
    ):
        raise BadInputError(
            f"{where}: field 'attn_layer_indices' must list layer indices from 0 to {layers - 1}"
        )
    inner = get_int(config, "mamba_expand", where, default=2) * hidden
    state = _mamba2_state(config, inner, "mamba_expand × hidden_size", where)
    attention = set(raw)
    return tuple(FULL_ATTENTION if i in attention else MAMBA for i in range(layers)), state


def _mamba2_state(config: Mapping[str, Any], inner: int, width: str, where: str) -> StateSpaceSpec:
    """The Mamba2 state of Bamba / Falcon-H1 (`mamba2_state_shape`): mamba_n_heads heads of mamba_d_head over the
    Mamba width `inner`; `mamba_d_head` `auto` (BambaConfig / FalconH1Config) is inner // mamba_n_heads."""
    heads = get_int(config, "mamba_n_heads", where, default=128)
    raw_head = config.get("mamba_d_head", "auto")
    head_dim = inner // heads if raw_head in ("auto", None) else get_int(config, "mamba_d_head", where)
    if head_dim * heads != inner:
        raise BadInputError(
            f"{where}: mamba_d_head ({head_dim}) × mamba_n_heads ({heads}) must equal {width} ({inner})"
        )
    return StateSpaceSpec(
        kind="mamba2",
        num_heads=heads,
        head_dim=head_dim,
        state_size=get_int(config, "mamba_d_state", where, default=256),
        n_groups=get_int(config, "mamba_n_groups", where, default=1),
        conv_kernel=get_int(config, "mamba_d_conv", where, default=4),
        intermediate_size=inner,
        ssm_dtype=_ssm_dtype(config),
        chunk_size=get_opt_int(config, "mamba_chunk_size", where),
    )


def _falcon_h1_pattern(
    config: Mapping[str, Any], layers: int, hidden: int, where: str
) -> tuple[tuple[str, ...], StateSpaceSpec]:
    """Falcon-H1: every decoder layer runs attention and a Mamba2 mixer side by side (vLLM falcon_h1.py
    `FalconH1ParallelHybrid`, v0.32.0: the SSM branch registers as layer num_hidden_layers + i, so V1 sees
    num_hidden_layers attention layers and as many Mamba layers). Each layer is listed twice in `layer_types`
    (attention, then Mamba). State: `FalconH1ForCausalLM.get_mamba_state_shape_from_config` →
    `mamba2_state_shape` with intermediate = `mamba_d_ssm`, else `mamba_expand × hidden_size`; `mamba_d_head`
    `auto` (FalconH1Config) is intermediate // mamba_n_heads."""
    inner = get_opt_int(config, "mamba_d_ssm", where)
    if inner is None:
        inner = get_int(config, "mamba_expand", where, default=2) * hidden
    return (FULL_ATTENTION, MAMBA) * layers, _mamba2_state(config, inner, "the Mamba width", where)


_GRANITE_LAYERS = {
    "mamba": MAMBA,
    "linear_attention": MAMBA,
    "attention": FULL_ATTENTION,
    "full_attention": FULL_ATTENTION,
}
"""Granite-4.0-H `layer_types`: transformers 4 wrote mamba / attention, transformers 5 writes linear_attention /
full_attention (`remap_legacy_layer_types`, configuration_utils.py, transformers 5.19, which maps the old names on
load). vLLM 0.32 builds its layers from the new names (granitemoehybrid.py `ALL_DECODER_LAYER_TYPES`:
full_attention → GraniteMoeHybridAttentionDecoderLayer, linear_attention → GraniteMoeHybridMambaDecoderLayer);
vLLM 0.10 – 0.1x, on transformers 4, from the old ones ("attention" / "mamba")."""


def _granite_hybrid_pattern(
    config: Mapping[str, Any], layers: int, hidden: int, where: str
) -> tuple[tuple[str, ...], StateSpaceSpec] | None:
    """Granite-4.0-H (`granitemoehybrid`): `layer_types` in either spelling (_GRANITE_LAYERS); absent, every layer
    is Mamba2 (GraniteMoeHybridConfig, transformers 4 `layers_block_type` and 5 `__post_init__`). State:
    `GraniteMoeHybridForCausalLM.get_mamba_state_shape_from_config` (vLLM 0.32 granitemoehybrid.py) →
    `mamba2_state_shape` with intermediate = mamba_expand × hidden_size, mamba_n_heads heads of mamba_d_head
    (`auto`: intermediate // mamba_n_heads). None when no layer is Mamba (Granite-4.0-micro: a plain attention
    model); every layer Mamba is an attention-free model."""
    raw = get_str_list(config, "layer_types", where) or ["linear_attention"] * layers
    if len(raw) != layers or set(raw) - set(_GRANITE_LAYERS):
        raise BadInputError(
            f"{where}: field 'layer_types' must list {layers} entries of 'linear_attention' / 'full_attention' "
            "(or 'mamba' / 'attention')"
        )
    kinds = tuple(_GRANITE_LAYERS[k] for k in raw)
    if MAMBA not in kinds:
        return None
    # all Mamba2 (the default config): an attention-free model, planned as vLLM's state-only pool (docs/hybrid.md)
    inner = get_int(config, "mamba_expand", where, default=2) * hidden
    return kinds, _mamba2_state(config, inner, "mamba_expand × hidden_size", where)


def _hybrid_pattern(
    config: Mapping[str, Any], model_type: str, layers: int, hidden: int, where: str
) -> tuple[tuple[str, ...], StateSpaceSpec] | None:
    """(layer kinds, state shape) of a supported hybrid, None for a model without recurrent-state layers.

    qwen3_next, qwen3_5 (dense and MoE, text_config unwrapped): `layer_types` or, absent, every
    `full_attention_interval`-th layer is full attention (transformers Qwen3NextConfig, Qwen3_5TextConfig,
    Qwen3_5MoeTextConfig `__post_init__`); the rest are Gated DeltaNet; olmo_hybrid the same from `layer_types`.
    nemotron_h: `hybrid_override_pattern`, one character per layer (M Mamba2, * attention, - MLP, E MoE; vLLM
    nemotron_h.py), transformers 5's `layers_block_type` turned into it by _nemotron_h_names. granitemoehybrid:
    `layer_types` in either spelling (_granite_hybrid_pattern). lfm2 / lfm2_moe: _lfm2_pattern.
    Other hybrids are refused with one line naming what is missing.
    """
    if model_type in _HYBRID_REFUSED:
        raise _refuse_hybrid(model_type, where, _HYBRID_REFUSED[model_type])
    if model_type in PURE_MAMBA_TYPES:
        return pure_mamba_pattern(config, model_type, layers, where)
    declared = config.get("layer_types")
    if model_type == "kimi_linear":
        return _kimi_linear_pattern(config, layers, where)
    if model_type == "falcon_h1":
        return _falcon_h1_pattern(config, layers, hidden, where)
    if model_type == "bamba":
        return _bamba_pattern(config, layers, hidden, where)
    if model_type == "jamba":
        return _jamba_pattern(config, layers, hidden, where)
    if model_type in ("lfm2", "lfm2_moe"):
        return _lfm2_pattern(config, layers, hidden, where)
    if model_type == "zamba2":
        return _zamba2_pattern(config, layers, hidden, where)
    if model_type in _GATED_DELTA_NET or model_type == "olmo_hybrid":
        if declared is not None:
            kinds = get_str_list(config, "layer_types", where)
        else:
            interval = get_int(config, "full_attention_interval", where, default=4)
            kinds = tuple(LINEAR_ATTENTION if (i + 1) % interval else FULL_ATTENTION for i in range(layers))
        if len(kinds) != layers or set(kinds) - {LINEAR_ATTENTION, FULL_ATTENTION}:
            raise BadInputError(
                f"{where}: field 'layer_types' must list {layers} entries of 'linear_attention' / 'full_attention'"
            )
        k_heads = get_int(config, "linear_num_key_heads", where)
        v_heads = get_int(config, "linear_num_value_heads", where)
        v_dim = get_int(config, "linear_value_head_dim", where)
        state = StateSpaceSpec(
            kind="gated_delta_net",
            num_heads=v_heads,
            head_dim=v_dim,
            state_size=get_int(config, "linear_key_head_dim", where),
            n_groups=k_heads,
            conv_kernel=get_int(config, "linear_conv_kernel_dim", where, default=4),
            intermediate_size=v_heads * v_dim,
            ssm_dtype=_ssm_dtype(config),
        )
        return tuple(kinds), state
    if model_type == "nemotron_h":
        pattern = config.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or len(pattern) != layers:
            raise BadInputError(
                f"{where}: field 'hybrid_override_pattern' must be a string of {layers} characters (M, *, -)"
            )
        unknown = sorted(set(pattern) - set(_NEMOTRON_H_CHARS))
        if unknown:
            raise BadInputError(
                f"{where}: field 'hybrid_override_pattern' has {unknown[0]!r} layers; vLLM builds M (Mamba2), "
                "* (attention), - (MLP) and E (MoE) layers"
            )
        if "M" not in pattern:
            raise _refuse_hybrid(model_type, where, "its hybrid_override_pattern has no Mamba ('M') layer")
        heads = get_int(config, "mamba_num_heads", where)
        head_dim = get_int(config, "mamba_head_dim", where)
        state = StateSpaceSpec(
            kind="mamba2",
            num_heads=heads,
            head_dim=head_dim,
            state_size=get_int(config, "ssm_state_size", where),
            n_groups=get_int(config, "n_groups", where, default=1),
            conv_kernel=get_int(config, "conv_kernel", where, default=4),
            intermediate_size=heads * head_dim,
            ssm_dtype=_ssm_dtype(config),
            chunk_size=get_opt_int(config, "chunk_size", where),
        )
        return tuple(_NEMOTRON_H_CHARS[c] for c in pattern), state
    if model_type == "granitemoehybrid":
        return _granite_hybrid_pattern(config, layers, hidden, where)
    marker = next((key for key in _STATE_MARKERS if key in config), None)
    if marker is not None:
        raise _refuse_hybrid(
            model_type or "unknown", where, f"field {marker!r} marks state-space layers of an unknown layout"
        )
    if isinstance(declared, list) and any(k in ("linear_attention", "mamba", "conv") for k in declared):
        raise _refuse_hybrid(
            model_type or "unknown", where, "its linear-attention / Mamba layer shapes are unknown"
        )
    return None


def _gated_q(config: Mapping[str, Any], spec: ModelSpec, where: str) -> int:
    """2 when q_proj also yields the attention output gate: Qwen3NextAttention (vLLM qwen3_next.py, reused by
    qwen3_5.py) sizes it total_num_heads × (1 + attn_output_gate), `getattr(config, "attn_output_gate", True)`, by
    the text model's type, not the architecture (MiniCPM-V 4.6 wraps a qwen3_5_text decoder); else 1."""
    text_kind = str(config.get("_text_model_type") or config.get("model_type") or "")
    gated = spec.architecture.startswith(("Qwen3Next", "Qwen3_5")) or text_kind in _GATED_DELTA_NET
    return 2 if gated and get_bool(config, "attn_output_gate", where, default=True) else 1


def _hybrid_param_count(spec: ModelSpec, config: Mapping[str, Any], where: str) -> int:
    """Parameters of a planned hybrid from its config (the dense formula of params.py knows no state layers).

    Per layer kind, following each model's vLLM / transformers modules: attention q, k, v, o (Qwen3-Next: q doubled
    for the output gate, + q/k norms); Gated DeltaNet in_proj_qkvz, in_proj_ba, conv1d, dt_bias, A_log, norm,
    out_proj; Mamba2 in_proj (2 × inner + 2 × groups × state + heads), conv1d (+ bias), dt_bias, A_log, D, gated
    norm, out_proj; MLP / MoE as configured; embeddings, final norm, untied lm_head.
    """
    st = spec.state_space
    assert st is not None
    if spec.architecture.startswith("Zamba2"):
        return _zamba2_param_count(spec, config, where)
    if st.kind in ("kda", "mamba1"):  # every layer from params.py, the state layers' mixers swapped in
        mixer = _kda_mixer_params(spec) if st.kind == "kda" else _jamba_mamba_params(spec, config, where)
        plain = _replace(spec, state_space=None, layer_types=())
        return param_count_from_spec(plain) + spec.num_state_layers * (
            mixer - attention_params_per_layer(plain)
        )
    h = spec.hidden_size
    q_width = spec.num_attention_heads * spec.head_dim
    kv_width = spec.num_key_value_heads * spec.head_dim
    # q_proj also yields the output gate: Qwen3NextAttention (vLLM qwen3_next.py, reused by qwen3_5.py) sizes it
    # total_num_heads × (1 + attn_output_gate), `getattr(config, "attn_output_gate", True)`
    # by the text model's type, not the architecture: MiniCPM-V 4.6 wraps a qwen3_5_text decoder (the audit found its
    # gated q and q/k norms left out, 134 M = 1.5 %)
    text_kind = str(config.get("_text_model_type") or config.get("model_type") or "")
    gated = spec.architecture.startswith(("Qwen3Next", "Qwen3_5")) or text_kind in _GATED_DELTA_NET
    gated_q = _gated_q(config, spec, where)
    attention = (
        h * q_width * gated_q
        + 2 * h * kv_width
        + q_width * h
        + (q_width + kv_width if spec.qk_norm_whole else 2 * spec.head_dim if spec.qk_norm or gated else 0)
        + ((q_width + 2 * kv_width) if spec.attention_qkv_bias else 0)
        + (h if spec.attention_out_bias else 0)
    )
    if st.kind == "short_conv":
        # LFM2 ShortConv (transformers Lfm2ShortConv): in_proj (hidden → 3 × conv), depthwise conv (conv ×
        # conv_L_cache), out_proj (conv → hidden), each with a bias when `conv_bias`
        width = st.intermediate_size
        bias = get_bool(config, "conv_bias", where)
        state = h * 3 * width + width * st.conv_kernel + width * h + ((4 * width + h) if bias else 0)
    elif st.kind == "gated_delta_net":
        key_dim = st.n_groups * st.state_size
        value_dim = st.num_heads * st.head_dim
        conv_dim = 2 * key_dim + value_dim
        state = h * (2 * key_dim + 2 * value_dim) + h * 2 * st.num_heads + conv_dim * st.conv_kernel
        state += 2 * st.num_heads + st.head_dim + value_dim * h
    else:
        inner = st.intermediate_size
        conv_dim = inner + 2 * st.n_groups * st.state_size
        conv_bias = conv_dim if config.get("use_conv_bias", config.get("mamba_conv_bias", True)) else 0
        in_width = 2 * inner + 2 * st.n_groups * st.state_size + st.num_heads
        state = h * in_width + conv_dim * st.conv_kernel + conv_bias
        # Falcon-H1 (FalconH1Mixer): the gated norm only with `mamba_rms_norm`, in_proj's bias with
        # `mamba_proj_bias`, out_proj's with `projectors_bias`
        falcon = spec.architecture.startswith("FalconH1")
        norm = inner if not falcon or get_bool(config, "mamba_rms_norm", where) else 0
        if falcon:
            state += (in_width if get_bool(config, "mamba_proj_bias", where) else 0) + (
                h if get_bool(config, "projectors_bias", where) else 0
            )
        elif (spec.architecture.startswith("Bamba") or text_kind == "granitemoehybrid") and get_bool(
            config, "mamba_proj_bias", where
        ):
            # BambaMixer / Granite's MambaMixer2(use_bias=config.mamba_proj_bias): in_proj and out_proj biases
            state += in_width + h
        state += 3 * st.num_heads + norm + inner * h
    granite_shared = get_int(config, "shared_intermediate_size", where, default=0, minimum=0)
    nemotron = text_kind == "nemotron_h"
    moe_ffn = 0
    if nemotron:
        # NemotronHMambaDecoderLayer's MambaMixer2 has in_proj / out_proj biases with `use_bias`
        if st.kind == "mamba2" and get_bool(config, "use_bias", where):
            state += 2 * inner + 2 * st.n_groups * st.state_size + st.num_heads + h
        # NemotronHMLP: relu² up + down, biases with mlp_bias (vLLM 0.32 nemotron_h.py)
        ffn = 2 * h * spec.intermediate_size + (spec.intermediate_size + h if spec.mlp_bias else 0)
        if spec.moe is not None:  # NemotronHMoE (see _nemotron_h_moe)
            m = spec.moe
            width = m.latent_size or h
            moe_ffn = h * m.num_experts + m.num_experts + m.num_experts * 2 * width * m.moe_intermediate_size
            moe_ffn += 2 * h * m.shared_expert_intermediate_size
            if m.latent_size:
                moe_ffn += 2 * h * m.latent_size + ((m.latent_size + h) if spec.mlp_bias else 0)
    elif spec.moe is not None:
        m = spec.moe
        moe_ffn = m.num_experts * 3 * h * m.moe_intermediate_size + h * m.num_experts
        moe_ffn += 3 * h * m.shared_expert_intermediate_size + (h if m.shared_expert_gate else 0)
        moe_ffn += 3 * h * granite_shared + (m.num_experts if m.score_correction_bias else 0)
        # layers before first_k_dense_replace (LFM2-MoE `num_dense_layers`) keep a dense gated MLP
        ffn = 3 * h * spec.intermediate_size + (2 * spec.intermediate_size + h if spec.mlp_bias else 0)
    elif granite_shared:  # Granite-4.0-H dense: the shared MLP is the layer's MLP
        ffn = 3 * h * granite_shared
    else:
        ffn = 3 * h * spec.intermediate_size + (2 * spec.intermediate_size + h if spec.mlp_bias else 0)
    if len(spec.layer_types) == 2 * spec.num_hidden_layers:
        # Falcon-H1: attention and Mamba side by side in each layer, one MLP, input + pre-MLP norms
        total = spec.num_hidden_layers * (2 * h + attention + state + ffn)
        embed = spec.vocab_size * h
        return total + embed + h + (0 if spec.tie_word_embeddings else embed)
    total = 0
    moe_layers = set(spec.moe.layer_indices) if spec.moe is not None else set()
    # Qwen3.5 `layer_scale`: attn_layer_scale + ffn_layer_scale of hidden_size per layer (vLLM qwen3_5.py)
    scales = (
        2 * h
        if (spec.architecture.startswith("Qwen3_5") or text_kind.startswith("qwen3_5"))
        and get_bool(config, "layer_scale", where)
        else 0
    )
    for i, kind in enumerate(spec.layer_types):
        mixer = attention if kind == FULL_ATTENTION else state if kind in (MAMBA, LINEAR_ATTENTION) else 0
        if nemotron:  # one block per layer: a norm + one of mixer / MLP / MoE
            total += h + (mixer if kind != MLP_ONLY else moe_ffn if i in moe_layers else ffn)
        else:
            total += 2 * h + mixer + (moe_ffn if is_moe_layer(spec, i) else ffn) + scales
    embed = spec.vocab_size * h
    # + a VL wrapper's vision tower (Qwen3.5: vLLM's Qwen3_VisionTransformer, counted by vision_towers.py)
    return total + embed + h + (0 if spec.tie_word_embeddings else embed) + spec.vision_params


def _kda_mixer_params(spec: ModelSpec) -> int:
    """Kimi-Linear: one KDA layer's token mixer, in place of the MLA tensors of params.py's formula (transformers
    KimiLinearDeltaAttention; vLLM
    KimiLinearGatedDeltaNetAttention loads the same tensors): q / k / v projections (hidden → heads × head_dim),
    their depthwise short convolutions (3 × heads × head_dim × kernel, no bias), the forget gate f_a (hidden →
    head_dim) and f_b (head_dim → heads × head_dim) with dt_bias (heads × head_dim) and A_log (heads), the beta
    projection b (hidden → heads), the output gate g_a / g_b (as f_a / f_b), the gated RMSNorm (head_dim) and
    o_proj."""
    st = spec.state_space
    assert st is not None
    h = spec.hidden_size
    qkv = st.num_heads * st.head_dim
    kda = 3 * h * qkv + 3 * qkv * st.conv_kernel
    kda += 2 * (h * st.head_dim + st.head_dim * qkv) + qkv + st.num_heads + h * st.num_heads
    return kda + st.head_dim + qkv * h


def _deepseek_v4_spec(
    cfg: Mapping[str, Any],
    *,
    where: str,
    name: str,
    aliases: Sequence[str],
    sources: Sequence[tuple[str, str]],
    param_count: int | None,
    weight_bytes: int | None,
) -> ModelSpec:
    """DeepseekV4ForCausalLM (vramctl.registry.deepseek_v4 → vramctl.core.dsv4): the parameter count and bytes
    module by module as vLLM 0.32.0 builds them; the plain fields below feed the activation and graph estimates
    (kv heads 1, head_dim 512; the MoE as it routes)."""
    shape = dsv4_shape(cfg, where)
    max_pos, max_len_note, vllm_max_pos = _max_len(cfg, "deepseek_v4", where)
    count = param_count if param_count is not None else dsv4_parameter_count(shape)
    quant = cfg.get("quantization_config")
    notes = [("layout", "DeepSeek-V4: weights and KV cache from vLLM 0.32.0's modules (vramctl/core/dsv4*.py)")]
    if max_len_note:
        notes.append(("max_position_embeddings", max_len_note))
    architectures = get_str_list(cfg, "architectures", where)
    return ModelSpec(
        name=name,
        architecture=architectures[0] if architectures else "DeepseekV4ForCausalLM",
        hidden_size=shape.hidden_size,
        intermediate_size=shape.moe_intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=1,
        head_dim=shape.head_dim,
        vocab_size=shape.vocab_size,
        max_position_embeddings=max_pos,
        vllm_max_position_embeddings=vllm_max_pos,
        torch_dtype="bfloat16" if _dtype(cfg, where) == "float32" else _dtype(cfg, where),
        param_count=count,
        weight_bytes=weight_bytes if weight_bytes is not None else dsv4_weight_bytes(shape),
        moe=MoESpec(
            num_experts=shape.n_routed_experts,
            num_experts_per_tok=shape.num_experts_per_tok,
            moe_intermediate_size=shape.moe_intermediate_size,
            num_shared_experts=shape.n_shared_experts,
            shared_expert_intermediate_size=shape.moe_intermediate_size * shape.n_shared_experts,
            score_correction_bias=shape.noaux_tc,
        ),
        quantization="fp8" if shape.quantized else None,
        quant_bits=8 if shape.quantized else None,
        quant_group_size=128 if shape.quantized and isinstance(quant, Mapping) else None,
        num_mtp_layers=shape.num_mtp_layers,
        aliases=tuple(aliases),
        sources=(*sources, *notes),
        dsv4=shape,
    )


_GEMMA4_TEXT = {"gemma4_text", "gemma4_unified_text"}


def _gemma4_spec(
    cfg: Mapping[str, Any],
    config: Mapping[str, Any],
    *,
    where: str,
    name: str,
    aliases: Sequence[str],
    sources: Sequence[tuple[str, str]],
    param_count: int | None,
    weight_bytes: int | None,
) -> ModelSpec:
    """Gemma-4's language model (vramctl.registry.gemma4 → vramctl.core.gemma4 / gemma4_cache): weights and KV
    cache layer by layer as vLLM 0.32.0 builds them; the plain fields (the sliding layers' head size and KV heads)
    feed the activation and graph estimates. A wrapper's vision / audio towers are not counted (the note says so)."""
    shape = gemma4_shape(cfg, where)
    max_pos, max_len_note, vllm_max_pos = _max_len(cfg, "gemma4_text", where)
    count = param_count if param_count is not None else gemma4_parameter_count(shape)
    notes = [("layout", "Gemma-4: weights and KV cache from vLLM 0.32.0's modules (vramctl/core/gemma4*.py)")]
    towers = [k for k in ("vision_config", "audio_config") if isinstance(config.get(k), Mapping)]
    if towers:
        notes.append(("vision_params", f"the wrapper's {' and '.join(towers)} towers are not counted"))
    if max_len_note:
        notes.append(("max_position_embeddings", max_len_note))
    architectures = get_str_list(cfg, "architectures", where)
    first_sliding = shape.layer_types.index(GEMMA4_SLIDING) if GEMMA4_SLIDING in shape.layer_types else 0
    return ModelSpec(
        name=name,
        architecture=architectures[0] if architectures else "Gemma4ForCausalLM",
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.kv_heads[first_sliding],
        head_dim=shape.head_dims[first_sliding],
        vocab_size=shape.vocab_size,
        max_position_embeddings=max_pos,
        vllm_max_position_embeddings=vllm_max_pos,
        torch_dtype="bfloat16" if _dtype(cfg, where) == "float32" else _dtype(cfg, where),
        param_count=count,
        weight_bytes=weight_bytes if weight_bytes is not None else gemma4_weight_bytes(shape),
        tie_word_embeddings=shape.tie_word_embeddings,
        layer_types=shape.layer_types,
        sliding_window=shape.sliding_window,
        aliases=tuple(aliases),
        sources=(*sources, *notes),
        gemma4=shape,
    )


def spec_from_config(
    config: Mapping[str, Any],
    *,
    where: str,
    name: str,
    param_count: int | None = None,
    weight_bytes: int | None = None,
    aliases: Sequence[str] = (),
    sources: Sequence[tuple[str, str]] = (),
) -> ModelSpec:
    """Build a ModelSpec from config.json fields; `where` names the file in every error.

    param_count / weight_bytes default to the formula of vramctl/core/params.py.
    """
    cfg = _zamba2_names(
        _lfm2_names(dbrx_names(legacy_layout(_chatglm_names(_text_config(config, where)))), where), where
    )
    cfg = _longcat_names(pure_mamba_names(_nemotron_h_names(cfg, where), where), where)
    model_type = str(cfg.get("_text_model_type") or cfg.get("model_type") or "")
    if model_type == "deepseek_v4":  # compressed sparse attention: its own weights and cache (core/dsv4*.py)
        return _deepseek_v4_spec(
            cfg, where=where, name=name, aliases=aliases, sources=sources, param_count=param_count,
            weight_bytes=weight_bytes,
        )
    if model_type in _GEMMA4_TEXT:  # per-layer head sizes, K = V, KV sharing: its own weights and cache
        return _gemma4_spec(
            cfg, config, where=where, name=name, aliases=aliases, sources=sources, param_count=param_count,
            weight_bytes=weight_bytes,
        )
    if str(cfg.get("model_type") or "") in _LAYOUT_REFUSED:  # a wrapper refused as a whole (Qwen3-Omni)
        model_type = str(cfg.get("model_type"))
    if model_type in _LAYOUT_REFUSED:
        raise BadInputError(
            f"{where}: model_type {model_type!r} cannot be planned: {_LAYOUT_REFUSED[model_type]}"
        )
    if cfg.get("block_configs") is not None:  # Nemotron-NAS (DeciLM): per-layer heads and MLP widths
        raise BadInputError(
            f"{where}: per-layer 'block_configs' ({model_type or 'DeciLM'}, e.g. Llama-3.3-Nemotron-Super) are not "
            "supported: each layer has its own KV heads and MLP width, which one ModelSpec cannot describe"
        )
    architectures = get_str_list(cfg, "architectures", where)
    architecture = architectures[0] if architectures else (model_type or "unknown")
    hidden = get_int(cfg, "hidden_size", where)
    layers = get_int(cfg, "num_hidden_layers", where, maximum=MAX_LAYERS)
    heads = get_int(cfg, "num_attention_heads", where)
    kv_heads = get_int(cfg, "num_key_value_heads", where, default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise BadInputError(
            f"{where}: field 'num_key_value_heads' ({kv_heads}) must divide num_attention_heads ({heads})"
        )
    mla = _mla(cfg, where)
    if mla is not None:
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    elif cfg.get("head_dim") is not None:
        head_dim = get_int(cfg, "head_dim", where)
    else:
        if hidden % heads:
            raise BadInputError(
                f"{where}: field 'hidden_size' ({hidden}) is not a multiple of num_attention_heads ({heads})"
                " and 'head_dim' is missing"
            )
        head_dim = hidden // heads
    max_pos, max_len_note, vllm_max_pos = _max_len(cfg, model_type, where)
    hybrid = _hybrid_pattern(cfg, model_type, layers, hidden, where)
    layer_types: tuple[str, ...]
    window: int | None
    if hybrid is None and model_type == "granitemoehybrid":  # Granite-4.0 without Mamba layers
        layer_types, window = (), None
    elif hybrid is None:
        layer_types, window = _attention_pattern(cfg, model_type, layers, max_pos, where)
    else:
        layer_types, window = hybrid[0], None
    vision_params, vision_note = _vision_params(config, hidden, where)
    vision_layers, vision_hidden = _vision_shape(config, where)
    is_opt = model_type == "opt"
    legacy = model_type in LEGACY_TYPES  # GPT-2 / GPT-J / Bloom / Falcon blocks (registry/_legacy_layouts.py)
    attention_bias = get_bool(cfg, "enable_bias" if is_opt else "attention_bias", where, default=is_opt)
    quant = _quantization(cfg, where)
    qk_norm_whole = model_type in _QK_NORM_WHOLE
    qk_norm = model_type in _QK_NORM or qk_norm_whole
    if model_type in _QK_NORM_FLAG and get_bool(cfg, "use_qk_norm", where):
        qk_norm, qk_norm_whole = True, _QK_NORM_FLAG[model_type]
    spec = ModelSpec(
        name=name,
        architecture=architecture,
        hidden_size=hidden,
        intermediate_size=get_int(cfg, _dense_ffn_key(cfg, is_opt), where),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=get_int(cfg, "vocab_size", where),
        max_position_embeddings=max_pos,
        vllm_max_position_embeddings=vllm_max_pos,
        vllm_unscaled_yarn_len=_unscaled_yarn_len(cfg, model_type, where, vllm_max_pos or max_pos),
        rope_cache_elements=_rope_cache_elements(
            cfg,
            model_type,
            mla.qk_rope_head_dim
            if mla is not None
            else int(head_dim * float(_partial_rotary(cfg, model_type)))
            if isinstance(_partial_rotary(cfg, model_type), int | float)
            else head_dim,
        )
        # DeepSeek-V3.2's indexer builds its own rope (`indexer_rope_emb = get_rope(..., is_neox_style=not
        # indexer_rope_interleave)`, deepseek_v2.py, v0.32.0); get_rope keys its cache on is_neox_style, and the MLA
        # rope is not neox-style, so a second cos/sin cache of the same size
        * (2 if mla is not None and mla.indexer_head_dim and not cfg.get("indexer_rope_interleave") else 1),
        torch_dtype=_dtype(cfg, where),
        param_count=0,
        weight_bytes=0,
        tie_word_embeddings=get_bool(
            cfg, "tie_word_embeddings", where, default=model_type in _TIED_BY_DEFAULT
        ),
        layer_types=layer_types,
        sliding_window=window,
        moe=_moe(cfg, model_type, where),
        mla=mla,
        quantization=quant.method,
        quant_bits=quant.bits,
        quant_group_size=quant.group_size,
        aliases=tuple(aliases),
        sources=tuple(sources),
        attention_qkv_bias=attention_bias or model_type in _QKV_BIAS_ALWAYS,
        attention_out_bias=attention_bias and model_type not in _NO_OUT_BIAS,
        qk_norm=qk_norm,
        qk_norm_whole=qk_norm_whole,
        attention_sinks=model_type == "gpt_oss",
        attention_out_gate=_attention_gate(cfg, model_type, heads * head_dim, heads),
        mlp_bias=get_bool(cfg, "enable_bias", where, default=True)
        if is_opt
        else get_bool(cfg, "mlp_bias", where),
        mlp_gated=not (is_opt or legacy) and model_type not in _UNGATED_MLP,
        norm_bias=is_opt or legacy or model_type in _LAYERNORM_BIAS,
        learned_position_embeddings=max_pos + _OPT_POSITION_OFFSET
        if is_opt
        else max_pos
        if model_type == "gpt2"
        else 0,
        norms_per_layer=int(cfg["_norms_per_layer"])
        if legacy
        else 4
        if model_type in _FOUR_NORMS
        else 1
        if model_type in _ONE_NORM
        else 2,
        num_mtp_layers=get_int(  # DeepSeek / GLM-4.5 `num_nextn_predict_layers`, MiniMax-M2 `num_mtp_modules`
            cfg,
            "num_nextn_predict_layers",
            where,
            default=get_int(
                cfg,
                "num_mtp_modules",
                where,
                # Qwen3-Next / Qwen3.5 `mtp_num_hidden_layers` (vLLM qwen3_5_mtp.py: getattr(..., 1) when the
                # checkpoint has an MTP head; absent: none)
                default=get_int(cfg, "mtp_num_hidden_layers", where, default=0, minimum=0),
                minimum=0,
            ),
            minimum=0,
        ),
        mtp_unquantised=quant.method is not None and _mtp_unquantised(cfg),
        quant_zero_points=quant.method == "compressed-tensors" and _asymmetric_int(cfg),
        quant_lm_head=_lm_head_packed(cfg, quant.method),
        quant_algos=read_mixed_layers(cfg["quantization_config"], where).algos
        if quant.method == "modelopt_mixed"
        else (),
        checkpoint_kv_cache_dtype=_checkpoint_kv_dtype(cfg),
        vision_params=vision_params,
        vision_layers=vision_layers,
        vision_hidden_size=vision_hidden,
        vision=vision_tower_shape(config, hidden, where),
        state_space=hybrid[1] if hybrid is not None else None,
    )
    if _dtype(cfg, where) == "float32":  # vLLM/SGLang --dtype auto serve a float32 checkpoint in 16 bits
        spec = _replace(
            spec,
            torch_dtype="bfloat16",
            sources=(
                *spec.sources,
                ("torch_dtype", "config.json float32; --dtype auto serves it as bfloat16"),
            ),
        )
    if vision_note:
        spec = _replace(spec, sources=(*spec.sources, ("vision_params", vision_note)))
    if max_len_note:
        spec = _replace(spec, sources=(*spec.sources, ("max_position_embeddings", max_len_note)))
    if not _length_keys(cfg, where):
        spec = _replace(spec, max_len_assumed=True)
    if model_type in PURE_MAMBA_TYPES:
        spec = _replace(spec, attention_free=True)
    if cfg.get("_text_defaults"):
        spec = _replace(spec, sources=(*spec.sources, ("text_config", str(cfg["_text_defaults"]))))
    if param_count is not None:
        count = param_count
    elif spec.state_space is not None and model_type in PURE_MAMBA_TYPES:
        count = pure_mamba_param_count(spec, cfg, where)
    elif spec.state_space is not None:
        count = _hybrid_param_count(spec, cfg, where)
    elif cfg.get("_longcat_layers"):
        count = _longcat_param_count(spec, cfg, where)
    else:
        count = param_count_from_spec(spec)
    if count > MAX_PARAMS:
        raise BadInputError(
            f"{where}: the fields describe ~10^{len(str(count)) - 1} parameters (hidden_size {hidden}, intermediate_size "
            f"{spec.intermediate_size}, vocab_size {spec.vocab_size}, {heads} heads), more than "
            f"{MAX_PARAMS:.0e}: a field is corrupt"
        )
    spec = _replace(spec, param_count=count)
    if weight_bytes is not None:
        size = weight_bytes
    elif cfg.get("_longcat_layers"):
        size = _longcat_weight_bytes(spec, cfg, where)
    elif spec.state_space is not None and spec.quantization is None:
        size = int(count * min(2.0, spec.dtype_bytes))  # every tensor in the 16-bit serving dtype
    elif spec.quantization == "modelopt_mixed":
        # one algo per module (vramctl.registry.modelopt_mixed): the 16-bit total less what each mapped module saves
        plain = _replace(spec, quantization=None, quant_bits=None, quant_group_size=None)
        high = int(count * min(2.0, spec.dtype_bytes)) if spec.state_space is not None else weight_bytes_from_spec(plain)
        size = high - mixed_saving_bytes(spec, read_mixed_layers(cfg["quantization_config"], where), where)
    elif spec.state_space is not None:
        # A pre-quantised hybrid (Qwen3.5 FP8 / NVFP4 / int4): Gated DeltaNet layouts Linear by Linear
        # (registry/hybrid_quant.py); other state layers: the dense layout formula does not see them, so its
        # quantised / 16-bit ratio scales the exact 16-bit total (as apply_quantization_flag does)
        kept = _kept_parts(cfg, spec)
        total_16bit = int(count * min(2.0, spec.dtype_bytes))
        exact = gated_delta_net_bytes(spec, total_16bit=total_16bit, gated_q=_gated_q(cfg, spec, where), kept=kept)
        plain = _replace(spec, quantization=None, quant_bits=None, quant_group_size=None)
        ratio = weight_bytes_keeping(spec, kept) / weight_bytes_keeping(plain, {})
        size = exact if exact is not None else round(total_16bit * ratio)
    else:
        kept = _kept_parts(cfg, spec)
        size = weight_bytes_keeping(spec, kept)
        if spec.quantization == "compressed-tensors":  # a second scheme for the modules a group names
            size += override_delta(spec, cfg["quantization_config"], _PART_NAMES, kept)
        if _double_quant(cfg):
            size -= bnb_double_quant_saving(spec)
    return _replace(spec, weight_bytes=size)


def _replace(spec: ModelSpec, **changes: Any) -> ModelSpec:
    return replace(spec, **changes)
