"""compare_with_plan: the plan beside the log, term by term (pure, with a stand-in plan result), and
settings_from_report: the ServeSettings a plan for the same deployment needs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    KV_CACHE,
    NON_TORCH,
    SLACK,
    WEIGHTS,
    Ledger,
    Term,
    TermSource,
)
from vramctl.core.units import GiB
from vramctl.diagnose.reader import iter_log_lines
from vramctl.diagnose.startup import compare_with_plan, parse_startup_log, settings_from_report

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples" / "startup"


@dataclass(frozen=True)
class FakePlan:
    ledger: Ledger
    requested_bytes: int
    num_blocks: int
    kv_tokens: int
    max_concurrency: float


def _plan(capacity: int, **terms: float) -> FakePlan:
    ledger = Ledger.with_residual(
        capacity, [Term(name, round(gib * GiB), TermSource.ESTIMATED) for name, gib in terms.items()]
    )
    return FakePlan(ledger, round(35.55 * GiB), 5800, 92800, 11.33)


@pytest.mark.shared("samples/startup")
def test_rows_difference_and_percent() -> None:
    report = parse_startup_log(iter_log_lines(SAMPLES / "026.log"))
    assert report.capacity_bytes is not None
    plan = _plan(report.capacity_bytes, weights=14.96, activation_peak=8.0, non_torch=0.5, kv_cache=12.0)
    comparison = compare_with_plan(report, plan)
    rows = {r.name: r for r in comparison.rows}
    assert rows[WEIGHTS].difference == pytest.approx(0, abs=GiB * 0.006)
    kv = rows[KV_CACHE]
    assert kv.logged == pytest.approx(11.12 * GiB, abs=1)
    assert kv.planned == pytest.approx(12.0 * GiB, abs=1)
    assert kv.percent == pytest.approx(100 * (12.0 - 11.12) / 11.12, rel=1e-3)
    assert rows[ACTIVATION_PEAK].percent == pytest.approx(100 * (8.0 - 9.37) / 9.37, rel=1e-3)
    assert rows["num_blocks"].logged == 5691 and rows["num_blocks"].planned == 5800
    assert rows["max_concurrency"].difference == pytest.approx(11.33 - 11.12)
    assert CUDA_GRAPH not in rows  # neither side has it
    json_rows = comparison.to_json()["rows"]
    assert {r["name"] for r in json_rows} >= {WEIGHTS, NON_TORCH, KV_CACHE, SLACK, "kv_tokens"}


@pytest.mark.shared("samples/startup")
def test_sglang_compares_activation_with_the_slack() -> None:
    report = parse_startup_log(iter_log_lines(SAMPLES / "110.log"), gpu_memory_bytes=round(139.72 * GiB))
    plan = _plan(round(139.72 * GiB), weights=14.96, activation_peak=17.0, kv_cache=106.0)
    rows = {r.name: r for r in compare_with_plan(report, plan).rows}
    both = rows["activation_peak + slack"]
    assert both.logged == report.ledger.bytes_of(SLACK)  # type: ignore[union-attr]
    assert both.planned == plan.ledger.bytes_of(ACTIVATION_PEAK) + plan.ledger.bytes_of(SLACK)


@pytest.mark.shared("samples/startup")
def test_settings_from_a_vllm_log() -> None:
    report = parse_startup_log(iter_log_lines(SAMPLES / "124.log"))
    s = settings_from_report(report)
    assert s.engine == "vllm" and s.engine_version == "0.8.3"
    assert s.tensor_parallel_size == 4 and s.max_model_len == 131072
    assert s.gpu_memory_utilization == 0.91 and s.max_num_batched_tokens == 1024 and s.max_num_seqs == 256
    assert s.dtype == "float16" and not s.enforce_eager


@pytest.mark.shared("samples/startup")
def test_settings_from_an_sglang_log() -> None:
    report = parse_startup_log(iter_log_lines(SAMPLES / "113.log"))
    s = settings_from_report(report)
    assert s.engine == "sglang" and s.engine_version == "0.4.3"
    assert s.tensor_parallel_size == 2 and s.mem_fraction_static == 0.87 and s.max_total_tokens == 10240
    assert s.chunked_prefill_size == 8192


def test_settings_carry_lora_dp_ep_and_online_quantisation() -> None:
    """vLLM's `non-default args` line (format: vllm/entrypoints/utils.py `log_non_default_args`), own numbers."""
    args = (
        "INFO 11-30 10:00:00 [utils.py:233] non-default args: {'model': 'Qwen/Qwen3-30B-A3B', "
        "'tensor_parallel_size': 2, 'data_parallel_size': 2, 'enable_expert_parallel': True, 'enable_lora': True, "
        "'max_loras': 4, 'max_lora_rank': 64, 'quantization': 'fp8'}"
    )
    kv = "INFO 11-30 10:01:00 [gpu_worker.py:1] Available KV cache memory: 30.00 GiB"
    s = settings_from_report(parse_startup_log([args, kv]))
    assert (s.tensor_parallel_size, s.data_parallel_size, s.enable_expert_parallel) == (2, 2, True)
    assert (s.enable_lora, s.max_loras, s.max_lora_rank, s.quantization) == (True, 4, 64, "fp8")
    # a checkpoint's own method (the registry's already) is not passed as a flag
    awq = args.replace("'quantization': 'fp8'", "'quantization': 'awq_marlin'")
    assert settings_from_report(parse_startup_log([awq, kv])).quantization is None


