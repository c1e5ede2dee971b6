"""Weights per TP rank (core/weights.py) and the served --dtype flowing into weights and the KV element."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl import registry
from vramctl.core import kv
from vramctl.core.engines import sglang as S
from vramctl.core.params import rank_weight_bytes
from vramctl.core.plan import plan_vllm, stage_weight_bytes
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GiB
from vramctl.core.weights import stage_rank_weight_bytes

R1 = registry.load_model("deepseek-ai/DeepSeek-R1")
LLAMA8 = registry.load_model("meta-llama/Llama-3.1-8B-Instruct")
LLAMA70 = registry.load_model("meta-llama/Llama-3.1-70B-Instruct")
MODELS = [
    registry.load_model(n)
    for n in (
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen/Qwen3-32B",
        "google/gemma-3-27b-it",
        "openai/gpt-oss-120b",
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
        "Qwen/Qwen3-30B-A3B",
    )
]


def test_deepseek_r1_tp16_holds_its_replicated_pieces() -> None:
    """Datapoint 125 (../shared/samples/startup) logs 40.32 GiB of weights per rank at TP 16. Dividing the
    checkpoint by 16 gave 39.18 GiB; MLA's q_a / kv_a, the routers and the norms sit whole on every rank, so
    the exact per-rank total is 40.18 GiB (0.35 % under the log instead of 2.8 %)."""
    (per_rank,) = stage_weight_bytes(R1, tp=16, pp=1, dtype="bfloat16")
    assert per_rank / GiB == pytest.approx(40.18, abs=0.01)
    assert R1.weight_bytes / 16 / GiB == pytest.approx(39.18, abs=0.01)
    assert abs(per_rank / GiB - 40.32) < abs(R1.weight_bytes / 16 / GiB - 40.32)


def test_tp1_is_the_checkpoint_and_sglang_agrees() -> None:
    assert stage_weight_bytes(LLAMA8, tp=1, pp=1, dtype="bfloat16") == (LLAMA8.weight_bytes,)
    ((sg_layers, sg_bytes),) = S.stage_layout(R1, 16, 1)
    assert sg_layers == R1.num_hidden_layers
    assert sg_bytes == stage_weight_bytes(R1, tp=16, pp=1, dtype="bfloat16")[0]


def test_llama70b_tp8_matches_log_117() -> None:
    """Sample 117 (vLLM 0.6.4, 8 × H200) logs 16.46 GiB on rank 0; the replicated norms add 2 MiB to /8."""
    (per_rank,) = stage_weight_bytes(LLAMA70, tp=8, pp=1, dtype="bfloat16")
    assert per_rank > LLAMA70.weight_bytes // 8
    assert abs(per_rank / GiB - 16.46) < 0.05


def test_tied_head_is_materialised_on_the_last_stage() -> None:
    gemma = registry.load_model("google/gemma-3-27b-it")
    assert gemma.tie_word_embeddings
    rank = rank_weight_bytes(gemma, 1, pad_vocab=True)
    first, last = stage_rank_weight_bytes(gemma, tp=1, pp=2)
    assert first + last > gemma.weight_bytes + rank.embedding - 1  # the embedding is held twice
    (single,) = stage_rank_weight_bytes(gemma, tp=1, pp=1)
    assert single == pytest.approx(gemma.weight_bytes, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(MODELS), tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 3]))
def test_ranks_hold_at_least_their_share(model: object, tp: int, pp: int) -> None:
    from vramctl.core.specs import ModelSpec

    assert isinstance(model, ModelSpec)
    stages = stage_rank_weight_bytes(model, tp=tp, pp=pp)
    assert len(stages) == pp
    # Every rank holds its 1/tp share of the checkpoint plus what is replicated (never less).
    assert sum(stages) * tp >= model.weight_bytes * 0.999
    # More TP never holds more per rank.
    assert max(stage_rank_weight_bytes(model, tp=tp * 2, pp=pp)) <= max(stages)


def test_dtype_rescales_weights() -> None:
    (bf16,) = stage_weight_bytes(LLAMA8, tp=1, pp=1, dtype="bfloat16")
    (fp32,) = stage_weight_bytes(LLAMA8, tp=1, pp=1, dtype="float32")
    assert fp32 == 2 * bf16


# --- the served --dtype and the KV element ------------------------------------------------------------------------


def test_kv_element_follows_explicit_dtype_and_downcasts_auto_fp32() -> None:
    """vLLM `--dtype auto` on a float32 checkpoint serves in 16 bits (`_get_and_verify_dtype`, vllm/config.py:
    "we use float16 for float32 models"); an explicit `--dtype float32` serves and caches in fp32."""
    fp32_ckpt = replace(LLAMA8, torch_dtype="float32")
    assert kv.kv_dtype_bytes(fp32_ckpt, "auto") == 2
    assert kv.kv_dtype_bytes(fp32_ckpt, "auto", model_dtype="auto") == 2
    assert kv.kv_dtype_bytes(fp32_ckpt, "auto", model_dtype="float32") == 4
    assert kv.kv_dtype_bytes(LLAMA8, "auto", model_dtype="float32") == 4
    assert kv.kv_dtype_bytes(LLAMA8, "auto", model_dtype="float16") == 2
    assert kv.kv_dtype_bytes(LLAMA8, "fp8", model_dtype="float32") == 1  # an explicit cache dtype wins
    assert kv.kv_bytes_per_token(LLAMA8, model_dtype="float32") == 2 * kv.kv_bytes_per_token(LLAMA8)


def test_serve_settings_dtype_flows_into_the_plan() -> None:
    h100 = registry.load_gpu("h100-sxm")
    base = ServeSettings(engine="vllm", engine_version="0.11.0", max_model_len=8192)
    bf16 = plan_vllm(LLAMA8, h100, base)
    fp32 = plan_vllm(LLAMA8, h100, base.with_changes(dtype="float32"))
    assert fp32.kv_bytes_per_token == 2 * bf16.kv_bytes_per_token
    assert fp32.bytes_per_block == 2 * bf16.bytes_per_block
    assert fp32.ledger.bytes_of("weights") == 2 * bf16.ledger.bytes_of("weights")
    # A float32 checkpoint under --dtype auto plans like the 16-bit one.
    fp32_ckpt = replace(LLAMA8, torch_dtype="float32")
    auto = plan_vllm(fp32_ckpt, h100, base)
    assert auto.kv_bytes_per_token == bf16.kv_bytes_per_token
