"""Docs examples are executed: every `$ vramctl ...` line in a ```console block of docs/*.md and README.md runs
from the project alone (no ../shared), through this interpreter (`python -m vramctl`), and is checked:

- its exit code: 0, or the one its comment names (`# exit 1: …`);
- its key output: the lines the block shows under it, if any, must appear in what it prints (whitespace
  folded); else what each command always prints (`verdict` for plan, `cause` for explain-oom, …), and with
  `--json` one JSON object holding that command's key.

Commands that need a GPU are skipped."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_MARKERS = ("--device cuda", "--device=cuda", "gpu-check")
EXIT_COMMENT = re.compile(r"#\s*exit (\d)\b")

# What each command always prints: (text, --json key). Checked when the docs show no output of their own.
KEY_OUTPUT: dict[str, tuple[str, str]] = {
    "plan": ("verdict", "verdict"),
    "diff": ("vramctl diff", "kind"),
    "check": ("vramctl check", "passed"),
    "explain-oom": ("phase", "cause"),
    "read-log": ("read-log", "terms"),
    "tiers plan": ("tier", "tiers"),
    "tiers simulate": ("hit", "tiers"),
    "tiers bench": ("GB/s", "tiers"),
    "models": ("model", "models"),
    "gpus": ("GPU", "gpus"),
    "profile": ("KV", "terms"),
    "suggest": ("KV", "fit_requested"),
    "validate": ("KV pool", "verdict"),
}


def _examples() -> list[tuple[str, str, tuple[str, ...]]]:
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for block in re.findall(r"```console\n(.*?)```", page.read_text(), flags=re.S):
            lines = block.splitlines()
            for n, line in enumerate(lines):
                if not line.startswith("$ vramctl"):
                    continue
                shown: list[str] = []
                for after in lines[n + 1 :]:
                    if after.startswith("$ "):
                        break
                    if after.strip():
                        shown.append(after)
                found.append((str(page.relative_to(ROOT)), line[2:].strip(), tuple(shown)))
    return found


EXAMPLES = _examples()


def _fold(text: str) -> str:
    return " ".join(text.split())


def _command_of(argv: list[str]) -> str:
    words = [w for w in argv[1:] if not w.startswith("-")]
    if words and words[0] == "tiers" and len(words) > 1:
        return f"tiers {words[1]}"
    return words[0] if words else ""


def test_docs_have_examples() -> None:
    assert len(EXAMPLES) >= 10


def test_every_example_command_has_a_key_output() -> None:
    for page, command, _ in EXAMPLES:
        argv = shlex.split(command, comments=True)
        assert _command_of(argv) in KEY_OUTPUT, f"{page}: {command}: add its key output to KEY_OUTPUT"


@pytest.mark.parametrize(
    ("page", "command", "shown"), EXAMPLES, ids=[f"{p}:{c[:60]}" for p, c, _ in EXAMPLES]
)
def test_docs_example_runs(page: str, command: str, shown: tuple[str, ...], tmp_path: Path) -> None:
    if any(marker in command for marker in GPU_MARKERS):
        pytest.skip("needs a CUDA device")
    argv = shlex.split(command, comments=True)  # README's examples end in `# what it shows`
    expected = EXIT_COMMENT.search(command)
    code = int(expected.group(1)) if expected else 0
    script = command.split(" #", 1)[0] if "|" in command or ">" in command else None
    env = {**os.environ, "VRAMCTL_DOCS_TMP": str(tmp_path), "COLUMNS": "120", "PY": sys.executable}
    if script is not None:
        run = ["bash", "-c", 'vramctl() { "$PY" -m vramctl "$@"; }; ' + script]
    else:
        run = [sys.executable, "-m", "vramctl", *argv[1:]]
    result = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    where = f"{page}: {command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert "Traceback" not in result.stderr, where
    assert result.returncode == code, f"exit {result.returncode}, the docs say {code}: {where}"
    out = _fold(result.stdout)
    if code == 2:  # a bad-input example: its one error line is the answer
        assert result.stderr.startswith("vramctl: error: ") and len(result.stderr.splitlines()) == 1, where
        return
    if shown:
        for line in shown:
            assert _fold(line) in out, f"the docs show {line!r}, the command does not print it: {where}"
        return
    text_key, json_key = KEY_OUTPUT[_command_of(argv)]
    if "--json" in argv and script is None:
        data = json.loads(result.stdout)
        assert isinstance(data, dict) and json_key in data, where
    elif "--markdown" not in argv and script is None:
        assert text_key.lower() in out.lower(), f"{text_key!r} not printed: {where}"
    else:
        assert out, where
