"""Plans against real start-up logs (../shared/samples/startup): the KV pool vLLM logged, within a few percent.

Each case is planned from the settings its log states (see docs/accuracy.md for the mapping); the logged value is
read from index.yaml, not copied here. These are in-sample regression guards (the estimate coefficients were
fitted on these logs); the leave-one-out errors are in docs/accuracy.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vramctl.core.plan import plan_vllm
from vramctl.core.settings import ServeSettings
from vramctl.core.units import GiB
from vramctl.registry import load_gpu, load_model

INDEX = Path(__file__).resolve().parents[2].parent / "shared" / "samples" / "startup" / "index.yaml"

CASES: list[tuple[str, str, str, dict[str, Any], str, float]] = [
    # id, model, gpu, settings, logged key, tolerance (relative)
    (
        "049",
        "meta-llama/Llama-3.1-8B-Instruct",
        "a100-80gb",
        {
            "engine_version": "0.31.0",
            "gpu_memory_utilization": 0.92,
            "max_model_len": 131072,
            "gpu_memory_bytes": int(79.25 * GiB),
        },
        "kv_tokens",
        0.02,
    ),
    (
        "049",
        "meta-llama/Llama-3.1-8B-Instruct",
        "a100-80gb",
        {
            "engine_version": "0.31.0",
            "gpu_memory_utilization": 0.92,
            "max_model_len": 131072,
            "gpu_memory_bytes": int(79.25 * GiB),
        },
        "available_kv_gib",
        0.02,
    ),
    (
        "013",
        "meta-llama/Llama-3.1-8B-Instruct",
        "h100-sxm",
        {
            "engine_version": "0.11.0",
            "gpu_memory_utilization": 0.9,
            "max_model_len": 16000,
            "block_size": 128,
            "gpu_memory_bytes": int(79.18 * GiB),
        },
        "available_kv_gib",
        0.03,
    ),
    (
        "017",
        "Qwen/Qwen3-0.6B",
        "h100-sxm",
        {
            "engine_version": "0.11.0",
            "gpu_memory_utilization": 0.9,
            "max_model_len": 16000,
            "block_size": 128,
            "gpu_memory_bytes": int(79.18 * GiB),
        },
        "available_kv_gib",
        0.03,
    ),
    (
        "019",
        "Qwen/Qwen3-32B",
        "h100-sxm",
        {
            "engine_version": "0.11.0",
            "gpu_memory_utilization": 0.9,
            "max_model_len": 16000,
            "block_size": 128,
            "tensor_parallel_size": 2,
            "gpu_memory_bytes": int(79.18 * GiB),
        },
        "available_kv_gib",
        0.03,
    ),
    (
        "039",
        "meta-llama/Llama-3.1-8B-Instruct",
        "h100-sxm",
        {"engine_version": "0.9.1", "max_model_len": 131072, "gpu_memory_bytes": int(79.18 * GiB)},
        "kv_tokens",
        0.05,
    ),
    (
        "011",
        "meta-llama/Llama-3.2-3B-Instruct",
        "t4",
        {
            "engine_version": "0.7.3",
            "gpu_memory_utilization": 0.8938626454842437,
            "max_model_len": 2048,
            "max_num_batched_tokens": 2048,
            "max_num_seqs": 192,
            "dtype": "float16",
            "gpu_memory_bytes": int(14.74 * GiB),
        },
        "num_gpu_blocks",
        0.03,
    ),
]


def _logged(point_id: str, key: str) -> float:
    doc = yaml.safe_load(INDEX.read_text())
    point = next(p for p in doc["datapoints"] if str(p["id"]).zfill(3) == point_id)
    return float(str(point["logged"][key]).replace(",", ""))


@pytest.mark.skipif(not INDEX.exists(), reason="../shared/samples/startup not present")
@pytest.mark.parametrize(
    ("point_id", "model", "gpu", "settings", "key", "tolerance"), CASES, ids=[f"{c[0]}-{c[4]}" for c in CASES]
)
def test_plan_matches_the_logged_kv(
    point_id: str, model: str, gpu: str, settings: dict[str, Any], key: str, tolerance: float
) -> None:
    r = plan_vllm(load_model(model), load_gpu(gpu), ServeSettings(**settings))
    predicted = {
        "kv_tokens": float(r.kv_tokens),
        "available_kv_gib": r.kv_cache_bytes / GiB,
        "num_gpu_blocks": float(r.num_blocks),
    }[key]
    logged = _logged(point_id, key)
    assert abs(predicted - logged) <= tolerance * abs(logged), (point_id, key, predicted, logged)
    assert r.verdict == "fits"
