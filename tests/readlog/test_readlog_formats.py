"""Synthetic logs for the line formats the reference lists that no real sample covers.

Each line below is built from the verbatim format strings of vLLM v0.33.0 (`vllm/utils/mem_utils.py`,
`vllm/v1/worker/gpu_worker.py`, `vllm/v1/core/kv_cache_utils.py`) and SGLang v0.5.23
(`python/sglang/srt/model_executor/model_runner.py`), filled with plausible numbers.
They are NOT real logs: they check that every documented wording is read, and that the ledger follows
the engine's subtraction for that version.
"""

from __future__ import annotations

import pytest

from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    KV_CACHE,
    NON_TORCH,
    OTHER_PROCESSES,
    SLACK,
    WEIGHTS,
)
from vramctl.core.units import GiB
from vramctl.diagnose import startup
from vramctl.diagnose.startup import StartupReport, startup_prefilter

_FILTER = startup_prefilter()


def parse_startup_log(lines: list[str], **kwargs: object) -> StartupReport:
    """Parse the synthetic lines, and check the fast line filter would keep every line that matters."""
    full = startup.parse_startup_log(lines, **kwargs)  # type: ignore[arg-type]
    kept: list[str] = []
    keep_next = False
    for line in lines:
        hit = _FILTER.search(line.encode()) is not None
        kept.append(line if hit or keep_next else "")  # blank, not dropped: line numbers stay the same
        keep_next = hit
    fast = startup.parse_startup_log(kept, **kwargs)  # type: ignore[arg-type]
    assert fast.to_json() == full.to_json()
    return full


H = "(EngineCore_DP0 pid=4242) "


def _gib(report_bytes: int) -> float:
    return round(report_bytes / GiB, 2)


