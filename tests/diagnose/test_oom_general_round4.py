"""Generalisation round 4 of issue 9: other engines (TGI, LMDeploy, wrappers of transformers / diffusers), short excerpts.

Every log here is synthesised (own numbers, the message formats of the cited sources); none is copied from a thread.
Each test states the memory-model reason the answer must hold, so that it keeps holding for logs nobody has seen.
"""

from __future__ import annotations

from vramctl.diagnose import Diagnosis, diagnose_text
from vramctl.diagnose.fixvalues import is_numeric_value, numeric_fix


def _numeric(d: Diagnosis) -> list[tuple[str | None, float]]:
    """(flag, value) of the fixes with a number."""
    return [(f.flag, float(f.value)) for f in d.fixes if f.flag and is_numeric_value(f.value)]


def _torch_oom(
    requested_mib: float, total_gib: float, free_mib: float, allocated_gib: float, reserved_gib: float
) -> str:
    # torch 2.x c10/cuda/CUDACachingAllocator.cpp wording
    unallocated_mib = (reserved_gib - allocated_gib) * 1024
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {requested_mib:.2f} MiB. GPU 0 has a total "
        f"capacity of {total_gib:.2f} GiB of which {free_mib:.2f} MiB is free. Of the allocated memory "
        f"{allocated_gib:.2f} GiB is allocated by PyTorch, and {unallocated_mib:.2f} MiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )


def test_a_launch_command_quoted_below_the_error_still_gives_the_settings() -> None:
    # an issue excerpt: the error first, the command after it. The command describes the deployment that failed, so
    # its utilisation (0.97 here) must be read: with it, PyTorch at 98 % of the card is inside the engine's budget
    oom = _torch_oom(200, 40.0, 150, 39.2, 39.4)
    log = oom + "\n\npython3 -m vllm.entrypoints.openai.api_server --model m --gpu-memory-utilization 0.97\n"
    d = diagnose_text(log)
    assert d.cause != "weights-do-not-fit"
    before = diagnose_text(oom)
    assert (
        before.cause == "weights-do-not-fit"
    )  # without the command the card filled up before any budget applied


def test_a_frame_in_vllms_vit_attention_wrapper_is_the_encoders_profiling() -> None:
    # vllm/v1/attention/ops/vit_attn_wrappers.py (vLLM 0.17): the vision encoder's attention over dummy images
    log = "\n".join(
        [
            "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:900] Traceback (most recent call last):",
            '(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:900]   File "/x/vllm/v1/attention/ops/'
            'vit_attn_wrappers.py", line 250, in vit_torch_sdpa_wrapper',
            "(EngineCore_DP0 pid=7) ERROR 01-02 03:04:05 [core.py:900] torch.OutOfMemoryError: HIP out of memory. "
            "Tried to allocate 96.00 GiB.",
        ]
    )
    d = diagnose_text(log)
    assert d.cause == "multimodal-profiling-oom"
    assert d.phase == "profiling"


def test_fragmentation_is_decisive_only_for_a_sizeable_request() -> None:
    # a 20 MiB request failing with 600 MiB cached on a full 8 GiB card: the card's budget ran out; the cached blocks
    # only delayed it, so fragmentation may be named but never with high confidence
    small = diagnose_text(_torch_oom(20, 8.0, 0, 6.6, 7.2))
    assert small.confidence != "high"
    # a 2 GiB request (2.5 % of an 80 GiB card) that free + cached memory would have held: fragmentation, decisively
    large = diagnose_text(_torch_oom(2048, 80.0, 1100, 60.0, 62.5))
    assert large.cause == "allocator-fragmentation"
    assert large.confidence == "high"


def test_moving_a_whole_pipeline_onto_a_full_card_is_the_weights() -> None:
    # `pipe.to(device)` materialises every weight on the GPU; PyTorch already holds 96 % of the card
    log = (
        "Traceback (most recent call last):\n"
        '  File "/app/app.py", line 72, in infer\n'
        "    pipe.to(device)\n"
        + _torch_oom(80, 16.0, 80, 15.4, 15.7).replace("CUDA out of memory", "HIP out of memory")
    )
    d = diagnose_text(log)
    assert d.cause == "weights-do-not-fit"
    assert d.cause != "no-failure"


def test_turbominds_cache_manager_running_out_of_entries_is_the_kv_pool() -> None:
    # src/turbomind/models/llama/LlamaCacheManager.cc (LMDeploy v0.0.x): the KV entries the engine sized ran out
    log = (
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  [TM][ERROR] No enough cache entries. Assertion fail: /x/turbomind/models/llama/"
        "LlamaCacheManager.cc:62\n"
        "  what():  [TM][ERROR] CUDA runtime error: out of memory /x/turbomind/utils/allocator.h:223\n"
    )
    d = diagnose_text(log)
    assert d.cause == "kv-pool-overcommit"
    assert d.engine == "lmdeploy"


