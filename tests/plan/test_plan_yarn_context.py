"""A yarn config: vLLM derives original_max_position_embeddings × factor, SGLang keeps max_position_embeddings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.registry import load_model

QWEN3_8B_YARN = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    # what Qwen's model card tells users to add for 131,072 tokens
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
}


@pytest.fixture
def yarn_model(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B_YARN))
    return str(tmp_path)


def test_the_spec_keeps_both_lengths(yarn_model: str) -> None:
    spec = load_model(yarn_model)
    assert (spec.max_position_embeddings, spec.vllm_max_model_len) == (40960, 131072)


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_vllm_0_29_defaults_to_and_accepts_original_times_factor(
    yarn_model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM ≤ 0.29 derives original_max_position_embeddings × factor (vllm/config/model.py:2452-2469, 0.29.0)."""
    v = ("--engine-version", "0.29.0")
    code, out, _ = _plan(capsys, "--model", yarn_model, "--gpu", "h100-sxm", *v, "--json")
    assert code == 0 and json.loads(out)["max_model_len"] == 131072
    code, out, _ = _plan(
        capsys, "--model", yarn_model, "--gpu", "h100-sxm", *v, "--max-model-len", "131072", "--json"
    )
    assert code == 0 and json.loads(out)["max_model_len"] == 131072
    code, _, err = _plan(capsys, "--model", yarn_model, "--gpu", "h100-sxm", *v, "--max-model-len", "131073")
    assert code == 2 and "derived max_model_len (max_position_embeddings=131072" in err


def test_vllm_0_30_on_keeps_max_position_embeddings(yarn_model: str, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM ≥ 0.30 leaves yarn unscaled (vllm/config/model.py:2468-2492, 0.30.0): 40,960, and 131,072 is refused."""
    for version in ("0.30.0", "0.33.0"):
        code, out, _ = _plan(capsys, "--model", yarn_model, "--gpu", "h100-sxm", "--engine-version", version, "--json")
        data = json.loads(out)
        assert code == 0 and data["max_model_len"] == 40960
        assert data["engine_features"]["yarn_max_model_len"]["up_to_0_29"] == 131072
        assert data["engine_features"]["yarn_max_model_len"]["from_0_30"] == 40960
        assert any("unscaled since 0.30" in note for note in data["explanations"])
        code, _, err = _plan(
            capsys, "--model", yarn_model, "--gpu", "h100-sxm", "--engine-version", version, "--max-model-len", "131072"
        )
        assert code == 2 and "derived max_model_len (max_position_embeddings=40960" in err


def test_sglang_keeps_max_position_embeddings(yarn_model: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _plan(capsys, "--model", yarn_model, "--gpu", "h100-sxm", "--engine", "sglang", "--json")
    assert code == 0 and json.loads(out)["max_model_len"] == 40960
    code, _, err = _plan(
        capsys, "--model", yarn_model, "--gpu", "h100-sxm", "--engine", "sglang", "--max-model-len", "131072"
    )
    assert code == 2 and "SGLang refuses it" in err


def test_models_without_yarn_are_unchanged() -> None:
    spec = load_model("Qwen/Qwen3-8B")
    assert (
        spec.vllm_max_position_embeddings is None and spec.vllm_max_model_len == spec.max_position_embeddings
    )
