"""The planned deployment as facts of an incident (vramctl/diagnose/planfacts.py) and the `planned-deployment` table
that decides from them when the wording decided with low confidence.

Property tests run the table on synthesised fact records; CLI tests run explain-oom on small synthesised logs (a
bare torch OOM whose wording alone decides nothing) with a bundled model, each with a counterpart that keeps its old
answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.diagnose import diagnose
from vramctl.diagnose.decide import FactRecord, decide
from vramctl.diagnose.planfacts import PLAN_FACTS, PLAN_MAY_REVISE, PLAN_TABLE

GiB = 1 << 30
TABLE = PLAN_TABLE
START_PHASES = (None, "startup-check", "weights-load", "profiling")
PAST_LOADING = ("kv-alloc", "graph-capture", "serving")


def _record(
    *,
    weights: int,
    total: int,
    budget: int,
    kv: int,
    mml_fits: int | None = 1,
    phase: str | None = None,
    decided: str = "activation-spike",
    numbers: dict[str, int] | None = None,
    markers: frozenset[str] = frozenset(),
) -> FactRecord:
    facts = {
        "planned_weights_per_rank_bytes": weights,
        "device_total_bytes": total,
        "planned_budget_bytes": budget,
        "planned_kv_bytes": kv,
        "planned_tp": 1,
        "planned_max_model_len": 32768,
        "planned_max_model_len_fit": 32768 if mml_fits else 1024,
    }
    if mml_fits is not None:
        facts["max_model_len_fits"] = mml_fits
    facts.update(numbers or {})
    return FactRecord(
        phase=phase,
        numbers=facts,
        markers=markers,
        decided=decided,
        words={"planned_model": "org/model", "planned_verdict": "x"},
    )


totals = st.integers(min_value=8 * GiB, max_value=200 * GiB)
utils = st.floats(min_value=0.5, max_value=0.98)
revisable = st.sampled_from(sorted(PLAN_MAY_REVISE - {"host-oom-killer"}))


@settings(max_examples=200, deadline=None)
@given(
    total=totals,
    util=utils,
    over=st.floats(min_value=1.001, max_value=5.0),
    phase=st.sampled_from(START_PHASES),
    decided=st.sampled_from(sorted(PLAN_MAY_REVISE)),
)
def test_weights_per_rank_above_the_whole_card_are_weights_do_not_fit(
    total: int, util: float, over: float, phase: str | None, decided: str
) -> None:
    record = _record(
        weights=int(total * over), total=total, budget=int(total * util), kv=-1, phase=phase, decided=decided
    )
    d = decide(record, TABLE, default=decided)
    assert d.cause == "weights-do-not-fit" and d.phase == "weights-load"
    assert d.confidence == "medium"
    assert d.why.startswith("planned, not read from the log")


@settings(max_examples=200, deadline=None)
@given(
    total=totals,
    util=utils,
    share=st.floats(min_value=0.0, max_value=0.999),
    phase=st.sampled_from(START_PHASES),
    decided=revisable,
)
def test_weights_above_the_budget_but_within_the_card_are_a_low_guess(
    total: int, util: float, share: float, phase: str | None, decided: str
) -> None:
    budget = int(total * util)
    weights = budget + 1 + int((total - budget - 1) * share)
    d = decide(
        _record(weights=weights, total=total, budget=budget, kv=-1, phase=phase, decided=decided),
        TABLE,
        default=decided,
    )
    assert (d.cause, d.confidence) == ("weights-do-not-fit", "low")


@settings(max_examples=100, deadline=None)
@given(total=totals, util=utils, share=st.floats(min_value=0.0, max_value=0.999))
def test_a_kill_is_the_weights_only_when_they_exceed_the_whole_card(
    total: int, util: float, share: float
) -> None:
    budget = int(total * util)
    weights = (
        budget + 1 + int((total - budget - 1) * share)
    )  # above the budget, within the card: host RAM may be it
    d = decide(
        _record(weights=weights, total=total, budget=budget, kv=-1, decided="host-oom-killer"),
        TABLE,
        default="host-oom-killer",
    )
    assert d.rule == -1


@settings(max_examples=200, deadline=None)
@given(total=totals, over=st.floats(min_value=1.001, max_value=5.0), phase=st.sampled_from(PAST_LOADING))
def test_an_engine_past_loading_had_its_weights_loaded(total: int, over: float, phase: str) -> None:
    """A phase or a progress line after loading means the weights did fit: the plan is wrong there, not the log."""
    weights = int(total * over)
    assert decide(_record(weights=weights, total=total, budget=total, kv=-1, phase=phase), TABLE).rule == -1
    marker = phase.replace("-", "_")
    d = decide(_record(weights=weights, total=total, budget=total, kv=-1, markers=frozenset({marker})), TABLE)
    assert d.cause != "weights-do-not-fit"


@settings(max_examples=100, deadline=None)
@given(
    total=totals,
    over=st.floats(min_value=1.001, max_value=5.0),
    request_gib=st.integers(min_value=1, max_value=4),
)
def test_a_request_the_free_memory_would_hold_is_no_capacity_failure(
    total: int, over: float, request_gib: int
) -> None:
    numbers = {
        "requested_bytes": request_gib * GiB,
        "free_bytes": (request_gib + 1) * GiB,
        "total_bytes": total,
    }
    record = _record(weights=int(total * over), total=total, budget=total, kv=-1, numbers=numbers)
    assert decide(record, TABLE).rule == -1


@settings(max_examples=200, deadline=None)
@given(
    total=totals,
    util=utils,
    wshare=st.floats(min_value=0.05, max_value=1.0),
    phase=st.sampled_from(START_PHASES),
)
def test_a_kv_cache_that_cannot_hold_max_model_len(
    total: int, util: float, wshare: float, phase: str | None
) -> None:
    budget = int(total * util)
    record = _record(
        weights=int(budget * wshare), total=total, budget=budget, kv=GiB, mml_fits=0, phase=phase
    )
    d = decide(record, TABLE)
    assert (d.cause, d.phase, d.confidence) == ("kv-cache-too-small-for-max-model-len", "kv-alloc", "low")
    # with the allocator's request logged, the failure is that allocation, not the start-up check
    logged = _record(
        weights=int(budget * wshare),
        total=total,
        budget=budget,
        kv=GiB,
        mml_fits=0,
        phase=phase,
        numbers={"requested_bytes": GiB},
    )
    assert decide(logged, TABLE).rule == -1


@settings(max_examples=100, deadline=None)
@given(
    total=totals,
    util=utils,
    wshare=st.floats(min_value=0.05, max_value=1.0),
    kv=st.integers(min_value=-50 * GiB, max_value=0),
)
def test_no_kv_budget_left_after_weights_that_fit(total: int, util: float, wshare: float, kv: int) -> None:
    budget = int(total * util)
    d = decide(_record(weights=int(budget * wshare), total=total, budget=budget, kv=kv), TABLE)
    assert (d.cause, d.confidence) == ("no-kv-cache-memory", "low")


@settings(max_examples=200, deadline=None)
@given(
    total=totals,
    util=utils,
    wshare=st.floats(min_value=0.0, max_value=1.0),
    kv_gib=st.integers(min_value=1, max_value=100),
    phase=st.sampled_from((*START_PHASES, *PAST_LOADING)),
)
def test_a_deployment_the_plan_says_starts_is_left_to_the_wording(
    total: int, util: float, wshare: float, kv_gib: int, phase: str | None
) -> None:
    budget = int(total * util)
    record = _record(
        weights=int(budget * wshare), total=total, budget=budget, kv=kv_gib * GiB, mml_fits=1, phase=phase
    )
    assert decide(record, TABLE).rule == -1


@settings(max_examples=300, deadline=None)
@given(
    weights=st.integers(min_value=0, max_value=400 * GiB),
    total=totals,
    util=utils,
    kv=st.integers(min_value=-400 * GiB, max_value=100 * GiB),
    mml=st.sampled_from((0, 1, None)),
    phase=st.sampled_from((*START_PHASES, *PAST_LOADING)),
    decided=st.sampled_from(sorted(PLAN_MAY_REVISE)),
)
def test_planned_facts_are_never_high_confidence(
    weights: int, total: int, util: float, kv: int, mml: int | None, phase: str | None, decided: str
) -> None:
    """Plan's numbers are inferences, not the log's: "low" or "medium" only, and every reason says so."""
    record = _record(
        weights=weights,
        total=total,
        budget=int(total * util),
        kv=kv,
        mml_fits=mml,
        phase=phase,
        decided=decided,
    )
    d = decide(record, TABLE, default=decided)
    assert d.confidence in ("low", "medium")
    if d.rule >= 0:
        assert "planned, not read from the log" in d.why


# ---------------------------------------------------------------------------------------------------- the CLI

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. "
    "GPU 0 has a total capacity of 79.19 GiB of which 100.00 MiB is free.\n"
)


def _log(tmp_path: Path, model: str, name: str = "server.log") -> Path:
    path = tmp_path / name
    path.write_text(
        "INFO 05-01 12:00:00 api_server.py:100] vLLM API server version 0.8.5\n"
        f"INFO 05-01 12:00:00 api_server.py:101] non-default args: {{'model': '{model}', 'max_model_len': 8192}}\n"
        + OOM,
        encoding="utf-8",
    )
    return path


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vramctl", "explain-oom", "--json", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_bare_oom_of_a_model_larger_than_the_card_is_the_weights(tmp_path: Path) -> None:
    out = _cli(str(_log(tmp_path, "Qwen/Qwen2-72B-Instruct")))
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert (d["cause"], d["phase"], d["confidence"]) == ("weights-do-not-fit", "weights-load", "medium")
    assert d["phase_inferred"] is True
    facts = d["facts"]
    assert facts["planned_weights_per_rank_bytes"] > facts["device_total_bytes"] == facts["total_bytes"]
    assert facts["planned_model"] == "Qwen/Qwen2-72B-Instruct" and facts["planned_tp"] == 1
    assert facts["planned_starts"] == 0 and isinstance(facts["planned_kv_bytes"], int)
    assert any(
        w.startswith("planned, not read from the log") and "GiB of weights per rank" in w for w in d["why"]
    )
    first = d["fixes"][0]
    assert (
        first["flag"] == "--tensor-parallel-size" and isinstance(first["value"], int) and first["value"] > 1
    )
    assert "checked with plan" in first["reason"]


def test_the_same_bare_oom_of_a_model_that_fits_keeps_the_wording_answer(tmp_path: Path) -> None:
    d = diagnose(_log(tmp_path, "Qwen/Qwen2.5-7B-Instruct"))
    assert d.cause == "activation-spike" and d.confidence == "low"
    assert not any(w.startswith("planned") for w in d.why)
    assert d.facts["planned_starts"] == 1  # planned, and the plan had nothing to say against the wording


def test_a_model_the_registry_does_not_know_gives_no_planned_facts(tmp_path: Path) -> None:
    # (a name that states its size is sized from it: tests/diagnose/test_oom_named_size.py)
    d = diagnose(_log(tmp_path, "acme/not-a-model"))
    assert d.cause == "activation-spike"
    assert not set(PLAN_FACTS) & set(d.facts)


def test_standard_input_is_not_planned(tmp_path: Path) -> None:
    """A stream cannot be read a second time for its start-up lines: the wording's answer stands."""
    text = _log(tmp_path, "Qwen/Qwen2-72B-Instruct").read_text(encoding="utf-8")
    out = _cli("-", stdin=text)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["cause"] == "activation-spike" and "planned_weights_per_rank_bytes" not in d["facts"]


def test_a_decided_wording_is_not_revised(tmp_path: Path) -> None:
    """A frame placing the OOM in the sampler warm-up names who allocated: the plan of the deployment does not overrule it."""
    path = _log(tmp_path, "Qwen/Qwen2-72B-Instruct")
    path.write_text(
        path.read_text(encoding="utf-8").replace(
            "torch.OutOfMemoryError",
            '  File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_model_runner.py", line 1700, in _dummy_sampler_run\n'
            "torch.OutOfMemoryError",
        ),
        encoding="utf-8",
    )
    d = diagnose(path)
    assert d.cause == "sampler-warmup-oom"
    assert "planned_weights_per_rank_bytes" not in d.facts


def test_the_docs_print_the_planned_deployment_table() -> None:
    from vramctl.diagnose.decide import markdown_table

    docs = (Path(__file__).resolve().parents[2] / "docs" / "explain-oom.md").read_text(encoding="utf-8")
    assert markdown_table(TABLE) in docs, "docs/explain-oom.md: the planned-deployment table is out of date"
