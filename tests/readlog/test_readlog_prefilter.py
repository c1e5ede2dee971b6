"""The fast line filter (`startup_prefilter`) must never change a report: every format needle holds an
anchor, and on every sample log the filtered parse equals the full parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramctl.diagnose.reader import iter_log_lines, iter_matching_lines
from vramctl.diagnose.startup import (
    _SETTINGS_NEEDLES,
    PREFILTER_ANCHORS,
    parse_startup_log,
    startup_prefilter,
)
from vramctl.diagnose.startup_formats import ALL_FORMATS, RUN_START_NEEDLES, VERSION_PATTERNS

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples" / "startup"


def test_every_needle_holds_an_anchor() -> None:
    needles = {f.needle for f in ALL_FORMATS if f.needle != "|"}
    needles |= set(RUN_START_NEEDLES) | {n for _, n, _ in VERSION_PATTERNS} | set(_SETTINGS_NEEDLES)
    lacking = sorted(n for n in needles if not any(a in n.encode() for a in PREFILTER_ANCHORS))
    assert lacking == []


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.log")), ids=lambda p: p.name)
def test_filtered_parse_equals_full_parse(path: Path) -> None:
    full = parse_startup_log(iter_log_lines(path)).to_json()
    fast = parse_startup_log(iter_matching_lines(path, startup_prefilter(), context_after=1)).to_json()
    assert fast == full
