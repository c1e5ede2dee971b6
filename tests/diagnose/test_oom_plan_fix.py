"""A fix value checked with plan: the deployment the log describes (model, device total, flags) is planned and the
smallest setting that makes it start is the fix (vramctl/diagnose/planfix.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vramctl.diagnose import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "oom"
LOG = FIXTURES / "vllm_weights_tp1_plan_checked.log"


def test_weights_oom_without_a_parallel_size_gets_the_tp_plan_says_fits() -> None:
    d = diagnose(LOG)
    assert d.cause == "weights-do-not-fit"
    first = d.fixes[0]
    # 70B in bf16 on one 79 GiB card: at TP 2 the plan leaves no KV cache for 8192 tokens, at TP 4 it fits
    assert (first.flag, first.value) == ("--tensor-parallel-size", "4")
    assert "checked with plan" in first.reason and "Llama-3.1-70B-Instruct" in first.reason


def test_plan_checked_value_is_a_json_number_from_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "explain-oom", "--json", str(LOG)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    fix = json.loads(out.stdout)["fixes"][0]
    assert fix["flag"] == "--tensor-parallel-size" and fix["value"] == 4


def test_from_standard_input_the_log_cannot_be_reread_and_the_default_value_stands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "vramctl", "explain-oom", "--json", "-"],
        input=LOG.read_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    fixes = json.loads(out.stdout)["fixes"]
    assert fixes[0]["flag"] == "--tensor-parallel-size" and fixes[0]["value"] == 2
    assert "checked with plan" not in fixes[0]["reason"] and "no parallel size" in fixes[0]["reason"]


def test_a_model_the_registry_does_not_know_gives_no_plan_fix(tmp_path: Path) -> None:
    log = tmp_path / "unknown_model.log"
    log.write_text(LOG.read_text().replace("meta-llama/Llama-3.1-70B-Instruct", "acme/not-a-model-70B"))
    d = diagnose(log)
    assert d.cause == "weights-do-not-fit"
    assert not any("checked with plan" in f.reason for f in d.fixes)
    assert d.fixes[0].value == "2"
