"""vLLM 0.34.0 against 0.33.0: the rules differ where the 0.34.0 sources differ, and only there.

What 0.34.0 changed that vramctl models (each cited in vramctl.core.engines.vllm.rules):
- `CacheConfig.DEFAULT_BLOCK_SIZE` 16 → 64 (`vllm/config/cache.py:185`);
- the extensible KV cache, on by default on CUDA / ROCm (`vllm/config/vllm.py:3180-3263`): the pool is sized after
  warm-up and graph capture (`measure_kv_cache_bytes`, `vllm/v1/worker/extensible_kv_cache.py:592-618`), the default
  utilisation is 1.0 (`vllm/config/cache.py:494-501`) and `request_memory` skips the free-memory check
  (`vllm/v1/worker/utils.py:783-797`);
- the hint of the no-cache / one-request / auto-fit errors (`vllm/v1/core/kv_cache_planning.py:63-132`, `:1427-1514`).
"""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from vramctl.cli.main import main
from vramctl.core.engines import vllm as V
from vramctl.core.engines.version_rules import RuleContext, changed_rules
from vramctl.core.settings import LATEST_VLLM_VERSION
from vramctl.core.units import GiB
from vramctl.registry import load_gpu


def _plan(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> dict:  # type: ignore[type-arg]
    assert main(["plan", "--json", *args]) == code
    return dict(json.loads(capsys.readouterr().out))


def test_latest_is_034() -> None:
    assert LATEST_VLLM_VERSION == "0.34.0"
    assert V.rules_for("0.34.0").known_range == "known"
    assert V.rules_for("0.35.0").known_range == "newer"


def test_rules_differ_only_where_the_sources_do() -> None:
    old, new = V.rules_for("0.33.0"), V.rules_for("0.34.0")
    differ = {f.name for f in fields(old) if getattr(old, f.name) != getattr(new, f.name)}
    assert differ == {"version", "extensible_kv_cache", "block_size_default"}
    assert (old.block_size_default, new.block_size_default) == (16, 64)
    assert (old.extensible_kv_cache, new.extensible_kv_cache) == (False, True)
    # the profile estimate's own default stays 0.92 (DEFAULT_GPU_MEMORY_UTILIZATION, vllm/config/cache.py:186)
    assert old.default_utilization == new.default_utilization == 0.92


def test_diff_table_names_the_three_changed_rules() -> None:
    ctx = RuleContext(gpu=load_gpu("h100-sxm"), defaults_used=frozenset({"gpu_memory_utilization", "block_size"}))
    keys = {c.key for c in changed_rules("vllm", "0.33.0", "0.34.0", ctx)}
    assert keys == {"default-utilization", "kv-sizing", "default-block-size"}
    assert not changed_rules("vllm", "0.34.0", "0.34.0", ctx)


def test_extensible_pool_follows_measure_kv_cache_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    """kv = min(requested − used, init free − used − margin) − reserve, with used = weights + non-torch growth +
    graph pool, reserve = activation peak + graph estimate, margin = max(1 GiB, 0.75 × reserve); u = 1.0, so
    requested = total and the second bound binds (init free = total − what predates the snapshot)."""
    d = _plan(capsys, "llama-3-8b", "--gpu", "h100-sxm")
    s, t = d["settings"], d["terms"]
    assert d["engine_version"] == "0.34.0" and s["gpu_memory_utilization"] == 1.0 and s["extensible_kv_cache"]
    assert d["block_size"] == 64
    total = d["capacity_bytes"]
    assert d["requested_bytes"] == total
    weights, act, graph = t["weights"]["bytes"], t["activation_peak"]["bytes"], t["cuda_graph"]["bytes"]
    non_torch_all = t["non_torch"]["bytes"]  # growth + what predates the init snapshot (CUDA context, cuBLAS)
    reserve = act + graph
    margin = max(GiB, int(reserve * 0.75))
    assert d["kv_cache_bytes"] == total - weights - non_torch_all - graph - margin - reserve
    assert sum(term["bytes"] for term in t.values()) == total


def test_without_the_extensible_cache_034_sizes_as_033(capsys: pytest.CaptureFixture[str]) -> None:
    old = _plan(capsys, "llama-3-8b", "--gpu", "h100-sxm", "--engine-version", "0.33.0")
    off = _plan(capsys, "llama-3-8b", "--gpu", "h100-sxm", "--no-enable-extensible-kv-cache")
    assert off["settings"]["gpu_memory_utilization"] == 0.92 and "extensible_kv_cache" not in off["settings"]
    assert off["kv_cache_bytes"] == old["kv_cache_bytes"]
    assert (old["block_size"], off["block_size"]) == (16, 64)
    # the same tokens up to the coarser block
    assert abs(off["kv_tokens"] - old["kv_tokens"]) <= 64


def test_explicit_utilization_caps_the_extensible_pool(capsys: pytest.CaptureFixture[str]) -> None:
    """Below 1.0 the first bound (requested − used − reserve) binds: each 0.01 of u moves the pool by 1 % of the card
    until the device bound takes over."""
    a = _plan(capsys, "llama-3-8b", "--gpu", "h100-sxm", "--gpu-memory-utilization", "0.90")
    b = _plan(capsys, "llama-3-8b", "--gpu", "h100-sxm", "--gpu-memory-utilization", "0.92")
    assert b["kv_cache_bytes"] - a["kv_cache_bytes"] == b["requested_bytes"] - a["requested_bytes"]
    full = _plan(capsys, "llama-3-8b", "--gpu", "h100-sxm")
    assert a["kv_cache_bytes"] < b["kv_cache_bytes"] < full["kv_cache_bytes"]


def test_rocm_keeps_a_3_gib_margin(capsys: pytest.CaptureFixture[str]) -> None:
    d = _plan(capsys, "llama-3-8b", "--gpu", "mi300x", "--max-model-len", "8192", "--max-num-seqs", "16")
    t = d["terms"]
    reserve = t["activation_peak"]["bytes"] + t["cuda_graph"]["bytes"]
    assert reserve * 0.75 < 3 * GiB  # the floor binds (KV_CACHE_MARGIN_FLOOR_BYTES, 3 GiB on ROCm)
    used = t["weights"]["bytes"] + t["non_torch"]["bytes"] + t["cuda_graph"]["bytes"]
    assert d["kv_cache_bytes"] == d["capacity_bytes"] - used - 3 * GiB - reserve


def test_the_flag_is_refused_where_vllm_refuses_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--enable-extensible-kv-cache", "--engine-version", "0.33.0"]) == 2
    assert "has no extensible KV cache (added in 0.34.0)" in capsys.readouterr().err
    assert main(["plan", "--enable-extensible-kv-cache", "--kv-cache-memory-bytes", "20GiB"]) == 2
    assert "which kv_cache_memory_bytes overrides" in capsys.readouterr().err
    # --kv-cache-memory-bytes alone turns it off, as vLLM does
    d = _plan(capsys, "--kv-cache-memory-bytes", "20GiB")
    assert "extensible_kv_cache" not in d["settings"] and d["settings"]["gpu_memory_utilization"] == 0.92


def test_034_wordings_of_the_kv_errors(capsys: pytest.CaptureFixture[str]) -> None:
    d = _plan(capsys, "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "131072", code=1)
    msg = d["verdict_message"]
    assert msg.startswith("To serve at least one request with the model's max seq len (131072)")
    assert (
        "The extensible KV cache already takes all device memory left after the model, its activations, CUDA graphs "
        "and warmup; decrease `max_model_len` or `max_num_seqs`, or the model needs a device with more memory."
    ) in msg
    assert msg.endswith(
        "Decreasing `max_model_len` also reduces what is needed. "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    u = _plan(capsys, "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "131072", "--gpu-memory-utilization", "0.9",
              code=1)
    assert "within `gpu_memory_utilization`=0.9; increase it (with the extensible KV cache it defaults to 1.0)" in (
        u["verdict_message"]
    )
    off = _plan(capsys, "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "131072", "--no-enable-extensible-kv-cache",
                code=1)
    assert "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU" in (
        off["verdict_message"]
    )
    old = _plan(capsys, "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "131072", "--engine-version", "0.33.0",
                code=1)
    assert "(which also controls CPU memory on the CPU backend) or decreasing `max_model_len`" in (
        old["verdict_message"]
    )


def test_hint_and_messages_are_the_sources() -> None:
    assert V.kv_memory_hint(extensible=True, utilization=1.0, after_warmup=False) == (
        "The extensible KV cache already takes all device memory left after the model and its activations; "
        "decrease `max_model_len` or `max_num_seqs`, or the model needs a device with more memory."
    )
    assert V.no_cache_memory_error("0.34.0", "H.") == (
        "No available memory for the cache blocks. H. "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    # 0.33 keeps its own wording whatever the hint
    assert V.no_cache_memory_error("0.33.0", "H.") == V.no_cache_memory_error("0.33.0")


def test_auto_fit_is_logged_after_warmup(capsys: pytest.CaptureFixture[str]) -> None:
    d = _plan(capsys, "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "auto")
    assert d["explanations"][0] == (
        "Auto-fit max_model_len: using max_model_len=131072, which fits in the KV cache memory left after CUDA graph "
        f"capture and warmup ({d['explanations'][0].split('(')[-1]}"
    )
    assert d["explanations"][0].endswith(" GiB GPU).")


def test_default_block_size_by_version_and_backend() -> None:
    h100, b200, a100 = load_gpu("h100-sxm"), load_gpu("b200"), load_gpu("a100-80gb")
    from vramctl.core.plan import default_block_size_for
    from vramctl.registry import load_model

    llama, mla = load_model("llama-3-8b"), load_model("deepseek-v2-lite")
    assert [default_block_size_for(llama, g, "0.33.0") for g in (h100, b200, a100)] == [16, 16, 16]
    assert [default_block_size_for(llama, g, "0.34.0") for g in (h100, b200, a100)] == [64, 64, 64]
    # FlashMLA (64) and CUTLASS MLA (128) keep their own: max(backend's, default)
    assert [default_block_size_for(mla, g, "0.34.0") for g in (h100, b200, a100)] == [64, 128, 64]


def test_utilisation_trade_replans_each_row(capsys: pytest.CaptureFixture[str]) -> None:
    d = _plan(capsys, "llama-3-8b", "--gpu", "h100-sxm")
    rows = {r["utilization"]: r for r in d["utilization_table"]}
    assert rows[1.0]["kv_bytes"] == d["kv_cache_bytes"]
    # at 0.90 the requested bound binds: the pool is the 0.90 replan's, not requested − a fixed non-KV sum
    at = _plan(capsys, "llama-3-8b", "--gpu", "h100-sxm", "--gpu-memory-utilization", "0.9")
    assert rows[0.9]["kv_bytes"] == at["kv_cache_bytes"]
    # what each row keeps free: the card less the pool and the terms (the outside-the-budget part included)
    terms = sum(at["terms"][k]["bytes"] for k in ("weights", "activation_peak", "non_torch", "cuda_graph"))
    assert rows[0.9]["held_back_bytes"] == at["capacity_bytes"] - at["kv_cache_bytes"] - terms + at[
        "outside_budget_bytes"
    ]


def test_weights_must_fit_what_is_free_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    # u = 1.0 requests the whole card and no check bounds it by free memory: the weights meet the free memory
    new = _plan(capsys, "llama-3-70b", "--gpu", "h100-sxm", code=1)
    assert new["verdict"] == "weights-do-not-fit"
    free = (new["capacity_bytes"] - new["outside_budget_bytes"]) / GiB
    assert f"exceed the free memory ({free:.2f} GiB)" in new["verdict_message"]
    old = _plan(capsys, "llama-3-70b", "--gpu", "h100-sxm", "--engine-version", "0.33.0", code=1)
    assert "exceed the requested budget (72.85 GiB)" in old["verdict_message"]


def test_diff_without_the_extensible_cache_names_only_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["diff", "llama-3-8b", "--from", "0.33", "--to", "0.34", "--json"]
    assert main(args) == 0
    keys = {r["key"] for r in json.loads(capsys.readouterr().out)["rules"]}
    assert keys == {"default-utilization", "kv-sizing", "default-block-size"}
    assert main([*args, "--to-flags=--no-enable-extensible-kv-cache"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {r["key"] for r in d["rules"]} == {"default-block-size"}
    assert d["kv_change_bytes"] == 0
