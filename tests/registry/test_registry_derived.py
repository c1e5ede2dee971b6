"""Pre-quantised checkpoints named after a bundled model, planned from that base when their config is unavailable
(vramctl/registry/derived.py). No network: HF_HUB_OFFLINE=1 and an empty HF_HOME, or names without an org."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.core.errors import BadInputError
from vramctl.registry import list_models, load_model
from vramctl.registry.derived import LAYOUT_BAND, derive_from_name, match_name
from vramctl.registry.models import spec_from_config

HUB_REPOS = Path(__file__).parent / "hub" / "repos"

# Checkpoints bundled both ways: the real pre-quantised config (its own quantization_config) and the 16-bit base.
BOTH_WAYS = {
    "Qwen/Qwen3-30B-A3B-FP8": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-0.6B-FP8": "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen2.5-0.5B-Instruct-AWQ": "Qwen/Qwen2.5-0.5B-Instruct",
    "TheBloke/Mixtral-8x7B-Instruct-v0.1-AWQ": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4": "meta-llama/Llama-3.1-70B-Instruct",
    "hugging-quants/Meta-Llama-3.1-405B-Instruct-AWQ-INT4": "meta-llama/Llama-3.1-405B-Instruct",
}
TOLERANCE = 0.01
"""Derived weights within 1 % of the real config's (measured: 0.00 % on every pair above)."""


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(home), HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    return env


def _vramctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vramctl", *args], capture_output=True, text=True, env=_env(home), timeout=120
    )


@pytest.mark.parametrize(("checkpoint", "base"), BOTH_WAYS.items())
def test_derived_weights_equal_the_real_configs(checkpoint: str, base: str) -> None:
    real = load_model(checkpoint)  # the bundled profile with its own quantization_config
    derived = derive_from_name(checkpoint, "test")
    assert derived is not None and derived.derived is not None
    assert derived.derived.base == base
    assert derived.quantization == real.quantization
    assert (derived.quant_bits, derived.quant_group_size) == (real.quant_bits, real.quant_group_size)
    assert abs(derived.weight_bytes - real.weight_bytes) <= TOLERANCE * real.weight_bytes
    assert abs(derived.weight_bytes - real.weight_bytes) <= derived.derived.weight_band_bytes


def _header_bytes(repo: str) -> int:
    total = 0
    for header in (HUB_REPOS / repo).glob("*.safetensors.header"):
        doc = json.loads(header.read_text())
        total += sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in doc.items() if k != "__metadata__")
    return total


@pytest.mark.parametrize(
    ("repo", "method"),
    [("RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic", "compressed-tensors"), ("nvidia/Llama-3.2-1B-Instruct-FP8", "fp8")],
)
def test_derived_weights_against_safetensors_headers(repo: str, method: str) -> None:
    """The fake Hub's checkpoints (tests/registry/hub/make_repos.py: the public checkpoints' shapes and dtypes)."""
    derived = derive_from_name(repo, "test")
    assert derived is not None and derived.quantization == method
    exact = _header_bytes(repo)
    assert abs(derived.weight_bytes - exact) <= 0.001 * exact
    assert abs(derived.weight_bytes - exact) <= derived.derived.weight_band_bytes  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "base", "method", "bits", "group"),
    [
        ("Lorbus/Qwen3.6-27B-int4-AutoRound", "Qwen/Qwen3.6-27B", "auto-round", 4, 128),
        ("someone/Qwen3.8-27B-FP8", "Qwen/Qwen3.8-27B", "fp8", 8, 128),
        ("acme/Qwen3.6-35B-A3B-NVFP4", "Qwen/Qwen3.6-35B-A3B", "compressed-tensors", 4, 16),
        ("Qwen/Qwen2.5-72B-Instruct-AWQ", "Qwen/Qwen2.5-72B-Instruct", "awq", 4, 128),
        ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "meta-llama/Llama-3.3-70B-Instruct", "compressed-tensors", 8, None),
        ("org/Llama-3.3-70B-Instruct-FP8-Dynamic", "meta-llama/Llama-3.3-70B-Instruct", "compressed-tensors", 8, None),
        ("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", "meta-llama/Llama-3.1-70B-Instruct",
         "compressed-tensors", 8, None),
        ("x/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "meta-llama/Llama-3.1-8B-Instruct", "compressed-tensors", 4, 128),
        ("x/Qwen2.5-7B-Instruct-GPTQ-Int8", "Qwen/Qwen2.5-7B-Instruct", "gptq", 8, 128),
        ("x/Qwen2.5-7B-Instruct-GPTQ-Int4", "Qwen/Qwen2.5-7B-Instruct", "gptq", 4, 128),
        ("x/qwen3-8b-awq-g64", "Qwen/Qwen3-8B", "awq", 4, 64),
        ("x/Llama-3.2-3B-Instruct-bnb-4bit", "meta-llama/Llama-3.2-3B-Instruct", "bitsandbytes", 4, None),
        ("x/Qwen3-30B-A3B-MXFP4", "Qwen/Qwen3-30B-A3B", "mxfp4", 4, 32),
        ("qwen3-8b-awq", "Qwen/Qwen3-8B", "awq", 4, 128),
    ],
)  # fmt: skip
def test_names_map_to_base_and_method(name: str, base: str, method: str, bits: int, group: int | None) -> None:
    spec = derive_from_name(name, "test")
    assert spec is not None and spec.derived is not None
    assert (spec.derived.base, spec.quantization, spec.quant_bits, spec.quant_group_size) == (base, method, bits, group)
    assert spec.name == name and spec.param_count == load_model(base).param_count
    assert 0 < spec.weight_bytes < load_model(base).weight_bytes
    assert spec.derived.weight_band_bytes >= LAYOUT_BAND * spec.weight_bytes - 1