def test_v033_debug_log_consumed_semantics() -> None:
    # vllm.md §4 rows 2, 3, 4, 7, 8, 9, 10, 13, 15, 16, 17 (0.33.0 wordings), DEBUG level on.
    lines = [
        H + "DEBUG 11-02 10:00:01 [gpu_worker.py:545] worker init memory snapshot: torch_peak=0.0GiB, "
        "torch_allocated=0.0GiB, free_memory=78.84GiB, total_memory=79.25GiB, cuda_memory=0.41GiB, "
        "torch_memory=0.0GiB, non_torch_memory=0.41GiB, timestamp=1762077601.25, auto_measure=True",
        H + "DEBUG 11-02 10:00:01 [gpu_worker.py:546] worker requested memory: 72.91GiB",
        H
        + "INFO 11-02 10:00:05 [gpu_model_runner.py:5088] Model loading took 15.0 GiB memory and 5.420225 seconds",
        H + "INFO 11-02 10:00:20 [gpu_model_runner.py:6410] Estimated CUDA graph memory: 0.42 GiB total",
        H + "DEBUG 11-02 10:00:21 [gpu_worker.py:760] Initial free memory: 78.84 GiB; Requested memory: "
        "0.920000 (util), 72.91 GiB",
        H + "DEBUG 11-02 10:00:21 [gpu_worker.py:765] Free memory after profiling: 62.58 GiB (total), "
        "56.65 GiB (within requested)",
        H
        + "DEBUG 11-02 10:00:21 [gpu_worker.py:771] Memory profiling takes 6.12 seconds. Total non KV cache "
        "memory: 16.28GiB; torch peak memory increase: 1.9GiB; total consumed (from mem_get_info): 15.26GiB; "
        "weights memory: 15.0GiB.",
        H + "INFO 11-02 10:00:21 [gpu_worker.py:772] Available KV cache memory: 56.21 GiB",
        H
        + "INFO 11-02 10:00:22 [kv_cache_utils.py:1147] GPU KV cache size: 460,496 tokens, Maximum concurrency "
        "for 131,072 tokens per request: 3.51x",
        H
        + "INFO 11-02 10:00:30 [gpu_model_runner.py:6516] Graph capturing finished in 8 secs, took 0.23 GiB",
        H + "INFO 11-02 10:00:30 [gpu_worker.py:1004] CUDA graph pool memory: 0.23 GiB (actual), 0.42 GiB "
        "(estimated), difference: -0.19 GiB (-45.2%).",
        H
        + "INFO 11-02 10:00:30 [gpu_worker.py:1066] Free memory on device (78.84/79.25 GiB) on startup. Desired "
        "GPU memory utilization is (0.92, 72.91 GiB). Actual usage is 15.26 GiB for consumed memory (weights + "
        "non-torch), 1.44 GiB for peak activation, and 0.23 GiB for CUDAGraph memory. Replace "
        "gpu_memory_utilization config with `--kv-cache-memory=60123456789` (55.99 GiB) to fit into requested "
        "memory, or `--kv-cache-memory=66123456789` (61.58 GiB) to fully utilize gpu memory. Current kv cache "
        "memory in use is 56.21 GiB.",
    ]
    report = parse_startup_log(lines)
    assert report.engine == "vllm" and report.variant == "V1" and report.semantics == "v1-consumed"
    assert report.engine_version == ">=0.28.0" and report.version_source == "formats"
    assert _gib(report.capacity_bytes or 0) == 79.25
    f = report.facts
    assert f["free_after_profile"].text == "62.58 GiB"
    assert f["free_after_profile_within_requested"].text == "56.65 GiB"
    assert f["snapshot_non_torch_memory"].text == "0.41 GiB"
    assert f["cuda_graph_estimate"].text == "0.42 GiB"
    assert report.kv_cache_memory_bytes_suggestion == 60123456789
    assert report.kv_cache_memory_bytes_to_fill_gpu == 66123456789
    ledger = report.ledger
    assert ledger is not None
    # ≥0.28: activation = total non-KV − consumed (the transient headroom), non-torch = consumed − weights
    assert _gib(ledger.bytes_of(ACTIVATION_PEAK)) == 1.02
    assert _gib(ledger.bytes_of(NON_TORCH)) == 0.26
    assert _gib(ledger.bytes_of(WEIGHTS)) == 15.0
    assert _gib(ledger.bytes_of(OTHER_PROCESSES)) == 0.41
    assert _gib(ledger.bytes_of(CUDA_GRAPH)) == 0.23
    assert _gib(ledger.bytes_of(KV_CACHE)) == 56.21
    assert report.kv_tokens == 460496 and report.max_concurrency == 3.51
    assert sum(t.bytes for t in ledger.terms) == ledger.capacity_bytes


def test_v011_debug_profile_repr_and_pre028_suggestion() -> None:
    # vllm.md §1.2 (0.11-0.26 repr), §2.4 (≤0.26 suggestion wording), §4 row 13 (two KV lines up to 0.26).
    lines = [
        "INFO 09-23 18:12:21 [gpu_model_runner.py:2392] Model loading took 14.0786 GiB and 10.247948 seconds",
        "DEBUG 09-23 18:12:33 [gpu_worker.py:290] Memory profiling takes 9.12 seconds. Total non KV cache memory: "
        "16.12GiB; torch peak memory increase: 1.97GiB; non-torch forward increase memory: 0.07GiB; weights "
        "memory: 14.08GiB.",
        "INFO 09-23 18:12:33 [gpu_worker.py:298] Available KV cache memory: 55.15 GiB",
        "INFO 09-23 18:12:34 [kv_cache_utils.py:864] GPU KV cache size: 451,744 tokens",
        "INFO 09-23 18:12:34 [kv_cache_utils.py:868] Maximum concurrency for 4,096 tokens per request: 110.29x",
    ]
    report = parse_startup_log(lines)
    assert report.semantics == "v1"
    assert report.engine_version == ">=0.11.0,<=0.11.x"
    assert report.facts["non_kv_memory"].text == "16.12 GiB"
    assert report.facts["activation_peak"].text == "1.97 GiB"
    assert report.facts["non_torch"].text == "0.07 GiB"
    assert report.ledger is None  # no total in these lines
    assert any("capacity" in m for m in report.missing)
    with_gpu = parse_startup_log(lines, gpu_memory_bytes=round(79.19 * GiB))
    assert with_gpu.ledger is not None and with_gpu.capacity_source == "--gpu-memory"


