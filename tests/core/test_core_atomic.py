"""Files are written atomically, with the mode a plain open() would give."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from vramctl.core.atomic import write_text_atomic


def test_atomic_write_gives_a_normal_mode_and_keeps_an_existing_one(tmp_path: Path) -> None:
    target = tmp_path / "profile.json"
    old = os.umask(0o022)
    try:
        write_text_atomic(target, "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    target.chmod(0o600)
    write_text_atomic(target, '{"a": 1}')
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and target.read_text() == '{"a": 1}'
    assert [p.name for p in target.parent.iterdir()] == ["profile.json"]
