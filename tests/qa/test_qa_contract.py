"""QA: the JSON contracts (issue 2 item 9, issue 5) and hand-checked numbers, through the CLI like a user."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main

PLAN_KEYS = (
    "engine",
    "engine_version",
    "model",
    "gpu",
    "settings",
    "terms",
    "requested_bytes",
    "kv_cache_bytes",
    "bytes_per_block",
    "block_size",
    "num_blocks",
    "kv_tokens",
    "max_concurrency",
    "max_model_len_fit",
    "verdict",
)
SGLANG_KEYS = ("mem_fraction_static", "kv_cache_bytes", "max_total_num_tokens", "max_running_requests")
VERDICTS = {
    "fits",
    "no-kv-cache-memory",
    "kv-cache-too-small-for-max-model-len",
    "gpu-util-exceeds-free-memory",
    "weights-do-not-fit",
    "kv-pool-overcommit",
    "host-pinned-memory-failure",
}
H100_SXM_CUDA_TOTAL = 85_018_542_080  # 79.18 GiB, what CUDA reports (reference/gpu_capacity.yaml)


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["plan", "--json", *args])
    out, err = capsys.readouterr()
    assert code in (0, 1), err

    def no_constants(name: str) -> float:
        raise AssertionError(f"JSON holds {name}")

    return code, json.loads(out, parse_constant=no_constants)


def assert_sizes_are_ints(obj: Any, path: str = "") -> None:
    """Every `*_bytes` / `*_tokens` / `num_*` value is an int (or null); no float is NaN or infinite."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            where = f"{path}.{key}"
            if (key.endswith(("_bytes", "_tokens")) or key.startswith("num_") or key == "bytes") and not (
                key.endswith("_per_s")
            ):
                assert value is None or (isinstance(value, int) and not isinstance(value, bool)), (
                    where,
                    value,
                )
            assert_sizes_are_ints(value, where)
    elif isinstance(obj, list):
        for n, value in enumerate(obj):
            assert_sizes_are_ints(value, f"{path}[{n}]")
    elif isinstance(obj, float):
        assert math.isfinite(obj), (path, obj)


CASES = {
    "default": [],
    "70b-h100-tp1": ["llama-3-70b", "--gpu", "h100-sxm"],
    "70b-tp2": ["llama-3-70b", "-tp", "2"],
    "70b-tp8": ["llama-3-70b", "-tp", "8"],
    "deepseek-v3-tp8-h200": ["deepseek-v3", "-tp", "8", "--gpu", "h200"],
    "gpt-oss-120b": ["gpt-oss-120b"],
    "gemma-3-27b": ["gemma-3-27b", "--max-model-len", "32768"],
    "both": ["--engine", "both"],
    "sglang": ["qwen3-8b", "--engine", "sglang", "--mem-fraction-static", "0.85"],
    "free-memory": ["--free-memory", "40GiB"],
    "tiny-kv": ["--kv-cache-memory-bytes", "1MiB"],
    "huge-kv": ["--kv-cache-memory-bytes", "200GiB"],
    "hicache": ["--engine", "sglang", "--enable-hierarchical-cache", "--host-memory", "64GiB"],
}


