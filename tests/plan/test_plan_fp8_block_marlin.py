"""Block-FP8 checkpoints on GPUs without an FP8 GEMM (SM < 8.9): vLLM serves them through Marlin, which replaces each
Linear's float32 scale per 128 × 128 block by a 16-bit scale per 128 inputs per output column
(vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py `prepare_fp8_layer_for_marlin`): +2/128 bytes
per FP8 weight, 1.5 % of the weights, in "Model loading took". Before, the plan booked the checkpoint's scales on
every GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main

LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
}


def _weights(tmp_path: Path, gpu: str, tp: int, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA))
    assert main(["plan", "--json", "--model", str(folder), "--gpu", gpu, "-tp", str(tp)]) == 0
    term = json.loads(capsys.readouterr().out)["terms"]["weights"]
    return int(term["bytes"]), str(term.get("formula", ""))


def _marlin_extra(tp: int) -> int:
    """Per rank and layer: (n, k, split) of q, k, v, o, gate, up, down; Marlin 2 × k_rank/128 × n_rank against the
    checkpoint's 4 × n/128 × k/128 / split."""
    kv_rows = 1024 * max(1, 8 // tp) // 8
    linears = [
        (4096 // tp, 4096, 4096, 4096, tp),
        (kv_rows, 4096, 1024, 4096, 8 / max(1, 8 // tp)),
        (kv_rows, 4096, 1024, 4096, 8 / max(1, 8 // tp)),
        (4096, 4096 // tp, 4096, 4096, tp),
        (14336 // tp, 4096, 14336, 4096, tp),
        (14336 // tp, 4096, 14336, 4096, tp),
        (4096, 14336 // tp, 4096, 14336, tp),
    ]
    per_layer = sum(
        round(2 * (k // 128) * n - 4 * (rows // 128) * (cols // 128) / split)
        for n, k, rows, cols, split in linears
    )
    return 32 * per_layer


@pytest.mark.parametrize(("gpu", "tp"), [("a100-80gb", 1), ("a100-80gb", 2), ("rtx-3090", 2)])
def test_marlin_expands_the_block_scales(
    tmp_path: Path, gpu: str, tp: int, capsys: pytest.CaptureFixture[str]
) -> None:
    native, _ = _weights(tmp_path, "h100", tp, capsys)
    marlin, formula = _weights(tmp_path, gpu, tp, capsys)
    assert marlin - native == _marlin_extra(tp)
    assert 0.010 < (marlin - native) / native < 0.016  # 1.5 % of the FP8 Linears, the embeddings stay
    assert "Marlin" in formula and "prepare_fp8_layer_for_marlin" in formula


def test_ada_runs_fp8_natively(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _weights(tmp_path, "l40s", 1, capsys)[0] == _weights(tmp_path, "h100", 1, capsys)[0]
