"""vLLM 0.30's yarn rule for the derived max_model_len (vramctl.core.engines.vllm_yarn), unit level."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vramctl.core.engines import vllm_yarn as yarn
from vramctl.registry import load_model


def test_unscaled_length_only_for_yarn_family() -> None:
    cfg = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert yarn.unscaled_yarn_len(cfg, "qwen3", 40960, 131072) == 40960
    assert yarn.unscaled_yarn_len(cfg, "qwen3", 131072, 131072) is None  # both rules agree (gpt-oss shape)
    assert yarn.unscaled_yarn_len(cfg, "gemma3", 40960, 131072) is None
    deepseek = {"rope_scaling": {"type": "deepseek_yarn", "factor": 4.0}}
    assert yarn.unscaled_yarn_len(deepseek, "deepseek_v3", 4096, 16384) == 4096
    linear = {"rope_scaling": {"type": "linear", "factor": 4.0}}
    assert yarn.unscaled_yarn_len(linear, "llama", 4096, 16384) is None


@pytest.mark.parametrize(("version", "expected"), [("0.29.0", 131072), ("0.30.0", 40960), ("0.33.0", 40960)])
def test_derived_length_by_version(version: str, expected: int) -> None:
    model = replace(load_model("Qwen/Qwen3-8B"), vllm_max_position_embeddings=131072, vllm_unscaled_yarn_len=40960)
    assert yarn.derived_max_model_len(model, version) == expected
    assert yarn.model_for_version(model, version).vllm_max_model_len == expected


def test_a_shorter_unscaled_length_lowers_the_model_view() -> None:
    """deepseek_yarn in 0.29 multiplied the length itself; from 0.30 the config's own length is the limit."""
    model = replace(load_model("Qwen/Qwen3-8B"), max_position_embeddings=16384, vllm_unscaled_yarn_len=4096)
    assert yarn.model_for_version(model, "0.29.0") is model
    assert yarn.model_for_version(model, "0.30.0").vllm_max_model_len == 4096


def test_models_without_yarn_are_untouched() -> None:
    model = load_model("Qwen/Qwen3-8B")
    assert model.vllm_unscaled_yarn_len is None
    assert yarn.model_for_version(model, "0.33.0") is model
    assert yarn.note(model, "0.33.0") is None
