"""`vramctl models` on a hybrid: the state kind in `attention`, a breakdown that sums to the exact count."""

from __future__ import annotations

import pytest

from vramctl.registry import load_model
from vramctl.registry.describe import model_to_json


@pytest.mark.parametrize(
    ("name", "kind"),
    [("qwen3-next-80b-a3b", "gqa+gated_delta_net"), ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "gqa+mamba2")],
)
def test_hybrid_description(name: str, kind: str) -> None:
    data = model_to_json(load_model(name))
    assert data["attention"] == kind
    assert sum(data["param_breakdown"].values()) == data["param_count"]
    assert set(data["param_breakdown"]) == {"embedding", "lm_head", "decoder_layers"}


def test_dense_models_keep_their_parts() -> None:
    data = model_to_json(load_model("llama-3-8b"))
    assert data["attention"] == "gqa" and "decoder_layers" not in data["param_breakdown"]
    assert sum(data["param_breakdown"].values()) == data["param_count"] == 8_030_261_248
