"""plan_vllm's versioned semantics, term by term (vramctl.core.plan)."""

from __future__ import annotations

import math

from vramctl.core.kv import bytes_per_block
from vramctl.core.plan import kv_view_of_model, plan, plan_vllm
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GiB
from vramctl.registry import load_gpu, load_model

LLAMA = load_model("meta-llama/Meta-Llama-3-8B-Instruct")
H100 = load_gpu("h100-sxm")


def _plan(**kw: object):  # type: ignore[no-untyped-def]
    return plan_vllm(LLAMA, H100, ServeSettings(max_model_len=8192, **kw))  # type: ignore[arg-type]


def test_requested_is_ceil_of_total_times_u() -> None:
    r = _plan(gpu_memory_utilization=0.9)
    assert r.requested_bytes == math.ceil(H100.cuda_total_bytes * 0.9)


def test_graph_estimate_subtracted_from_0_20_only() -> None:
    new = _plan(engine_version="0.20.0", gpu_memory_utilization=0.9)
    old = _plan(engine_version="0.19.0", gpu_memory_utilization=0.9)
    graph = new.ledger.bytes_of("cuda_graph")
    assert graph > 0
    assert "charged to the budget" in (new.ledger.get("cuda_graph").note or "")  # type: ignore[union-attr]
    assert old.kv_cache_bytes - new.kv_cache_bytes == graph
    # Off by the env var: the same KV as before 0.20, the graphs come out of the slack.
    off = _plan(engine_version="0.20.0", gpu_memory_utilization=0.9, estimate_cudagraphs=False)
    assert off.kv_cache_bytes == new.kv_cache_bytes + graph
    assert off.ledger.bytes_of("slack") == new.ledger.bytes_of("slack") - graph


def test_enforce_eager_has_no_graph_term() -> None:
    r = _plan(enforce_eager=True)
    assert r.ledger.get("cuda_graph") is None
    assert r.settings.cudagraph_capture_sizes == ()


def test_default_utilization_by_version() -> None:
    assert _plan(engine_version="0.19.0").settings.gpu_memory_utilization == 0.90
    assert _plan(engine_version="0.33.0").settings.gpu_memory_utilization == 0.92
    # 0.34: 1.0 with the extensible KV cache (the default on CUDA), 0.92 without it (vllm/config/cache.py:494-501)
    assert _plan().settings.gpu_memory_utilization == 1.0
    assert _plan(enable_extensible_kv_cache=False).settings.gpu_memory_utilization == 0.92


def test_kv_cache_memory_bytes_ignores_utilization() -> None:
    a = _plan(kv_cache_memory_bytes=40 * GiB, gpu_memory_utilization=0.5)
    b = _plan(kv_cache_memory_bytes=40 * GiB, gpu_memory_utilization=0.95)
    # Llama-3-8B: 128 KiB of KV per token (the default block: 16 tokens through 0.33, 64 from 0.34)
    assert a.bytes_per_block == a.settings.block_size * 128 * 1024
    assert a.num_blocks == b.num_blocks == 40 * GiB // a.bytes_per_block
    assert a.verdict == "fits"


def test_kv_cache_memory_bytes_too_large_warns() -> None:
    r = _plan(kv_cache_memory_bytes=70 * GiB)
    assert any("exceed the card" in w for w in r.warnings)
    assert r.ledger.bytes_of("slack") < 0


def test_tokens_formula_changed_at_0_20_1() -> None:
    # max_model_len not a multiple of block_size: int(concurrency × len) differs from blocks × block_size
    # (_report_kv_cache_config: [0.20.0] kv_cache_utils.py:1694-1697, [0.20.1] :1706).
    for version in ("0.33.0", "0.26.0", "0.20.1"):
        new = plan_vllm(LLAMA, H100, ServeSettings(max_model_len=8008, engine_version=version))
        assert new.kv_tokens == int(new.num_blocks / new.blocks_per_request * 8008)
    old = plan_vllm(LLAMA, H100, ServeSettings(max_model_len=8008, engine_version="0.20.0"))
    assert old.kv_tokens == old.num_blocks * 16 != int(old.num_blocks / old.blocks_per_request * 8008)


