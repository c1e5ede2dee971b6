"""vLLM's start-up choices the flags do not show (vramctl/core/engines/vllm_runtime.py), each rule against the
version boundaries read from vLLM's source, and what they do to the plan."""

from __future__ import annotations

import pytest

from vramctl.core.engines import vllm_runtime as RT
from vramctl.core.plan import plan
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_gpu, load_model

H100 = load_gpu("h100-sxm")
T4 = load_gpu("t4")
RTX4090 = load_gpu("rtx-4090")


@pytest.mark.parametrize(
    ("version", "env", "kind"),
    [
        ("0.8.5", None, "pytorch"),  # refuses FlashInfer >= 0.2.3
        ("0.10.1", None, "pytorch"),  # flashinfer is an extra of the wheel
        ("0.10.1", True, "flashinfer"),
        ("0.11.0", False, "pytorch"),
        ("0.16.0", None, "pytorch"),  # opt-in 0.12 - 0.20
        ("0.20.0", True, "flashinfer"),
        ("0.21.0", None, "flashinfer+native"),  # default on, and the PyTorch path warmed too
        ("0.33.0", False, "pytorch"),
    ],
)
def test_sampler_by_version_and_environment(version: str, env: bool | None, kind: str) -> None:
    assert RT.sampler_kind(version, v0_engine=False, gpu=H100, flashinfer_env=env)[0] == kind


def test_v0_sampler_and_old_cards() -> None:
    assert RT.sampler_kind("0.7.3", v0_engine=True, gpu=H100, flashinfer_env=None)[0] == "pytorch"
    assert RT.sampler_kind("0.7.3", v0_engine=True, gpu=H100, flashinfer_env=True)[0] == "flashinfer"
    assert RT.sampler_kind("0.33.0", v0_engine=False, gpu=T4, flashinfer_env=None)[0] == "pytorch"


@pytest.mark.parametrize(
    ("version", "kwargs", "reason"),
    [
        ("0.8.2", {"quantization": "bitsandbytes"}, "bitsandbytes"),
        ("0.8.3", {"quantization": "bitsandbytes"}, None),
        ("0.9.2", {"quantization": "gguf"}, "GGUF"),
        ("0.10.1", {"quantization": "gguf"}, None),
        ("0.8.2", {"enable_lora": True}, "LoRA"),
        ("0.8.2", {"enable_lora": True, "use_v1_env": True}, None),
        ("0.8.5", {"enable_lora": True}, None),
        ("0.8.1", {"pipeline_parallel_size": 2}, "pipeline"),
        ("0.8.5", {"dtype": "float32"}, "float32"),
        ("0.8.5", {"kv_cache_dtype": "fp8", "compute_capability": "8.0"}, "fp8"),
        ("0.8.5", {"kv_cache_dtype": "fp8", "compute_capability": "9.0"}, None),
        ("0.10.1", {"compute_capability": "7.5"}, "compute capability"),
        ("0.11.0", {"compute_capability": "7.5"}, None),
    ],
)
def test_v0_fallbacks_of_0_8_to_0_10(version: str, kwargs: dict[str, object], reason: str | None) -> None:
    args: dict[str, object] = {"compute_capability": "9.0", **kwargs}
    got = RT.v1_fallback_reason(version, **args)  # type: ignore[arg-type]
    assert (got is None) if reason is None else (got is not None and reason in got), got


def test_custom_all_reduce_by_card_and_flag() -> None:
    assert RT.custom_all_reduce(2, H100).custom
    assert RT.custom_all_reduce(8, H100).custom
    assert not RT.custom_all_reduce(2, H100, disabled=True).custom
    assert not RT.custom_all_reduce(16, H100).custom  # world size
    assert not RT.custom_all_reduce(4, load_gpu("l40s")).custom  # PCIe only
    assert not RT.custom_all_reduce(2, RTX4090).custom  # no peer access


def test_lora_slots_and_graphs_by_version() -> None:
    assert not RT.lora_slots_charged("0.7.3", v0_engine=True)
    assert RT.lora_slots_charged("0.8.0", v0_engine=True)
    assert RT.lora_slots_charged("0.7.3", v0_engine=False)
    assert RT.graphs_specialize_lora("0.12.0", v0_engine=False)
    assert not RT.graphs_specialize_lora("0.11.0", v0_engine=False)


LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _terms(version: str, gpu: str = "h100-sxm", **changes: object) -> dict[str, int]:
    settings = ServeSettings(engine_version=version).with_changes(**changes)
    result = plan(load_model(LLAMA), load_gpu(gpu), settings)
    return {t.name: t.bytes for t in result.ledger.terms}


