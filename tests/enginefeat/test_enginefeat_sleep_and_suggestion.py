"""Sleep mode (vramctl.core.engines.vllm_sleep) and the `--kv-cache-memory=` suggestion
(vramctl.core.engines.vllm_suggestion): numbers from the plan's own terms and vLLM's formulas."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vramctl.core.engines import vllm_suggestion as sug
from vramctl.core.errors import BadInputError
from vramctl.core.ledger import ACTIVATION_PEAK, CUDA_GRAPH, NON_TORCH, OTHER_PROCESSES, SLACK, WEIGHTS
from vramctl.core.plan import plan
from vramctl.core.settings import ServeSettings
from vramctl.core.suggest import VLLM_REDUNDANCY_BYTES
from vramctl.core.units import GiB, MiB
from vramctl.registry import load_gpu, load_model

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _plan(**changes: object) -> object:
    settings = ServeSettings(max_model_len=8192).with_changes(**changes)
    return plan(load_model(MODEL), load_gpu("h100-sxm"), settings)


def test_sleep_moves_no_term_and_reports_what_each_level_frees() -> None:
    base, slept = _plan(), _plan(enable_sleep_mode=True)
    assert slept.ledger == base.ledger and slept.kv_cache_bytes == base.kv_cache_bytes  # type: ignore[attr-defined]
    sp = slept.engine_features.sleep  # type: ignore[attr-defined]
    ledger = base.ledger  # type: ignore[attr-defined]
    weights, kv = ledger.bytes_of(WEIGHTS), base.kv_cache_bytes  # type: ignore[attr-defined]
    assert sp.level1_freed_bytes == weights + kv
    assert sp.level1_host_bytes == weights and sp.level2_host_bytes == 0
    idle = ledger.capacity_bytes - ledger.bytes_of(OTHER_PROCESSES) - ledger.bytes_of(SLACK)
    idle -= ledger.bytes_of(ACTIVATION_PEAK)
    graph = ledger.bytes_of(CUDA_GRAPH)
    assert sp.remains_bytes == idle - weights - kv
    assert sp.remains_bytes >= graph  # the graph pool stays without --sleep-mode-offload-cudagraph
    assert sp.release_kv_endpoint  # 0.33 has /release_kv_cache_memory (0.31 →)


def test_sleep_offload_cudagraph_and_nccl_suspend() -> None:
    sp = _plan(enable_sleep_mode=True, sleep_mode_offload_cudagraph=True).engine_features.sleep  # type: ignore[attr-defined]
    plain = _plan(enable_sleep_mode=True).engine_features.sleep  # type: ignore[attr-defined]
    assert sp.level1_freed_bytes - plain.level1_freed_bytes == sp.cuda_graph_bytes > 0
    assert sp.level1_host_bytes - plain.level1_host_bytes == sp.cuda_graph_bytes
    tp2 = _plan(enable_sleep_mode=True, enable_nccl_comm_suspend=True, tensor_parallel_size=2)
    assert tp2.engine_features.sleep.nccl_bytes > 0  # type: ignore[attr-defined]


def test_sleep_flags_by_version() -> None:
    with pytest.raises(BadInputError, match=r"added in 0\.30\.0"):
        _plan(enable_sleep_mode=True, enable_nccl_comm_suspend=True, engine_version="0.29.0")
    with pytest.raises(BadInputError, match=r"added in 0\.32\.0"):
        _plan(enable_sleep_mode=True, sleep_mode_offload_cudagraph=True, engine_version="0.31.0")
    assert not _plan(enable_sleep_mode=True, engine_version="0.30.0").engine_features.sleep.release_kv_endpoint  # type: ignore[attr-defined]


def test_sleep_warns_when_level1_cannot_be_pinned() -> None:
    small = _plan(enable_sleep_mode=True, host_memory_bytes=16 * GiB)
    assert any("level-1 sleep pins" in w for w in small.warnings)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("version", "twice"), [("0.26.0", False), ("0.28.0", True), ("0.33.0", True)])
def test_suggestion_counts_the_graph_pool_twice_from_0_28(version: str, twice: bool) -> None:
    p = _plan(kv_cache_memory_suggestion=True, engine_version=version)
    ps = p.engine_features.kv_cache_memory_suggestion  # type: ignore[attr-defined]
    ledger = p.ledger  # type: ignore[attr-defined]
    graph = ledger.bytes_of(CUDA_GRAPH)
    outside = p.outside_budget_bytes  # type: ignore[attr-defined]
    non_kv = (
        ledger.bytes_of(WEIGHTS)
        + ledger.bytes_of(NON_TORCH)
        - outside
        + ledger.bytes_of(ACTIVATION_PEAK)
        + graph
    )
    assert ps.fit_requested_bytes == p.requested_bytes - non_kv - VLLM_REDUNDANCY_BYTES  # type: ignore[attr-defined]
    assert ps.double_counted_bytes == (graph if twice else 0)
    assert ps.vllm_fit_requested_bytes == ps.fit_requested_bytes - ps.double_counted_bytes
    # counted once, the suggestion is the plan's own pool less vLLM's 150 MiB redundancy
    assert ps.fit_requested_bytes == p.kv_cache_bytes - 150 * MiB  # type: ignore[attr-defined]


def test_suggestion_is_opt_in_and_versioned() -> None:
    assert _plan().engine_features is None  # type: ignore[attr-defined]
    assert sug.log_level("0.20.0") == "DEBUG" and sug.log_level("0.33.0") == "INFO"
    assert sug.plan_suggestion(
        "0.9.0", total=1, init_free=1, requested=1, utilization=0.9, consumed=0, transient_peak=0, graph_bytes=0,
        graph_charged=False,
    ) is None


def test_cli_sleep_and_suggestion_from_a_pasted_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "plan", "--json", "--host-memory", "256GiB", "--", "vllm", "serve", MODEL,
         "--max-model-len", "8192", "--enable-sleep-mode", "--kv-cache-memory-suggestion"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data["engine_features"]) == {"sleep", "kv_cache_memory_suggestion"}
    assert data["engine_features"]["kv_cache_memory_suggestion"]["fixed_in"] is None
    assert any("--kv-cache-memory=" in note for note in data["explanations"])
