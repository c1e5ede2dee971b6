"""The fast line filter (`startup_prefilter`) must never change a report: every format needle holds an
anchor, and on every sample log the filtered parse equals the full parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramctl.diagnose.reader import iter_log_lines, iter_matching_lines
from vramctl.diagnose.startup import (
    _SETTINGS_NEEDLES,
    PREFILTER_ANCHORS,
    PREFILTER_LOWER_ANCHORS,
    parse_startup_log,
    startup_prefilter,
)
from vramctl.diagnose.startup_formats import ALL_FORMATS, RUN_START_NEEDLES, VERSION_PATTERNS

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples" / "startup"
COLLECTED = Path(__file__).resolve().parents[1] / "fixtures" / "startup_collected"


# Needles without an anchor of their own, and the anchor every line they appear in carries.
ANCHORED_BY: dict[str, str] = {
    "api_server": "`python` or `vllm` (a command line)",
    "with config:": "`LLM` (Initializing a V1 LLM engine ... with config:)",
    "gpu_memory_utilization": "none: the 0.6.5-dev table line follows `total_gpu_memory …GiB` (context_after=1)",
    "blocks: ": "`CPU blocks` (# GPU blocks: N, # CPU blocks: M)",
    "graph end.": "`Capture`",
    "hierarchical KV host pool:": "`Allocating`",
    "is equivalent to --gpu-memory-utilization": "`CUDA graph` (CUDA graph memory profiling is enabled)",
    "maximum number of tokens that can be stored in KV cache": "`in KV cache (`",
    "with num_gpu_blocks_override=": "`Overriding num_gpu_blocks`",
    "Current kv cache memory in use is": "`Free memory` (the suggestion line starts with it)",
    "padding layers, may waste at most": "`KV cache memory` (… may waste at most 5.00% KV cache memory)",
    "to fit in": "`Free memory` (the suggestion line starts with it)",
    "to fully utilize": "`Free memory` (the suggestion line starts with it)",
}


def test_every_needle_holds_an_anchor() -> None:
    anchors = PREFILTER_ANCHORS + PREFILTER_LOWER_ANCHORS
    needles = {f.needle for f in ALL_FORMATS if f.needle != "|"}
    needles |= set(RUN_START_NEEDLES) | {n for _, n, _ in VERSION_PATTERNS} | set(_SETTINGS_NEEDLES)
    by_unit = {
        f.needle
        for f in ALL_FORMATS
        if f.size_unit in ("GiB", "GB") and ("GiB" in f.pattern.pattern or " GB" in f.pattern.pattern)
    }
    lacking = sorted(
        n
        for n in needles
        if not any(a in n.encode() for a in anchors) and n not in by_unit and n not in ANCHORED_BY
    )
    assert lacking == []


@pytest.mark.parametrize(
    "path",
    sorted(SAMPLES.glob("*.log")) + sorted(COLLECTED.glob("*.log")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_filtered_parse_equals_full_parse(path: Path) -> None:
    full = parse_startup_log(iter_log_lines(path)).to_json()
    fast = parse_startup_log(iter_matching_lines(path, startup_prefilter(), context_after=1)).to_json()
    assert fast == full
