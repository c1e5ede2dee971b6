"""MXFP4 (gpt-oss) weights below Hopper by vLLM version: the Marlin MoE path and its padded experts from 0.10.1
(`VllmRules.mxfp4_marlin_below_hopper`); before it (the gpt-oss launch build) triton_kernels with strided layouts,
whose experts load unpadded with float32 biases."""

from __future__ import annotations

import json

import pytest

from vramctl.cli.main import main
from vramctl.core.engines.vllm.rules import MXFP4_MARLIN_FROM_VLLM, rules_for
from vramctl.core.units import GiB
from vramctl.core.weights import mxfp4_backend, mxfp4_load_change
from vramctl.registry import load_model


@pytest.mark.parametrize(
    ("version", "ampere", "hopper"),
    [("0.10.0", "triton_strided", "triton"), ("0.10.1", "marlin", "marlin"), ("0.10.2", "marlin", "triton"),
     ("0.12.0", "marlin", "triton")],
)
def test_backend_by_version_on_both_sides_of_the_switch(version: str, ampere: str, hopper: str) -> None:
    r = rules_for(version)
    kw = {"marlin_on_hopper": r.mxfp4_marlin_on_hopper, "marlin_below_hopper": r.mxfp4_marlin_below_hopper}
    assert mxfp4_backend("8.6", **kw) == ampere
    assert mxfp4_backend("12.0", **kw) == ampere
    assert mxfp4_backend("9.0", **kw) == hopper
    assert mxfp4_backend("10.0", **kw) == "flashinfer"
    assert MXFP4_MARLIN_FROM_VLLM == (0, 10, 1)


def test_strided_triton_adds_only_float32_biases() -> None:
    """gpt-oss-20b: 32 experts, intermediate 2880 (a multiple of 64: no padding), hidden 2880, biases on the
    experts: each bias value gains 2 bytes (bf16 → float32), per MoE layer 32 × (2 × 2880 + 2880) × 2."""
    spec = load_model("gpt-oss-20b")
    change = mxfp4_load_change(spec, tp=1, ep=1, compute_capability="8.6", marlin_below_hopper=False)
    assert change is not None and change.backend == "triton_strided"
    assert change.per_moe_layer_bytes == 32 * (2 * 2880 + 2880) * 2
    assert "PR #22259" in change.note
    marlin = mxfp4_load_change(spec, tp=1, ep=1, compute_capability="8.6")
    assert marlin is not None and marlin.per_moe_layer_bytes > 30 * change.per_moe_layer_bytes


def _weights_gib(version: str, capsys: pytest.CaptureFixture[str]) -> float:
    code = main(["plan", "--model", "gpt-oss-20b", "--gpu", "rtx-3090", "--engine-version", version, "--json"])
    assert code == 0
    return float(json.loads(capsys.readouterr().out)["terms"]["weights"]["bytes"]) / GiB


def test_gpt_oss_20b_on_an_rtx_3090_both_sides(capsys: pytest.CaptureFixture[str]) -> None:
    """The launch image (before 0.10.1) logged 12.88 GiB of weights on an RTX 3090 (vllm-project/vllm#22331);
    the Marlin releases pad the experts (intermediate 2880 → 2944, hidden 2880 → 3072): about 0.85 GiB more."""
    before = _weights_gib("0.10.0", capsys)
    after = _weights_gib("0.10.1", capsys)
    assert abs(before - 12.88) / 12.88 < 0.01
    assert 0.8 < after - before < 0.9


def test_the_launch_wheel_keeps_the_triton_path(capsys: pytest.CaptureFixture[str]) -> None:
    """`vllm==0.10.1+gptoss` (the launch image) predates the Marlin path although its release number is 0.10.1."""
    launch = rules_for("0.10.1+gptoss")
    assert not launch.mxfp4_marlin_below_hopper and not launch.mxfp4_marlin_on_hopper
    assert rules_for("0.10.1").mxfp4_marlin_below_hopper
    assert abs(_weights_gib("0.10.1+gptoss", capsys) - _weights_gib("0.10.0", capsys)) < 1e-9
