"""The multimodal encoder budget and dummy item count (vramctl.core.engines.vllm.multimodal) against vLLM's own
functions, run by the engine's interpreter on a grid of tokens per item, batch sizes, context lengths, sequence
counts, per-prompt limits and chunked prefill (engine_mm_budget_driver.py)."""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vramctl.core.engines.vllm import rules as V
from vramctl.core.engines.vllm.multimodal import encoder_items

HERE = Path(__file__).resolve().parent
GRID = [
    {"id": f"t{t}-b{b}-l{mml}-s{s}-p{lim}-{'c' if c else 'n'}", "tokens": t, "max_num_batched_tokens": b,
     "max_model_len": mml, "max_num_seqs": s, "limit": lim, "chunked_prefill": c}
    for t, b, mml, s, lim, c in itertools.product(
        [1, 256, 576, 2928, 16384, 114688], [512, 2048, 8192, 16384], [2048, 4096, 32768, 131072],
        [1, 2, 256, 1024], [1, 2, 999], [True, False],
    )
]


@pytest.fixture(scope="module")
def engine_budget(engine_env: Any) -> dict[str, dict[str, int]]:
    proc = subprocess.run(
        [str(engine_env.python), str(HERE / "engine_mm_budget_driver.py")],
        input=json.dumps(GRID), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {r["id"]: r for r in map(json.loads, (x for x in proc.stdout.splitlines() if x.startswith("{")))}


def test_budget_and_items_match_the_engine(
    engine_budget: dict[str, dict[str, int]], engine_env: Any, engine_record: Callable[..., None]
) -> None:
    rules = V.rules_for(engine_env.version)
    wrong = []
    for case in GRID:
        budget = max(case["max_num_batched_tokens"], case["tokens"])
        items = encoder_items(
            rules, case["tokens"], budget, case["limit"], max_num_seqs=case["max_num_seqs"],
            max_model_len=case["max_model_len"], max_num_batched_tokens=case["max_num_batched_tokens"],
            chunked_prefill=case["chunked_prefill"],
        )
        theirs = engine_budget[case["id"]]
        if (budget, items) != (theirs["budget"], theirs["items"]):
            wrong.append(f"{case['id']}: vramctl {budget}/{items}, vLLM {theirs['budget']}/{theirs['items']}")
    engine_record(
        "mm-encoder-budget", "grid", "encoder budget / dummy items", f"{len(GRID) - len(wrong)}/{len(GRID)} agree",
        "compute_mm_encoder_budget, MultiModalBudget._get_max_items", not wrong, "; ".join(wrong[:5]),
    )
    assert not wrong, "\n".join(wrong[:20])
