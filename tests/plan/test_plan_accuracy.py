"""Accuracy bookkeeping: the held-out evaluation on tests/fixtures/startup_collected, the refit decision, and
CALIBRATION's bands equal to the measured out-of-sample error (scripts/calibrate.py, docs/accuracy.md)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core.engines.vllm import estimates as est

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT.parent / "shared" / "samples" / "startup"
COLLECTED = ROOT / "tests" / "fixtures" / "startup_collected"
needs_samples = pytest.mark.skipif(not (SAMPLES / "index.yaml").exists(), reason="../shared/samples absent")


def _calibrate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vramctl_calibrate_acc", ROOT / "scripts" / "calibrate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["vramctl_calibrate_acc"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def evaluation() -> Any:
    if not (SAMPLES / "index.yaml").exists():
        pytest.skip("../shared/samples/startup not present")
    return _calibrate().evaluate(SAMPLES, COLLECTED)


@needs_samples
def test_held_out_points_are_mapped_and_planned(evaluation: Any) -> None:
    ids = {row[0].id for row in evaluation.held_rows}
    assert ids == {"c001", "c003", "c006", "c007", "c008", "c012", "c015"}
    for point, key, logged, before, _ in evaluation.held_rows:
        assert logged > 0 and before > 0, (point.id, key)


@needs_samples
def test_kv_size_to_tokens_is_exact_on_held_out_logs(evaluation: Any) -> None:
    """vLLM's 'Available KV cache memory' → 'GPU KV cache size' and SGLang's K+V size → #tokens (c006, c007,
    c008, c015): the per-token / per-block sizes of core/kv.py and the SGLang cell, within the 0.01 GiB rounding
    of the logged size plus 1.1 % (c007)."""
    rows = [r for r in evaluation.held_rows if r[1] == "kv_tokens_given_kv"]
    assert len(rows) == 4
    for point, _, logged, before, _ in rows:
        assert abs(before - logged) / logged < 0.012, point.id


@needs_samples
def test_refit_decision_and_constants(evaluation: Any) -> None:
    """The refit is taken only when it improves leave-one-out; CALIBRATION carries the chosen fit."""
    assert evaluation.refit == (evaluation.score_with_collected < evaluation.score_samples_only)
    cal = evaluation.calibration
    assert est.CALIBRATION.forward_factor == pytest.approx(cal.forward_factor, abs=0.005)
    assert est.CALIBRATION.sampler_copies_v1 == pytest.approx(cal.sampler_copies_v1, abs=0.01)
    assert est.CALIBRATION.sampler_copies_v0 == pytest.approx(cal.sampler_copies_v0, abs=0.01)


@needs_samples
def test_bands_are_the_measured_out_of_sample_error(evaluation: Any) -> None:
    """Each band is the 90th percentile of its term's out-of-sample |error| (rounded to 1 %)."""
    cal = est.CALIBRATION
    pairs = {
        "activation": (cal.activation_rel_band, cal.activation_median_error),
        "graph": (cal.graph_rel_band, cal.graph_median_error),
        "non_torch": (cal.non_torch_rel_band, cal.non_torch_median_error),
    }
    for term, (band, median) in pairs.items():
        assert band == pytest.approx(evaluation.bands[term] / 100, abs=0.006), term
        assert median == pytest.approx(evaluation.medians[term] / 100, abs=0.006), term
        assert band >= median


def test_p90_interpolates() -> None:
    cal = _calibrate()
    assert cal.p90([]) == 0.0
    assert cal.p90([5.0]) == 5.0
    assert cal.p90([float(i) for i in range(11)]) == pytest.approx(9.0)
    assert cal.p90([0.0, 10.0]) == pytest.approx(9.0)


def test_docs_carry_the_bands() -> None:
    """docs/accuracy.md states the bands CALIBRATION uses (regenerate it with scripts/calibrate.py --write)."""
    text = (ROOT / "docs" / "accuracy.md").read_text()
    cal = est.CALIBRATION
    assert f"activation_rel_band={cal.activation_rel_band:.2f}" in text
    assert f"graph_rel_band={cal.graph_rel_band:.2f}" in text
    assert f"non_torch_rel_band={cal.non_torch_rel_band:.2f}" in text
    assert "held-out" in text and "leave-one-out" in text


def test_plan_text_says_which_terms_are_estimated_and_how_good(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm"])
    out = capsys.readouterr().out
    assert code == 0
    flat = re.sub(r"\s+", " ", out)
    band = f"{est.CALIBRATION.activation_rel_band:.0%}"
    assert f"90th percentile {band}" in flat
    assert flat.count("out-of-sample error on real start-up logs") >= 3  # activation, non-torch, graphs
    for term in ("activation_peak", "non_torch", "cuda_graph"):
        assert re.search(rf"{term}\s+│[^\n]*estimated", out), term


def test_estimated_terms_carry_their_band_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    code = main(["plan", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    act = doc["terms"]["activation_peak"]
    assert act["source"] == "estimated"
    assert act["uncertainty_bytes"] == int(est.CALIBRATION.activation_rel_band * act["bytes"])
    assert "out-of-sample error" in act["formula"]
