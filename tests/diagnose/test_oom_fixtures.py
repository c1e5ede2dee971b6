"""Hand-written logs for labels the real samples do not cover (tests/fixtures/oom/index.yaml says where
each message format comes from), plus the catalogue's contract: every taxonomy label reachable."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from vramctl.diagnose import LABELS, PHASES, diagnose, load_catalogue

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "oom"
TAXONOMY = ROOT / ".." / "shared" / "taxonomy.md"
CASES: list[dict[str, Any]] = yaml.safe_load((FIXTURES / "index.yaml").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_oom_fixture_classified(case: dict[str, Any]) -> None:
    d = diagnose(FIXTURES / case["file"])
    assert (d.cause, d.phase) == (case["cause"], case["phase"]), (d.signature, d.why)
    if d.cause == "no-failure":
        assert not d.evidence and not d.fixes
    else:
        assert d.evidence and d.fixes and d.do_not


@pytest.mark.shared("taxonomy.md")
def test_oom_labels_match_the_taxonomy() -> None:
    labels = set(re.findall(r"^- \*\*([a-z0-9-]+)\*\*", TAXONOMY.read_text(), flags=re.M))
    assert labels == set(LABELS)
    text = TAXONOMY.read_text()
    phases = text[text.index("Phases:") :].split("\n\n", 1)[0]
    assert set(re.findall(r"`([a-z-]+)`", phases)) == set(PHASES)


def test_oom_every_label_is_reachable_by_a_signature_or_a_rule() -> None:
    cat = load_catalogue()
    reachable = {"no-failure"}
    for sig in cat.signatures:
        if sig.cause:
            reachable.add(sig.cause)
        reachable.update(r.cause for r in sig.refine if r.cause)
        if sig.repeat:
            reachable.add(sig.repeat.cause)
    assert reachable == set(LABELS)


@pytest.mark.shared("samples/oom")
def test_oom_every_label_is_produced_by_a_real_or_fixture_log() -> None:
    index = yaml.safe_load((ROOT / ".." / "shared" / "samples" / "oom" / "index.yaml").read_text())["cases"]
    produced = {c["root_cause"] for c in index} | {c["cause"] for c in CASES}
    assert produced == set(LABELS), sorted(set(LABELS) - produced)


def test_oom_catalogue_keys_are_covered_by_anchors() -> None:
    cat = load_catalogue()
    for key in cat.key_phrases():
        assert any(a.decode() in key for a in cat.all_anchors), key
    for sig in cat.signatures:
        if sig.kind == "failure" and not sig.head_only:
            assert any(a.decode() in k for k in sig.keys for a in cat.failure_anchors), sig.id


def test_oom_not_oom_never_suggests_memory_settings() -> None:
    for case in CASES:
        if case["cause"] != "not-oom":
            continue
        d = diagnose(FIXTURES / case["file"])
        assert d.what
        assert all(f.flag not in ("--gpu-memory-utilization", "--mem-fraction-static") for f in d.fixes)


def test_oom_version_change_in_one_log_is_a_regression_with_the_failing_version() -> None:
    d = diagnose(FIXTURES / "vllm_upgrade_two_runs.log")
    assert d.cause == "version-regression" and d.engine_version == "0.6.4.post1"
    assert d.fixes[0].action.startswith("pin vllm 0.6.3.post1")
