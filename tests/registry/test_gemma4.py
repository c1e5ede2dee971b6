"""Gemma-4 (`gemma4` / `gemma4_text`, Gemma-4-unified, DiffusionGemma) is refused in one line, not planned as Gemma-3.

vLLM 0.32.0 builds Gemma-4 layer by layer (vllm/model_executor/models/gemma4.py): each layer's head size and KV heads
come from `per_layer_config[layer]` (:578-580; transformers 5.19 Gemma4TextConfig writes it from `global_head_dim`
and `num_global_key_value_heads` for the full-attention layers), the last `num_kv_shared_layers` layers build only a
q_proj and read an earlier layer's KV (:403-412, :471-491), `use_double_wide_mlp` doubles their MLP (:595-606), a
MoE block runs beside the dense MLP whenever `num_experts` is set (:630-665) and per-layer input embeddings of
vocab_size_per_layer_input × (hidden_size_per_layer_input × layers) are loaded (:1019-1040). A ModelSpec with one
head size and one KV-head count cannot describe that, so vramctl refuses it rather than plan it as a Gemma-3.

The configs below are synthesised from the fields vLLM reads. Where public repositories quote a published
checkpoint's fields, those are used (E2B: hidden 1536, 35 layers, 8 heads, 1 KV head, 20 KV-shared layers, per-layer
inputs of 256, double-wide MLP; 31B: hidden 5376, 32 heads, 16 sliding / 4 global KV heads, K = V on global layers,
intermediate 21504; 26B-A4B: 128 experts of 704, top 8, beside a dense MLP of 2112); the rest (the 31B's layer count,
the 26B's hidden size and heads) is made up: the test only needs the refusal. No network.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.registry.models import spec_from_config


def _layer_types(layers: int, every: int) -> list[str]:
    return ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]


_ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10_000.0, "rope_type": "default"},
}


def _text(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model_type": "gemma4_text",
        "vocab_size": 262_144,
        "head_dim": 256,
        "global_head_dim": 512,
        "hidden_activation": "gelu_pytorch_tanh",
        "sliding_window": 512,
        "max_position_embeddings": 131_072,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "final_logit_softcapping": 30.0,
        "rope_parameters": _ROPE,
        "attention_bias": False,
        "torch_dtype": "bfloat16",
    }
    return {**base, **fields}


E2B = _text(
    hidden_size=1536, intermediate_size=6144, num_hidden_layers=35, num_attention_heads=8, num_key_value_heads=1,
    layer_types=_layer_types(35, 5), hidden_size_per_layer_input=256, vocab_size_per_layer_input=262_144,
    num_kv_shared_layers=20, use_double_wide_mlp=True,
)
DENSE_31B = _text(
    hidden_size=5376, intermediate_size=21_504, num_hidden_layers=60, num_attention_heads=32, num_key_value_heads=16,
    num_global_key_value_heads=4, attention_k_eq_v=True, layer_types=_layer_types(60, 6),
    hidden_size_per_layer_input=0, num_kv_shared_layers=0, max_position_embeddings=262_144,
)
MOE_26B = _text(
    hidden_size=2816, intermediate_size=2112, num_hidden_layers=30, num_attention_heads=16, num_key_value_heads=8,
    num_global_key_value_heads=2, attention_k_eq_v=True, layer_types=_layer_types(30, 6),
    hidden_size_per_layer_input=0, num_kv_shared_layers=0, enable_moe_block=True, num_experts=128,
    top_k_experts=8, moe_intermediate_size=704, max_position_embeddings=262_144,
)


def _wrapped(text: dict[str, Any], model_type: str = "gemma4", arch: str = "Gemma4ForConditionalGeneration") -> dict[str, Any]:
    return {
        "architectures": [arch],
        "model_type": model_type,
        "text_config": copy.deepcopy(text),
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 768, "num_hidden_layers": 16},
        "tie_word_embeddings": True,
    }


CASES = {
    "E2B (ConditionalGeneration)": _wrapped(E2B),
    "31B (ConditionalGeneration)": _wrapped(DENSE_31B),
    "26B-A4B (ConditionalGeneration)": _wrapped(MOE_26B),
    "31B (CausalLM)": {**copy.deepcopy(DENSE_31B), "architectures": ["Gemma4ForCausalLM"]},
    "unified": _wrapped({**DENSE_31B, "model_type": "gemma4_unified_text"}, "gemma4_unified",
                        "Gemma4UnifiedForConditionalGeneration"),
    "DiffusionGemma": _wrapped({**E2B, "model_type": "diffusion_gemma_text"}, "diffusion_gemma",
                               "DiffusionGemmaForBlockDiffusion"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gemma4_is_refused_in_one_line_naming_what_is_not_modelled(name: str) -> None:
    with pytest.raises(BadInputError) as info:
        spec_from_config(CASES[name], where="config.json", name=name)
    text = str(info.value)
    assert "\n" not in text and len(text) < 600
    for field in ("global_head_dim", "num_kv_shared_layers", "hidden_size_per_layer_input", "gemma4.py"):
        assert field in text, text


def test_plan_of_a_gemma4_folder_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a Gemma-4 config folder planned as a Gemma-3 (one head size, every layer's own KV, no per-layer
    embeddings); now exit 2 and one line."""
    folder = tmp_path / "gemma-4-31B-it"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CASES["31B (ConditionalGeneration)"]))
    code = main(["plan", "--model", str(folder), "--gpu", "h200", "--engine-version", "0.32.0"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Gemma-4" in err and len(err.strip().splitlines()) == 1


def test_lfm2_moe_without_layer_types_is_refused_not_planned_all_attention() -> None:
    """vLLM 0.32 lfm2_moe.py:433 indexes config.layer_types, which Lfm2MoeConfig leaves null: before, vramctl planned
    every layer as attention (11.1 B parameters, a KV cache in 24 layers instead of 6)."""
    config = {
        "model_type": "lfm2_moe", "architectures": ["Lfm2MoeForCausalLM"], "vocab_size": 65_536,
        "hidden_size": 2048, "intermediate_size": 7168, "moe_intermediate_size": 1792, "num_hidden_layers": 24,
        "num_attention_heads": 32, "num_key_value_heads": 8, "num_experts": 32, "num_experts_per_tok": 4,
        "num_dense_layers": 2, "max_position_embeddings": 128_000,
    }
    with pytest.raises(BadInputError, match="layer_types"):
        spec_from_config(config, where="config.json", name="lfm2-moe")


REAL_12B = Path(__file__).resolve().parents[1] / "fixtures" / "gemma4" / "gemma-4-12B" / "config.json"
"""google/gemma-4-12B's config.json (revision 56820d7d8cbe8e47975a53325439ed272e91cff2) as a public GitHub repository's
agent log quotes it in full (the towers' id2label / label2id boilerplate left out). transformers 5.19 builds its
language model (Gemma4UnifiedForCausalLM) on the meta device with 11,907,350,272 parameters: 40 sliding layers of
head size 256 with 8 KV heads, 8 global layers of head size 512 with 1 KV head and no v_proj (attention_k_eq_v),
MLPs of 15,360, a tied 262,144-row embedding. vLLM 0.32 loads the K weights of those 8 layers into a V slot too
(gemma4.py:86-123 `_get_qkv_shards`, :421-430), 15,728,640 more."""


def test_the_published_gemma4_12b_config_is_refused_in_one_line() -> None:
    config = json.loads(REAL_12B.read_text())
    with pytest.raises(BadInputError) as info:
        spec_from_config(config, where="gemma-4-12B config.json", name="google/gemma-4-12B")
    assert "gemma4_unified_text" in str(info.value) and "\n" not in str(info.value)
