"""`plan` computes only the engines asked for (issue 10 follow-up): `--engine sglang` runs no vLLM budget, not in
the plan and not in the fix search; `vllm` runs no SGLang sizing; `both` runs both."""

from __future__ import annotations

from typing import Any

import pytest

from vramctl.core import plan as plan_module
from vramctl.core.engines import sglang as sg
from vramctl.core.engines.vllm import planner
from vramctl.core.ledger import ACTIVATION_PEAK, CUDA_GRAPH, SLACK
from vramctl.core.plan import plan
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_gpu, load_model

H100 = load_gpu("h100-sxm")
L4 = load_gpu("l4")


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"vllm": 0, "sglang": 0}
    real_vllm, real_sglang = plan_module.plan_vllm, sg.plan_sglang

    def vllm(*a: Any, **k: Any) -> Any:
        calls["vllm"] += 1
        return real_vllm(*a, **k)

    def sglang(*a: Any, **k: Any) -> Any:
        calls["sglang"] += 1
        return real_sglang(*a, **k)

    monkeypatch.setattr(plan_module, "plan_vllm", vllm)
    monkeypatch.setattr(sg, "plan_sglang", sglang)
    return calls


@pytest.mark.parametrize("model", ["llama-3-8b", "qwen3-8b", "deepseek-v2-lite"])
def test_sglang_alone_runs_no_vllm_budget(monkeypatch: pytest.MonkeyPatch, model: str) -> None:
    calls = _counting(monkeypatch)
    r = plan(load_model(model), H100, ServeSettings(engine="sglang"))
    assert calls["vllm"] == 0
    assert calls["sglang"] >= 1
    assert r.engine == "sglang" and r.sglang is not None


def test_sglang_fix_search_runs_no_vllm_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    # 8B in bf16 on a 24 GB card at a static fraction of 0.5: no KV, so the fix search plans many variants
    r = plan(load_model("llama-3-8b"), L4, ServeSettings(engine="sglang", mem_fraction_static=0.5))
    assert not r.fits and r.fixes, r.verdict
    assert calls["vllm"] == 0
    assert calls["sglang"] > 2


def test_vllm_alone_runs_no_sglang_sizing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    plan(load_model("llama-3-8b"), H100, ServeSettings())
    assert calls == {"vllm": 1, "sglang": 0}


def test_both_runs_both(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    r = plan(load_model("llama-3-8b"), H100, ServeSettings(engine="both"))
    assert calls["vllm"] == 1 and calls["sglang"] >= 1
    assert r.engine == "vllm" and r.sglang is not None and r.gap


@pytest.mark.parametrize("model", ["llama-3-8b", "qwen3-8b"])
def test_sglang_alone_outside_budget_is_sglangs_held_back_use(model: str) -> None:
    r = plan(load_model(model), H100, ServeSettings(engine="sglang"))
    held_back = r.capacity_bytes - r.requested_bytes
    used = r.ledger.bytes_of(ACTIVATION_PEAK) + r.ledger.bytes_of(CUDA_GRAPH)
    assert r.outside_budget_bytes == used
    # the reserve lies in the held-back part; the slack term also carries page rounding of the static part
    assert 0 < used <= held_back <= used + r.ledger.bytes_of(SLACK)
    assert sum(t.bytes for t in r.ledger.as_mapping().values()) == r.capacity_bytes


def test_sglang_alone_settings_record_matches_the_flags() -> None:
    s = ServeSettings(engine="sglang", tensor_parallel_size=2, max_model_len=4096)
    r = plan(load_model("llama-3-8b"), H100, s)
    assert (r.settings.tensor_parallel_size, r.settings.max_model_len) == (2, 4096)
    assert r.max_model_len == 4096


def test_sglang_alone_refuses_what_the_vllm_path_refused() -> None:
    from vramctl.core.errors import BadInputError

    with pytest.raises(BadInputError, match="--tensor-parallel-size"):
        planner.settings_record(load_model("llama-3-8b"), H100, ServeSettings(engine="sglang", tensor_parallel_size=0))
