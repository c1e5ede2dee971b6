"""Every real log in ../shared/samples/oom classified as labelled, with evidence and sensible fixes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from vramctl.diagnose import LABELS, PHASES, diagnose
from vramctl.render.jsonout import dumps

SAMPLES = Path(__file__).resolve().parents[2] / ".." / "shared" / "samples" / "oom"
GOLDEN = Path(__file__).resolve().parent / "golden"
CASES: list[dict[str, Any]] = (
    yaml.safe_load((SAMPLES / "index.yaml").read_text())["cases"] if (SAMPLES / "index.yaml").exists() else []
)
pytestmark = pytest.mark.shared("samples/oom")

# For each label, a flag (or env var) a sensible first fix touches; None: no flag is expected.
MEMORY_FLAGS = {"--gpu-memory-utilization", "--mem-fraction-static"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_oom_sample_classified_as_labelled(case: dict[str, Any]) -> None:
    d = diagnose(SAMPLES / f"{case['id']}.log")
    assert d.cause == case["root_cause"], d.why
    assert d.phase == case["phase"]
    assert d.cause in LABELS and d.phase in PHASES
    assert d.evidence, "a diagnosis shows the lines it rests on"
    lines = (SAMPLES / f"{case['id']}.log").read_text(errors="replace").splitlines()
    for ev in d.evidence:
        assert 1 <= ev.line <= len(lines)
        assert ev.text[:40] in lines[ev.line - 1], (ev.line, ev.text)
    assert d.fixes, "every diagnosis proposes at least one fix"
    assert d.do_not, "and says what not to do"
    if d.cause in ("not-oom", "host-pinned-memory-failure", "host-shm-exhausted", "host-oom-killer"):
        assert not any(f.flag in MEMORY_FLAGS and f.value for f in d.fixes), "no GPU memory setting for these"


def test_oom_sample_001_fix_lowers_utilisation_from_the_logged_numbers() -> None:
    d = diagnose(SAMPLES / "001.log")
    first = d.fixes[0]
    assert (first.flag, first.value) == ("--gpu-memory-utilization", "0.64")
    assert "31.44 GiB of 47.38 GiB free" in first.reason
    assert any("raise" in note.lower() for note in d.do_not)


def test_oom_sample_022_fix_is_the_engines_own_estimate() -> None:
    d = diagnose(SAMPLES / "022.log")
    assert (d.fixes[0].flag, d.fixes[0].value) == ("--max-model-len", "205728")
    assert d.facts["estimated_max_model_len"] == 205728
    assert [o.line for o in d.other_failures] == [7], "the second run's failure is listed, not the root"


def test_oom_sample_017_raises_utilisation_never_lowers_it() -> None:
    d = diagnose(SAMPLES / "017.log")
    util = [f for f in d.fixes if f.flag == "--gpu-memory-utilization" and f.value]
    assert util and float(util[0].value or 0) > 0.70
    assert any("lower" in note for note in d.do_not)


def test_oom_sample_037_expandable_segments_with_the_logs_variable_name() -> None:
    d = diagnose(SAMPLES / "037.log")
    assert (d.fixes[0].flag, d.fixes[0].value) == ("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert d.facts["reserved_unallocated_bytes"] == round(1.83 * 2**30)
    assert d.phase_inferred


def test_oom_sample_014_sampler_fix_halves_max_num_seqs() -> None:
    d = diagnose(SAMPLES / "014.log")
    assert (d.fixes[0].flag, d.fixes[0].value) == ("--max-num-seqs", "512")


def test_oom_sample_065_shm_size_covers_the_request() -> None:
    d = diagnose(SAMPLES / "065.log")
    assert d.fixes[0].flag == "--shm-size"
    assert int(str(d.fixes[0].value).rstrip("g")) * 2**30 > d.facts["shm_request_bytes"]


def test_oom_sample_047_vs_048_repetition_means_leak() -> None:
    assert diagnose(SAMPLES / "047.log").facts["tensor_shape"] == "256, 2, 1024"
    assert diagnose(SAMPLES / "048.log").cause == "host-kv-buffer-exhausted"


@pytest.mark.parametrize("sample", ["001", "013", "028", "037", "059"])
def test_oom_golden_json(sample: str) -> None:
    """The JSON for a few samples, frozen (regenerate with VRAMCTL_REGOLD=1 after a deliberate change)."""
    import os

    d = diagnose(SAMPLES / f"{sample}.log")
    got = json.loads(dumps(d.to_json()))
    got["source"] = f"{sample}.log"
    path = GOLDEN / f"oom_{sample}.json"
    if os.environ.get("VRAMCTL_REGOLD"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
    assert got == json.loads(path.read_text())
