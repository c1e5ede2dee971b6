"""Line shapes found while evaluating read-log on real start-up logs outside the repository. Each line is built
from the engine's format string (cited in startup_formats.py) with invented numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.core.units import GiB
from vramctl.diagnose.startup import parse_startup_log, startup_prefilter

_FILTER = startup_prefilter()


def _parse(lines: list[str]):  # type: ignore[no-untyped-def]
    for line in lines:  # every line that matters passes the fast filter
        assert _FILTER.search(line.encode()) is not None, line
    return parse_startup_log(lines)


def test_readlog_cuda_graph_profiling_both_modes() -> None:
    rep = _parse(
        [
            "(Worker_TP0 pid=90) INFO 06-22 11:17:44 [gpu_model_runner.py:6471] Profiling CUDA graph memory: "
            "PIECEWISE=35 (largest=256), FULL=19 (largest=128)"
        ]
    )
    got = {o.key: o.value for o in rep.all_observations}
    assert got["cuda_graphs_profiled"] == 35 and got["cuda_graph_largest_size"] == 256
    assert got["cuda_graphs_profiled_second_mode"] == 19 and got["cuda_graph_largest_size_second_mode"] == 128


def test_readlog_one_mode_has_no_second_mode() -> None:
    rep = _parse(
        [
            "INFO 06-22 11:17:44 [gpu_model_runner.py:6471] Profiling CUDA graph memory: PIECEWISE=16 (largest=16)"
        ]
    )
    assert "cuda_graphs_profiled_second_mode" not in {o.key for o in rep.all_observations}


@pytest.mark.parametrize(
    "line",
    [
        "Capturing batches (avail_mem=4.12 GB):   0%|          | 0/8 [00:00<?, ?it/s]",
        "Capturing batches (bs=8 avail_mem=4.12 GB):   0%|          | 0/8 [00:00<?, ?it/s]",
    ],
)
def test_readlog_sglang_capture_progress_with_and_without_bs(line: str) -> None:
    rep = _parse(
        [
            "[2025-06-19 15:12:27] Capture cuda graph begin. This can take up to several minutes. avail mem=4.12 GB",
            line,
        ]
    )
    obs = [o for o in rep.all_observations if o.key == "graph_capture_avail"]
    assert obs and abs(obs[0].value - round(4.12 * GiB)) <= 1


def test_readlog_sleep_mode_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "sleep.log"
    log.write_text(
        "(LLMRayActor pid=77) INFO 06-20 01:36:37 worker.py:133] Sleep mode freed 38.20 GiB memory, "
        "21.45 GiB memory is still in use.\n"
    )
    rep = parse_startup_log(log.read_text().splitlines())
    got = {o.key: o.value for o in rep.all_observations}
    assert abs(got["sleep_freed"] - round(38.20 * GiB)) <= 1
    assert abs(got["sleep_still_in_use"] - round(21.45 * GiB)) <= 1
    assert rep.engine == "vllm"
    code = main(["read-log", "--json", str(log)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["engine"] == "vllm"
