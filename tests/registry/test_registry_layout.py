"""The profiles are found in a wheel layout (vramctl/profiles, via pyproject's force-include) as well as
in the repository (editable install)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import vramctl

PACKAGE = Path(vramctl.__file__).resolve().parent
REPO = PACKAGE.parent


def test_wheel_layout_finds_bundled_profiles(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "vramctl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "profiles", site / "vramctl" / "profiles")
    code = (
        "import vramctl.registry as r; from vramctl.registry._files import profiles_dir;"
        "print(profiles_dir()); print(r.load_model('llama-3-8b').param_count)"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    )
    lines = out.stdout.split()
    assert lines == [str(site / "vramctl" / "profiles"), "8030261248"]


def test_editable_layout_uses_the_repository_profiles() -> None:
    from vramctl.registry._files import profiles_dir

    assert profiles_dir() in (REPO / "profiles", PACKAGE / "profiles")