_V0_TP2_LOG = """\
$ vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2 --max-model-len 8192
INFO 03-01 10:00:00 llm_engine.py:232] Initializing an LLM engine (v0.7.3) with config: max_seq_len=8192
INFO 03-01 10:00:05 worker.py:267] Memory profiling takes 3.10 seconds
INFO 03-01 10:00:05 worker.py:267] the current vLLM instance can use total_gpu_memory (79.18GiB) x \
gpu_memory_utilization (0.90) = 71.26GiB
INFO 03-01 10:00:05 worker.py:267] model weights take 7.50GiB; non_torch_memory takes 0.30GiB; PyTorch \
activation peak memory takes 1.20GiB; the rest of the memory reserved for KV Cache is 62.26GiB.
"""


@pytest.mark.parametrize("tp", [1, 2])
def test_planned_non_torch_is_the_part_charged_to_the_budget(tmp_path: Path, tp: int) -> None:
    """vLLM logs the non-torch growth since its init snapshot; the plan's ledger also books the CUDA context and
    NCCL communicators that exist before it. The comparison puts the charged part beside the log's figure, and
    says how much it left out."""
    from vramctl.core.engines.vllm_features import charged_non_torch_bytes
    from vramctl.core.plan import plan
    from vramctl.registry import load_gpu, load_model

    log = tmp_path / "start.log"
    log.write_text(_V0_TP2_LOG.replace("--tensor-parallel-size 2", f"--tensor-parallel-size {tp}"))
    report = parse_startup_log(iter_log_lines(log))
    settings = settings_from_report(report)
    result = plan(load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("h100-sxm"), settings)
    comparison = compare_with_plan(report, result, settings)
    row = {r.name: r for r in comparison.rows}[NON_TORCH]
    ledger_non_torch = result.ledger.bytes_of(NON_TORCH)
    charged = charged_non_torch_bytes(result)
    assert 0 < charged < ledger_non_torch  # the context is always outside the budget
    assert row.planned == charged
    assert row.logged == pytest.approx(0.30 * GiB, abs=0.006 * GiB)
    assert any("charged to the budget" in n for n in comparison.notes)
    # KV is unaffected: the charged part is what the plan subtracted from `requested`.
    kv = result.ledger.bytes_of(KV_CACHE)
    weights, act = result.ledger.bytes_of(WEIGHTS), result.ledger.bytes_of(ACTIVATION_PEAK)
    assert kv + weights + act + charged == pytest.approx(result.requested_bytes, abs=0.02 * GiB)
