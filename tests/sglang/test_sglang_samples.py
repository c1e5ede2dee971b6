"""plan_sglang against the real SGLang start-up logs in ../shared/samples/startup (docs/sglang.md, "Accuracy")."""

from __future__ import annotations

import re

import pytest
import yaml
from sglang_samples import (
    DATAPOINTS,
    SAMPLES,
    Datapoint,
    default_mode,
    engine_mode,
    error,
    logged_kv_bytes,
    plan_mode,
)

from vramctl.core.settings import parse_version

IDS = [dp.id for dp in DATAPOINTS]
pytestmark = pytest.mark.shared("samples/startup")


def test_every_sglang_datapoint_is_covered() -> None:
    index = yaml.safe_load((SAMPLES / "index.yaml").read_text())
    sglang_ids = {p["id"] for p in index["datapoints"] if p["engine"] == "sglang"}
    assert sglang_ids == set(IDS)


@pytest.mark.parametrize("dp", DATAPOINTS, ids=IDS)
def test_logged_numbers_match_the_index(dp: Datapoint) -> None:
    """The numbers typed into sglang_samples.py are the ones in the logs."""
    log = (SAMPLES / f"{dp.id}.log").read_text()
    begins = [float(x) for x in re.findall(r"Load weight begin\. avail mem=([\d.]+) GB", log)]
    ends = [float(x) for x in re.findall(r"Load weight end\..*?avail mem=([\d.]+) GB", log)]
    assert dp.begin_gib in begins or dp.begin_gib == min(begins)
    assert dp.end_gib in ends or dp.end_gib == min(ends)
    if dp.tokens is not None:
        assert re.search(rf"(max_total_num_tokens=|#tokens: ){dp.tokens}\b", log)


@pytest.mark.parametrize("dp", DATAPOINTS, ids=IDS)
def test_engine_arithmetic_reproduces_the_pool(dp: Datapoint) -> None:
    """Fed the logged free memory, SGLang's formula gives the logged pool to within the logs' rounding.

    The log prints GiB with two decimals (±0.005 GiB each). 105 and 109 show only some ranks while SGLang takes
    the MIN over all of them, so they get a wider band.
    """
    plan = engine_mode(dp)
    logged = logged_kv_bytes(dp, plan)
    tolerance = 0.02 if dp.id in ("105", "109") else 0.002 + 0.011 * 2**30 / max(logged, 1)
    assert abs(error(plan.kv_cache_bytes, logged)) <= tolerance


@pytest.mark.parametrize("dp", DATAPOINTS, ids=IDS)
def test_planning_without_the_log(dp: Datapoint) -> None:
    """From the flags alone (estimated context + checkpoint weights) the pool lands within 13 %; most within 5 %."""
    plan = plan_mode(dp)
    assert abs(error(plan.kv_cache_bytes, logged_kv_bytes(dp, plan))) <= 0.13


def test_planning_error_summary() -> None:
    errors = sorted(
        abs(error(plan_mode(dp).kv_cache_bytes, logged_kv_bytes(dp, plan_mode(dp)))) for dp in DATAPOINTS
    )
    assert errors[len(errors) // 2] < 0.03  # median


@pytest.mark.parametrize(
    "dp",
    [dp for dp in DATAPOINTS if dp.default_mfs and parse_version(dp.version) >= (0, 4, 0)],
    ids=lambda d: d.id,
)
def test_default_fraction_matches_logged_default(dp: Datapoint) -> None:
    plan = default_mode(dp)
    assert plan.mem_fraction_static == pytest.approx(dp.mfs, abs=1e-9)
    if dp.default_chunked is not None:
        assert plan.chunked_prefill_size == dp.default_chunked
    if dp.default_graph_bs is not None:
        assert plan.cuda_graph_max_bs == dp.default_graph_bs


@pytest.mark.parametrize(
    "dp",
    [dp for dp in DATAPOINTS if dp.max_running_requests_logged and parse_version(dp.version) >= (0, 4, 0)],
    ids=lambda d: d.id,
)
def test_default_max_running_requests_matches_log(dp: Datapoint) -> None:
    plan = engine_mode(dp)
    from vramctl.core.engines.sglang import default_max_running_requests

    assert dp.tokens is not None and dp.context_len is not None
    assert (
        default_max_running_requests(dp.tokens, dp.context_len, plan.rules) == dp.max_running_requests_logged
    )


def test_log_line_format_matches_sample_110() -> None:
    dp = next(d for d in DATAPOINTS if d.id == "110")
    plan = engine_mode(dp)
    k_gib = (plan.max_total_num_tokens + 1) * plan.bytes_per_token / 2 / 2**30
    assert (
        plan.log_lines[0]
        == f"KV Cache is allocated. #tokens: {plan.max_total_num_tokens}, K size: {k_gib:.2f} GB, V size: {k_gib:.2f} GB"
    )
    assert plan.log_lines[1].startswith(
        f"max_total_num_tokens={plan.max_total_num_tokens}, chunked_prefill_size=16384,"
    )
