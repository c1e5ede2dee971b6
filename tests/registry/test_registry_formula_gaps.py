"""Exact parameter counts of layouts the formula used to miss, each checked by hand from its config.json.

Before the fix: Cohere / Cohere2 counted two norms per layer (they have one, CohereDecoderLayer's input_layernorm
feeds attention and MLP in parallel); EXAONE-4 missed its per-head q/k RMSNorm; OLMo-2 and MiniMax-M2 missed
their whole-projection q/k RMSNorm (heads × head_dim and kv_heads × head_dim); GLM-4-0414 and GLM-4.5 got an
o_proj bias from `attention_bias` (vLLM glm4.py / glm4_moe.py: bias=False), GLM-4-0414 two norms short (it has
post_self_attn_layernorm and post_mlp_layernorm), GLM-4.5 / 4.6 without its `use_qk_norm` per-head norms.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core.kv import kv_bytes_per_token
from vramctl.core.params import param_breakdown, param_count_from_spec, rank_weight_bytes
from vramctl.core.specs import ModelSpec
from vramctl.core.weights import rope_cache_bytes
from vramctl.registry import load_model
from vramctl.registry._files import profiles_dir, read_yaml
from vramctl.registry.models import spec_from_config


def _profile_config(stem: str) -> dict[str, Any]:
    doc = read_yaml(profiles_dir() / "models" / f"{stem}.yaml")
    config = doc["config"]
    assert isinstance(config, dict)
    return config


def _spec(config: dict[str, Any]) -> ModelSpec:
    return spec_from_config(config, where="config.json", name="m")


def _gqa_attention(h: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """q + k + v + o weights: h × heads·d + 2 × h × kv·d + heads·d × h."""
    q, kv = heads * head_dim, kv_heads * head_dim
    return h * q + 2 * h * kv + q * h


# ---- the nine bundled models, by hand ------------------------------------------------------------------


def test_command_r_08_2024_one_norm_per_layer() -> None:
    h, layers, inter, vocab = 8192, 40, 24576, 256000
    layer = _gqa_attention(h, 64, 8, 128) + 3 * h * inter + 1 * h  # one input_layernorm (weight only)
    total = layers * layer + vocab * h + h  # tied lm_head; final norm
    assert total == 40 * 754_982_912 + 2_097_152_000 + 8192 == 32_296_476_672
    spec = load_model("command-r-08-2024")
    assert spec.norms_per_layer == 1 and spec.tie_word_embeddings
    assert param_count_from_spec(spec) == spec.param_count == total
    # the old count (two norms per layer) was 40 × 8192 higher
    assert total + layers * h == 32_296_804_352


def test_command_a_one_norm_per_layer() -> None:
    h, layers, inter, vocab = 12288, 64, 36864, 256000
    layer = _gqa_attention(h, 96, 8, 128) + 3 * h * inter + h
    total = layers * layer + vocab * h + h
    assert total == 111_057_580_032
    spec = load_model("command-a")
    assert spec.name == "CohereLabs/c4ai-command-a-03-2025"
    assert param_count_from_spec(spec) == spec.param_count == total
    assert total + layers * h == 111_058_366_464  # before


def test_exaone4_per_head_qk_norm() -> None:
    h, layers, inter, vocab, d = 5120, 64, 27392, 102400, 128
    layer = _gqa_attention(h, 40, 8, d) + 2 * d + 3 * h * inter + 2 * h  # q_norm, k_norm of head_dim
    total = layers * layer + 2 * vocab * h + h  # untied lm_head
    assert total == 32_003_216_384
    spec = load_model("exaone-4.0-32b")
    assert spec.qk_norm and not spec.qk_norm_whole
    assert param_count_from_spec(spec) == spec.param_count == total
    assert total - layers * 2 * d == 32_003_200_000  # before
    # the card's "without embeddings" figure: 30.95B
    assert total - 2 * vocab * h == 30_954_640_384


def test_olmo2_whole_projection_qk_norm() -> None:
    h, layers, inter, vocab = 4096, 32, 11008, 100352
    q_norm, k_norm = 32 * 128, 32 * 128  # heads × head_dim, kv_heads × head_dim
    layer = _gqa_attention(h, 32, 32, 128) + q_norm + k_norm + 3 * h * inter + 2 * h
    total = layers * layer + 2 * vocab * h + h
    assert total == 7_298_617_344
    spec = load_model("olmo-2-7b-instruct")
    assert spec.qk_norm and spec.qk_norm_whole
    assert spec.torch_dtype == "bfloat16"  # float32 config, served in 16 bits
    assert param_count_from_spec(spec) == spec.param_count == total
    assert total - layers * (q_norm + k_norm) == 7_298_355_200  # before


def test_minimax_m2_whole_projection_qk_norm() -> None:
    h, layers, vocab, experts, moe_inter = 3072, 62, 200064, 256, 1536
    q_norm, k_norm = 48 * 128, 8 * 128  # 6144, 1024
    attention = _gqa_attention(h, 48, 8, 128) + q_norm + k_norm
    ffn = experts * 3 * h * moe_inter + experts * h + experts  # experts, router, e_score_correction_bias
    layer = attention + ffn + 2 * h
    total = layers * layer + 2 * vocab * h + h
    assert layer == 3_668_718_848
    assert total == 228_689_764_864
    spec = load_model("minimax-m2")
    assert spec.quantization == "fp8" and spec.quant_group_size == 128
    assert spec.num_mtp_layers == 3  # num_mtp_modules: skipped by vLLM, not counted
    assert param_count_from_spec(spec) == spec.param_count == total
    assert total - layers * (q_norm + k_norm) == 228_689_320_448  # before


def test_glm4_0414_no_o_bias_four_norms() -> None:
    h, layers, inter, vocab = 6144, 61, 23040, 151552
    q, kv = 48 * 128, 2 * 128
    bias = q + 2 * kv  # q/k/v biases only
    layer = _gqa_attention(h, 48, 2, 128) + bias + 3 * h * inter + 4 * h
    total = layers * layer + 2 * vocab * h + h
    assert total == 32_566_487_552
    spec = load_model("glm-4-32b")
    assert spec.attention_qkv_bias and not spec.attention_out_bias and spec.norms_per_layer == 4
    assert param_count_from_spec(spec) == spec.param_count == total
    # before: + o_proj bias (h), − two norms (2h) per layer
    assert total + layers * h - layers * 2 * h == 32_566_112_768


def _glm45(
    h: int, layers: int, inter: int, moe_inter: int, experts: int, first_dense: int, qk_norm: bool
) -> tuple[int, int]:
    """(total, the qk-norm + o-bias difference to the old count) of a GLM-4.5 MoE config."""
    vocab, d = 151552, 128
    q, kv = 96 * d, 8 * d
    attention = _gqa_attention(h, 96, 8, d) + q + 2 * kv + (2 * d if qk_norm else 0)
    dense = 3 * h * inter
    moe = experts * 3 * h * moe_inter + 3 * h * moe_inter + experts * h + experts  # + shared, router, bias
    total = (
        layers * (attention + 2 * h) + first_dense * dense + (layers - first_dense) * moe + 2 * vocab * h + h
    )
    return total, layers * ((2 * d if qk_norm else 0) - h)


def test_glm45_air_no_o_bias() -> None:
    total, delta = _glm45(4096, 46, 10944, 1408, 128, 1, qk_norm=False)
    assert total == 106_852_251_264
    spec = load_model("glm-4.5-air")
    assert not spec.qk_norm and not spec.attention_out_bias and spec.num_mtp_layers == 1
    assert param_count_from_spec(spec) == spec.param_count == total
    assert total - delta == 106_852_439_680  # before


@pytest.mark.parametrize("name", ["glm-4.5", "glm-4.6"])
def test_glm45_glm46_qk_norm_no_o_bias(name: str) -> None:
    total, delta = _glm45(5120, 92, 12288, 1536, 160, 3, qk_norm=True)
    assert total == 352_797_829_024
    spec = load_model(name)
    assert spec.qk_norm and not spec.qk_norm_whole and not spec.attention_out_bias
    assert spec.num_mtp_layers == 1  # the MTP layer 92 is not counted (vLLM skips it)
    assert param_count_from_spec(spec) == spec.param_count == total
    assert total - delta == 352_798_276_512  # before


def test_glm46_differs_from_glm45_only_in_context() -> None:
    a, b = load_model("glm-4.5"), load_model("glm-4.6")
    assert (a.max_position_embeddings, b.max_position_embeddings) == (131072, 202752)
    assert a.param_count == b.param_count and a.weight_bytes == b.weight_bytes


# ---- the flags on configs of their own -----------------------------------------------------------------

BASE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def test_cohere_use_qk_norm_spans_heads_and_kv_heads() -> None:
    """Command-R+ (`use_qk_norm: true`): LayerNorm(param_shape=(heads, head_dim)) and (kv_heads, head_dim)."""
    off = _spec({**BASE, "model_type": "cohere", "use_qk_norm": False})
    on = _spec({**BASE, "model_type": "cohere", "use_qk_norm": True})
    assert on.qk_norm and on.qk_norm_whole and not off.qk_norm
    assert on.param_count - off.param_count == 3 * (4 * 16 + 2 * 16)


def test_glm4_moe_use_qk_norm_is_per_head() -> None:
    config = {
        **BASE,
        "model_type": "glm4_moe",
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
    }
    off, on = _spec({**config, "use_qk_norm": False}), _spec({**config, "use_qk_norm": True})
    assert on.param_count - off.param_count == 3 * 2 * 16


def test_attention_bias_still_adds_o_bias_outside_glm() -> None:
    """Llama with `attention_bias: true` keeps its o_proj bias (unchanged by the GLM fix)."""
    llama = _spec({**BASE, "model_type": "llama", "attention_bias": True})
    glm = _spec({**BASE, "model_type": "glm4", "attention_bias": True})
    assert llama.attention_out_bias and not glm.attention_out_bias
    assert (llama.norms_per_layer, glm.norms_per_layer) == (2, 4)


@pytest.mark.parametrize("model_type", ["olmo2", "minimax_m2"])
def test_whole_qk_norm_is_replicated_on_every_rank(model_type: str) -> None:
    spec = _spec({**BASE, "model_type": model_type})
    assert spec.qk_norm_whole
    norms = 3 * (4 * 16 + 2 * 16)
    plain = _spec({**BASE, "model_type": "llama"})
    assert param_breakdown(spec).attention - param_breakdown(plain).attention == norms
    # tp 2: the norm weights stay whole (2 bytes each) on each rank
    diff = sum(rank_weight_bytes(spec, 2).layers) - sum(rank_weight_bytes(plain, 2).layers)
    assert diff == norms * 2


def test_formula_gap_models_load_from_a_local_config(tmp_path: Path) -> None:
    """The bundled `config:` blocks, written as config.json, give the profile's counts (one parser for both)."""
    for stem in ("command-a-03-2025", "glm-4.5", "minimax-m2", "olmo-2-1124-7b-instruct"):
        folder = tmp_path / stem
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(_profile_config(stem)))
        local, bundled = load_model(str(folder)), load_model(stem)
        assert (local.param_count, local.weight_bytes) == (bundled.param_count, bundled.weight_bytes)


