"""Issue 12, items 1 and 2: the verdict carries the estimates' bands; failing plans get checked fixes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl import registry
from vramctl.core.check import parse_spec, run_check
from vramctl.core.plan import FITS, plan
from vramctl.core.settings import ServeSettings
from vramctl.render.plan import verdict_line


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vramctl", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def test_qwen3_8b_on_4090_at_32k_is_at_risk_in_json() -> None:
    # vLLM 0.33's profile estimate (0.34's extensible KV cache keeps more free: 28k is at risk there, below)
    out = _cli("plan", "Qwen/Qwen3-8B", "--gpu", "rtx-4090", "--max-model-len", "32768", "--json",
               "--engine-version", "0.33.0")
    data = json.loads(out.stdout)
    assert data["verdict"] == "fits"  # the existing key keeps its meaning
    assert data["at_risk"] is True
    edge = data["pessimistic"]
    assert edge["verdict"] != "fits"
    assert edge["kv_tokens"] < 32768 <= data["kv_tokens"]
    assert edge["max_concurrency"] < 1 <= data["max_concurrency"]
    assert edge["max_model_len_fit"] < data["max_model_len_fit"]
    assert data["kv_cache_uncertainty_bytes"] == data["kv_cache_bytes"] - edge["kv_cache_bytes"] > 0
    assert data["terms"]["kv_cache"]["uncertainty_bytes"] == data["kv_cache_uncertainty_bytes"]
    assert data["optimistic"]["kv_tokens"] > data["kv_tokens"]


def test_the_verdict_is_the_first_line_and_says_the_pessimistic_edge() -> None:
    for length, version in (("32768", "0.33.0"), ("28672", "0.34.0")):
        out = _cli("plan", "Qwen/Qwen3-8B", "--gpu", "rtx-4090", "--max-model-len", length, "--engine-version", version)
        assert out.returncode == 0
        first = out.stdout.lstrip().splitlines()[0]
        assert first.startswith("verdict: fits if the estimates hold")
        assert "at the pessimistic edge: kv-cache-too-small-for-max-model-len" in " ".join(out.stdout.split())


def test_a_comfortable_plan_is_not_at_risk() -> None:
    r = plan(
        registry.load_model("Qwen/Qwen3-8B"), registry.load_gpu("h100-sxm"), ServeSettings(max_model_len=8192)
    )
    assert r.fits and not r.at_risk and r.pessimistic is not None and r.pessimistic.fits
    assert r.fixes == ()
    assert verdict_line(r).startswith("verdict: fits — ") and "pessimistic edge" in verdict_line(r)


@settings(max_examples=25, deadline=None)
@given(
    length=st.sampled_from([2048, 8192, 16384, 32768, 40960]),
    u=st.sampled_from([0.8, 0.85, 0.9, 0.92, 0.95]),
    gpu=st.sampled_from(["rtx-4090", "l4", "a10g", "l40s"]),
)
def test_edges_bracket_the_estimate(length: int, u: float, gpu: str) -> None:
    r = plan(
        registry.load_model("Qwen/Qwen3-8B"),
        registry.load_gpu(gpu),
        ServeSettings(max_model_len=length, gpu_memory_utilization=u),
    )
    lo, hi = r.pessimistic, r.optimistic
    assert lo is not None and hi is not None
    assert lo.kv_cache_bytes <= r.kv_cache_bytes <= hi.kv_cache_bytes
    assert lo.num_blocks <= r.num_blocks <= hi.num_blocks
    assert lo.max_model_len_fit <= r.max_model_len_fit <= hi.max_model_len_fit
    assert r.at_risk == (r.verdict == FITS and lo.verdict != FITS)
    # every fix is real: planning the changed flags fits at the pessimistic edge
    for fix in r.fixes:
        assert fix.pessimistic_kv_tokens <= fix.kv_tokens
        assert "," not in str(fix.value)


def _fix_settings(flag: str, value: object, base: ServeSettings) -> ServeSettings:
    field = {
        "--max-model-len": "max_model_len",
        "--gpu-memory-utilization": "gpu_memory_utilization",
        "--tensor-parallel-size": "tensor_parallel_size",
        "--kv-cache-dtype": "kv_cache_dtype",
        "--quantization": "quantization",
        "--max-num-seqs": "max_num_seqs",
    }[flag]
    return base.with_changes(**{field: value})


@pytest.mark.parametrize(
    ("name", "gpu", "base"),
    [
        ("Qwen/Qwen3-8B", "rtx-4090", ServeSettings(max_model_len=40960)),  # kv too small
        ("Qwen/Qwen3-8B", "rtx-4090", ServeSettings(max_model_len=32768)),  # at risk
        ("Qwen/Qwen3-32B", "h100-sxm", ServeSettings(max_model_len=40960, gpu_memory_utilization=0.5)),
        ("Qwen/Qwen3-32B", "rtx-4090", ServeSettings()),  # weights do not fit
    ],
)
def test_a_failing_vllm_plan_gets_checked_fixes(name: str, gpu: str, base: ServeSettings) -> None:
    model, card = registry.load_model(name), registry.load_gpu(gpu)
    r = plan(model, card, base)
    assert not r.fits or r.at_risk
    assert r.fixes, "a failing plan offers at least one fix"
    for fix in r.fixes:
        fixed = plan(model, card, _fix_settings(fix.flag, fix.value, base))
        assert fixed.fits and not fixed.at_risk, fix.argument
        assert fixed.kv_tokens == fix.kv_tokens
    flags = {f.flag for f in r.fixes}
    if r.verdict != "weights-do-not-fit":
        assert "--max-model-len" in flags
    # the shortest-context fix is the longest length that works: one more token does not
    for fix in r.fixes:
        if fix.flag == "--max-model-len":
            worse = plan(model, card, base.with_changes(max_model_len=int(fix.value) + 1))
            assert not worse.fits or worse.at_risk


def test_fixes_are_in_the_json_and_pasteable() -> None:
    out = _cli("plan", "Qwen/Qwen3-8B", "--gpu", "rtx-4090", "--max-model-len", "40960", "--json")
    assert out.returncode == 1
    fixes = json.loads(out.stdout)["fixes"]
    assert fixes and all(f["argument"] == f"{f['flag']} {f['value']}" for f in fixes)
    by_flag = {f["flag"]: f["value"] for f in fixes}
    assert isinstance(by_flag["--max-model-len"], int)
    for flag, value in by_flag.items():
        text = flag not in ("--kv-cache-dtype", "--quantization")
        assert isinstance(value, (int, float)) == text, flag


def test_no_negative_kv_row_and_the_table_says_which_rows_do_not_start() -> None:
    out = _cli(
        "plan",
        "Qwen/Qwen3-8B",
        "--gpu",
        "rtx-4090",
        "--max-model-len",
        "40960",
        "--gpu-memory-utilization",
        "0.7",
    )
    text = out.stdout
    kv_row = next(line for line in text.splitlines() if line.startswith("kv_cache "))
    assert "-" not in kv_row.split("│")[1] and "short by" in kv_row
    rows = [line for line in text.splitlines() if line.strip()[:4] in ("0.70", "0.85", "0.88", "0.90")]
    assert rows and all("no-start" in row or "no-kv" in row for row in rows)


def test_check_fails_an_at_risk_deployment_unless_allowed(tmp_path: Path) -> None:
    spec = (
        "model: Qwen/Qwen3-8B\ngpu: rtx-4090\nengine_version: 0.33.0\nflags:\n  max-model-len: 32768\n"
        "requirements:\n  must_fit: true\n"
    )
    model, gpu = registry.load_model("Qwen/Qwen3-8B"), registry.load_gpu("rtx-4090")
    result = run_check(parse_spec(spec), model, gpu)
    assert not result.passed
    item = next(i for i in result.items if i.requirement == "at_risk")
    assert "--max-model-len 23" in item.message and "allow_at_risk" in item.message
    allowed = run_check(parse_spec(spec + "  allow_at_risk: true\n"), model, gpu)
    assert allowed.passed
    path = tmp_path / "deploy.yaml"
    path.write_text(spec)
    out = _cli("check", str(path), "--json")
    assert out.returncode == 1
    data = json.loads(out.stdout)
    assert data["engines"][0]["at_risk"] is True
