"""Audit of issue 2 item 2: quantised checkpoints (AWQ, GPTQ, MXFP4) in a local folder — the weights are the exact
bytes of the safetensors headers, read without the tensor data, and reach `vramctl plan --json`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.registry.test_registry_local import ELEMENT, TINY, tiny_tensors, write_safetensors
from vramctl.cli.main import main
from vramctl.core.weights import rope_cache_bytes
from vramctl.registry import load_model


def _packed(config: dict[str, Any], method: str) -> dict[str, tuple[str, list[int]]]:
    """The tiny Llama with every linear layer replaced by a 4-bit packed form of `method`."""
    out: dict[str, tuple[str, list[int]]] = {}
    group = 32
    for name, (dtype, shape) in tiny_tensors(config).items():
        is_linear = ".layers." in name and name.endswith("proj.weight")
        if not is_linear:
            out[name] = (dtype, shape)
            continue
        rows, cols = shape  # [out, in]
        base = name.removesuffix(".weight")
        if (
            method == "awq"
        ):  # qweight [in, out / 8] int32, qzeros [in / g, out / 8] int32, scales [in / g, out] f16
            out[base + ".qweight"] = ("I32", [cols, rows // 8])
            out[base + ".qzeros"] = ("I32", [cols // group, rows // 8])
            out[base + ".scales"] = ("F16", [cols // group, rows])
        elif (
            method == "gptq"
        ):  # qweight [in / 8, out], qzeros [in / g, out / 8], scales [in / g, out], g_idx [in]
            out[base + ".qweight"] = ("I32", [cols // 8, rows])
            out[base + ".qzeros"] = ("I32", [cols // group, rows // 8])
            out[base + ".scales"] = ("F16", [cols // group, rows])
            out[base + ".g_idx"] = ("I32", [cols])
        else:  # mxfp4: blocks [out, in / 32, 16] u8, scales [out, in / 32] u8
            out[base + ".weight_blocks"] = ("U8", [rows, cols // 32, 16])
            out[base + ".weight_scales"] = ("U8", [rows, cols // 32])
    return out


QUANT = {
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True, "version": "gemm"},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": True},
    "mxfp4": {"quant_method": "mxfp4"},
}


@pytest.mark.parametrize("method", sorted(QUANT))
def test_quantised_folder_weights_are_the_header_bytes(
    tmp_path: Path, method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = {**TINY, "torch_dtype": "bfloat16", "quantization_config": QUANT[method]}
    folder = tmp_path / method
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors = _packed(cfg, method)
    data = write_safetensors(folder / "model.safetensors", tensors)
    assert data == sum(math.prod(s) * ELEMENT[d] for d, s in tensors.values())
    spec = load_model(str(folder))
    assert spec.quantization == method
    assert spec.weight_bytes == data
    # smaller than the bf16 checkpoint of the same shapes
    assert data < 2 * sum(math.prod(s) for _, s in tiny_tensors(cfg).values())
    assert main(["plan", "--json", "--model", str(folder), "--gpu", "l4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"]["weight_bytes"] == data
    assert out["model"]["quantization"] == method
    # On the GPU vLLM pads the embedding and lm_head rows to a multiple of 64 (100 → 128 rows here):
    # at most 28 rows × 64 hidden × 2 B × 2 tensors above the checkpoint.
    # Plus the rotary embedding's cos/sin cache vLLM builds with the model (vramctl.core.weights.rope_cache_bytes).
    padding = (128 - 100) * 64 * 2 * 2 + rope_cache_bytes(spec)
    assert data < out["terms"]["weights"]["bytes"] <= data + padding
    if method != "mxfp4":  # the packing formula matches these headers byte for byte
        assert out["terms"]["weights"]["bytes"] == data + padding