def test_old_dataclass_snapshot_repr_in_bytes() -> None:
    # vllm.md §1.1: "In older versions (≤0.26) MemorySnapshot used the dataclass default repr" (bytes).
    line = (
        "DEBUG 06-01 10:00:00 [gpu_worker.py:230] worker init memory snapshot: MemorySnapshot(torch_peak=0, "
        "free_memory=84358021120, total_memory=85018542080, cuda_memory=660520960, torch_memory=0, "
        "non_torch_memory=660520960, timestamp=1717236000.5, auto_measure=True)"
    )
    report = parse_startup_log([line, "INFO x [gpu_worker.py:1] Available KV cache memory: 60.00 GiB"])
    assert report.facts["total_memory"].value == 85018542080
    assert report.facts["free_memory_at_start"].value == 84358021120
    assert report.facts["total_memory"].uncertainty == 0
    assert report.capacity_bytes == 85018542080


def test_kv_cache_memory_bytes_path() -> None:
    # vllm.md §2.2 step 2 (0.33.0 wording; 0.11 had "This does does not respect").
    line = (
        "INFO 11-02 10:00:21 [gpu_worker.py:660] Initial free memory 78.84 GiB, reserved 40.0 GiB memory for KV "
        "Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not respect "
        "the gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual control of "
        "KV cache memory size."
    )
    report = parse_startup_log([line], gpu_memory_bytes=round(79.25 * GiB))
    assert report.semantics == "kv-bytes"
    assert _gib(report.kv_cache_bytes or 0) == 40.0
    assert _gib(report.facts["free_memory_at_start"].bytes) == 78.84
    assert report.ledger is not None


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        (
            "INFO 1 [interface.py:777] Setting kv cache block size to 64 for FLASHMLA backend(s).",
            "block_size",
            64,
        ),
        (
            "INFO 1 [gpu_worker.py:790] CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            "--gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9147 without CUDA graph "
            "memory profiling.",
            "gpu_memory_utilization",
            0.92,
        ),
        (
            "ERROR 1 [core.py:700] ValueError: Free memory on device cuda:0 (10.5/79.18 GiB) on startup is less "
            "than desired GPU memory utilization (0.92, 72.85 GiB). Decrease GPU memory utilization or reduce GPU "
            "memory used by other processes.",
            "requested_memory",
            72.85 * GiB,
        ),
        (
            "INFO 1 [gpu_model_runner.py:6304] Estimated CUDA graph memory: 118.65 GiB total",
            "cuda_graph_estimate",
            118.65 * GiB,
        ),
        ("INFO 1 [worker.py:1] Loading model weights took 14.9595 GB", "weights_loaded", 14.9595 * GiB),
        ("INFO 1 [kv_cache_utils.py:1] XPU KV cache size: 12,345 tokens", "kv_tokens", 12345),
    ],
)
def test_single_vllm_lines(line: str, key: str, value: float) -> None:
    report = parse_startup_log([line])
    assert report.facts[key].value == pytest.approx(value, abs=1.0)