def test_flashinfer_sampler_lowers_the_activation_only_where_the_peak_is_its_own() -> None:
    saving = 3.5 * 1024 * 128256 * 4
    base, fi = _terms("0.10.1"), _terms("0.10.1", flashinfer_sampler=True)
    assert base["activation_peak"] - fi["activation_peak"] == pytest.approx(saving, rel=0.01)
    assert fi["kv_cache"] > base["kv_cache"]
    # 0.21 →: FlashInfer samples, but the profile run also warms the PyTorch path
    assert _terms("0.33.0")["activation_peak"] == _terms("0.33.0", flashinfer_sampler=False)["activation_peak"]


def test_graph_tp_factor_only_with_nccl_in_the_graphs() -> None:
    on = _terms("0.33.0", tensor_parallel_size=2)["cuda_graph"]
    off = _terms("0.33.0", tensor_parallel_size=2, disable_custom_all_reduce=True)["cuda_graph"]
    assert off > 2 * on


def test_v0_lora_slots_are_outside_the_budget_before_0_8() -> None:
    lora = {"enable_lora": True, "max_loras": 4, "max_lora_rank": 64, "max_model_len": 8192}
    v073 = _terms("0.7.3", "a100-80gb", **lora)["kv_cache"] - _terms("0.7.3", "a100-80gb", max_model_len=8192)["kv_cache"]
    v085 = _terms("0.8.5", "a100-80gb", **lora)["kv_cache"] - _terms("0.8.5", "a100-80gb", max_model_len=8192)["kv_cache"]
    assert abs(v073) < 64 << 20  # not charged: the KV cache keeps its size
    assert v085 < -(1 << 30)  # 1.25 GiB of slots charged with the weights


# --- the version boundaries are VllmRules fields (vramctl/core/engines/vllm/rules.py) ------------------------------


@pytest.mark.parametrize(
    ("version", "sampler", "gguf", "bnb", "fp32", "fp8", "lora_pp", "lora_graphs", "v0_slots"),
    [
        ("0.7.3", "pytorch", False, False, False, False, False, False, False),
        ("0.8.0", "pytorch", True, True, True, True, True, False, True),
        ("0.8.3", "pytorch", True, False, True, True, False, False, True),
        ("0.9.2", "pytorch", True, False, False, False, False, False, True),
        ("0.10.0", "flashinfer-if-installed", False, False, False, False, False, False, True),
        ("0.11.0", "flashinfer-if-installed", False, False, False, False, False, False, True),
        ("0.12.0", "flashinfer-opt-in", False, False, False, False, False, True, True),
        ("0.20.0", "flashinfer-opt-in", False, False, False, False, False, True, True),
        ("0.21.0", "flashinfer-and-native", False, False, False, False, False, True, True),
    ],
)
def test_runtime_boundaries_are_rules_fields(
    version: str,
    sampler: str,
    gguf: bool,
    bnb: bool,
    fp32: bool,
    fp8: bool,
    lora_pp: bool,
    lora_graphs: bool,
    v0_slots: bool,
) -> None:
    from vramctl.core.engines.vllm.rules import rules_for

    r = rules_for(version)
    assert (
        r.sampler,
        r.v0_fallback_gguf,
        r.v0_fallback_bitsandbytes,
        r.v0_fallback_float32,
        r.v0_fallback_fp8_kv_without_fa3,
        r.v0_fallback_lora_pp,
        r.graphs_specialize_lora,
        r.v0_lora_slots_charged,
    ) == (sampler, gguf, bnb, fp32, fp8, lora_pp, lora_graphs, v0_slots)


def test_runtime_asks_the_rules_not_its_own_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flip the fields of one version: every runtime answer follows (no version window left in vllm_runtime)."""
    from dataclasses import replace

    from vramctl.core.engines.vllm.rules import rules_for

    real = rules_for("0.16.0")
    flipped = replace(
        real,
        sampler="flashinfer-and-native",
        graphs_specialize_lora=not real.graphs_specialize_lora,
        v0_fallback_window=True,
        v0_fallback_gguf=True,
        v0_lora_slots_charged=not real.v0_lora_slots_charged,
    )
    monkeypatch.setattr(RT, "rules_for", lambda version: flipped)
    assert RT.sampler_kind("0.16.0", v0_engine=False, gpu=H100, flashinfer_env=None)[0] == "flashinfer+native"
    assert not RT.sampler_choice_matters("0.16.0", v0_engine=False)
    assert RT.graphs_specialize_lora("0.16.0", v0_engine=False) is flipped.graphs_specialize_lora
    assert RT.lora_slots_charged("0.16.0", v0_engine=True) is flipped.v0_lora_slots_charged
    reason = RT.v1_fallback_reason("0.16.0", compute_capability="9.0", quantization="gguf")
    assert reason is not None and "GGUF" in reason


def test_an_unreadable_version_plans_as_the_newest() -> None:
    assert RT.sampler_kind("nightly", v0_engine=False, gpu=H100, flashinfer_env=None)[0] == "flashinfer+native"
    assert RT.v1_fallback_reason("nightly", compute_capability="7.5") is None