def test_tgi_and_lmdeploy_failures_get_their_own_flags_with_numbers() -> None:
    # the flag must be the engine's: TGI shards with --num-shard, LMDeploy with --tp; a vLLM flag cannot be pasted
    assert numeric_fix("weights-do-not-fit", "weights-load", {}, "tgi") is not None
    flag, value, _, _ = numeric_fix("weights-do-not-fit", "weights-load", {"num_shard": 2}, "tgi") or (
        "",
        "",
        "",
        "",
    )
    assert (flag, value) == ("--num-shard", "4")
    flag, value, _, _ = numeric_fix("weights-do-not-fit", "weights-load", {}, "lmdeploy") or ("", "", "", "")
    assert (flag, value) == ("--tp", "2")
    flag, value, _, _ = numeric_fix(
        "activation-spike", "serving", {"max_prefill_token_num": 8192}, "lmdeploy"
    ) or (
        "",
        "",
        "",
        "",
    )
    assert (flag, value) == ("--max-prefill-token-num", "4096")
    flag, value, _, _ = numeric_fix("no-kv-cache-memory", "kv-alloc", {"session_len": 32768}, "lmdeploy") or (
        "",
        "",
        "",
        "",
    )
    assert (flag, value) == ("--session-len", "16384")
    flag, value, _, _ = numeric_fix(
        "gpu-util-exceeds-free-memory", "context", {"cuda_memory_fraction": 0.99}, "tgi"
    ) or (
        "",
        "",
        "",
        "",
    )
    assert (flag, value) == ("--cuda-memory-fraction", "0.89")


def test_a_tgi_launch_line_gives_the_shard_count_to_the_fix() -> None:
    # TGI's launcher prints its Args; a weight-load OOM there is fixed by doubling the shards it printed
    log = (
        '2024-01-01T00:00:00.000000Z  INFO text_generation_launcher: Args { model_id: "m", num_shard: Some(2), '
        "max_batch_prefill_tokens: 4096, cuda_memory_fraction: 1.0 }\n"
        "Traceback (most recent call last):\n"
        '  File "/x/text_generation_server/models/flash_causal_lm.py", line 10, in __init__\n'
        '  File "/x/text_generation_server/utils/weights.py", line 20, in load_weights\n'
        + _torch_oom(500, 24.0, 100, 23.4, 23.5)
    )
    d = diagnose_text(log)
    assert d.cause == "weights-do-not-fit"
    assert ("--num-shard", 4) in _numeric(d)


def test_the_dev4_label_file_is_a_valid_development_set() -> None:
    """dev4: known labels and phases, labels and sources only, odd thread numbers, no thread of a held-out set."""
    from pathlib import Path

    import yaml

    from vramctl.diagnose.inventory import LABELS, PHASES

    folder = Path(__file__).resolve().parents[1] / "fixtures" / "oom_eval"
    cases = yaml.safe_load((folder / "dev4.yaml").read_text())["cases"]
    assert len(cases) >= 24
    urls = [case["source"]["url"] for case in cases]
    assert len(set(urls)) == len(urls), "one log per thread"
    for case in cases:
        assert set(case) <= {"id", "source", "engine", "phase", "root_cause", "confidence"}, case["id"]
        assert case["root_cause"] in (*LABELS, "no-failure"), case["id"]
        assert case["phase"] in PHASES, case["id"]
        assert case["source"]["number"] % 2 == 1, "even thread numbers belong to held-out sets"
    held_out: set[str] = set()
    for name in ("index.yaml", "fresh2.yaml", "fresh3.yaml", "fresh4.yaml", "dev3.yaml"):
        held_out |= {c["source"]["url"] for c in yaml.safe_load((folder / name).read_text())["cases"]}
    assert not held_out & set(urls)


def test_a_cublas_failure_beside_a_full_card_torch_oom_is_not_decisive() -> None:
    # aten/src/ATen/cuda/CublasHandlePool.cpp raises CUBLAS_STATUS_ALLOC_FAILED when cublasCreate cannot allocate; with a
    # torch OOM beside it showing PyTorch at 90 % of the card, the card was full: the library's wording is not decisive
    alone = diagnose_text(
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n"
    )
    assert alone.cause == "non-torch-allocation-oom"
    full = diagnose_text(
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`\n"
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 MiB (GPU 0; 8.00 GiB total capacity;"
        " 7.20 GiB already allocated; 0 bytes free; 7.40 GiB reserved in total by PyTorch)\n"
    )
    assert full.cause == "non-torch-allocation-oom"
    assert full.confidence != "high"


def test_the_setting_in_force_at_the_failure_wins_over_a_later_restart() -> None:
    # a server log: started with 0.97, failed, restarted with 0.80. The failure happened under 0.97
    oom = _torch_oom(200, 40.0, 150, 39.2, 39.4)
    log = (
        "vllm serve m --gpu-memory-utilization 0.97\n"
        + oom
        + "\nvllm serve m --gpu-memory-utilization 0.80\n"
    )
    d = diagnose_text(log)
    assert d.cause != "weights-do-not-fit"  # PyTorch at 98 % is inside a 0.97 budget
