"""The engine-neutral plan (vramctl.core.engines.base), the verdict enum and vLLM's rules object (issue 10)."""

from __future__ import annotations

import json

import pytest

from vramctl.core.engines.base import EnginePlan, EngineRules
from vramctl.core.engines.vllm import rules as vllm_rules
from vramctl.core.engines.vllm.rules import VllmRules, rules_for
from vramctl.core.plan import FITS, engine_rules, plan, plan_vllm
from vramctl.core.settings import ServeSettings
from vramctl.core.verdicts import Verdict
from vramctl.registry import load_gpu, load_model

LLAMA = load_model("meta-llama/Meta-Llama-3-8B-Instruct")
H100 = load_gpu("h100-sxm")


def test_verdicts_are_their_strings() -> None:
    assert FITS == "fits" and FITS is Verdict.FITS
    assert json.dumps({"verdict": Verdict.KV_TOO_SMALL}) == '{"verdict": "kv-cache-too-small-for-max-model-len"}'
    assert type(str(Verdict.NO_KV_CACHE_MEMORY)) is str
    assert {v.value for v in Verdict} >= {"fits", "weights-do-not-fit", "host-pinned-memory-failure"}


def test_vllm_plan_result_round_trips_through_the_engine_plan() -> None:
    r = plan_vllm(LLAMA, H100, ServeSettings(max_model_len=8192))
    ep = r.engine_plan
    assert isinstance(ep, EnginePlan)
    assert (ep.engine, ep.verdict, ep.kv_pool.num_blocks, ep.kv_pool.tokens) == (
        "vllm",
        Verdict.FITS,
        r.num_blocks,
        r.kv_tokens,
    )
    assert r.with_engine_plan(ep) == r
    assert ep.ledger.capacity_bytes == r.capacity_bytes


def test_both_engines_produce_an_engine_plan_through_one_interface() -> None:
    settings = ServeSettings(max_model_len=8192)
    plans = {}
    for name in ("vllm", "sglang"):
        rules: EngineRules = engine_rules(name)
        assert rules.engine == name
        plans[name] = rules.plan(LLAMA, H100, settings)
    assert plans["vllm"].engine == "vllm" and plans["sglang"].engine == "sglang"
    # `plan --engine sglang` puts SGLang's engine plan at the top of the result.
    top = plan(LLAMA, H100, settings.with_changes(engine="sglang"))
    assert top.engine_plan.kv_pool == plans["sglang"].kv_pool
    assert top.engine_plan.verdict == plans["sglang"].verdict
    assert top.to_json()["verdict"] == str(plans["sglang"].verdict)


def test_unknown_engine_is_bad_input() -> None:
    from vramctl.core.errors import BadInputError

    with pytest.raises(BadInputError, match="--engine"):
        engine_rules("trt")


@pytest.mark.parametrize(
    ("version", "switches"),
    [
        ("0.6.3", {"v0": True, "subtraction": "v0", "charges_nccl": True, "counts_other_processes": True}),
        ("0.8.5", {"v0": False, "subtraction": "profile-sum", "checks_free_memory": False, "graph_regime": "piecewise"}),
        ("0.11.0", {"reserves_null_block": False, "new_wordings": False, "in_flight": "batched-tokens"}),
        ("0.12.0", {"reserves_null_block": True, "has_auto_fit": True, "graph_regime": "full-and-piecewise"}),
        ("0.28.0", {"subtraction": "consumed", "tokens_from_concurrency": True, "has_max_num_active_seqs": False}),
        ("0.33.0", {"default_utilization": 0.92, "in_flight": "pp-plus-one", "has_max_num_active_seqs": True}),
    ],
)
def test_vllm_rules_object_holds_the_switches(version: str, switches: dict[str, object]) -> None:
    rules = rules_for(version)
    assert isinstance(rules, VllmRules) and rules.version == version
    assert {k: getattr(rules, k) for k in switches} == switches
    assert rules_for(rules.version_tuple) == rules


def test_one_switch_api_reads_the_rules_object() -> None:
    for version in ("0.6.3", "0.8.5", "0.10.1", "0.19.0", "0.20.0", "0.33.0"):
        rules = rules_for(version)
        assert vllm_rules.is_v0(version) == rules.v0
        assert vllm_rules.subtraction_kind(version) == rules.subtraction
        assert vllm_rules.checks_free_memory(version) == rules.checks_free_memory
        assert vllm_rules.default_gpu_memory_utilization(version) == rules.default_utilization
        assert vllm_rules.semantics(version).subtraction == rules.subtraction
