"""The models bundled for `vramctl plan -- vllm serve <HF id>` without a local config.json (20 profiles, 17 new
architecture classes): each resolves by HF id and alias, its KV bytes per token equal the value derived by hand from
its config.json and the engine's attention layout, and it plans on a sensible GPU / TP.

KV bytes per token (bf16 cache, 2 bytes) = layers x 2 (K and V) x KV heads per rank x head_dim x 2; per rank the KV heads
are max(1, kv_heads // tp) (vLLM `get_num_kv_heads`, ../shared/reference/vllm.md §3 "Per-rank KV heads"). The attention
layout of each model is its vLLM model file's (vllm/model_executor/models/<Case.vllm_file>, reached through
registry.py): all of them GQA / MHA / MQA with one K and one V of head_dim per KV head and layer, no MLA, no window.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from vramctl.cli.main import main
from vramctl.core.kv import kv_bytes_per_token
from vramctl.core.params import active_param_count, num_moe_layers
from vramctl.registry import list_models, load_model


@dataclass(frozen=True)
class Case:
    hf_id: str
    alias: str
    architecture: str
    param_count: int
    layers: int
    kv_heads: int
    head_dim: int
    gpu: str
    tp: int
    vllm_file: str
    """The vLLM model file whose attention layout the KV figure follows."""
    extra: tuple[str, ...] = ()
    """More serve flags (a context that fits the card)."""

    def kv_per_token(self, tp: int = 1) -> int:
        return self.layers * 2 * max(1, self.kv_heads // tp) * self.head_dim * 2


CASES = [
    # NoPE every 4th layer changes no tensor and no cache: GQA 16 / 4, head_dim 2048 / 16
    Case(
        "HuggingFaceTB/SmolLM3-3B",
        "smollm3-3b",
        "SmolLM3ForCausalLM",
        3_075_098_624,
        36,
        4,
        128,
        "l4",
        1,
        "llama.py",
    ),
    # Qwen2 decoder under the VLM wrapper: GQA 28 / 4, head_dim 3584 / 28
    Case(
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "qwen2.5-vl-7b",
        "Qwen2_5_VLForConditionalGeneration",
        8_292_166_656,
        28,
        4,
        128,
        "l40s",
        1,
        "qwen2_5_vl.py",
        ("--max-model-len", "32768"),
    ),
    # Qwen3 decoder (q/k norms: no cache) under the VLM wrapper: GQA 32 / 8 heads of 128
    Case(
        "Qwen/Qwen3-VL-8B-Instruct",
        "qwen3-vl-8b",
        "Qwen3VLForConditionalGeneration",
        8_767_123_696,
        36,
        8,
        128,
        "h100-sxm",
        1,
        "qwen3_vl.py",
        ("--max-model-len", "65536"),
    ),
    # GLMAttention: multi_query_group_num 2 KV heads of kv_channels 128 (remote-code config names)
    Case(
        "THUDM/glm-4-9b-chat",
        "glm-4-9b-chat",
        "ChatGLMModel",
        9_399_951_360,
        40,
        2,
        128,
        "a100-40gb",
        1,
        "chatglm.py",
        ("--trust-remote-code", "--max-model-len", "32768"),
    ),
    Case(
        "Qwen/Qwen2-VL-7B-Instruct",
        "qwen2-vl-7b",
        "Qwen2VLForConditionalGeneration",
        8_291_375_616,
        28,
        4,
        128,
        "l40s",
        1,
        "qwen2_vl.py",
    ),
    # BaichuanAttention: MHA, W_pack = 3 x hidden; 7B RoPE, 13B ALiBi (same cache)
    Case(
        "baichuan-inc/Baichuan2-7B-Chat",
        "baichuan2-7b",
        "BaichuanForCausalLM",
        7_505_973_248,
        32,
        32,
        128,
        "a100-40gb",
        1,
        "baichuan.py",
    ),
    Case(
        "baichuan-inc/Baichuan2-13B-Chat",
        "baichuan2-13b",
        "BaichuanForCausalLM",
        13_896_668_160,
        40,
        40,
        128,
        "a100-80gb",
        1,
        "baichuan.py",
    ),
    Case(
        "baidu/ERNIE-4.5-21B-A3B-PT",
        "ernie-4.5-21b-a3b",
        "Ernie4_5_MoeForCausalLM",
        21_825_437_888,
        28,
        4,
        128,
        "h100-sxm",
        1,
        "ernie45_moe.py",
        ("--max-model-len", "32768"),
    ),
    Case(
        "ibm-granite/granite-3.3-8b-instruct",
        "granite-3.3-8b",
        "GraniteForCausalLM",
        8_170_864_640,
        40,
        8,
        128,
        "l40s",
        1,
        "granite.py",
        ("--max-model-len", "32768"),
    ),
    # GQA 24 / 8, head_dim 1536 / 24 = 64
    Case(
        "ibm-granite/granite-3.1-3b-a800m-instruct",
        "granite-3.1-3b-a800m",
        "GraniteMoeForCausalLM",
        3_298_793_472,
        32,
        8,
        64,
        "l4",
        1,
        "granitemoe.py",
        ("--max-model-len", "32768"),
    ),
    # fused wqkv: num_key_value_heads 8 of 128
    Case(
        "internlm/internlm2_5-7b-chat",
        "internlm2.5-7b",
        "InternLM2ForCausalLM",
        7_737_708_544,
        32,
        8,
        128,
        "a100-40gb",
        1,
        "internlm2.py",
        ("--max-model-len", "32768"),
    ),
    Case(
        "internlm/internlm3-8b-instruct",
        "internlm3-8b",
        "InternLM3ForCausalLM",
        8_804_241_408,
        48,
        2,
        128,
        "l40s",
        1,
        "llama.py",
        ("--max-model-len", "32768"),
    ),
    # every layer booked as full attention (chunked local layers included); 8 KV heads over TP 4 = 2 per rank
    Case(
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        "llama-4-scout",
        "Llama4ForConditionalGeneration",
        108_641_793_536,
        48,
        8,
        128,
        "h100-sxm",
        4,
        "llama4.py",
        ("--max-model-len", "131072"),
    ),
    Case(
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        "mistral-small-3.1",
        "Mistral3ForConditionalGeneration",
        24_011_361_280,
        40,
        8,
        128,
        "h100-sxm",
        1,
        "mistral3.py",
        ("--max-model-len", "32768"),
    ),
    # GemmaAttention: 7B MHA 16 heads of 256, 2B multi-query (1 KV head of 256)
    Case(
        "google/gemma-7b-it",
        "gemma-7b",
        "GemmaForCausalLM",
        8_537_680_896,
        28,
        16,
        256,
        "a100-40gb",
        1,
        "gemma.py",
    ),
    Case(
        "google/gemma-2b-it", "gemma-2b", "GemmaForCausalLM", 2_506_172_416, 18, 1, 256, "l4", 1, "gemma.py"
    ),
    Case(
        "Qwen/Qwen1.5-MoE-A2.7B-Chat",
        "qwen1.5-moe-a2.7b",
        "Qwen2MoeForCausalLM",
        14_315_784_192,
        24,
        16,
        128,
        "a100-80gb",
        1,
        "qwen2_moe.py",
    ),
    # the Llama-2-7B decoder (MHA 32 heads) behind CLIP
    Case(
        "llava-hf/llava-1.5-7b-hf",
        "llava-1.5-7b",
        "LlavaForConditionalGeneration",
        7_063_427_072,
        32,
        32,
        128,
        "l40s",
        1,
        "llava.py",
    ),
    Case(
        "deepseek-ai/deepseek-moe-16b-chat",
        "deepseek-moe-16b",
        "DeepseekForCausalLM",
        16_375_728_128,
        28,
        16,
        128,
        "a100-80gb",
        1,
        "deepseek_v2.py",
    ),
    # Phi3Attention: fused qkv, GQA 40 / 10, head_dim 5120 / 40 = 128
    Case("microsoft/phi-4", "phi4", "Phi3ForCausalLM", 14_659_507_200, 40, 10, 128, "h100-sxm", 1, "phi3.py"),
]
IDS = [c.alias for c in CASES]


def test_fifteen_new_architecture_classes() -> None:
    new = {c.architecture for c in CASES} - {"Phi3ForCausalLM"}
    assert len(new) >= 17
    bundled = {m.architecture for m in list_models()}
    assert new <= bundled


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_resolves_by_hf_id_alias_and_name(case: Case) -> None:
    spec = load_model(case.hf_id)
    assert spec.name == case.hf_id and spec.architecture == case.architecture
    assert spec.param_count == case.param_count
    assert load_model(case.alias) is spec
    assert load_model(case.hf_id.split("/", 1)[1]) is spec  # the part after the slash
    assert load_model(case.hf_id.upper()) is spec
    # 16-bit weights; ERNIE's aux-free router bias (one per expert and MoE layer) is stored in float32
    fp32_bias = (
        num_moe_layers(spec) * spec.moe.num_experts if spec.moe and spec.moe.score_correction_bias else 0
    )
    assert spec.quantization is None and spec.weight_bytes == 2 * spec.param_count + 2 * fp32_bias


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_kv_bytes_per_token_by_hand(case: Case) -> None:
    spec = load_model(case.alias)
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (
        case.layers,
        case.kv_heads,
        case.head_dim,
    )
    assert spec.mla is None and spec.sliding_window is None
    for tp in (1, 2, 4, 8):
        if case.kv_heads % tp and tp % case.kv_heads:
            continue
        assert kv_bytes_per_token(spec, tp=tp) == case.kv_per_token(tp), tp


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_plans_from_the_serve_command(case: Case, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "plan",
        "--json",
        "--gpu",
        case.gpu,
        "--",
        "vllm",
        "serve",
        case.hf_id,
        "-tp",
        str(case.tp),
        *case.extra,
    ]
    code = main(argv)
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out.get("verdict_message")
    assert out["verdict"] == "fits"
    assert out["kv_bytes_per_token"] == case.kv_per_token(case.tp)
    assert out["kv_tokens"] >= out["max_model_len"]  # at least one full-length request


def test_hand_values_spot_checks() -> None:
    # written out once so the arithmetic is visible: SmolLM3 36 x 2 x 4 x 128 x 2; Gemma-7B 28 x 2 x 16 x 256 x 2;
    # Baichuan2-13B 40 x 2 x 40 x 128 x 2; Llama-4-Scout at TP 4: 48 x 2 x 2 x 128 x 2
    by_alias = {c.alias: c for c in CASES}
    assert by_alias["smollm3-3b"].kv_per_token() == 73_728
    assert by_alias["gemma-7b"].kv_per_token() == 458_752
    assert by_alias["baichuan2-13b"].kv_per_token() == 819_200
    assert by_alias["llama-4-scout"].kv_per_token(4) == 49_152


def test_moe_active_parameters_match_the_model_cards() -> None:
    assert 2.6e9 < active_param_count(load_model("qwen1.5-moe-a2.7b")) < 2.8e9  # "2.7B activated"
    assert (
        3.0e9 < active_param_count(load_model("ernie-4.5-21b-a3b")) < 3.5e9
    )  # "A3B": 3.35B with the tied embedding
    scout = load_model("llama-4-scout")
    assert (
        17.0e9 < active_param_count(scout) - scout.vision_params < 17.4e9
    )  # "17B active" in the language model
    granite = load_model("granite-3.1-3b-a800m")
    non_embedding = active_param_count(granite) - granite.vocab_size * granite.hidden_size
    assert 0.78e9 < non_embedding < 0.82e9  # "800M active" (tied embedding aside)
    assert 2.7e9 < active_param_count(load_model("deepseek-moe-16b")) < 2.9e9  # "2.8B activated"


def test_vision_towers_are_counted() -> None:
    for alias, tower in (
        ("qwen2.5-vl-7b", 676_550_144),
        ("qwen2-vl-7b", 675_759_104),
        ("qwen3-vl-8b", 576_388_336),
        ("llava-1.5-7b", 324_487_168),
        ("llama-4-scout", 871_932_416),
        ("mistral-small-3.1", 438_958_080),
    ):
        spec = load_model(alias)
        assert spec.vision_params == tower
        assert spec.vision_layers is not None  # SGLang's VLM memory rule sees a multimodal model
