"""Docs examples are executed: every `$ vramctl ...` line in a ```console block of docs/*.md and README.md must run
without a traceback and exit with a documented code (0..5). Commands that need a GPU are skipped."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_MARKERS = ("--device cuda", "--device=cuda", "gpu-check")


def _examples() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in re.findall(r"```console\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.splitlines():
                if line.startswith("$ vramctl"):
                    found.append((str(page.relative_to(ROOT)), line[2:].strip()))
    return found


EXAMPLES = _examples()


def test_docs_have_examples() -> None:
    assert len(EXAMPLES) >= 10


@pytest.mark.parametrize(("page", "command"), EXAMPLES, ids=[f"{p}:{c[:60]}" for p, c in EXAMPLES])
def test_docs_example_runs(page: str, command: str, tmp_path: Path) -> None:
    if any(marker in command for marker in GPU_MARKERS):
        pytest.skip("needs a CUDA device")
    if "|" in command or ">" in command:
        argv = ["bash", "-c", command]
    else:
        argv = shlex.split(command, comments=True)  # README's examples end in `# what it shows`
        exe = shutil.which("vramctl")
        assert exe is not None, "vramctl is not installed (pip install -e .)"
        argv[0] = exe
    env = {**os.environ, "VRAMCTL_DOCS_TMP": str(tmp_path), "COLUMNS": "120"}
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert "Traceback" not in result.stderr, f"{page}: {command}\n{result.stderr}"
    assert 0 <= result.returncode <= 5, f"{page}: {command} exited {result.returncode}\n{result.stderr}"