def test_sglang_0518_log_with_capacity() -> None:
    # sglang.md §3, current (0.5.18 / 0.5.23) wordings.
    lines = [
        "[2026-01-10 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', "
        "mem_fraction_static=0.835, tp_size=1, chunked_prefill_size=8192, max_running_requests=None, "
        "context_length=None, page_size=1, disable_cuda_graph=False)",
        "[2026-01-10 10:00:05 TP0] Memory baseline taken. mem usage=0.52 GB",
        "[2026-01-10 10:00:05 TP0] Load weight begin. avail mem=78.66 GB",
        "[2026-01-10 10:00:09 TP0] Load weight end. elapsed=3.21 s, type=LlamaForCausalLM, avail mem=63.57 GB, "
        "mem usage=15.09 GB.",
        "[2026-01-10 10:00:09 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 416000, K size: 25.39 GB, "
        "V size: 25.39 GB",
        "[2026-01-10 10:00:09 TP0] Memory pool end. avail mem=11.95 GB",
        "[2026-01-10 10:00:10 TP0] Capture target decode CUDA graph begin. backend=flashinfer, "
        "num_tokens_per_req=1, avail mem=11.85 GB",
        "[2026-01-10 10:00:17 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=6.57 s, "
        "mem usage=1.12 GB, avail mem=10.73 GB.",
        "[2026-01-10 10:00:18 TP0] max_total_num_tokens=416000, chunked_prefill_size=8192, max_prefill_tokens=16384,"
        " max_running_requests=4096, context_len=131072, available_gpu_mem=10.70 GB",
    ]
    report = parse_startup_log(lines, gpu_memory_bytes=round(79.19 * GiB))
    assert report.engine == "sglang" and report.engine_version == ">=0.5.23"
    ledger = report.ledger
    assert ledger is not None
    assert _gib(ledger.bytes_of(WEIGHTS)) == 15.09
    assert _gib(ledger.bytes_of(KV_CACHE)) == 50.78
    assert _gib(ledger.bytes_of(CUDA_GRAPH)) == 1.12
    assert _gib(ledger.bytes_of(OTHER_PROCESSES)) == 0.53
    # the rest of the pool step and the gap before capture: 63.57 − 50.78 − 11.85
    assert _gib(ledger.bytes_of(NON_TORCH)) == 0.94
    # slack = what is left after capture: the activation headroom and the reserve
    assert _gib(ledger.bytes_of(SLACK)) == 10.73
    assert report.kv_tokens == 416000
    assert report.facts["available_gpu_mem"].text == "10.70 GB".replace("GB", "GiB")
    assert report.requested_bytes == round(78.66 * GiB * 0.835)


def test_sglang_mla_and_old_graph_lines() -> None:
    lines = [
        "[2025-02-09 20:33:13 TP0] Load weight begin. avail mem=43.85 GB",
        "[2025-02-09 20:33:21 TP0] Load weight end. type=DeepseekV2ForCausalLM, dtype=torch.bfloat16, avail mem=14.34 GB",
        "[2025-02-09 20:33:21 TP0] KV Cache is allocated. #tokens: 313444, KV size: 9.08 GB",
        "[2025-02-09 20:33:21 TP0] Memory pool end. avail mem=3.97 GB",
        "[2025-02-09 20:33:21 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3.90 GB",
        "[2025-02-09 20:33:32 TP0] Capture cuda graph end. Time elapsed: 7.01 s. mem usage=1.34 GB. avail mem=2.56 GB.",
    ]
    report = parse_startup_log(lines)
    assert report.kv_tokens == 313444
    assert _gib(report.kv_cache_bytes or 0) == 9.08
    assert report.facts["graph_mem_usage"].text == "1.34 GiB"
    assert report.facts["graph_end_avail"].text == "2.56 GiB"
    assert report.facts["graph_seconds"].value == 7.01


def test_sglang_hicache_lines_are_decimal_gb() -> None:
    report = parse_startup_log(
        [
            "[TP0] Load weight begin. avail mem=78.66 GB",
            "[TP0] Allocating kv hierarchical KV host pool: 1000000 tokens, 65.90 GB host memory.",
        ]
    )
    assert report.facts["host_pool_bytes"].value == 65.90e9
    assert report.facts["host_pool_tokens"].value == 1_000_000


