"""vLLM's versioned rules (vramctl.core.engines.vllm) against ../shared/reference/vllm.md §6, §9."""

from __future__ import annotations

import pytest

from vramctl.core.engines import vllm as V
from vramctl.registry import load_gpu


@pytest.mark.parametrize(
    ("version", "u"),
    [("0.6.6", 0.90), ("0.11.0", 0.90), ("0.19.0", 0.90), ("0.20.0", 0.92), ("0.33.0", 0.92)],
)
def test_default_utilization(version: str, u: float) -> None:
    assert V.default_gpu_memory_utilization(version) == u


def test_graph_estimate_default_on_from_0_20() -> None:
    assert not V.estimate_cudagraphs_default("0.19.0")
    assert V.estimate_cudagraphs_default("0.20.0")
    assert not V.supports_cudagraph_estimate("0.17.0")


@pytest.mark.parametrize(
    ("version", "kind"),
    [("0.6.6", "v0"), ("0.8.5", "profile-sum"), ("0.26.0", "profile-sum"), ("0.28.0", "consumed")],
)
def test_subtraction_by_version(version: str, kind: str) -> None:
    assert V.subtraction_kind(version) == kind


def test_nccl_charged_only_before_the_snapshot_moved() -> None:
    assert V.charges_nccl_to_budget("0.6.6")
    assert not V.charges_nccl_to_budget("0.8.2")
    assert not V.charges_nccl_to_budget("0.33.0")


def test_scheduler_table_by_gpu_class_and_entrypoint() -> None:
    h100, a100, l4, b200 = (load_gpu(n) for n in ("h100-sxm", "a100-80gb", "l4", "b200"))
    assert V.default_scheduler_limits(h100, "0.33.0", "server") == (8192, 1024)
    assert V.default_scheduler_limits(h100, "0.33.0", "llm") == (16384, 1024)
    assert V.default_scheduler_limits(a100, "0.33.0", "server") == (
        2048,
        256,
    )  # A100 excluded from the big row
    assert V.default_scheduler_limits(l4, "0.33.0", "llm") == (8192, 256)
    assert V.default_scheduler_limits(b200, "0.33.0", "server") == (16384, 1024)
    # 0.11.0 had no ≥160 GiB row: a B200 falls in the ≥70 GiB row.
    assert V.default_scheduler_limits(b200, "0.11.0", "server") == (8192, 1024)
    assert V.default_scheduler_limits(None, "0.33.0") == (2048, 256)


def test_v0_scheduler_defaults() -> None:
    assert V.default_scheduler_limits(None, "0.6.6", max_model_len=8192) == (8192, 256)
    assert V.default_scheduler_limits(None, "0.6.6", max_model_len=131072) == (
        512,
        256,
    )  # chunked prefill auto
    assert V.default_scheduler_limits(None, "0.6.6", max_model_len=1024) == (2048, 256)


def test_scheduler_caps() -> None:
    # batched tokens capped at max_num_seqs × max_model_len, then seqs at batched tokens.
    assert V.apply_scheduler_caps(8192, 1024, 2, user_batched_tokens=False) == (2048, 1024)
    assert V.apply_scheduler_caps(2048, 256, 8192, user_batched_tokens=False, chunked_prefill=False) == (
        8192,
        256,
    )
    assert V.apply_scheduler_caps(100, 256, 8192, user_batched_tokens=True) == (100, 100)


def test_capture_sizes_0_33() -> None:
    sizes = V.default_capture_sizes(1024, 8192, load_gpu("h100-sxm"), "0.33.0")
    assert sizes[:4] == (1, 2, 4, 8)
    assert max(sizes) == 512
    assert 248 in sizes and 256 in sizes and 272 in sizes and 264 not in sizes
    assert len(sizes) == 3 + 31 + 17
    # SM100: 1024 cap; small max_num_seqs: 2 × seqs, and the uniform-decode size itself.
    assert max(V.default_capture_sizes(1024, 8192, load_gpu("b200"), "0.33.0")) == 1024
    assert V.default_capture_sizes(3, 8192, None, "0.33.0") == (1, 2, 3, 4)


def test_capture_sizes_history() -> None:
    assert V.default_capture_sizes(256, 2048, None, "0.11.0") == (1, 2, 4, *range(8, 513, 8))
    assert V.default_capture_sizes(1, 2048, None, "0.8.3") == (1, 2, 4, *range(8, 513, 8))  # not tied to seqs
    assert V.default_capture_sizes(42, 512, None, "0.6.3") == (1, 2, 4, 8, 16, 24, 32, 40, 48)


def test_error_texts_are_vllms() -> None:
    msg = V.free_memory_error(
        device="cuda:0", free="60.0", total="79.18", util=0.92, requested="72.85", version="0.33.0"
    )
    assert msg.startswith(
        "Free memory on device cuda:0 (60.0/79.18 GiB) on startup is less than desired GPU memory"
    )
    old = V.free_memory_error(
        device="cuda:0", free="60.0", total="79.18", util=0.9, requested="71.26", version="0.11.0"
    )
    assert old.startswith("Free memory on device (60.0/79.18 GiB)")
    assert V.no_cache_memory_error("0.11.0").endswith("initializing the engine.")
    assert "models's max seq len" in V.one_request_error(
        max_model_len=10, needed="1", available="0.5", estimated=5, version="0.11.0"
    )
    text = V.one_request_error(
        max_model_len=131072, needed="16.0", available="3.0", estimated=24000, version="0.33.0"
    )
    assert "the estimated maximum model length is 24000. " in text


@pytest.mark.parametrize(
    ("version", "accepted"),
    [
        ("0.6.3", (8, 16, 32)),
        ("0.6.4", (8, 16, 32, 64, 128)),
        ("0.6.5", (8, 16, 32)),
        ("0.7.3", (8, 16, 32, 64, 128)),
        ("0.8.5", (1, 8, 16, 32, 64, 128)),
        ("0.11.0", (1, 8, 16, 32, 64, 128)),
        ("0.11.1", (1, 8, 16, 32, 64, 128, 256)),
        ("0.17.0", (1, 8, 16, 32, 64, 128, 256)),
        ("0.18.0", None),
        ("0.33.0", None),
    ],
)
def test_block_sizes_each_version_accepts(version: str, accepted: tuple[int, ...] | None) -> None:
    """Read from each version's wheel: argparse choices, then the BlockSize Literal, then any positive int."""
    from vramctl.core.engines.vllm.rules import rules_for

    assert rules_for(version).block_sizes == accepted


@pytest.mark.parametrize(
    ("version", "block", "message"),
    [
        ("0.12.0", 48, "--block-size 48: vLLM 0.12.0 accepts 1, 8, 16, 32, 64, 128, 256 (any positive size from 0.18.0)"),
        ("0.10.2", 256, "--block-size 256: vLLM 0.10.2 accepts 1, 8, 16, 32, 64, 128"),
        ("0.33.0", 0, "--block-size 0: must be positive"),
    ],
)
def test_plan_refuses_a_block_size_the_version_refuses(
    version: str, block: int, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from vramctl.cli.main import main

    assert main(["plan", "--engine-version", version, "--block-size", str(block)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_any_positive_block_size_plans_from_0_18(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from vramctl.cli.main import main

    assert main(["plan", "--engine-version", "0.33.0", "--block-size", "48", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["settings"]["block_size"] == 48
