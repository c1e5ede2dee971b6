"""The parameter formula: the worked Llama-3-8B breakdown, properties, and profile validation errors."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vramctl.core.errors import BadInputError
from vramctl.core.params import (
    param_breakdown,
    param_count_from_spec,
    rank_weight_bytes,
    weight_bytes_from_spec,
)
from vramctl.registry import load_model
from vramctl.registry._catalog import GPUS, MODELS
from vramctl.registry.catalog_models import model_from_profile
from vramctl.registry.gpus import gpu_from_profile
from vramctl.registry.models import spec_from_config


def test_llama_3_8b_breakdown() -> None:
    parts = param_breakdown(load_model("llama-3-8b"))
    assert parts.embedding == parts.lm_head == 128256 * 4096
    assert parts.attention == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    assert parts.dense_mlp == 32 * 3 * 4096 * 14336
    assert parts.norms == 65 * 4096
    assert parts.total == 8_030_261_248


def test_tying_removes_exactly_the_lm_head() -> None:
    spec = load_model("llama-3-8b")
    tied = replace(spec, tie_word_embeddings=True)
    assert param_count_from_spec(spec) - param_count_from_spec(tied) == 128256 * 4096


def test_qwen2_biases_and_qwen3_norms() -> None:
    q25 = load_model("qwen2.5-7b")
    assert q25.attention_qkv_bias and not q25.attention_out_bias
    no_bias = replace(q25, attention_qkv_bias=False)
    assert param_count_from_spec(q25) - param_count_from_spec(no_bias) == 28 * (3584 + 2 * 512)
    q3 = load_model("qwen3-8b")
    assert param_count_from_spec(q3) - param_count_from_spec(replace(q3, qk_norm=False)) == 36 * 2 * 128


BASE: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": 100,
    "max_position_embeddings": 64,
}


@given(
    layers=st.integers(1, 64),
    hidden_mult=st.integers(1, 16),
    heads=st.sampled_from([1, 2, 4, 8]),
    vocab=st.integers(1, 10**5),
    tied=st.booleans(),
)
def test_formula_properties(layers: int, hidden_mult: int, heads: int, vocab: int, tied: bool) -> None:
    cfg = {
        **BASE,
        "num_hidden_layers": layers,
        "hidden_size": 64 * hidden_mult,
        "num_attention_heads": heads,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
    }
    spec = spec_from_config(cfg, where="t", name="t")
    more = spec_from_config({**cfg, "num_hidden_layers": layers + 1}, where="t", name="t")
    per_layer = param_count_from_spec(more) - param_count_from_spec(spec)
    h = 64 * hidden_mult
    assert per_layer == 4 * h * h + 3 * h * 128 + 2 * h  # MHA attention + MLP + 2 norms
    assert weight_bytes_from_spec(spec) == 2 * spec.param_count


def _model_doc() -> dict[str, Any]:
    return copy.deepcopy(MODELS.document(MODELS.directory / "llama-3-8b-instruct.yaml"))


def _gpu_doc() -> dict[str, Any]:
    return copy.deepcopy(GPUS.document(GPUS.directory / "h100-sxm.yaml"))


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d.pop("config"), "'config'"),
        (lambda d: d.pop("param_count"), "'param_count'"),
        (lambda d: d.update(param_count=-1), "'param_count' must be positive"),
        (lambda d: d.update(paramcount=1), "unknown field 'paramcount'"),
        (lambda d: d["config"].update(hidden_size="4096"), "config: field 'hidden_size'"),
        (lambda d: d.update(sources=["a"]), "'sources' must be a mapping"),
    ],
)
def test_bad_model_profile(mutate: Any, needle: str) -> None:
    doc = _model_doc()
    mutate(doc)
    with pytest.raises(BadInputError, match=needle):
        model_from_profile(doc, "x.yaml")


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d.pop("nvidia_smi_total_mib"), "'nvidia_smi_total_mib'"),
        (lambda d: d.update(cuda_total_gib=-1.0), "'cuda_total_gib' must be a non-negative"),
        (lambda d: d.update(cuda_total_gib=90.0), "exceeds nvidia_smi_total_mib"),
        (lambda d: d.update(hbm_bandwidth_tb_s="fast"), "'hbm_bandwidth_tb_s' must be a number"),
        (lambda d: d.pop("host_link"), "'host_link'"),
        (lambda d: d["host_link"].update(lanes=0), "'lanes' must be positive"),
        (lambda d: d.update(memory=1), "unknown field 'memory'"),
    ],
)
def test_bad_gpu_profile(mutate: Any, needle: str) -> None:
    doc = _gpu_doc()
    mutate(doc)
    with pytest.raises(BadInputError, match=needle):
        gpu_from_profile(doc, "x.yaml")


def test_opt_layout() -> None:
    opt = load_model("facebook/opt-125m")
    assert not opt.mlp_gated and opt.norm_bias and opt.learned_position_embeddings == 2050
    assert opt.tie_word_embeddings and opt.attention_qkv_bias and opt.attention_out_bias
    assert opt.param_count == 125_239_296


@pytest.mark.parametrize("path", sorted(MODELS.paths()), ids=lambda p: p.stem)
def test_recorded_weight_bytes_equal_the_layout_formula(path: Any) -> None:
    spec = load_model(path.stem)
    if spec.state_space is None:
        assert weight_bytes_from_spec(spec) == spec.weight_bytes
        assert rank_weight_bytes(spec, 1).total == spec.weight_bytes
    else:  # hybrids: the registry's per-kind count (tests/hybrid), 16 bits each; parts scaled to it
        assert spec.weight_bytes == 2 * spec.param_count
        assert abs(rank_weight_bytes(spec, 1).total - spec.weight_bytes) <= spec.num_hidden_layers + 4


# What vLLM logged as "Model loading took X GiB" per rank (../shared/samples/startup) against the
# per-rank formula. The tolerance is each datapoint's error today; the remaining gap is the allocator's
# rounding and buffers that are not checkpoint tensors.
LOGGED_RANK_WEIGHTS = [
    (
        "deepseek-r1",
        16,
        40.3174,
        0.01,
    ),  # 125.log; a naive /16 would be 2.8 % low (replicated q_a/kv_a/router)
    ("llama-3.1-405b-instruct-awq-int4", 4, 51.1453, 0.015),  # 124.log
    ("qwen2.5-0.5b-instruct-awq", 1, 0.4315, 0.015),  # 131.log
    ("qwen2-7b", 2, 7.1217, 0.01),  # 040.log
    ("llama-3-8b", 1, 14.96, 0.001),  # 001.log
    ("opt-125m", 1, 0.2393, 0.03),  # 123.log
]


@pytest.mark.parametrize(("name", "tp", "logged_gib", "tolerance"), LOGGED_RANK_WEIGHTS)
def test_rank_weights_against_vllm_logs(name: str, tp: int, logged_gib: float, tolerance: float) -> None:
    rank = rank_weight_bytes(load_model(name), tp, pad_vocab=True).total / 2**30
    assert abs(rank - logged_gib) <= tolerance * logged_gib


def test_rank_weights_shard_and_replicate() -> None:
    r1 = load_model("deepseek-r1")
    one, sixteen = rank_weight_bytes(r1, 1), rank_weight_bytes(r1, 16)
    assert sixteen.total > one.total / 16  # replicated parts
    llama = load_model("llama-3-8b")
    # 8 KV heads: at tp 16 each rank still holds one whole KV head, so k/v do not shrink past tp 8
    kv_layer = 2 * 1024 * 4096 * 2
    l8, l16 = rank_weight_bytes(llama, 8).layers[0], rank_weight_bytes(llama, 16).layers[0]
    assert l8 - l16 == (l8 - kv_layer // 8 - 2 * 4096 * 2) // 2
    with pytest.raises(ValueError):
        rank_weight_bytes(llama, 0)


@given(layers=st.integers(1, 300), first=st.integers(0, 320), freq=st.integers(1, 5))
def test_num_moe_layers_matches_the_rule(layers: int, first: int, freq: int) -> None:
    from vramctl.core.params import is_moe_layer, num_moe_layers
    from vramctl.core.specs import MoESpec

    spec = replace(
        load_model("mixtral-8x7b"),
        num_hidden_layers=layers,
        moe=MoESpec(8, 2, 14336, first_k_dense_replace=first, moe_layer_freq=freq),
    )
    assert num_moe_layers(spec) == sum(1 for i in range(layers) if is_moe_layer(spec, i))


def test_implausible_layer_count_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="implausibly large"):
        spec_from_config({**BASE, "num_hidden_layers": 10**9}, where="config.json", name="x")