def test_v0_multi_process_picks_the_driver_and_keeps_other_ranks() -> None:
    lines = [
        "(VllmWorkerProcess pid=350) INFO 11-27 02:16:23 worker.py:232] Memory profiling results: "
        "total_gpu_memory=139.72GiB initial_memory_usage=19.65GiB peak_torch_memory=16.53GiB "
        "memory_usage_post_profile=22.18GiB non_torch_memory=5.68GiB kv_cache_size=110.52GiB "
        "gpu_memory_utilization=0.95",
        "INFO 11-27 02:16:23 worker.py:232] Memory profiling results: total_gpu_memory=139.72GiB "
        "initial_memory_usage=19.60GiB peak_torch_memory=17.67GiB memory_usage_post_profile=24.21GiB "
        "non_torch_memory=7.71GiB kv_cache_size=107.35GiB gpu_memory_utilization=0.95",
    ]
    report = parse_startup_log(lines)
    assert report.facts["kv_cache"].text == "107.35 GiB" and report.facts["kv_cache"].process is None
    assert {o.text for o in report.observations if o.key == "kv_cache"} == {"110.52 GiB", "107.35 GiB"}


def test_wrapped_v0_line_is_joined() -> None:
    report = parse_startup_log(
        [
            "INFO 04-04 06:27:00 [worker.py:267] model weights take 9.05GiB; non_torch_memory takes 0.03GiB; "
            "PyTorch activation peak memory takes",
            " 2.18GiB; the rest of the memory reserved for KV Cache is 3.54GiB.",
        ]
    )
    assert report.facts["activation_peak"].text == "2.18 GiB"
    assert report.facts["kv_cache"].line == 2


def test_restart_without_engine_line_is_a_new_run() -> None:
    report = parse_startup_log(
        [
            "INFO 1 [worker.py:267] the rest of the memory reserved for KV Cache is 19.00GiB.",
            "INFO 2 [gpu_model_runner.py:1273] Model loading took 0.2393 GiB and 0.666895 seconds",
            "INFO 3 [kv_cache_utils.py:578] GPU KV cache size: 502,304 tokens",
        ]
    )
    assert len(report.runs) == 2
    second = parse_startup_log(
        [
            "INFO 1 [worker.py:267] the rest of the memory reserved for KV Cache is 19.00GiB.",
            "INFO 2 [gpu_model_runner.py:1273] Model loading took 0.2393 GiB and 0.666895 seconds",
            "INFO 3 [kv_cache_utils.py:578] GPU KV cache size: 502,304 tokens",
        ],
        run=1,
    )
    assert second.kv_tokens == 502304 and second.variant == "V1"


def test_no_memory_lines() -> None:
    report = parse_startup_log(
        ["hello", "INFO 1 [api_server.py:1] Starting vLLM API server on http://0.0.0.0:8000"]
    )
    assert not report.found and report.engine is None and report.ledger is None


def test_auto_fit_and_block_override_lines() -> None:
    # vllm.md §3.4 step 3 and §3.7 (0.33.0 wordings).
    lines = [
        "INFO 1 [kv_cache_planning.py:1526] Overriding num_gpu_blocks=28764 with num_gpu_blocks_override=512",
        "INFO 2 [kv_cache_planning.py:1390] Auto-fit max_model_len: reduced from 131072 to 98304 to fit in "
        "available KV cache memory (12.34 GiB GPU)",
        "INFO 3 [interface.py:777] Setting kv cache block size to 64 for FLASHMLA backend(s).",
    ]
    report = parse_startup_log(lines)
    assert report.num_blocks == 512
    assert report.settings["max_model_len"].value == 98304
    assert report.settings["block_size"].value == 64
    assert report.facts["auto_fit_kv_cache"].text == "12.34 GiB"
    assert report.kv_tokens == 512 * 64


