"""Check 1: KV arithmetic per attention family, vramctl plan against the running engine.

For every case of cases.yaml the engine is started with a fixed KV size; its `vllm:cache_config_info` (/metrics)
gives the block size it chose, the blocks, the tokens and the concurrency. `vramctl plan` is given the same
serve command, the same KV bytes and the engine's block size (the CPU platform decides it: 128 unless set), and
must find the same blocks, tokens and concurrency, and a bytes-per-block the engine's blocks allow: the engine
does not print its page size, but `blocks = floor(KV bytes / page)` bounds it to (KV/(blocks+1), KV/blocks].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import engine_harness as harness
import pytest

CASES = harness.load_cases()


def _params() -> list[Any]:
    params = []
    for case in CASES:
        marks = [pytest.mark.xfail(reason=case["xfail"], strict=True)] if case.get("xfail") else []
        params.append(pytest.param(case, id=case["id"], marks=marks))
    return params


def plan_for_run(
    case: dict[str, Any], run: harness.EngineRun, engine_version: str
) -> tuple[int, dict[str, Any], str]:
    """`vramctl plan` on the case's serve command with the KV size and block size the engine used."""
    args = [str(a) for a in case.get("args", [])]
    command = [
        "vllm",
        "serve",
        str(harness.CONFIGS / case["config"]),
        *args,
        "--kv-cache-memory-bytes",
        run.metrics["kv_cache_memory_bytes"],
        "--block-size",
        run.metrics["block_size"],
        *harness.platform_flags(run.log, args),
        *[str(a) for a in case.get("plan_flags", [])],
    ]
    return harness.vramctl_json(["plan", "--engine-version", engine_version, "--", *command])


@pytest.mark.parametrize("case", _params())
def test_kv_arithmetic_matches_the_engine(
    case: dict[str, Any],
    engine_case: Callable[[str], harness.EngineRun],
    engine_env: Any,
    engine_record: Callable[..., None],
) -> None:
    run = engine_case(case["id"])
    harness.skip_if_refused(run)
    assert run.started, harness.failure_excerpt(run)
    metrics = run.metrics
    assert metrics, f"{case['id']}: /metrics had no vllm:cache_config_info"
    code, plan, stderr = plan_for_run(case, run, engine_env.version)
    assert code in (0, 1) and plan, f"vramctl plan exited {code}: {stderr.strip()[-400:]}"

    kv_bytes = int(metrics["kv_cache_memory_bytes"])
    blocks = int(metrics["num_gpu_blocks"])
    rows: list[tuple[str, Any, Any, bool]] = [
        ("kv_cache_bytes", plan["kv_cache_bytes"], kv_bytes, plan["kv_cache_bytes"] == kv_bytes),
        (
            "block_size",
            plan["block_size"],
            int(metrics["block_size"]),
            plan["block_size"] == int(metrics["block_size"]),
        ),
        ("num_blocks", plan["num_blocks"], blocks, plan["num_blocks"] == blocks),
        (
            "kv_tokens",
            plan["kv_tokens"],
            int(metrics["kv_cache_size_tokens"]),
            plan["kv_tokens"] == int(metrics["kv_cache_size_tokens"]),
        ),
        (
            "max_concurrency",
            plan["max_concurrency"],
            round(float(metrics["kv_cache_max_concurrency"]), 4),
            abs(plan["max_concurrency"] - float(metrics["kv_cache_max_concurrency"])) < 1e-3,
        ),
        (
            "bytes_per_block",
            plan["bytes_per_block"],
            f"({kv_bytes // (blocks + 1)}, {kv_bytes // blocks}]",
            kv_bytes / (blocks + 1) < plan["bytes_per_block"] <= kv_bytes / blocks,
        ),
    ]
    for quantity, ours, theirs, agree in rows:
        engine_record("1-kv", case["id"], quantity, ours, theirs, agree, case.get("family", ""))
    wrong = [f"{q}: vramctl {o} vs engine {t}" for q, o, t, ok in rows if not ok]
    assert not wrong, f"{case['id']} ({case.get('family')}): " + "; ".join(wrong)
