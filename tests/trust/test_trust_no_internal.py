"""Issue 12, item 4: nothing internal. No reference files kept beside the project, no development-machine
paths, no "seed" chapter, no section numbers of documents a user does not have — in the package (code,
docstrings, data), the docs, the README, the scripts, the shipped profiles and examples, and in what the
commands print. Doc links stay inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vramctl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
LEAK = re.compile(
    r"\.\./shared|/work/|/home/[a-z]|/Users/|shared/(samples|data|reference)|[Ss]eed chapter|the seed\b|seed's"
    r"|taxonomy\.md|DESIGN\.md|\.md`? ?§|reference/[a-z_]+\.(md|yaml)"
)
SHIPPED = [
    *sorted((ROOT / "vramctl").rglob("*.py")),
    *sorted((ROOT / "vramctl").rglob("*.yaml")),
    *sorted((ROOT / "vramctl").rglob("*.toml")),
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "README.md",
    *sorted((ROOT / "scripts").glob("*")),
    *sorted((ROOT / "benchmarks").glob("*.py")),
    *sorted((ROOT / "profiles").rglob("*.yaml")),
    *sorted((ROOT / "profiles").rglob("*.json")),
    *sorted((ROOT / "examples").glob("*")),
]


def test_no_internal_reference_in_what_ships() -> None:
    found = []
    for path in SHIPPED:
        if not path.is_file():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if LEAK.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not found, "\n".join(found[:40])


def test_doc_links_stay_in_the_repository() -> None:
    bad = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://|mailto:|#", target):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                bad.append(f"{page.relative_to(ROOT)} → {target}")
    assert not bad, bad


@pytest.mark.parametrize(
    "argv",
    [
        ["plan"],
        ["plan", "--engine", "both"],
        [
            "plan",
            "--engine",
            "sglang",
            "--mem-fraction-static",
            "0.9",
            "--max-total-tokens",
            "445632",
            "--hicache-ratio",
            "2",
            "--host-memory",
            "256GiB",
        ],
        ["tiers", "plan", "llama-3-8b", "--gpu", "h100-sxm"],
        [
            "tiers",
            "simulate",
            "--trace",
            "examples/chat-trace.jsonl",
            "--gpu-capacity",
            "2e4",
        ],
        ["models", "llama-3-8b"],
        ["gpus", "rtx-3090"],
        ["read-log", "examples/vllm-startup.log", "--compare-plan"],
        ["explain-oom", "examples/vllm-oom.log"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_no_internal_reference_in_output(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.chdir(ROOT)  # the inputs by relative path: the output repeats them
    main(argv)
    main([*argv, "--json"])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert not LEAK.search(text), LEAK.search(text)
    assert "§" not in text