def test_docker_timestamps_and_worker_tp_prefixes() -> None:
    # Shape of a 0.2x multi-GPU log collected with `docker logs -t` (synthetic numbers): an RFC 3339
    # timestamp before the process tag, one line per TP worker.
    lines = [
        "2026-07-08T22:40:05.705951537Z (Worker_TP1 pid=449) INFO 07-08 22:40:05 [gpu_model_runner.py:6588] "
        "Estimated CUDA graph memory: 0.41 GiB total",
        "2026-07-08T22:40:05.705951537Z (Worker_TP0 pid=448) INFO 07-08 22:40:05 [gpu_model_runner.py:6588] "
        "Estimated CUDA graph memory: 0.44 GiB total",
        "2026-07-08T22:40:06.098303108Z (Worker_TP0 pid=448) INFO 07-08 22:40:06 [gpu_worker.py:508] Available KV "
        "cache memory: 30.12 GiB",
        "2026-07-08T22:40:06.098303108Z (Worker_TP1 pid=449) INFO 07-08 22:40:06 [gpu_worker.py:508] Available KV "
        "cache memory: 30.20 GiB",
        "2026-07-08T22:40:06.098327284Z (Worker_TP0 pid=448) INFO 07-08 22:40:06 [gpu_worker.py:523] CUDA graph "
        "memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9000 is "
        "equivalent to --gpu-memory-utilization=0.8950 without CUDA graph memory profiling.",
    ]
    report = parse_startup_log(lines)
    assert report.facts["kv_cache"].process == "Worker_TP0 pid=448"
    assert report.facts["kv_cache"].text == "30.12 GiB"
    assert report.facts["cuda_graph_estimate"].text == "0.44 GiB"
    assert report.gpu_memory_utilization == 0.9
    assert report.engine_version == ">=0.20.0"
    assert {o.process for o in report.observations if o.key == "kv_cache"} == {
        "Worker_TP0 pid=448",
        "Worker_TP1 pid=449",
    }


def test_v2_runner_prints_graph_capture_twice_the_real_one_counts() -> None:
    # vllm.md §2.3: with the V2 model runner "Graph capturing finished … took" appears for the
    # profiling capture and again for the real one.
    lines = [
        "INFO 1 [gpu_model_runner.py:1163] Graph capturing finished in 3 secs, took 0.61 GiB",
        "INFO 2 [gpu_worker.py:772] Available KV cache memory: 40.00 GiB",
        "INFO 3 [gpu_model_runner.py:1163] Graph capturing finished in 4 secs, took 0.35 GiB",
    ]
    report = parse_startup_log(lines)
    assert report.facts["cuda_graph_actual"].text == "0.35 GiB"
    with_pool = parse_startup_log(
        [
            *lines,
            "INFO 4 [gpu_worker.py:1004] CUDA graph pool memory: 0.36 GiB (actual), 0.61 GiB (estimated), "
            "difference: -0.25 GiB (-41.0%).",
        ]
    )
    assert with_pool.facts["cuda_graph_actual"].text == "0.36 GiB"


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        # vllm.md §2.2 item 10: both utilisations of the enabled hint, and the disabled WARNING.
        (
            "INFO 1 [gpu_worker.py:790] CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            "--gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9147 without CUDA graph "
            "memory profiling. To maintain the same effective KV cache size as before, increase "
            "--gpu-memory-utilization to 0.9253. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
            "gpu_memory_utilization_to_keep_kv",
            0.9253,
        ),
        (
            "WARNING 1 [gpu_worker.py:800] CUDA graph memory profiling is disabled "
            "(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not accounted for "
            "during KV cache allocation, which may require lowering --gpu-memory-utilization to avoid OOM. Consider "
            "re-enabling it (the default as of v0.21.0) and increasing --gpu-memory-utilization from 0.9000 to 0.9071.",
            "gpu_memory_utilization_to_keep_kv",
            0.9071,
        ),
        # vllm.md §3.1: hybrid attention + mamba, hybrid KV groups.
        (
            "INFO 1 [interface.py:645] Setting attention block size to 672 tokens to ensure that attention page "
            "size is >= mamba page size.",
            "block_size",
            672,
        ),
        (
            "INFO 1 [interface.py:669] Padding mamba page size by 1.49% to ensure that mamba page size and attention "
            "page size are exactly equal.",
            "mamba_page_padding_pct",
            1.49,
        ),
        (
            "WARNING 1 [kv_cache_utils.py:979] Add 2 padding layers, may waste at most 7.69% KV cache memory",
            "kv_padding_waste_pct",
            7.69,
        ),
        ("INFO 1 [worker.py:241] Memory profiling takes 5.31 seconds", "profiling_seconds", 5.31),
        ("INFO 1 [default_loader.py:507] Loading weights took 3.20 seconds", "loading_weights_seconds", 3.2),
        (
            "INFO 1 [gpu_model_runner.py:6465] Encoder cache will be initialized with a budget of 16384 tokens, and "
            "profiled with 1 image items of the maximum feature size.",
            "encoder_cache_budget_tokens",
            16384,
        ),
        ("INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: 4,096", "num_gpu_blocks", 4096),
        (
            "INFO 1 [gpu_worker.py:1066] Free memory on device (78.84/79.18 GiB) on startup. Desired GPU memory "
            "utilization is (0.9, 71.26 GiB). Actual usage: 15.00 GiB for weights, 1.20 GiB for peak activation, "
            "0.30 GiB for non-torch memory, 0.50 GiB for CUDA graph memory. Replace gpu_memory_utilization with "
            "`--kv-cache-memory=58001234567` (54.02 GiB) to fit into requested memory",
            "kv_cache_memory_to_requested",
            58001234567,
        ),
    ],
)
def test_more_vllm_lines(line: str, key: str, value: float) -> None:
    report = parse_startup_log([line])
    assert report.facts[key].value == pytest.approx(value, abs=1e-6)