@pytest.mark.parametrize(
    "name",
    [
        "Qwen/Qwen3-30B-A3B-Thinking-2507-FP8",  # the base (Thinking-2507) is not bundled: another checkpoint
        "acme/Qwen3-8B-Turbo-AWQ",  # a word after the base that is not a marker
        "acme/Qwen3-8B-int4",  # int4 alone names no single layout
        "acme/Qwen3-8B-GGUF",  # GGUF: per-tensor quant types, not a layout a name fixes
        "acme/Qwen3-8B-MXFP4",  # vLLM's mxfp4 method quantises MoE experts only
        "acme/gpt-oss-20b-AWQ",  # the base is already quantised
        "acme/Qwen3-9B-AWQ",  # another size
        "acme/NotAModel-AWQ",
        "Qwen/Qwen3-8B",  # no marker at all
    ],
)
def test_names_that_do_not_derive(name: str) -> None:
    assert derive_from_name(name, "test") is None


@settings(max_examples=60, deadline=None)
@given(
    index=st.integers(min_value=0, max_value=10_000),
    marker=st.sampled_from(["AWQ", "GPTQ-Int4", "GPTQ-Int8", "FP8", "FP8-dynamic", "quantized.w8a8", "W4A16", "NVFP4",
                            "int4-AutoRound", "bnb-4bit"]),
    org=st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,12}", fullmatch=True),
)  # fmt: skip
def test_any_org_any_unquantised_base(index: int, marker: str, org: str) -> None:
    """Every unquantised bundled model + a marker, under any org: its base, fewer bytes, the same bytes as the
    base's config with the scheme's quantization_config planned the ordinary way (non-hybrids)."""
    bases = [m for m in list_models() if not m.quantization]
    base = bases[index % len(bases)]
    name = f"{org}/{base.name.rsplit('/', 1)[-1]}-{marker}"
    spec = derive_from_name(name, "test")
    assert spec is not None and spec.derived is not None, name
    assert spec.derived.base == base.name and spec.weight_bytes < base.weight_bytes
    if base.state_space is None and not base.vision_params and base.weight_bytes == load_model(base.name).weight_bytes:
        from vramctl.registry.derived import derived_config

        config = derived_config(name)
        assert config is not None
        ordinary = spec_from_config(config, where="t", name=name, param_count=base.param_count)
        assert abs(spec.weight_bytes - ordinary.weight_bytes) <= 0.001 * ordinary.weight_bytes + 64


def test_every_unquantised_base_and_marker_gives_a_sane_plan() -> None:
    """Every unquantised bundled model × every marker (hybrids whose layers the dense formula does not split,
    Nemotron-H, included): fewer bytes than the base, a positive band, never an exception."""
    markers = ["AWQ", "GPTQ-Int8", "FP8", "FP8-dynamic", "quantized.w8a8", "W4A16", "NVFP4", "int4-AutoRound", "bnb-4bit"]
    for base in (m for m in list_models() if not m.quantization):
        for marker in markers:
            spec = derive_from_name(f"org/{base.name.rsplit('/', 1)[-1]}-{marker}", "test")
            assert spec is not None and spec.derived is not None, (base.name, marker)
            assert 0 < spec.weight_bytes < base.weight_bytes, (base.name, marker)
            assert 0 < spec.derived.weight_band_bytes < spec.weight_bytes, (base.name, marker)


