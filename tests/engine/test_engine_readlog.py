"""Check 3: `vramctl read-log` on the engine's own start-up logs, captured live for every case of cases.yaml.

Each server runs with VLLM_LOGGING_LEVEL=DEBUG; the INFO-level log is the same capture without its DEBUG lines.
For both, every memory number the engine printed (the lines of log_numbers.yaml, patterns written from the
engine's format strings) must come back from `read-log --json`, and `read-log --compare-plan` must agree with
the log on the KV arithmetic (KV bytes within the log's rounding, blocks, tokens, concurrency).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import engine_harness as harness
import pytest
import yaml

CASES = harness.load_cases()
LINES = yaml.safe_load((harness.HERE / "log_numbers.yaml").read_text())["lines"]
GIB = 1 << 30


def _params(levels: tuple[str, ...]) -> list[Any]:
    params = []
    for case in CASES:
        for level in levels:
            params.append(pytest.param(case, level, id=f"{case['id']}-{level}"))
    return params


def _json_at(data: dict[str, Any], path: str) -> Any:
    value: Any = data
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def expected_numbers(log: str, *, info_only: bool) -> list[tuple[str, str, str, float, str]]:
    """(line name, group, json path, the printed number, unit) for every memory number the log prints."""
    found: list[tuple[str, str, str, float, str]] = []
    for spec in LINES:
        if spec.get("debug") and info_only:
            continue
        pattern = re.compile(spec["regex"])
        for line in log.splitlines():
            m = pattern.search(line)
            if m is None:
                continue
            for group, target in spec["numbers"].items():
                found.append((spec["name"], group, target["json"], _number(m.group(group)), target["unit"]))
            break  # the first occurrence: the one start-up this log holds
    return found


def _agrees(unit: str, got: Any, printed: float) -> bool:
    if got is None:
        return False
    if unit == "GiB":
        return abs(float(got) - printed * GIB) <= 0.005 * GIB + 1
    if unit == "ratio":
        return abs(float(got) - printed) <= 0.005 + 1e-9
    return bool(float(got) == printed)


def _log_file(run: harness.EngineRun, level: str) -> Path:
    if level == "debug":
        return run.log_path
    path = run.log_path.with_name(run.log_path.stem + ".info.log")
    path.write_text(run.info_log())
    return path


@pytest.mark.parametrize(("case", "level"), _params(("debug", "info")))
def test_read_log_recovers_every_memory_number(
    case: dict[str, Any],
    level: str,
    engine_case: Callable[[str], harness.EngineRun],
    engine_record: Callable[..., None],
) -> None:
    run = engine_case(case["id"])
    harness.skip_if_refused(run)
    assert run.started, harness.failure_excerpt(run)
    path = _log_file(run, level)
    log = path.read_text(errors="replace")
    expected = expected_numbers(log, info_only=level == "info")
    assert any(name == "kv-tokens-concurrency" for name, *_ in expected), "the log has no KV cache size line"
    code, report, stderr = harness.vramctl_json(["read-log", str(path)])
    assert code == 0 and report, f"read-log exited {code}: {stderr.strip()[-400:]}"
    wrong = []
    for name, group, json_path, printed, unit in expected:
        got = _json_at(report, json_path)
        agree = _agrees(unit, got, printed)
        engine_record(f"3-read-log-{level}", case["id"], f"{name}.{group} → {json_path}", got, printed, agree)
        if not agree:
            wrong.append(f"{name} {group}={printed} ({unit}): read-log {json_path} = {got}")
    assert not wrong, "; ".join(wrong)


def _compare_params() -> list[Any]:
    params = []
    for case in CASES:
        marks = [pytest.mark.xfail(reason=case["xfail"], strict=True)] if case.get("xfail") else []
        params.append(pytest.param(case, id=case["id"], marks=marks))
    return params


@pytest.mark.parametrize("case", _compare_params())
def test_read_log_compare_plan_agrees(
    case: dict[str, Any],
    engine_case: Callable[[str], harness.EngineRun],
    engine_record: Callable[..., None],
) -> None:
    run = engine_case(case["id"])
    harness.skip_if_refused(run)
    assert run.started, harness.failure_excerpt(run)
    code, report, stderr = harness.vramctl_json(["read-log", str(run.log_path), "--compare-plan"])
    assert code == 0 and report.get("comparison"), (
        f"read-log --compare-plan exited {code}: {stderr.strip()[-400:]}"
    )
    rows = {row["name"]: row for row in report["comparison"]["rows"]}
    # A log that states no block size (one KV cache group that is not full attention, e.g. sliding window on
    # every layer: its token count is not blocks × block size) leaves the plan on vLLM's GPU default; the
    # blocks, tokens and concurrency are then not comparable and are recorded as such, not asserted.
    block_known = report["settings"].get("block_size") is not None
    names = ["kv_cache"] + (["num_blocks", "kv_tokens", "max_concurrency"] if block_known else [])
    wrong = []
    for name in names:
        row = rows[name]
        planned, logged = row["planned"], row["logged"]
        if logged is None or planned is None:
            agree = False
        elif name == "kv_cache":
            agree = abs(planned - logged) <= 0.005 * GIB + 1
        elif name == "max_concurrency":
            agree = abs(planned - logged) <= 0.005 + 1e-4
        else:
            agree = planned == logged
        engine_record("3-compare-plan", case["id"], name, planned, logged, agree)
        if not agree:
            wrong.append(f"{name}: planned {planned} vs logged {logged}")
    if not block_known:
        engine_record(
            "3-compare-plan",
            case["id"],
            "num_blocks, kv_tokens, max_concurrency",
            "n/a",
            "n/a",
            True,
            "not compared: the log states no block size (nor a token count that gives it)",
        )
    assert not wrong, "; ".join(wrong)
