"""The characterization corpus: `plan`, `check` and `tiers plan` outputs of about 80 deployments (models × cards ×
versions × engines, with EP, LoRA, fp8, hybrids, PP, auto-fit, --free-memory, host tiers) must stay byte-identical
unless a change is made on purpose (regenerate: `python scripts/characterize.py --write`, and say so in
CHANGELOG.md). It is the safety net of refactors of the engine rules."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("characterize", ROOT / "scripts" / "characterize.py")
assert _spec is not None and _spec.loader is not None
characterize = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(characterize)
CASES = characterize.load_cases()


def test_corpus_is_large_and_ids_unique() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)) >= 75


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_output_is_as_stored(case: dict[str, Any]) -> None:
    path = characterize.expected_path(case)
    assert path.exists(), f"no stored output for {case['id']}: run python scripts/characterize.py --write"
    assert characterize.run_case(case) == path.read_text(), (
        f"{case['id']} changed: if on purpose, run python scripts/characterize.py --write and note it in CHANGELOG.md"
    )