def test_pipeline_parallel_min_over_stages() -> None:
    m = load_model("meta-llama/Llama-3.1-70B-Instruct")
    r = plan_vllm(
        m, H100, ServeSettings(max_model_len=8192, tensor_parallel_size=2, pipeline_parallel_size=3)
    )
    # 80 layers over 3 stages → (27, 27, 26) (the remainder goes to the stages before the last); the last stage
    # also runs the lm_head and the sampler warm-up, so it has the fewest blocks and binds.
    assert any("Pipeline stages hold [27, 27, 26]" in n for n in r.explanations)
    assert r.binding_stage == 2
    assert r.bytes_per_block == 26 * bytes_per_block(m, block_size=r.settings.block_size, tp=2) // 80


def test_v0_sizes_hybrid_layers_as_full_attention() -> None:
    gemma = load_model("google/gemma-3-27b-it")
    assert kv_view_of_model(gemma, "0.7.3").num_sliding_layers == 0
    assert kv_view_of_model(gemma, "0.33.0") is gemma
    new = plan_vllm(gemma, H100, ServeSettings(max_model_len=32768))
    old = plan_vllm(gemma, H100, ServeSettings(max_model_len=32768, engine_version="0.8.5"))
    # Window groups are capped: one request needs fewer bytes with the hybrid manager.
    assert new.blocks_per_request * new.bytes_per_block < old.blocks_per_request * old.bytes_per_block
    # groups of 10 layers vs all 62 (per token: the default block is 64 tokens from 0.34, 16 before)
    assert new.bytes_per_block * 62 * old.settings.block_size == old.bytes_per_block * 10 * new.settings.block_size


def test_mla_block_size_on_hopper_and_replicated_kv() -> None:
    v2 = load_model("deepseek-ai/DeepSeek-V2-Lite-Chat")
    r1 = plan_vllm(v2, H100, ServeSettings(max_model_len=8192))
    r2 = plan_vllm(v2, H100, ServeSettings(max_model_len=8192, tensor_parallel_size=2))
    assert r1.block_size == 64
    assert r1.kv_bytes_per_token == r2.kv_bytes_per_token  # MLA is not sharded by TP


def test_v0_charges_nccl_with_tp() -> None:
    m = load_model("meta-llama/Llama-3.1-70B-Instruct")
    v0 = plan_vllm(m, H100, ServeSettings(max_model_len=8192, tensor_parallel_size=4, engine_version="0.6.4"))
    v1 = plan_vllm(m, H100, ServeSettings(max_model_len=8192, tensor_parallel_size=4, engine_version="0.8.5"))
    assert v0.ledger.bytes_of("non_torch") > v1.ledger.bytes_of("non_torch") + 2 * GiB


def test_free_memory_accounts_for_other_tenants() -> None:
    r = _plan(free_memory_bytes=70 * GiB, gpu_memory_utilization=0.8)
    assert r.ledger.bytes_of("other_processes") == H100.cuda_total_bytes - 70 * GiB
    assert r.verdict == "fits"


def test_plan_both_attaches_sglang_and_gap() -> None:
    r = plan(LLAMA, H100, ServeSettings(engine="both", max_model_len=8192))
    assert r.engine == "vllm" and r.sglang is not None and r.gap
    assert sum(item.bytes for item in r.gap) == r.kv_cache_bytes - r.sglang.kv_cache_bytes


def test_utilization_table_has_the_users_value() -> None:
    r = _plan(gpu_memory_utilization=0.93)
    current = [row for row in r.utilization_table if row.current]
    assert len(current) == 1 and current[0].utilization == 0.93
    assert current[0].num_blocks == r.num_blocks


def test_other_tenants_by_version() -> None:
    # 0.10 →: vLLM's start-up check fails; 0.8–0.9 V1: the tenant's memory comes out of the KV pool; V0 0.7: no
    # check at all, an OOM later.
    checked = _plan(free_memory_bytes=60 * GiB, engine_version="0.10.0", gpu_memory_utilization=0.9)
    assert checked.verdict == "gpu-util-exceeds-free-memory"
    assert checked.verdict_message.startswith("Free memory on device (")
    counted = _plan(free_memory_bytes=60 * GiB, engine_version="0.8.3", gpu_memory_utilization=0.9)
    alone = _plan(engine_version="0.8.3", gpu_memory_utilization=0.9)
    assert counted.verdict == "fits"
    assert alone.kv_cache_bytes - counted.kv_cache_bytes == H100.cuda_total_bytes - 60 * GiB
    unchecked = _plan(free_memory_bytes=60 * GiB, engine_version="0.7.3", gpu_memory_utilization=0.9)
    assert unchecked.verdict == "gpu-util-exceeds-free-memory"
    assert "no start-up check" in unchecked.verdict_message
