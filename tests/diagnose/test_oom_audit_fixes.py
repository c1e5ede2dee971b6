"""Audit of issue 3: the fixes computed from the log's own numbers for wordings the first fixtures lacked
(tests/fixtures/oom/index.yaml, "audit round"), and the JSON contract on them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.diagnose import diagnose

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "oom"


def _fix(name: str, flag: str | None) -> list[tuple[str | None, str | None, str]]:
    d = diagnose(FIXTURES / name)
    return [(f.flag, f.value, f.action) for f in d.fixes if f.flag == flag]


def test_oom_torch1_fragmentation_suggests_max_split_not_expandable_segments() -> None:
    # torch 1.x has no expandable_segments (torch 2.1+): the option its own message names comes first
    d = diagnose(FIXTURES / "torch1_fragmentation_max_split.log")
    assert d.cause == "allocator-fragmentation"
    first = d.fixes[0]
    assert (first.flag, first.value) == ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    assert "3.41 GiB reserved but unallocated" in first.reason and "626.00 MiB requested" in first.reason
    assert all(f.value != "expandable_segments:True" for f in d.fixes)
    assert any("torch >= 2.1" in f.action for f in d.fixes)


@pytest.mark.shared("samples/oom")
def test_oom_torch2_fragmentation_still_suggests_expandable_segments() -> None:
    d = diagnose(Path(__file__).resolve().parents[3] / "shared" / "samples" / "oom" / "037.log")
    assert d.cause == "allocator-fragmentation"
    assert d.fixes[0].value == "expandable_segments:True"


def test_oom_other_process_in_the_torch_message_is_a_free_memory_problem() -> None:
    d = diagnose(FIXTURES / "torch_other_process_holds_card.log")
    assert (d.cause, d.phase) == ("gpu-util-exceeds-free-memory", "weights-load")
    assert d.facts["other_process_pid"] == 3321
    assert d.facts["other_process_bytes"] == round(18.21 * 2**30)
    assert "process 3321 holds 18.21 GiB" in d.fixes[0].action
    # (23.55 - 18.21 - max(1 GiB, 2% of 23.55)) / 23.55 = 0.184 -> 0.18
    assert ("--gpu-memory-utilization", "0.18") in [(f.flag, f.value) for f in d.fixes]


def test_oom_own_process_alone_is_not_another_process() -> None:
    # in a container torch prints `Process N has` for itself: without `this process has` no other-process fact
    d = diagnose(FIXTURES / "vllm_v05_profile_run_frames.log")
    assert "other_process_bytes" not in d.facts
    assert d.cause == "batch-budget-too-large"


def test_oom_cgroup_killer_wording(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain-oom", str(FIXTURES / "cgroup_oom_killer.log"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["cause"] == "host-oom-killer"
    assert out["facts"]["killed_pid"] == 40211
    assert out["facts"]["anon_rss_bytes"] == 61880012 * 1024
    assert isinstance(out["facts"]["anon_rss_bytes"], int)


def test_oom_sglang_capture_advice_computes_a_lower_fraction() -> None:
    d = diagnose(FIXTURES / "sglang_capture_failed_advice_v059.log")
    assert d.engine == "sglang"
    values = {f.flag: f.value for f in d.fixes}
    fraction = values["--mem-fraction-static"]
    assert fraction is not None and float(fraction) < 0.91
    assert "--cuda-graph-max-bs" in values
    assert any("raise" in text for text in d.do_not)


def test_oom_tgi_warmup_prefill_tokens_halved() -> None:
    d = diagnose(FIXTURES / "tgi_shard_warmup_prefill.log")
    assert d.cause == "batch-budget-too-large"
    assert _fix("tgi_shard_warmup_prefill.log", "--max-batch-prefill-tokens")[0][1] == "8025"


def test_oom_trtllm_max_tokens_assertion_gives_the_token_bound() -> None:
    d = diagnose(FIXTURES / "trtllm_max_tokens_paged_kv.log")
    assert d.cause == "kv-cache-too-small-for-max-model-len"
    assert ("--max_seq_len", "9216") in [(f.flag, f.value) for f in d.fixes]


def test_oom_ray_oom_killer_table_names_the_threshold() -> None:
    d = diagnose(FIXTURES / "ray_oom_killer_table.log")
    assert (d.cause, d.phase) == ("host-oom-killer", "weights-load")
    assert "RAY_memory_usage_threshold" in [f.flag for f in d.fixes]
    assert all("gpu-memory-utilization" not in (f.flag or "") for f in d.fixes)


@pytest.mark.parametrize(
    ("line", "process", "text"),
    [
        (
            "2025-01-01T00:00:00.123456789Z stderr F (EngineCore_DP0 pid=812) ERROR 01-01 00:00:00 [core.py:1] "
            "ValueError: No available memory for the cache blocks.",
            "EngineCore_DP0 pid=812",
            "ValueError: No available memory for the cache blocks.",
        ),
        (
            "2025-01-01T00:00:00.5+00:00 [1,3]<stderr>:RuntimeError: CUDA error: out of memory",
            "1,3",
            "RuntimeError: CUDA error: out of memory",
        ),
        (
            "2023-07-26T09:55:39.447617Z  INFO text_generation_launcher: Args",
            None,
            "text_generation_launcher: Args",
        ),
    ],
)
def test_oom_collector_timestamps_and_mpi_tags_are_split_off(
    line: str, process: str | None, text: str
) -> None:
    from vramctl.diagnose.reader import split_prefixes

    assert split_prefixes(line) == (process, text)


@pytest.mark.shared("samples/oom")
def test_oom_kubectl_timestamped_log_classifies_like_the_plain_one(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[3] / "shared" / "samples" / "oom" / "022.log"
    stamped = tmp_path / "022-k8s.log"
    stamped.write_text(
        "".join(
            f"2025-01-01T00:00:{i % 60:02d}.000000000Z stdout F {line}"
            for i, line in enumerate(sample.read_text().splitlines(keepends=True))
        )
    )
    plain, k8s = diagnose(sample), diagnose(stamped)
    assert (k8s.cause, k8s.phase) == (plain.cause, plain.phase)
    assert [(f.flag, f.value) for f in k8s.fixes] == [(f.flag, f.value) for f in plain.fixes]


def test_oom_sglang_self_kill_is_not_the_oom_killer() -> None:
    d = diagnose(FIXTURES / "sglang_sigquit_self_kill.log")
    assert d.cause == "not-oom" and d.what is not None and "not the OOM killer" in d.what
    # next to a real failure the launcher's `Killed` is listed, not as an OOM kill
    d = diagnose(FIXTURES / "sglang_capture_failed_advice_v059.log")
    assert d.cause == "cuda-graph-capture-oom"
    assert [o.cause for o in d.other_failures] == ["not-oom"]


def test_oom_memory_held_outside_this_process_is_named_and_fitted() -> None:
    d = diagnose(FIXTURES / "torch_container_invisible_tenant.log")
    assert d.cause == "gpu-util-exceeds-free-memory"
    assert "18.22 GiB of it is held outside this process" in d.fixes[0].action
    # (23.55 - 18.22 - 1 GiB margin) / 23.55 -> 0.18
    assert ("--gpu-memory-utilization", "0.18") in [(f.flag, f.value) for f in d.fixes]
    d = diagnose(FIXTURES / "torch1_other_process_outside_allocator.log")
    assert d.cause == "gpu-util-exceeds-free-memory"
    assert "76.12 GiB" in d.fixes[0].action


def test_oom_v0_profile_budget_below_context_needs_chunked_prefill() -> None:
    d = diagnose(FIXTURES / "vllm_v05_profile_run_frames.log")
    pairs = [(f.flag, f.value) for f in d.fixes]
    assert pairs[:2] == [("--max-num-batched-tokens", "16384"), ("--max-model-len", "16384")]
    assert "--enable-chunked-prefill" in d.fixes[0].action


@pytest.mark.shared("samples/oom")
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_oom_utf16_log_reads_like_utf8(tmp_path: Path, encoding: str) -> None:
    # Windows PowerShell 5's `>` writes UTF-16 LE with a byte-order mark; `utf-16-be` here carries none,
    # so it gets one added by hand
    sample = Path(__file__).resolve().parents[3] / "shared" / "samples" / "oom" / "022.log"
    text = sample.read_text()
    data = text.encode(encoding) if encoding == "utf-16" else b"\xfe\xff" + text.encode(encoding)
    log = tmp_path / "ps.log"
    log.write_bytes(data)
    gz = tmp_path / "ps.log.gz"
    gz.write_bytes(gzip.compress(data))
    plain = diagnose(sample)
    for path in (log, gz):
        d = diagnose(path)
        assert (d.cause, d.phase) == (plain.cause, plain.phase)
        assert [e.line for e in d.evidence] == [e.line for e in plain.evidence]
        assert any("UTF-16" in w for w in d.warnings)