def test_v1_blocks_line_is_not_v0() -> None:
    report = parse_startup_log(["INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: 127626"])
    assert report.variant == "V1" and report.num_blocks == 127626 and "num_cpu_blocks" not in report.facts
    old = parse_startup_log(["INFO 1 executor_base.py:111] # cuda blocks: 2000, # CPU blocks: 512"])
    assert old.variant == "V0" and old.num_blocks == 2000


def test_fp8_kv_scale_warning_implies_the_kv_dtype_but_never_overrides_a_stated_one() -> None:
    warn = (
        "WARNING 08-17 20:38:37 [kv_cache.py:151] Using KV cache scaling factor 1.0 for fp8_e4m3. If this is "
        "unintended, verify that k/v_scale scaling factors are properly set in the checkpoint."
    )
    kv = "INFO 1 [gpu_worker.py:1] Available KV cache memory: 12.00 GiB"
    assert parse_startup_log([warn, kv]).settings["kv_cache_dtype"].value == "fp8_e4m3"
    stated = "INFO 1 [utils.py:1] non-default args: {'kv_cache_dtype': 'fp8'}"
    assert parse_startup_log([stated, warn, kv]).settings["kv_cache_dtype"].value == "fp8"


def test_sglang_prefill_and_decode_graphs_both_count() -> None:
    # sglang.md §3: 0.5.18 captures a prefill graph (breakable, the CUDA default) besides the decode graph.
    lines = [
        "[TP0] Load weight begin. avail mem=78.66 GB",
        "[TP0] Load weight end. elapsed=3.21 s, type=LlamaForCausalLM, avail mem=63.57 GB, mem usage=15.09 GB.",
        "[TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 416000, K size: 25.39 GB, V size: 25.39 GB",
        "[TP0] Memory pool end. avail mem=11.95 GB",
        "[TP0] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[4, 8], avail mem=11.85 GB",
        "[TP0] Capture target prefill CUDA graph end. elapsed=9.10 s, mem usage=0.40 GB, avail mem=11.45 GB.",
        "[TP0] Capture target decode CUDA graph begin. backend=flashinfer, num_tokens_per_req=1, avail mem=11.40 GB",
        "[TP0] Capture target decode CUDA graph end. elapsed=6.57 s, mem usage=1.12 GB, avail mem=10.28 GB.",
    ]
    report = parse_startup_log(lines, gpu_memory_bytes=round(79.19 * GiB))
    assert report.settings["kv_cache_dtype"].value == "bfloat16"
    assert report.facts["load_seconds"].value == 3.21
    ledger = report.ledger
    assert ledger is not None
    assert _gib(ledger.bytes_of(CUDA_GRAPH)) == 1.52
    # non-torch: up to the FIRST capture (the prefill one, so its graph is not counted twice) and between them
    assert _gib(ledger.bytes_of(NON_TORCH)) == round(63.57 - 50.78 - 11.85 + (11.45 - 11.40), 2)
    assert _gib(ledger.bytes_of(SLACK)) == 10.28


