"""The weights of a model not known offline, sized from the parameter count its name states
(vramctl/diagnose/namedsize.py) and decided by the `planned-deployment` table only past a clear margin.

Unit tests for the name's reading, property tests of the table on synthesised fact records, and explain-oom on small
synthesised logs: a not-bundled 78B at TP 2 on 40 GB cards, with counterparts that keep their old answer (a bundled
model, weights that fit, a close call, a name with no parameter count)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.diagnose import diagnose
from vramctl.diagnose.decide import FactRecord, decide
from vramctl.diagnose.namedsize import NAMED_MARGIN, bytes_per_param, params_of_name
from vramctl.diagnose.planfacts import PLAN_MAY_REVISE, PLAN_TABLE

GiB = 1 << 30
A100_40GB = "39.38 GiB"


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("OpenGVLab/InternVL3-78B", 78_000_000_000),
        ("/data/models/OpenGVLab/InternVL3-78B/", 78_000_000_000),
        ("meta-llama/Meta-Llama-3.1-405B-Instruct", 405_000_000_000),
        ("Qwen/Qwen2.5-1.5B-Instruct", 1_500_000_000),
        ("someorg/Mixtral-8x7B-finetune", 56_000_000_000),
        ("someorg/Qwen3-235B-A22B-finetune", 235_000_000_000),
        ("HuggingFaceTB/SmolLM-360M", 360_000_000),
        ("my-org/my-finetune", None),
        ("org/merge-7B-13B", None),  # two sizes: no guess between them
    ],
)
def test_the_parameter_count_a_name_states(name: str, params: int | None) -> None:
    assert params_of_name(name) == params


def test_bytes_per_parameter_follow_the_registry_schemes() -> None:
    assert bytes_per_param("org/Model-78B") == (2.0, "16-bit (no quantisation in the name)")
    awq = bytes_per_param("org/Model-78B-AWQ")
    assert awq is not None and 0.5 < awq[0] < 0.55  # 4 bits + a 16-bit scale and packed zeros per group of 128
    fp8 = bytes_per_param("org/Model-78B-FP8-dynamic")
    assert fp8 is not None and 1.0 <= fp8[0] < 1.01
    online = bytes_per_param("org/Model-78B", "fp8")
    assert online is not None and 1.0 <= online[0] < 1.01
    assert bytes_per_param("org/Model-78B-GGUF") is None  # a format the registry does not cost from a name
    assert bytes_per_param("org/Model-78B", "exl2") is None


def _record(weights: int, total: int, *, phase: str | None = None, decided: str = "activation-spike") -> FactRecord:
    return FactRecord(
        phase=phase,
        numbers={
            "named_weights_per_rank_bytes": weights,
            "device_total_bytes": total,
            "named_budget_bytes": int(total * 0.9),
            "named_params": weights,
            "named_bytes_per_param": 1.0,
            "named_tp": 1,
        },
        decided=decided,
        words={"named_model": "org/model-78B"},
    )


totals = st.integers(min_value=8 * GiB, max_value=200 * GiB)


@settings(max_examples=200, deadline=None)
@given(
    total=totals,
    over=st.floats(min_value=1.051, max_value=20.0),
    phase=st.sampled_from((None, "startup-check", "weights-load", "profiling")),
    decided=st.sampled_from(sorted(PLAN_MAY_REVISE - {"host-oom-killer"})),
)
def test_a_name_well_past_the_card_is_weights_do_not_fit_low(
    total: int, over: float, phase: str | None, decided: str
) -> None:
    d = decide(_record(int(total * over), total, phase=phase, decided=decided), PLAN_TABLE, default=decided)
    assert (d.cause, d.phase, d.confidence) == ("weights-do-not-fit", "weights-load", "low")
    assert d.why.startswith("sized from the model's name, not planned")


@settings(max_examples=200, deadline=None)
@given(total=totals, share=st.floats(min_value=0.0, max_value=0.8))
def test_a_close_call_is_never_decided_from_a_name(total: int, share: float) -> None:
    # the budget is 0.9 x total here: weights under nine tenths of it (0.81 x total) leave room, whatever the name
    assert decide(_record(int(total * share), total), PLAN_TABLE).rule == -1


@settings(max_examples=200, deadline=None)
@given(total=totals, share=st.floats(min_value=0.82, max_value=NAMED_MARGIN))
def test_a_name_filling_nine_tenths_of_the_budget_does_not_fit_low(total: int, share: float) -> None:
    # session 9: at nine tenths of the budget or more nothing is left for the activation peak and a KV cache
    d = decide(_record(int(total * share), total), PLAN_TABLE)
    assert (d.cause, d.phase, d.confidence) == ("weights-do-not-fit", "weights-load", "low")
    assert d.why.startswith("sized from the model's name, not planned")


@settings(max_examples=100, deadline=None)
@given(total=totals, over=st.floats(min_value=1.06, max_value=20.0))
def test_a_name_never_outranks_a_log_that_says_the_weights_loaded(total: int, over: float) -> None:
    loaded = _record(int(total * over), total)
    loaded.numbers["weights_bytes"] = 20 * GiB
    assert decide(loaded, PLAN_TABLE).rule == -1
    assert decide(_record(int(total * over), total, phase="serving"), PLAN_TABLE).rule == -1


def _log(tmp_path: Path, model: str, tp: int, *, quantization: str = "None") -> Path:
    path = tmp_path / "oom.log"
    path.write_text(
        "INFO 04-17 09:40:29 [api_server.py:1034] vLLM API server version 0.8.4\n"
        f"INFO 04-17 09:40:29 [api_server.py:1035] args: Namespace(subparser='serve', model='{model}', "
        f"tensor_parallel_size={tp}, gpu_memory_utilization=0.95, max_model_len=4096, dtype='bfloat16')\n"
        "INFO 04-17 09:40:45 [core.py:58] Initializing a V1 LLM engine (v0.8.4) with config: "
        f"model='{model}', dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size={tp}, "
        f"quantization={quantization}\n"
        "ERROR 04-17 09:41:10 [core.py:387] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. "
        f"GPU 0 has a total capacity of {A100_40GB} of which 512.00 MiB is free.\n",
        encoding="utf-8",
    )
    return path


def _named(why: tuple[str, ...] | list[str]) -> bool:
    return any("sized from the model's name" in w for w in why)


def test_a_not_bundled_78b_at_tp2_on_40gb_cards_needs_tp8(tmp_path: Path) -> None:
    d = diagnose(str(_log(tmp_path, "/models/OpenGVLab/InternVL3-78B", 2)))
    assert (d.cause, d.confidence, d.phase) == ("weights-do-not-fit", "low", "weights-load")
    assert _named(d.why)
    assert d.facts["named_params"] == 78_000_000_000
    assert d.facts["named_weights_per_rank_bytes"] == 78_000_000_000
    fix = d.fixes[0]
    assert (fix.flag, fix.value) == ("--tensor-parallel-size", "8")  # TP 4: 36.3 GiB x 1.05 > the 37.4 GiB budget
    assert "sized from the name" in fix.reason and "heads are unknown" in fix.reason


def test_a_quantised_name_that_fits_keeps_its_answer(tmp_path: Path) -> None:
    # 78B in AWQ at TP 2: ~19 GiB per rank, well inside a 40 GB card
    d = diagnose(str(_log(tmp_path, "someorg/InternVL3-78B-AWQ", 2)))
    assert d.cause != "weights-do-not-fit" and not _named(d.why)
    assert d.facts["named_weights_per_rank_bytes"] < 20 * GiB


def test_a_close_call_keeps_its_answer(tmp_path: Path) -> None:
    # 78B at TP 4: 36.3 GiB per rank, within 1.05 x the 39.38 GiB card
    d = diagnose(str(_log(tmp_path, "/models/OpenGVLab/InternVL3-78B", 4)))
    assert d.cause != "weights-do-not-fit" and not _named(d.why)


def test_a_logged_online_quantisation_is_costed(tmp_path: Path) -> None:
    # 78B with --quantization fp8 at TP 2: ~36 GiB per rank, a close call: no decision from the name
    d = diagnose(str(_log(tmp_path, "/models/OpenGVLab/InternVL3-78B", 2, quantization="fp8")))
    assert d.cause != "weights-do-not-fit" and not _named(d.why)


def test_a_name_with_no_parameter_count_keeps_its_answer(tmp_path: Path) -> None:
    d = diagnose(str(_log(tmp_path, "/models/my-org/my-finetune", 1)))
    assert not _named(d.why) and "named_params" not in d.facts


def test_a_bundled_model_is_planned_not_sized_from_its_name(tmp_path: Path) -> None:
    d = diagnose(str(_log(tmp_path, "Qwen/Qwen2.5-72B-Instruct", 1)))
    assert not _named(d.why) and "named_params" not in d.facts
    assert "planned_weights_per_rank_bytes" in d.facts


def test_a_log_that_never_states_its_tp_is_not_sized(tmp_path: Path) -> None:
    path = tmp_path / "bare.log"
    path.write_text(
        "INFO 05-01 12:00:00 api_server.py:101] non-default args: {'model': '/models/OpenGVLab/InternVL3-78B'}\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. "
        f"GPU 0 has a total capacity of {A100_40GB} of which 512.00 MiB is free.\n",
        encoding="utf-8",
    )
    d = diagnose(str(path))
    assert not _named(d.why) and "named_params" not in d.facts
