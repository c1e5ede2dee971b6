"""Ledger and monotonicity invariants of plan() over random settings (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vramctl.core.plan import plan_vllm, stage_weight_bytes
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_gpu, load_model

MODELS = [
    "meta-llama/Meta-Llama-3-8B-Instruct",
    "Qwen/Qwen3-32B",
    "openai/gpt-oss-20b",
    "deepseek-ai/DeepSeek-V2-Lite-Chat",
    "google/gemma-3-27b-it",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
]
GPUS = ["h100-sxm", "a100-40gb", "l4", "b200", "rtx-4090"]
VERSIONS = ["0.6.6", "0.8.5", "0.11.0", "0.20.0", "0.26.0", "0.33.0"]

common = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@common
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    version=st.sampled_from(VERSIONS),
    u=st.floats(min_value=0.05, max_value=1.0),
    tp=st.sampled_from([1, 2, 4, 8]),
    mml=st.integers(min_value=1, max_value=32768),
    eager=st.booleans(),
)
def test_ledger_sums_to_capacity(
    model: str, gpu: str, version: str, u: float, tp: int, mml: int, eager: bool
) -> None:
    m = load_model(model)
    if m.num_attention_heads % tp:
        return
    r = plan_vllm(
        m,
        load_gpu(gpu),
        ServeSettings(
            engine_version=version,
            gpu_memory_utilization=u,
            tensor_parallel_size=tp,
            max_model_len=min(mml, m.max_position_embeddings),
            enforce_eager=eager,
        ),
    )
    assert sum(t.bytes for t in r.ledger.terms) == r.capacity_bytes
    assert r.num_blocks >= 0 and r.kv_tokens >= 0
    if r.verdict == "fits":
        assert r.num_blocks > 0 and r.max_concurrency > 0


@common
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    version=st.sampled_from(VERSIONS),
    u1=st.floats(min_value=0.05, max_value=1.0),
    u2=st.floats(min_value=0.05, max_value=1.0),
)
def test_more_utilization_never_fewer_blocks(
    model: str, gpu: str, version: str, u1: float, u2: float
) -> None:
    lo, hi = sorted((u1, u2))
    m, g = load_model(model), load_gpu(gpu)
    a = plan_vllm(m, g, ServeSettings(engine_version=version, gpu_memory_utilization=lo, max_model_len=4096))
    b = plan_vllm(m, g, ServeSettings(engine_version=version, gpu_memory_utilization=hi, max_model_len=4096))
    assert b.num_blocks >= a.num_blocks
    assert b.kv_cache_bytes >= a.kv_cache_bytes


@common
@given(model=st.sampled_from(MODELS), pp=st.sampled_from([1, 2, 4]))
def test_more_tp_never_more_weights_per_rank(model: str, pp: int) -> None:
    m = load_model(model)
    previous = None
    for tp in (1, 2, 4, 8, 16):
        per_rank = max(stage_weight_bytes(m, tp=tp, pp=pp, dtype=m.torch_dtype))
        if previous is not None:
            assert per_rank <= previous
        previous = per_rank


@common
@given(model=st.sampled_from(MODELS), tp=st.sampled_from([1, 2, 4, 8]))
def test_more_tp_never_more_weights_in_the_plan(model: str, tp: int) -> None:
    m = load_model(model)
    if m.num_attention_heads % (2 * tp):
        return
    g = load_gpu("h100-sxm")
    one = plan_vllm(m, g, ServeSettings(tensor_parallel_size=tp, max_model_len=4096))
    two = plan_vllm(m, g, ServeSettings(tensor_parallel_size=2 * tp, max_model_len=4096))
    assert two.ledger.bytes_of("weights") <= one.ledger.bytes_of("weights")
    assert two.kv_bytes_per_token <= one.kv_bytes_per_token
