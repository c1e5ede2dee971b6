"""The timeline ring: constant disk use, readable after a crash, damage refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.watch.test_trends import BASE, series
from vramctl.watch.ring import RingRecorder, TimelineError, previous_segment, read_timeline


def _record(path: Path, n: int, max_samples: int = 20) -> None:
    rec = RingRecorder(path, max_samples=max_samples, fsync=False)
    for s in series([BASE + i for i in range(n)]):
        rec.append(s)
    rec.close()


def test_disk_use_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    sizes = []
    for n in (40, 400, 2000):
        _record(path, n)
        sizes.append(path.stat().st_size + previous_segment(path).stat().st_size)
        timeline = read_timeline(path)
        assert 10 < len(timeline.samples) <= 20
        assert timeline.samples[-1].term("transient") == series([BASE + n - 1])[0].term("transient")
    assert max(sizes) <= 1.05 * min(sizes)


def test_a_crash_mid_line_leaves_a_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    _record(path, 15)
    with open(path, "ab") as handle:
        handle.write(b'{"t": 1015.0, "status": "up", "eng')  # what a kill during write() leaves
    timeline = read_timeline(path)
    assert timeline.dropped_partial_lines == 1 and len(timeline.samples) == 15


def test_a_killed_recorder_leaves_a_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    code = (
        "import sys, os, signal\n"
        "from tests.watch.test_trends import series, BASE\n"
        "from vramctl.watch.ring import RingRecorder\n"
        f"rec = RingRecorder({str(path)!r}, max_samples=50)\n"
        "for i, s in enumerate(series([BASE + i for i in range(30)])):\n"
        "    rec.append(s)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], check=False)
    timeline = read_timeline(path)
    assert len(timeline.samples) == 30


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda b: b[: b.index(b"\n") // 2], "truncated"),
        (lambda b: b"", "empty or truncated"),
        (lambda b: b.replace(b'"status":"up"', b'"status":"up', 1), "corrupt"),
        (lambda b: b.replace(b'"vramctl_timeline":1', b'"something":1', 1), "not a vramctl timeline"),
        (lambda b: b.split(b"\n", 1)[0] + b"\n", "no complete sample"),
    ],
)
def test_damage_is_refused(tmp_path: Path, damage: object, words: str) -> None:
    path = tmp_path / "tl.jsonl"
    _record(path, 8)
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with pytest.raises(TimelineError, match=words):
        read_timeline(path)


def test_out_of_order_segments_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    _record(path, 30)
    prev = previous_segment(path)
    a, b = path.read_bytes(), prev.read_bytes()
    path.write_bytes(b)
    prev.write_bytes(a)
    with pytest.raises(TimelineError, match="out of order"):
        read_timeline(path)


def test_never_writes_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep")
    link = tmp_path / "tl.jsonl"
    os.symlink(target, link)
    with pytest.raises(Exception, match="not a regular file"):
        RingRecorder(link)
    assert target.read_text() == "keep"


def test_a_second_run_continues_the_ring(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    _record(path, 7, max_samples=100)
    rec = RingRecorder(path, max_samples=100, fsync=False)
    for s in series([BASE] * 3, dt=1.0):
        rec.append(s.__class__(s.t + 100, s.status, s.engine, s.devices, s.terms))
    rec.close()
    timeline = read_timeline(path)
    assert len(timeline.samples) == 10 and timeline.last_seq == 9


def test_a_damaged_ring_is_not_continued(tmp_path: Path) -> None:
    path = tmp_path / "tl.jsonl"
    path.write_text("garbage\n")
    with pytest.raises(Exception, match="move it away"):
        RingRecorder(path)
    assert path.read_text() == "garbage\n"


_VALID: dict[str, bytes] = {}


def _valid_bytes(tmp: Path) -> bytes:
    if "ring" not in _VALID:
        path = tmp / "valid.jsonl"
        _record(path, 6, max_samples=100)
        _VALID["ring"] = path.read_bytes()
    return _VALID["ring"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damage_is_a_timeline_error_or_a_readable_ring(tmp_path: Path, data: st.DataObject) -> None:
    original = _valid_bytes(tmp_path)
    cut = data.draw(st.integers(0, len(original)))
    pos = data.draw(st.integers(0, max(0, cut - 1)))
    junk = data.draw(st.binary(max_size=8))
    damaged = original[:pos] + junk + original[pos + len(junk) : cut]
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(damaged)
    try:
        timeline = read_timeline(path)
    except TimelineError as exc:
        assert "\n" not in str(exc)
    else:
        assert 1 <= len(timeline.samples) <= 6


@pytest.mark.parametrize(
    "patch",
    [{"engine": []}, {"engine": "x"}, {"devices": {"a": 1}}, {"devices": [{"kind": "cpu"}]}, {"terms": {"free": True}},
     {"t": "noon"}, {"status": "sleeping"}, {"devices": [7]}],
)
def test_wrong_shapes_are_corrupt_samples(tmp_path: Path, patch: dict[str, object]) -> None:
    import json

    path = tmp_path / "tl.jsonl"
    _record(path, 2, max_samples=100)
    lines = path.read_text().splitlines()
    sample = json.loads(lines[1])
    sample.update(patch)
    lines[1] = json.dumps(sample)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TimelineError, match="corrupt sample"):
        read_timeline(path)