@pytest.mark.parametrize("args", CASES.values(), ids=list(CASES))
def test_qa_plan_json_contract(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, data = plan_json(capsys, *args)
    for key in PLAN_KEYS:
        assert key in data, key
    assert data["verdict"] in VERDICTS
    assert (code == 0) == (data["verdict"] == "fits")
    assert data["terms"] and all({"bytes", "source"} <= set(t) for t in data["terms"].values())
    assert all(t["source"] in ("measured", "estimated", "given", "derived") for t in data["terms"].values())
    assert_sizes_are_ints(data)
    if data["engine"] == "sglang" or "--engine" in args:
        assert data["sglang"] is not None
        for key in SGLANG_KEYS:
            assert key in data["sglang"], key


def test_qa_plan_seed_numbers_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3-8B, --kv-cache-memory-bytes 54.4GiB (the seed): per token 32 layers × 8 KV heads × 128 dims ×
    2 (K and V) × 2 B = 131,072 B; a 16-token block 2,097,152 B; blocks = floor(54.4 × 2^30 / 2,097,152) =
    floor(27,852.8) = 27,852; tokens 27,852 × 16 = 445,632; concurrency 27,852 / (8192 / 16 = 512) = 54.398.
    vLLM 0.33's block of 16 tokens (0.34's is 64: tests/plan/test_plan_cli.py)."""
    _, d = plan_json(capsys, "--kv-cache-memory-bytes", "54.4GiB", "--engine-version", "0.33.0")
    assert d["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 2 == 131_072
    assert d["bytes_per_block"] == 16 * 131_072
    assert d["num_blocks"] == int(54.4 * 2**30) // (16 * 131_072) == 27_852
    assert d["kv_tokens"] == 27_852 * 16 == 445_632
    assert d["max_concurrency"] == pytest.approx(27_852 / 512, abs=1e-4)
    # fp8 KV: one byte per element, half the bytes per token, twice the blocks in the same bytes.
    _, f = plan_json(capsys, "--kv-cache-memory-bytes", "54.4GiB", "--kv-cache-dtype", "fp8", "--engine-version", "0.33.0")
    assert f["bytes_per_block"] == d["bytes_per_block"] // 2
    assert f["num_blocks"] == int(54.4 * 2**30) // (16 * 65_536) == 55_705


def test_qa_plan_requested_bytes_by_version(capsys: pytest.CaptureFixture[str]) -> None:
    """requested = ceil(total × u): 0.11.0 defaults u to 0.90, 0.33.0 to 0.92 (the 0.20 change):
    85,018,542,080 × 0.90 = 76,516,687,872 exactly; × 0.92 = 78,217,058,713.6 → 78,217,058,714."""
    _, old = plan_json(capsys, "--engine-version", "0.11.0")
    _, new = plan_json(capsys, "--engine-version", "0.33.0")
    assert old["settings"]["gpu_memory_utilization"] == 0.90
    assert new["settings"]["gpu_memory_utilization"] == 0.92
    assert old["requested_bytes"] == 76_516_687_872
    assert new["requested_bytes"] == math.ceil(H100_SXM_CUDA_TOTAL * 0.92) == 78_217_058_714


def test_qa_plan_70b_tensor_parallel_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3-70B (131.42 GiB bf16) on an 80 GB H100: tp 1 cannot hold the weights (exit 1,
    weights-do-not-fit); weights per rank halve with each doubling of TP; KV per token per rank is
    80 layers × (8 KV heads / tp) × 128 × 2 × 2 B, one head per rank at tp 8: 40,960 B, a block 655,360 B."""
    code, one = plan_json(capsys, "llama-3-70b", "--gpu", "h100-sxm")
    assert code == 1 and one["verdict"] == "weights-do-not-fit"
    assert one["terms"]["weights"]["bytes"] > H100_SXM_CUDA_TOTAL
    weights = [one["terms"]["weights"]["bytes"]]
    for tp in (2, 4, 8):
        _, d = plan_json(capsys, "llama-3-70b", "-tp", str(tp))
        weights.append(d["terms"]["weights"]["bytes"])
        assert d["kv_bytes_per_token"] == 80 * (8 // tp) * 128 * 2 * 2
        assert d["bytes_per_block"] == d["block_size"] * d["kv_bytes_per_token"]
    assert all(b < a for a, b in itertools.pairwise(weights))
    assert weights[3] == pytest.approx(weights[0] / 8, rel=0.01)


def test_qa_plan_mla_latent_replicated_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 (MLA): one 576-wide latent (512 kv_lora_rank + 64 rope dims) per token per layer, bf16, on every
    TP rank: 576 × 61 layers × 2 B = 70,272 B per token per rank at tp 8 as at tp 1; vLLM's MLA block is 64."""
    _, tp8 = plan_json(capsys, "deepseek-v3", "-tp", "8", "--gpu", "h200")
    _, tp1 = plan_json(capsys, "deepseek-v3", "--gpu", "h200")
    assert tp8["kv_bytes_per_token"] == tp1["kv_bytes_per_token"] == 576 * 61 * 2 == 70_272
    assert tp8["block_size"] == 64 and tp8["bytes_per_block"] == 64 * 70_272
    assert tp8["verdict"] == "fits" and tp1["verdict"] == "weights-do-not-fit"


def test_qa_plan_enforce_eager_drops_the_graph_term(capsys: pytest.CaptureFixture[str]) -> None:
    _, graphs = plan_json(capsys, "--engine-version", "0.33.0")
    _, eager = plan_json(capsys, "--enforce-eager", "--engine-version", "0.33.0")
    assert graphs["terms"]["cuda_graph"]["bytes"] > 0
    assert eager["terms"].get("cuda_graph", {"bytes": 0})["bytes"] == 0
    assert eager["settings"]["cudagraph_capture_sizes"] == []
    assert eager["kv_cache_bytes"] == graphs["kv_cache_bytes"] + graphs["terms"]["cuda_graph"]["bytes"]
    # 0.34's extensible KV cache: the captured pool and the graph estimate in its reserve (both the graph term here)
    # come back, and the margin (0.75 × the reserve above 1 GiB) shrinks with the reserve
    _, graphs = plan_json(capsys)
    _, eager = plan_json(capsys, "--enforce-eager")
    graph = graphs["terms"]["cuda_graph"]["bytes"]
    assert graphs["kv_cache_bytes"] + 2 * graph <= eager["kv_cache_bytes"] <= graphs["kv_cache_bytes"] + 4 * graph


def test_qa_plan_serve_commands_from_the_brief(capsys: pytest.CaptureFixture[str]) -> None:
    """The two commands of the QA brief: the vLLM one asks for 32,768 tokens of an 8,192-token model (vLLM refuses
    it: exit 2 naming the flag); the SGLang one plans with the fraction it was given."""
    code = main(
        [
            "plan",
            "--",
            "vllm",
            "serve",
            "meta-llama/Meta-Llama-3-8B-Instruct",
            "--max-model-len",
            "32768",
            "-tp",
            "2",
            "--gpu-memory-utilization",
            "0.95",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--max-model-len 32768" in err and "max_position_embeddings=8192" in err
    code, d = plan_json(
        capsys, "--", "python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
        "--mem-fraction-static", "0.85",
    )  # fmt: skip
    assert d["engine"] == "sglang" and d["sglang"]["mem_fraction_static"] == 0.85
    # Qwen3-8B: 36 layers × 8 KV heads × 128 × 2 × 2 B = 147,456 B per token; SGLang pages of 1 token.
    assert d["sglang"]["bytes_per_token"] == 36 * 8 * 128 * 2 * 2
    assert d["sglang"]["max_total_num_tokens"] == d["sglang"]["kv_cache_bytes"] // 147_456


TIERS_KEYS = ("requests", "input_tokens", "token_hit_rate", "request_hit_rate", "tiers")
TIER_KEYS = ("name", "capacity_tokens", "hit_tokens", "written_bytes")


def test_qa_tiers_simulate_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]},
        {"timestamp": 5, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]},
        {"timestamp": 9, "input_length": 1100, "output_length": 8, "hash_ids": [1, 2, 3]},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(
        ["tiers", "simulate", "--trace", str(trace), "--gpu-capacity", "1024", "--host-capacity", "4096",
         "--model", "llama-3-8b", "--json"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    for key in TIERS_KEYS:
        assert key in data
    assert [t["name"] for t in data["tiers"]] == ["gpu", "host"]
    for tier in data["tiers"]:
        for key in TIER_KEYS:
            assert key in tier
    assert_sizes_are_ints(data)
    # By hand: 3,148 input tokens; request 2 hits blocks 1-2 (1,024 tokens) in the host tier (GPU holds 2 blocks
    # of 512 but request 1's blocks were written through), request 3 hits 1,024 of 1,100.
    assert data["requests"] == 3 and data["input_tokens"] == 3148
    assert sum(t["hit_tokens"] for t in data["tiers"]) == 2048
    assert data["token_hit_rate"] == pytest.approx(2048 / 3148)
    code = main(["tiers", "simulate", "--trace", str(trace), "--sweep", "1024,2048", "--json"])
    sweep = json.loads(capsys.readouterr().out)
    assert code == 0 and len(sweep["sweep"]) == 2
    for point in sweep["sweep"]:
        for key in ("token_hit_rate", "request_hit_rate", "tiers"):
            assert key in point


def test_qa_plan_largest_fitting_len_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B on an L4 at max_model_len 131,072: one request needs 131,072 × 131,072 B = 16.0 GiB; the pool is
    smaller (exit 1, kv-cache-too-small-for-max-model-len). vLLM ≥0.12 keeps one null block out of the pool, so
    the longest request that fits is floor((KV − block) / block) × 16 tokens."""
    code, d = plan_json(capsys, "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "131072")
    assert code == 1 and d["verdict"] == "kv-cache-too-small-for-max-model-len"
    bpb, block = d["bytes_per_block"], d["block_size"]
    assert bpb == block * 131_072
    assert d["num_blocks"] == d["kv_cache_bytes"] // bpb
    assert d["max_model_len_fit"] == (d["kv_cache_bytes"] - bpb) // bpb * block
    assert "16.0 GiB KV cache is needed" in d["verdict_message"]
    assert f"estimated maximum model length is {d['max_model_len_fit']}" in d["verdict_message"]


@pytest.mark.parametrize(
    "model", ["llama-3-8b", "qwen3-8b", "deepseek-v2-lite", "gpt-oss-20b", "mixtral-8x7b-awq"]
)
def test_qa_engine_both_gap_adds_up(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--engine both` explains the KV gap term by term: the terms sum to vLLM's KV − SGLang's KV exactly."""
    _, d = plan_json(capsys, model, "--engine", "both")
    assert sum(item["bytes"] for item in d["gap"]) == d["kv_cache_bytes"] - d["sglang"]["kv_cache_bytes"]
    assert all(item["sentence"] for item in d["gap"])
