"""SGLang sizing rules (vramctl/core/engines/sglang.py) against ../shared/reference/sglang.md and the seed chapter."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.core.engines import sglang as S
from vramctl.core.errors import BadInputError
from vramctl.core.ledger import ACTIVATION_PEAK, CUDA_GRAPH, KV_CACHE, SLACK, WEIGHTS
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import FULL_ATTENTION, SLIDING_ATTENTION, GpuSpec, ModelSpec
from vramctl.core.units import GiB, MiB
from vramctl.registry import load_gpu, load_model


def card(smi_mib: int, cuda_gib: float | None = None, name: str = "card") -> GpuSpec:
    return GpuSpec(
        name=name,
        display_name=name,
        cuda_total_bytes=int((cuda_gib if cuda_gib is not None else smi_mib / 1024 * 0.994) * GiB),
        nvidia_smi_total_mib=smi_mib,
        hbm_bandwidth_bytes_per_s=1e12,
        pcie_generation=5,
        pcie_lanes=16,
        host_link_bytes_per_s=64e9,
        dense_bf16_flops=1e15,
    )


LLAMA = load_model("llama-3-8b")
H100 = load_gpu("h100-sxm")
SG = ServeSettings(engine="sglang")


def sg(**kw: object) -> ServeSettings:
    return SG.with_changes(**kw)


# --- sglang.md §1.7 worked defaults, exactly -------------------------------------------------------------
@pytest.mark.parametrize(
    ("smi", "tp", "version", "reserved", "mfs"),
    [
        (81559, 1, "0.5.18", 13904, 0.830),
        (81559, 2, "0.5.18", 14032, 0.828),  # llm-d PR #1921 observed 0.828
        (81559, 8, "0.5.18", 15312, 0.812),
        (143771, 1, "0.5.18", 13904, 0.903),
        (143771, 8, "0.5.18", 15312, 0.893),
        (40960, 1, "0.5.18", 7248, 0.823),
        (46068, 1, "0.5.18", 7248, 0.843),
        (24564, 1, "0.5.18", 4096, 0.833),
        (24564, 1, "0.5.23", 7280, 0.704),
        (183359, 1, "0.5.18", 26832, 0.854),
    ],
)
def test_worked_defaults_section_1_7(smi: int, tp: int, version: str, reserved: int, mfs: float) -> None:
    got, reserve = S.worked_defaults(smi, tp, version=version)
    assert reserve.total_mib == reserved
    assert got == mfs


def test_worked_defaults_post_capture_and_mla() -> None:
    mfs, reserve = S.worked_defaults(81559, 1, post_capture=True)
    assert (reserve.branch, reserve.total_mib, mfs) == ("post-capture", 1664, 0.980)
    mfs, reserve = S.worked_defaults(81559, 8, mla=True)
    assert reserve.total_mib == 512 + 12288 + 1024 + 1024 + 1536 == 16384
    assert mfs == 0.799


def test_seed_h100_reserve_512_12288_128_g() -> None:
    """Seed: 'on our 80 GB card with chunked_prefill_size = 8192 the formula gives 512 + 12288 + 128 + G MB'."""
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18"))
    r = plan.reserve
    assert r is not None
    assert (r.metadata_mib, r.activation_mib, r.parallel_mib) == (512, 12288, 128)
    assert dict(r.graph_parts) == {"decode_graph": 512, "prefill_graph": 8 * 58}
    assert not r.floor_applied  # already above the 10 GiB floor
    assert plan.mem_fraction_static == 0.830
    # The seed writes (81920 − reserved) / 81920: the same 0.830 after rounding.
    assert round((81920 - r.total_mib) / 81920, 3) == 0.830


# --- GPU tiers and graph lists --------------------------------------------------------------------------
def test_bucket_counts() -> None:
    assert [len(S.prefill_graph_buckets(n)) for n in (2048, 4096, 8192, 16384)] == [42, 50, 58, 74]


def test_decode_batch_sizes() -> None:
    sizes = S.decode_graph_batch_sizes(256)
    assert sizes[:6] == (1, 2, 4, 8, 12, 16) and sizes[-1] == 256 and len(sizes) == 36
    assert S.decode_graph_batch_sizes(24)[-1] == 24
    big = S.decode_graph_batch_sizes(512)
    assert 496 in big and 512 in big and 288 in big


@pytest.mark.parametrize(
    ("smi", "tp", "rules", "chunked", "max_bs"),
    [
        (15360, 1, "0.5.18", 2048, 8),
        (24564, 1, "0.5.18", 2048, 24),
        (24564, 4, "0.5.18", 2048, 80),
        (24564, 1, "0.5.23", 4096, 48),
        (24564, 4, "0.5.23", 4096, 160),
        (40960, 1, "0.5.18", 4096, 32),
        (81559, 4, "0.5.18", 8192, 512),
        (143771, 1, "0.5.18", 8192, 256),
        (183359, 1, "0.5.18", 16384, 512),
        (None, 1, "0.5.18", 4096, 160),
    ],
)
def test_gpu_tiers(smi: int | None, tp: int, rules: str, chunked: int, max_bs: int) -> None:
    tier = S.gpu_tier(smi, tp, rules)
    assert (tier.chunked_prefill_size, tier.cuda_graph_max_bs) == (chunked, max_bs)


# --- versions ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "rules"),
    [
        ("0.3.0", "0.4.6.post5"),
        ("0.4.6.post5", "0.4.6.post5"),
        ("0.4.7.post1", "0.5.2"),
        ("0.5.2", "0.5.2"),
        ("0.5.9", "0.5.9"),
        ("0.5.15", "0.5.9"),
        ("0.5.16", "0.5.17"),
        ("0.5.17", "0.5.17"),
        ("0.5.18", "0.5.18"),
        ("0.5.22", "0.5.18"),
        ("0.5.23", "0.5.23"),
        ("0.6.0", "0.5.23"),
    ],
)
def test_rules_for_version(version: str, rules: str) -> None:
    assert S.rules_for_version(version) == rules


def test_bad_version_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="engine-version"):
        S.rules_for_version("latest")


def test_0_4_6_table_h200_matches_sample_110() -> None:
    plan = S.plan_sglang(LLAMA, card(143771, 139.81), sg(engine_version="0.4.6.post5"))
    assert plan.mem_fraction_static == pytest.approx(0.8717961202189594, abs=1e-15)


@pytest.mark.parametrize(("tp", "mfs"), [(1, 0.88), (2, 0.87), (4, 0.85), (8, 0.81), (16, 0.79)])
def test_0_4_6_tp_table(tp: int, mfs: float) -> None:
    big = ModelSpec(**{**LLAMA.__dict__, "num_key_value_heads": 16})
    plan = S.plan_sglang(big, H100, sg(engine_version="0.4.6", tensor_parallel_size=tp))
    assert plan.mem_fraction_static == mfs


def test_0_5_2_table_matches_sample_111() -> None:
    """0.4.7.post1 on an H100 logged 0.874: round((81559 − (9.5 + 0.5)·1024) / 81559, 3)."""
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.4.7.post1"))
    assert plan.reserve is not None and plan.reserve.table_mib == 10240
    assert plan.mem_fraction_static == 0.874


def test_0_5_2_add_ons() -> None:
    opts = S.SglangOptions(speculative_algorithm="STANDALONE", enable_dp_attention=True, dp_size=2)
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.2"), options=opts)
    assert plan.reserve is not None and plan.reserve.total_mib == 10240 + 6 * 1024 + 4 * 1024
    h200 = S.plan_sglang(LLAMA, card(143771, 139.81), sg(engine_version="0.5.2"))
    assert h200.reserve is not None and h200.reserve.table_mib == 12.5 * 1024


def test_0_5_9_no_prefill_graph_reserve_and_speculative_after_floor() -> None:
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.9"))
    assert plan.reserve is not None and plan.reserve.total_mib == 512 + 12288 + 512 + 128
    assert plan.mem_fraction_static == 0.835
    eagle = S.plan_sglang(
        LLAMA, H100, sg(engine_version="0.5.9"), options=S.SglangOptions(speculative_algorithm="EAGLE")
    )
    assert eagle.reserve is not None and eagle.reserve.after_floor_mib == 2048
    ngram = S.plan_sglang(
        LLAMA, H100, sg(engine_version="0.5.9"), options=S.SglangOptions(speculative_algorithm="NGRAM")
    )
    assert ngram.reserve is not None and ngram.reserve.after_floor_mib == 0
    # 0.5.18 dropped the speculative add-ons (draft weights are counted in KV sizing instead).
    new = S.plan_sglang(
        LLAMA, H100, sg(engine_version="0.5.18"), options=S.SglangOptions(speculative_algorithm="EAGLE")
    )
    assert new.reserve is not None and new.reserve.after_floor_mib == 0


def test_unknown_gpu_fallback_by_version() -> None:
    unknown = card(0, 79.18)
    assert S.plan_sglang(LLAMA, unknown, sg(engine_version="0.5.18")).mem_fraction_static == 0.88
    plan = S.plan_sglang(LLAMA, unknown, sg(engine_version="0.5.23"))
    assert (plan.mem_fraction_static, plan.mem_fraction_source, plan.gpu_mem_mib) == (0.95, "fallback", None)
    assert plan.chunked_prefill_size == 4096 and plan.cuda_graph_max_bs == 160


def test_0_5_23_caps_graph_max_bs_at_max_running_requests() -> None:
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.23", max_running_requests=64))
    assert plan.cuda_graph_max_bs == 64
    old = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18", max_running_requests=64))
    assert old.cuda_graph_max_bs == 256


# --- branches of the 0.5.18 heuristic --------------------------------------------------------------------
def test_floor_applies_above_60_gib() -> None:
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18", chunked_prefill_size=2048))
    r = plan.reserve
    assert r is not None and r.floor_applied
    assert r.total_mib == 10240 and r.floor_extra_mib == 10240 - (512 + 3072 + 128 + 512 + 8 * 42)
    small = S.plan_sglang(LLAMA, card(46068, 44.35), sg(engine_version="0.5.18", chunked_prefill_size=2048))
    assert small.reserve is not None and not small.reserve.floor_applied


def test_no_chunked_prefill_uses_max_prefill_tokens() -> None:
    plan = S.plan_sglang(
        LLAMA, H100, sg(engine_version="0.5.18", chunked_prefill_size=-1, max_prefill_tokens=32768)
    )
    assert plan.reserve is not None and plan.reserve.activation_tokens == 32768


def test_disaggregation_decode_activation_tokens() -> None:
    opts = S.SglangOptions(disaggregation_mode="decode")
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18", max_running_requests=4096), options=opts)
    r = plan.reserve
    assert r is not None and r.activation_tokens == 4096
    assert "prefill_graph" not in dict(r.graph_parts)  # decode role: no prefill graph
    spec = S.SglangOptions(disaggregation_mode="decode", speculative_num_draft_tokens=16)
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18"), options=spec)
    assert plan.reserve is not None and plan.reserve.activation_tokens == 256 * 16
    prefill = S.plan_sglang(
        LLAMA, H100, sg(engine_version="0.5.18"), options=S.SglangOptions(disaggregation_mode="prefill")
    )
    assert prefill.reserve is not None and "decode_graph" not in dict(prefill.reserve.graph_parts)


def test_deepep_added_after_the_floor_and_dp_attention() -> None:
    opts = S.SglangOptions(moe_a2a_backend="deepep")
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18", chunked_prefill_size=2048), options=opts)
    r = plan.reserve
    assert r is not None and r.floor_applied and r.after_floor_mib == 2048 and r.total_mib == 10240 + 2048
    assert dict(r.graph_parts)["prefill_graph_deepep"] == 1024
    dp = S.SglangOptions(enable_dp_attention=True, dp_size=8)
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18", tensor_parallel_size=8), options=dp)
    assert plan.reserve is not None
    assert dict(plan.reserve.graph_parts)["dp_attention"] == 512 * 8 * 3 + 512 * 8 * 1.5


def test_disable_cuda_graph_drops_graph_reserve() -> None:
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18", disable_cuda_graph=True))
    assert plan.reserve is not None and plan.reserve.graph_mib == 0 and plan.cuda_graph_bs == ()


def test_mla_prefill_graph_flat_reserve() -> None:
    ds = load_model("deepseek-ai/DeepSeek-V3")
    plan = S.plan_sglang(ds, H100, sg(engine_version="0.5.18", tensor_parallel_size=8))
    assert plan.reserve is not None and dict(plan.reserve.graph_parts)["prefill_graph_mla"] == 1536
    assert plan.mem_fraction_static == 0.799


# --- post-capture sizing --------------------------------------------------------------------------------------
POST = S.SglangOptions(post_capture_kv_sizing=True)


def test_post_capture_floor_by_version() -> None:
    new = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18"), options=POST)
    assert new.post_capture and new.reserve is not None and new.reserve.total_mib == 1536 + 128
    assert new.mem_fraction_static == 0.980
    old = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.17"), options=POST)
    assert old.reserve is not None and old.reserve.total_mib == 512 + 128
    before = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.15"), options=POST)
    assert not before.post_capture and before.mem_fraction_static == 0.835


def test_post_capture_tokens_capped_at_pre_capture_and_headroom_raised() -> None:
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18"), options=POST)
    normal = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18"))
    # Eager decode gap (graph max_bs 256 < max_running_requests): headroom raised to 512 + 12288 + 128 MiB.
    assert any("eager decode gap" in b for b in plan.branch)
    assert 0 < plan.max_total_num_tokens <= plan.profiled_tokens
    assert abs(plan.max_total_num_tokens - normal.max_total_num_tokens) / normal.max_total_num_tokens < 0.05


@pytest.mark.parametrize(
    ("model_name", "kw", "opts", "why"),
    [
        ("deepseek-ai/DeepSeek-V3", {"tensor_parallel_size": 8}, {}, "MLA"),
        ("llama-3-8b", {}, {"dcp_size": 2}, "dcp_size"),
        ("llama-3-8b", {}, {"enable_memory_saver": True}, "memory-saver"),
        ("llama-3-8b", {"disable_cuda_graph": True}, {}, "decode CUDA graph disabled"),
        ("llama-3-8b", {}, {"disable_prefill_graph": True}, "prefill CUDA graph disabled"),
        ("llama-3-8b", {"chunked_prefill_size": -1}, {}, "chunked prefill disabled"),
        ("llama-3-8b", {"max_total_tokens": 4096}, {}, "largest captured"),
        ("llama-3-8b", {}, {"device": "xpu"}, "not cuda"),
    ],
)
def test_post_capture_exclusions(
    model_name: str, kw: dict[str, object], opts: dict[str, object], why: str
) -> None:
    plan = S.plan_sglang(
        load_model(model_name), H100, sg(engine_version="0.5.18", **kw), options=POST.with_changes(**opts)
    )
    assert not plan.post_capture
    assert any(why in b for b in plan.branch), plan.branch


# --- the KV pool ------------------------------------------------------------------------------------------------
def test_kv_formula_with_given_free_memory() -> None:
    """tokens = floor((avail − pre × (1 − mfs)) GiB × 2^30 / cell), as SGLang computes it."""
    pre, avail = int(139.20 * GiB), int(124.23 * GiB)
    mfs = 0.8717961202189594
    opts = S.SglangOptions(free_before_load_bytes=pre, free_after_load_bytes=avail)
    plan = S.plan_sglang(
        LLAMA, card(143771, 139.81), sg(engine_version="0.4.6.post5", mem_fraction_static=mfs), options=opts
    )
    rest = avail / GiB - pre / GiB * (1 - mfs)
    assert plan.max_total_num_tokens == int(rest * GiB) // 131072
    assert plan.weights_bytes == pre - avail
    assert plan.log_lines[0].startswith("KV Cache is allocated. #tokens: ")  # 0.4.x format, no dtype


def test_planning_mode_h100_llama3() -> None:
    plan = S.plan_sglang(LLAMA, H100, SG)
    assert plan.bytes_per_token == 131072
    assert plan.free_before_load_bytes == H100.cuda_total_bytes - 480 * MiB
    kv_gib = plan.free_before_load_bytes / GiB * 0.83 - LLAMA.weight_bytes / GiB
    assert plan.max_total_num_tokens == int(kv_gib * GiB) // 131072
    assert plan.verdict == "fits" and plan.max_running_requests == 4096
    assert plan.log_lines[0].startswith("KV Cache is allocated. dtype: torch.bfloat16, #tokens: ")


@pytest.mark.parametrize("page", [16, 64, 128])
def test_page_alignment(page: int) -> None:
    plan = S.plan_sglang(LLAMA, H100, sg(page_size=page))
    base = S.plan_sglang(LLAMA, H100, SG)
    assert plan.max_total_num_tokens % page == 0
    assert base.max_total_num_tokens - page < plan.max_total_num_tokens <= base.max_total_num_tokens


def test_attention_backend_forces_page_size() -> None:
    ds = load_model("deepseek-ai/DeepSeek-V3")
    plan = S.plan_sglang(
        ds, H100, sg(tensor_parallel_size=8), options=S.SglangOptions(attention_backend="flashmla")
    )
    assert plan.page_size == 64 and plan.max_total_num_tokens % 64 == 0


def test_max_total_tokens_cap_and_larger_cap_note() -> None:
    capped = S.plan_sglang(LLAMA, H100, sg(max_total_tokens=100_000))
    assert capped.max_total_num_tokens == 100_000 and capped.kv_cache_bytes == 100_000 * 131072
    big = S.plan_sglang(LLAMA, H100, sg(max_total_tokens=10_000_000))
    assert big.max_total_num_tokens == big.profiled_tokens
    assert any("larger than the profiled value" in n for n in big.notes)


def test_cell_sizes() -> None:
    ds = load_model("deepseek-ai/DeepSeek-V3")
    assert S.cell_size(ds, sg(tensor_parallel_size=8)) == (512 + 64) * 61 * 2 == 70272
    assert S.cell_size(LLAMA, sg(tensor_parallel_size=2)) == 65536
    assert S.cell_size(LLAMA, sg(tensor_parallel_size=16)) == 1 * 2 * 128 * 32 * 2  # heads replicated
    assert S.cell_size(LLAMA, sg(kv_cache_dtype="fp8_e4m3")) == 65536
    assert S.cell_size(LLAMA, sg(pipeline_parallel_size=3)) == 8 * 2 * 128 * 11 * 2
    with pytest.raises(BadInputError, match="kv-cache-dtype"):
        S.cell_size(LLAMA, sg(kv_cache_dtype="int3"))


def test_hybrid_swa_pools_for_gpt_oss() -> None:
    oss = load_model("openai/gpt-oss-20b")
    plan = S.plan_sglang(oss, H100, SG)
    assert plan.full_layer_tokens is not None and plan.swa_layer_tokens is not None
    full_layers, swa_layers = oss.num_full_layers, oss.num_sliding_layers
    assert plan.swa_layer_tokens == int(plan.full_layer_tokens * 0.8)
    per_layer = plan.bytes_per_token // oss.num_hidden_layers
    # the pool bytes never exceed the uniform pool it was carved from
    assert plan.kv_cache_bytes <= plan.profiled_tokens * plan.bytes_per_token
    assert plan.kv_cache_bytes == per_layer * (
        plan.full_layer_tokens * full_layers + plan.swa_layer_tokens * swa_layers
    )
    off = S.plan_sglang(oss, H100, SG, options=S.SglangOptions(disable_hybrid_swa_memory=True))
    assert off.full_layer_tokens is None


def test_sliding_window_models_get_full_length_kv() -> None:
    gemma = load_model("google/gemma-3-27b-it")
    plan = S.plan_sglang(gemma, H100, SG)
    assert plan.full_layer_tokens is None
    assert any("full-length KV" in n for n in plan.notes)
    mixed = ModelSpec(
        **{**LLAMA.__dict__, "layer_types": (SLIDING_ATTENTION, FULL_ATTENTION) * 16, "sliding_window": 4096}
    )
    assert S.plan_sglang(mixed, H100, SG).bytes_per_token == 131072


# --- max_running_requests (sglang.md §1.8) ----------------------------------------------------------------
def test_default_max_running_requests() -> None:
    assert S.default_max_running_requests(444500, 131072, "0.4.6.post5") == 2049  # sample 021
    assert S.default_max_running_requests(871371, 8192, "0.4.6.post5") == 4097  # sample 110
    assert S.default_max_running_requests(871371, 8192, "0.5.18") == 4096
    assert S.default_max_running_requests(3000, 8192, "0.5.18") == 1500  # tokens // 2
    assert S.default_max_running_requests(871371, 8192, "0.5.18", user_value=10000) == 10000
    assert S.default_max_running_requests(10000, 8192, "0.5.18", user_value=10000) == 5000
    assert S.default_max_running_requests(871371, 8192, "0.5.18", user_value=64, dp_size=4) == 16


# --- failures ---------------------------------------------------------------------------------------------------
def test_no_kv_cache_memory_message_by_version() -> None:
    plan = S.plan_sglang(LLAMA, H100, sg(mem_fraction_static=0.15))
    assert plan.verdict == "no-kv-cache-memory" and plan.max_total_num_tokens == 0
    assert (
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.150"
        in plan.message
    )
    assert "Raise --mem-fraction-static above 0.19" in plan.message
    old = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.9", mem_fraction_static=0.15))
    assert old.message.startswith("Not enough memory. Please try to increase --mem-fraction-static")
    assert old.ledger.bytes_of(KV_CACHE) == 0


def test_weights_do_not_fit() -> None:
    big = load_model("meta-llama/Llama-3.1-70B-Instruct")
    plan = S.plan_sglang(big, H100, SG)
    assert plan.verdict == "weights-do-not-fit" and "--tp-size 2" in plan.message
    assert S.plan_sglang(big, H100, sg(tensor_parallel_size=4)).verdict == "fits"


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"mem_fraction_static": 1.2}, "--mem-fraction-static"),
        ({"mem_fraction_static": 0.0}, "--mem-fraction-static"),
        ({"max_total_tokens": 0}, "--max-total-tokens"),
        ({"page_size": -1}, "--page-size"),
        ({"tensor_parallel_size": 0}, "--tp-size"),
        (
            {"max_model_len": 100_000},
            "--context-length 100000: above the model's max_position_embeddings 8192",
        ),
    ],
)
def test_bad_settings(kw: dict[str, object], flag: str) -> None:
    with pytest.raises(BadInputError, match=flag):
        S.plan_sglang(LLAMA, H100, sg(**kw))


# --- ledger and JSON --------------------------------------------------------------------------------------------
def test_ledger_terms_and_json_keys() -> None:
    plan = S.plan_sglang(LLAMA, H100, SG)
    terms = plan.ledger.as_mapping()
    assert sum(t.bytes for t in plan.ledger.terms) == H100.cuda_total_bytes
    assert terms[WEIGHTS].bytes == LLAMA.weight_bytes
    assert terms[ACTIVATION_PEAK].bytes == 12288 * MiB and terms[CUDA_GRAPH].bytes == 976 * MiB
    assert terms[KV_CACHE].bytes == plan.kv_cache_bytes and terms[SLACK].bytes >= 0
    data = plan.to_json()
    for key in (
        "mem_fraction_static",
        "kv_cache_bytes",
        "max_total_num_tokens",
        "max_running_requests",
        "chunked_prefill_size",
        "cuda_graph_max_bs",
        "reserved_mib",
        "bytes_per_token",
        "page_size",
        "version",
        "verdict",
        "terms",
        "branch",
    ):
        assert key in data
    assert data["reserved_mib"] == 13904


def test_gpu_memory_override_shifts_smi_total() -> None:
    plan = S.plan_sglang(LLAMA, H100, sg(gpu_memory_bytes=H100.cuda_total_bytes + 1024 * MiB))
    assert plan.gpu_mem_mib == 81559 + 1024
    assert plan.capacity_bytes == H100.cuda_total_bytes + 1024 * MiB


def test_other_tenants_reduce_free_before_load() -> None:
    free = H100.cuda_total_bytes - 10 * GiB
    plan = S.plan_sglang(LLAMA, H100, sg(free_memory_bytes=free))
    assert plan.ledger.bytes_of("other_processes") == 10 * GiB
    assert plan.free_before_load_bytes == free - 480 * MiB


# --- properties -----------------------------------------------------------------------------------------------
MODELS = [
    load_model(n)
    for n in ("llama-3-8b", "Qwen/Qwen3-0.6B", "deepseek-ai/DeepSeek-V2-Lite-Chat", "openai/gpt-oss-20b")
]
VERSIONS = ["0.4.6.post5", "0.5.2", "0.5.9", "0.5.17", "0.5.18", "0.5.23"]


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    smi=st.integers(min_value=8 * 1024, max_value=200 * 1024),
    tp=st.sampled_from([1, 2, 4, 8]),
    version=st.sampled_from(VERSIONS),
    mfs=st.one_of(st.none(), st.floats(min_value=0.05, max_value=0.99)),
    page=st.sampled_from([None, 1, 16, 64]),
    chunked=st.one_of(st.none(), st.sampled_from([-1, 1024, 4096, 16384])),
    post=st.booleans(),
    pp=st.sampled_from([1, 1, 2, 3]),
)
def test_ledger_sums_to_capacity(
    model: ModelSpec,
    smi: int,
    tp: int,
    version: str,
    mfs: float | None,
    page: int | None,
    chunked: int | None,
    post: bool,
    pp: int,
) -> None:
    gpu = card(smi)
    s = sg(
        engine_version=version,
        tensor_parallel_size=tp,
        mem_fraction_static=mfs,
        page_size=page,
        chunked_prefill_size=chunked,
        pipeline_parallel_size=pp,
    )
    plan = S.plan_sglang(model, gpu, s, options=S.SglangOptions(post_capture_kv_sizing=post))
    assert sum(t.bytes for t in plan.ledger.terms) == plan.capacity_bytes == gpu.cuda_total_bytes
    assert plan.max_total_num_tokens >= 0 and plan.max_total_num_tokens % plan.page_size == 0
    assert plan.kv_cache_bytes <= max(0, plan.kv_budget_bytes) + plan.bytes_per_token
    assert (plan.verdict == "fits") == (
        plan.max_total_num_tokens > 0 and plan.weights_bytes < plan.free_before_load_bytes
    )


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    smi=st.integers(min_value=16 * 1024, max_value=200 * 1024),
    tp=st.sampled_from([1, 2, 8]),
    a=st.floats(min_value=0.05, max_value=0.99),
    b=st.floats(min_value=0.05, max_value=0.99),
    page=st.sampled_from([1, 64]),
)
def test_bigger_fraction_never_fewer_tokens(
    model: ModelSpec, smi: int, tp: int, a: float, b: float, page: int
) -> None:
    lo, hi = sorted((a, b))
    gpu = card(smi)
    small = S.plan_sglang(model, gpu, sg(tensor_parallel_size=tp, mem_fraction_static=lo, page_size=page))
    large = S.plan_sglang(model, gpu, sg(tensor_parallel_size=tp, mem_fraction_static=hi, page_size=page))
    assert large.max_total_num_tokens >= small.max_total_num_tokens
    assert large.kv_cache_bytes >= small.kv_cache_bytes


@settings(max_examples=60, deadline=None)
@given(smi=st.integers(min_value=8 * 1024, max_value=260 * 1024), tp=st.sampled_from([1, 2, 4, 8, 16]))
def test_default_fraction_is_rounded_complement_of_reserve(smi: int, tp: int) -> None:
    mfs, reserve = S.worked_defaults(smi, tp)
    assert mfs == round((smi - reserve.total_mib) / smi, 3)
    if smi > 60 * 1024:
        assert reserve.total_mib >= 10240
    assert math.isfinite(mfs)


def test_pipeline_parallel_binding_stage() -> None:
    """PP ranks all-reduce MIN the token count: the stage with the most layers + the embedding binds."""
    layout = S.stage_layout(LLAMA, 1, 3)
    assert [layers for layers, _ in layout] == [11, 11, 10]
    assert sum(w for _, w in layout) == pytest.approx(LLAMA.weight_bytes, abs=3)
    plan = S.plan_sglang(LLAMA, H100, sg(pipeline_parallel_size=3))
    per_stage = []
    for layers, weights in layout:
        rest = (plan.free_before_load_bytes - weights) / GiB - plan.free_before_load_bytes / GiB * (
            1 - plan.mem_fraction_static
        )
        per_stage.append(int(rest * GiB) // (8 * 2 * 128 * layers * 2))
    assert plan.max_total_num_tokens == min(per_stage)
    assert plan.weights_bytes == layout[0][1] and plan.bytes_per_token == 8 * 2 * 128 * 11 * 2
    assert any("pipeline stage 0 binds" in b for b in plan.branch)
    assert sum(t.bytes for t in plan.ledger.terms) == H100.cuda_total_bytes


@settings(max_examples=60, deadline=None)
@given(model=st.sampled_from(MODELS), pp=st.sampled_from([1, 2, 3, 4]), tp=st.sampled_from([1, 2, 4]))
def test_more_tp_never_more_weights_per_rank(model: ModelSpec, pp: int, tp: int) -> None:
    assert S.weights_per_rank_bytes(model, tp * 2, pp) <= S.weights_per_rank_bytes(model, tp, pp)
    layout = S.stage_layout(model, tp, pp)
    assert sum(layers for layers, _ in layout) == model.num_hidden_layers


def test_eagle_draft_grows_the_cell_and_charges_draft_weights() -> None:
    opts = S.SglangOptions(
        speculative_algorithm="EAGLE", speculative_draft_layers=1, speculative_draft_weight_bytes=1 * GiB
    )
    plan = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18"), options=opts)
    base = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.18"))
    assert plan.bytes_per_token == 131072 + 131072 // 32
    assert plan.weights_bytes == base.weights_bytes + GiB
    assert plan.max_total_num_tokens < base.max_total_num_tokens
    old = S.plan_sglang(LLAMA, H100, sg(engine_version="0.5.9"), options=opts)
    assert old.weights_bytes == base.weights_bytes  # 0.5.9 reserves +2 GiB instead
    assert old.reserve is not None and old.reserve.after_floor_mib == 2048