def test_a_bundled_quantised_prefix_is_skipped_for_its_base() -> None:
    """`Qwen3-0.6B-FP8` is bundled (block FP8); `…-FP8-dynamic` is the 16-bit base with another FP8 layout."""
    spec = derive_from_name("RedHatAI/Qwen3-0.6B-FP8-dynamic", "test")
    assert spec is not None and spec.derived is not None
    assert spec.derived.base == "Qwen/Qwen3-0.6B" and spec.derived.marker == "FP8-dynamic"
    assert spec.quantization == "compressed-tensors"


def test_match_name_prefers_the_longest_bundled_prefix() -> None:
    found = match_name("TheBloke/Mixtral-8x7B-Instruct-v0.1-AWQ")
    assert found is not None and found.base_name == "Mixtral-8x7B-Instruct-v0.1" and found.marker == "AWQ"


def test_plan_offline_says_derived_in_text_and_json(tmp_path: Path) -> None:
    name = "Lorbus/Qwen3.6-27B-int4-AutoRound"
    proc = _vramctl(tmp_path, "plan", name, "--gpu", "rtx-3090", "-tp", "2", "--max-model-len", "32768", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    derived = out["model"]["derived_from"]
    assert derived["base"] == "Qwen/Qwen3.6-27B" and derived["marker"] == "int4-AutoRound"
    assert derived["method"].startswith("auto-round int4, group 128")
    assert "HF_HUB_OFFLINE" in derived["why_config_unavailable"]
    assert f"hf download {name} config.json" in derived["exact_numbers"] and "--model PATH" in derived["exact_numbers"]
    assert out["warnings"][0].startswith(f"DERIVED, NOT READ: {name}")
    weights = out["terms"]["weights"]
    assert weights["source"] == "estimated" and weights["uncertainty_bytes"] > 0
    text = _vramctl(tmp_path, "plan", name, "--gpu", "rtx-3090", "-tp", "2", "--max-model-len", "32768")
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert "DERIVED from Qwen/Qwen3.6-27B + int4-AutoRound" in flat and "warning: DERIVED, NOT READ" in flat
    assert f"hf download {name} config.json" in flat


def test_the_band_is_wider_than_the_real_configs(tmp_path: Path) -> None:
    """The same checkpoint planned from its real (bundled) config and derived from its name: the same KV estimate,
    a wider KV band for the derived one (its weights band moves the pessimistic edge)."""
    real = _vramctl(tmp_path, "plan", "Qwen/Qwen3-30B-A3B-FP8", "--gpu", "h100", "--json")
    derived = _vramctl(tmp_path, "plan", "acme/Qwen3-30B-A3B-FP8", "--gpu", "h100", "--json")
    assert real.returncode == 0 and derived.returncode == 0, real.stderr + derived.stderr
    a, b = json.loads(real.stdout), json.loads(derived.stdout)
    assert "derived_from" not in a["model"] and "derived_from" in b["model"]
    assert a["kv_cache_bytes"] == b["kv_cache_bytes"]
    assert b["kv_cache_uncertainty_bytes"] > a["kv_cache_uncertainty_bytes"]
    assert b["pessimistic"]["kv_cache_bytes"] < a["pessimistic"]["kv_cache_bytes"]


@pytest.mark.parametrize("name", ["acme/Qwen3-8B-Turbo-AWQ", "Qwenn/Qwen2.5-73B-Instruct-AWQ"])
def test_a_name_without_a_bundled_base_is_still_one_line_exit_2(tmp_path: Path, name: str) -> None:
    proc = _vramctl(tmp_path, "plan", name, "--gpu", "h100")
    assert proc.returncode == 2, proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert f"hf download {name} config.json" in lines[0]
    # every suggestion of another quantisation or size says so
    for candidate in lines[0].split("closest bundled: ", 1)[-1].split("), "):
        if "awq" not in candidate.lower():
            assert "another quantisation" in candidate


def test_bare_name_and_models_command(tmp_path: Path) -> None:
    proc = _vramctl(tmp_path, "models", "qwen3-8b-awq", "--json")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "derived_from" in text and "Qwen/Qwen3-8B" in text


def test_hf_overrides_apply_to_a_derived_checkpoint() -> None:
    spec = load_model(
        "acme/Qwen3-8B-AWQ",
        offline=True,
        hf_overrides={"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
    )
    assert spec.quantization == "awq" and spec.vllm_max_model_len == 131072
    assert spec.derived is not None and spec.derived.base == "Qwen/Qwen3-8B"


def test_library_offline_is_derived(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = load_model("Qwen/Qwen3.8-27B-FP8")
    assert spec.derived is not None and spec.derived.base == "Qwen/Qwen3.8-27B" and spec.quantization == "fp8"
    with pytest.raises(BadInputError, match=re.escape("hf download acme/Qwen3.8-27B-Pro-FP8 config.json")):
        load_model("acme/Qwen3.8-27B-Pro-FP8")
