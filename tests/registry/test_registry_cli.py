"""`vramctl models` and `vramctl gpus` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every column: piped output is 80 columns wide unless COLUMNS says otherwise (docs/cli.md)."""
    monkeypatch.setenv("COLUMNS", "240")


def test_models_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "meta-llama/Meta-Llama-3-8B-Instruct" in out and "8.03B" in out and "14.96 GiB" in out
    assert "mla 576" in out and "hybrid 12×w128+12×full" in out


def test_models_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_id = {m["id"]: m for m in data["models"]}
    assert len(by_id) >= 30
    llama = by_id["meta-llama/Meta-Llama-3-8B-Instruct"]
    assert llama["param_count"] == 8_030_261_248 and llama["attention"] == "gqa"
    assert by_id["deepseek-ai/DeepSeek-V3"]["mla"]["latent_dim"] == 576
    assert by_id["openai/gpt-oss-20b"]["quantization"] == "mxfp4"


def test_one_model_by_alias_shows_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "qwen3-8b"]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-8B" in out and "param_count:" in out


def test_local_model_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
        "max_position_embeddings": 512,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["models", str(tmp_path), "--json"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    # qwen2: embed + lm_head 2 × 6400; per layer q+o 2 × 4096, k+v 2 × 2048, q/k/v biases 64+32+32,
    # MLP 3 × 64 × 128, 2 norms × 64; final norm 64
    assert model["param_count"] == 2 * 6400 + 2 * (8192 + 4096 + 128 + 24576 + 128) + 64


def test_gpus_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "h100-sxm" in out and "79.18 GiB" in out and "81,559" in out and "PCIe5 x16 64 GB/s" in out
    assert main(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    h100 = next(g for g in data["gpus"] if g["id"] == "h100-sxm")
    assert h100["nvidia_smi_total_mib"] == 81559 and h100["host_link_bytes_per_s"] == 64e9
    assert len(data["gpus"]) >= 16


def test_gpu_by_driver_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpus", "NVIDIA A100-SXM4-80GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"][0]["id"] == "a100-80gb"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["models", "lama-3-8b"], "llama-3-8b"),
        (["gpus", "h1000"], "h100"),
        (["plan", "--gpu", "RTX 4060 Ti 8GB"], "--gpu-memory"),
    ],
)
def test_unknown_names_exit_2_with_suggestions(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("vramctl: error: ") and needle in err and err.count("\n") == 1


def test_bad_local_config_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text("{")
    assert main(["models", str(tmp_path / "config.json")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


DATA = Path(__file__).parent / "data"


def test_bundled_tiny_checkpoint_and_hf_cache(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", str(DATA / "tiny-llama"), "--json"]) == 0
    (folder,) = json.loads(capsys.readouterr().out)["models"]
    assert main(["models", str(DATA / "hf-cache" / "models--acme--tiny-llama"), "--json"]) == 0
    (cached,) = json.loads(capsys.readouterr().out)["models"]
    assert cached["id"] == "acme/tiny-llama"
    # 2 × 128 × 32 embeddings + 2 layers × (q,o 2 × 1024 + k,v 2 × 512 + MLP 3 × 32 × 64 + 2 norms × 32) + 32
    expected = 2 * 4096 + 2 * (2048 + 1024 + 6144 + 64) + 32
    assert folder["param_count"] == cached["param_count"] == expected
    assert folder["weight_bytes"] == 2 * expected
    assert "safetensors headers" in folder["sources"]["weight_bytes"]


def test_hf_id_from_the_cache_via_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(DATA / "hf-cache"))
    assert main(["models", "acme/tiny-llama"]) == 0
    assert "acme/tiny-llama" in capsys.readouterr().out


def test_one_model_shows_breakdown_and_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "deepseek-r1"]) == 0
    out = capsys.readouterr().out
    assert "experts 653,908,770,816" in out and "tp 8: 79.29 GiB" in out
    assert main(["models", "llama-3-8b", "--json"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert sum(model["param_breakdown"].values()) == model["param_count"]
    ranks = model["weight_bytes_per_tp_rank"]
    assert (
        ranks["1"] >= model["weight_bytes"] and ranks["2"] < ranks["1"] and set(ranks) == {"1", "2", "4", "8"}
    )