# ---- KV bytes per token: layers × 2 × max(1, kv / tp) × head_dim × 2 ------------------------------------

KV_CASES = [
    # name, tp, layers holding per-token KV, kv heads, head_dim
    ("command-r-08-2024", 1, 40, 8, 128),
    ("command-a", 4, 16, 8, 128),  # 64 layers, every 4th global: the 48 sliding ones are capped per request
    ("exaone-4.0-32b", 2, 16, 8, 128),  # "LLLG": 16 global layers
    ("olmo-2-7b-instruct", 1, 32, 32, 128),
    ("glm-4-32b", 2, 61, 2, 128),
    ("glm-4.5-air", 4, 46, 8, 128),
    ("glm-4.5", 8, 92, 8, 128),
    ("glm-4.6", 8, 92, 8, 128),
    ("minimax-m2", 4, 62, 8, 128),
]


@pytest.mark.parametrize(("name", "tp", "layers", "kv", "head_dim"), KV_CASES, ids=[c[0] for c in KV_CASES])
def test_kv_bytes_per_token(name: str, tp: int, layers: int, kv: int, head_dim: int) -> None:
    spec = load_model(name)
    assert spec.num_full_layers == layers
    expected = layers * 2 * max(1, kv // tp) * head_dim * 2
    assert kv_bytes_per_token(spec, tp=tp) == expected


def test_sliding_models_count_only_global_layers() -> None:
    assert kv_bytes_per_token(load_model("command-a"), tp=4) == 16 * 2 * 2 * 128 * 2 == 16_384
    assert kv_bytes_per_token(load_model("exaone-4.0-32b"), tp=2) == 16 * 2 * 4 * 128 * 2 == 32_768
    assert load_model("command-a").num_sliding_layers == 48


# ---- vramctl plan -- vllm serve <id> -tp N ---------------------------------------------------------------

PLAN_CASES = [
    # HF id, tp, GPU, expected kv_bytes_per_token, vLLM's default max_model_len
    ("CohereForAI/c4ai-command-r-08-2024", 1, "h200", 163_840, 131072),
    ("CohereLabs/c4ai-command-a-03-2025", 4, "h100-sxm", 16_384, 131072),
    ("LGAI-EXAONE/EXAONE-4.0-32B", 2, "h100-sxm", 32_768, 131072),
    ("allenai/OLMo-2-1124-7B-Instruct", 1, "l40s", 524_288, 4096),
    ("zai-org/GLM-4-32B-0414", 2, "h100-sxm", 31_232, 32768),
    ("zai-org/GLM-4.5-Air", 4, "h100-sxm", 47_104, 131072),
    ("zai-org/GLM-4.5", 8, "h200", 47_104, 131072),
    ("zai-org/GLM-4.6", 8, "h200", 47_104, 202752),
    ("MiniMaxAI/MiniMax-M2", 4, "h200", 63_488, 196608),
]


@pytest.mark.parametrize(
    ("model", "tp", "gpu", "per_token", "max_len"), PLAN_CASES, ids=[c[0] for c in PLAN_CASES]
)
def test_plan_vllm_serve(
    capsys: pytest.CaptureFixture[str], model: str, tp: int, gpu: str, per_token: int, max_len: int
) -> None:
    code = main(["plan", "--gpu", gpu, "--json", "--", "vllm", "serve", model, "-tp", str(tp)])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    spec = load_model(model)
    assert data["model"]["name"] == model
    assert data["model"]["param_count"] == spec.param_count
    assert data["settings"]["tensor_parallel_size"] == tp
    assert data["verdict"] == "fits"
    assert data["kv_bytes_per_token"] == per_token
    assert data["max_model_len"] == data["max_model_len_fit"] == max_len
    # the weights term is this rank's share of the checkpoint (vocab padded to 64 rows) + the rotary cos/sin cache
    assert data["terms"]["weights"]["bytes"] == rank_weight_bytes(
        spec, tp, pad_vocab=True
    ).total + rope_cache_bytes(spec)


def test_minimax_m2_on_four_h100_is_short_of_its_context(capsys: pytest.CaptureFixture[str]) -> None:
    """53.6 GiB of FP8 weights per rank leave less KV than one 196,608-token request needs: exit 1, the fitting length."""
    code = main(
        ["plan", "--gpu", "h100-sxm", "--json", "--", "vllm", "serve", "MiniMaxAI/MiniMax-M2", "-tp", "4"]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["verdict"] == "kv-cache-too-small-for-max-model-len"
    assert 0 < data["max_model_len_fit"] < 196608
