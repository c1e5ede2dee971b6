"""vLLM's load-time MXFP4 transformations by GPU architecture (vramctl.core.weights.mxfp4_load_change)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vramctl.core.weights import mxfp4_backend, mxfp4_load_change, stage_rank_weight_bytes
from vramctl.registry import load_gpu, load_model

GiB = 2**30


@pytest.mark.parametrize(
    ("capability", "lora", "backend"),
    [
        ("8.0", False, "marlin"),
        ("8.9", False, "marlin"),
        ("9.0", False, "triton"),
        ("10.0", False, "flashinfer"),
        ("10.0", True, "triton"),
        ("12.0", False, "marlin"),
        (None, False, None),
    ],
)
def test_backend_by_architecture(capability: str | None, lora: bool, backend: str | None) -> None:
    assert mxfp4_backend(capability, lora=lora) == backend


def test_gpt_oss_on_hopper_matches_the_logged_weights() -> None:
    # vLLM logs "Model loading took 64.38 GiB" for gpt-oss-120b and 13.47 GiB for gpt-oss-20b on an H100 (TP 1).
    for name, logged_gib in (("gpt-oss-120b", 64.38), ("gpt-oss-20b", 13.47)):
        spec = load_model(name)
        change = mxfp4_load_change(spec, tp=1, ep=1, compute_capability="9.0")
        assert change is not None and change.backend == "triton"
        (planned,) = stage_rank_weight_bytes(spec, tp=1, load_change=change)
        assert abs(planned / GiB - logged_gib) / logged_gib < 0.01, (name, planned / GiB)


def test_marlin_padding_on_ampere_at_tp4() -> None:
    spec = load_model("gpt-oss-120b")
    change = mxfp4_load_change(spec, tp=4, ep=1, compute_capability="8.0")
    assert change is not None and change.backend == "marlin"
    extra = change.per_moe_layer_bytes * 36
    assert 1.9 * GiB < extra < 2.0 * GiB  # intermediate 720 → 768, hidden 2880 → 3072 per rank


def test_no_change_for_other_methods_and_unknown_gpus() -> None:
    assert mxfp4_load_change(load_model("llama-3-8b"), tp=1, ep=1, compute_capability="9.0") is None
    assert mxfp4_load_change(load_model("gpt-oss-20b"), tp=1, ep=1, compute_capability=None) is None


def test_plan_names_the_backend_in_the_weights_term() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vramctl",
            "plan",
            "gpt-oss-20b",
            "--gpu",
            "h100-sxm",
            "--max-model-len",
            "16000",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    weights = json.loads(out.stdout)["terms"]["weights"]
    assert "triton backend" in weights["formula"]
    assert abs(weights["bytes"] / GiB - 13.47) < 0.1
    assert load_gpu("a100-80gb").compute_capability == "8.0"


@pytest.mark.parametrize(
    ("version", "backend"),
    [("0.10.1", "marlin"), ("0.10.2", "triton"), ("0.11.0", "triton"), ("0.14.1", "triton")],
)
def test_hopper_backend_by_version(version: str, backend: str) -> None:
    """0.10.1 pins torch 2.7.1, so `_should_use_marlin` picks Marlin on Hopper as on Ampere."""
    from vramctl.core.engines.vllm.rules import rules_for

    marlin = rules_for(version).mxfp4_marlin_on_hopper
    assert mxfp4_backend("9.0", marlin_on_hopper=marlin) == backend
    assert mxfp4_backend("8.0", marlin_on_hopper=marlin) == "marlin"  # Ampere: Marlin in every version
    assert mxfp4_backend("10.0", marlin_on_hopper=marlin) == "flashinfer"  # SM 10.0 never takes Marlin


def test_marlin_on_hopper_pads_like_ampere() -> None:
    """The Marlin padding depends on the shapes, not the architecture: 0.10.1 on an H100 pads gpt-oss-120b's
    experts exactly as an A100 does (intermediate 2880 → 2944, hidden 2880 → 3072 at TP 1)."""
    spec = load_model("gpt-oss-120b")
    hopper = mxfp4_load_change(spec, tp=1, ep=1, compute_capability="9.0", marlin_on_hopper=True)
    ampere = mxfp4_load_change(spec, tp=1, ep=1, compute_capability="8.0")
    assert hopper is not None and ampere is not None and hopper.backend == "marlin"
    assert hopper.per_moe_layer_bytes == ampere.per_moe_layer_bytes
    moe = spec.moe
    assert moe is not None
    experts, inter, hidden = moe.num_experts, moe.moe_intermediate_size, spec.hidden_size
    nibbles = 3 * (-(-inter // 128) * 128) * (-(-hidden // 256) * 256) - 3 * inter * hidden
    assert hopper.per_moe_layer_bytes >= experts * nibbles // 2  # at least the padded 4-bit weights


def test_plan_at_0_10_1_on_hopper_uses_marlin() -> None:
    from vramctl.core.plan import plan
    from vramctl.core.settings import ServeSettings

    spec, gpu = load_model("gpt-oss-120b"), load_gpu("h100-sxm")
    old = plan(spec, gpu, ServeSettings(engine_version="0.10.1"))
    new = plan(spec, gpu, ServeSettings(engine_version="0.14.1"))
    assert (
        old.ledger.bytes_of("weights") > new.ledger.bytes_of("weights") + GiB
    )  # Marlin pads more than Triton