def test_version_at_the_end_of_a_sentence() -> None:
    report = parse_startup_log(
        [
            "A leak is detected when using sglang==0.5.3.post3. both backends",
            "[2025-10-21 10:00:00 TP0] max_total_num_tokens=270331, chunked_prefill_size=8192, "
            "max_prefill_tokens=16384, max_running_requests=2048, context_len=131072",
        ]
    )
    assert report.engine == "sglang" and report.engine_version == "0.5.3.post3"


def test_kv_too_small_error_gives_the_available_kv_and_the_length() -> None:
    # vllm.md §5.2: ≤0.11 `models's` typo without the URL; 0.33 `model's`, format_gib values, the docs URL.
    old = (
        "ValueError: To serve at least one request with the models's max seq len (262144), (62.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (48.66 GiB). Based on the available memory, "
        "the estimated maximum model length is 205728. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine."
    )
    new = (
        "(EngineCore pid=1) ValueError: To serve at least one request with the model's max seq len (131072), (16.0 "
        "GiB KV cache is needed, which is larger than the available KV cache memory (0.71 GiB). Try increasing "
        "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` "
        "when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
        "details."
    )
    report = parse_startup_log([old])
    assert report.kv_cache_bytes == round(48.66 * GiB)
    assert report.facts["estimated_max_model_len"].value == 205728
    assert report.settings["max_model_len"].value == 262144
    report = parse_startup_log([new])
    assert report.facts["kv_needed_per_request"].value == 16 * GiB
    assert report.kv_cache_bytes == round(0.71 * GiB) and report.variant == "V1"
    # An `Available KV cache memory` line of the same run is the KV term; the error's number stays a fact.
    report = parse_startup_log(["INFO 1 [gpu_worker.py:1] Available KV cache memory: 48.70 GiB", old])
    assert report.kv_cache_bytes == round(48.70 * GiB)
    assert report.facts["kv_available_at_error"].value == round(48.66 * GiB)


def test_suggestion_for_another_device_fills_its_memory() -> None:
    # The first half is the line of collected 022.log (vllm-ascend's wording, reconstructed with the posted
    # numbers); the post ends at "to fit in", so the "fully utilize" half mirrors vLLM's wording with the
    # device named (an assumption, numbers made up).
    line = (
        "(EngineCore pid=1) INFO 04-15 11:02:36 [worker.py:575] Free memory on device (60.86/61.27 GiB) on startup. "
        "Desired GPU memory utilization is (0.9, 55.14 GiB). Actual usage: 1.14 GiB for weights, 0.22 GiB for peak "
        "activation, 0.13 GiB for non-torch memory, 0.04 GiB for NPU graph memory. Replace gpu_memory_utilization "
        "with `--kv-cache-memory=57403864576` (53.46 GiB) to fit in requested memory, or "
        "`--kv-cache-memory=63527389184` (59.16 GiB) to fully utilize npu memory."
    )
    report = parse_startup_log([line])
    assert report.kv_cache_memory_bytes_suggestion == 57403864576
    assert report.kv_cache_memory_bytes_to_fill_gpu == 63527389184


def test_sglang_01_summary_in_the_singular() -> None:
    lines = [
        "INFO:model_rpc:Rank 0: max_total_num_token=426666, max_prefill_num_token=71111, context_len=4096, ",
    ]
    report = parse_startup_log(lines)
    assert report.engine == "sglang"
    assert report.kv_tokens == 426666
    assert report.facts["max_prefill_tokens"].value == 71111
    assert report.settings["max_model_len"].value == 4096
