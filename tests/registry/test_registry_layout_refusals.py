"""Layouts vramctl cannot describe are refused in one line naming what is missing, exit 2, never planned wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main

GEMMA3N: dict[str, Any] = {
    "architectures": ["Gemma3nForConditionalGeneration"],
    "model_type": "gemma3n",
    "text_config": {
        "model_type": "gemma3n_text",
        "hidden_size": 2048,
        "num_hidden_layers": 35,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "intermediate_size": 16384,
        "vocab_size": 262400,
        "vocab_size_per_layer_input": 262144,
        "hidden_size_per_layer_input": 256,
        "num_kv_shared_layers": 15,
        "max_position_embeddings": 32768,
    },
}
QWEN3_OMNI: dict[str, Any] = {
    "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
    "model_type": "qwen3_omni_moe",
    "thinker_config": {
        "model_type": "qwen3_omni_moe_thinker",
        "text_config": {"model_type": "qwen3_omni_moe_text", "hidden_size": 2048, "num_hidden_layers": 48},
    },
}


@pytest.mark.parametrize(
    ("config", "says"),
    [(GEMMA3N, "num_kv_shared_layers"), (QWEN3_OMNI, "audio encoder")],
    ids=["gemma-3n", "qwen3-omni"],
)
def test_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: dict[str, Any], says: str
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    code = main(["plan", "--model", str(tmp_path), "--gpu", "h100"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "cannot be planned" in err and says in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
