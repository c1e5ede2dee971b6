"""Whole serve commands → ServeSettings (vramctl.core.serve_command)."""

from __future__ import annotations

import pytest

from vramctl.core.errors import BadInputError
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.settings import ServeSettings


def settings_of(command: str) -> tuple[str | None, ServeSettings, tuple[str, ...]]:
    parsed = parse_serve_command(command)
    return parsed.model, parsed.apply(ServeSettings()), parsed.notes


def test_vllm_serve_both_flag_forms() -> None:
    model, s, notes = settings_of(
        "vllm serve meta-llama/Meta-Llama-3-8B-Instruct --gpu-memory-utilization=0.95 --max-model-len 32K "
        "-tp 2 --pipeline-parallel-size=2 --max-num-seqs 256 --max-num-batched-tokens 16k --kv-cache-dtype fp8 "
        "--block-size 32 --enforce-eager --kv-cache-memory-bytes 8G --dtype bfloat16 --kv-offloading-size 64"
    )
    assert model == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert s.engine == "vllm"
    assert s.gpu_memory_utilization == 0.95
    assert s.max_model_len == 32768  # K = 2^10, as vLLM's parser
    assert s.max_num_batched_tokens == 16000  # k = 10^3
    assert (s.tensor_parallel_size, s.pipeline_parallel_size) == (2, 2)
    assert s.max_num_seqs == 256 and s.kv_cache_dtype == "fp8" and s.block_size == 32 and s.enforce_eager
    assert s.kv_cache_memory_bytes == 8 * 2**30
    assert s.kv_offloading_size_gib == 64
    assert notes == ()


def test_ignored_flags_are_noted_not_errors() -> None:
    _, s, notes = settings_of(
        "vllm serve m --served-model-name x --port 8000 -O3 --compilation-config '{\"level\": 3}' --trust-remote-code "
        "--max-model-len 4096"
    )
    assert s.max_model_len == 4096
    joined = " ".join(notes)
    for flag in ("--served-model-name", "--port", "-O3", "--compilation-config", "--trust-remote-code"):
        assert flag in joined


def test_env_prefix_and_graph_estimate_switch() -> None:
    _, s, notes = settings_of(
        "CUDA_VISIBLE_DEVICES=0 VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 vllm serve m"
    )
    assert s.estimate_cudagraphs is False
    assert any("CUDA_VISIBLE_DEVICES" in n for n in notes)


def test_python_m_entrypoints() -> None:
    model, s, _ = settings_of("python -m vllm.entrypoints.openai.api_server --model m --max-model-len auto")
    assert model == "m" and s.engine == "vllm" and s.max_model_len == -1
    model, s, _ = settings_of(
        "python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 4 --mem-fraction-static 0.85 "
        "--chunked-prefill-size 4096 --max-running-requests 64 --page-size 16 --cuda-graph-max-bs 32 "
        "--disable-cuda-graph --enable-hierarchical-cache --hicache-ratio 2.5 --hicache-size 100 --context-length 8192"
    )
    assert model == "Qwen/Qwen3-8B" and s.engine == "sglang"
    assert s.tensor_parallel_size == 4 and s.mem_fraction_static == 0.85 and s.chunked_prefill_size == 4096
    assert s.max_running_requests == 64 and s.page_size == 16 and s.cuda_graph_max_bs == 32
    assert (
        s.disable_cuda_graph
        and s.enable_hierarchical_cache
        and s.hicache_ratio == 2.5
        and s.hicache_size_gb == 100
    )
    assert s.max_model_len == 8192


def test_sglang_serve() -> None:
    model, s, _ = settings_of("sglang serve --model-path m --tp-size 2")
    assert model == "m" and s.engine == "sglang" and s.tensor_parallel_size == 2


@pytest.mark.parametrize(
    "command",
    [
        "",
        "docker run vllm",
        "vllm bench",
        "python -m flask",
        "vllm serve m --max-num-seqs lots",
        "vllm serve m --block-size",
    ],
)
def test_malformed_commands(command: str) -> None:
    with pytest.raises(BadInputError):
        parse_serve_command(command)
