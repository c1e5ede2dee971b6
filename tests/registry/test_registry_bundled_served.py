"""Checkpoints served with vLLM / SGLang in 2025-26, bundled from their exact public config.json (the profile's
`sources` say where each config came from): each answers to its HF id and aliases, its parameter count is within 1 %
of the figure its model card or Hub page publishes (the safetensors total where one is known), its KV bytes per token
equal the value derived by hand from the config, and `vramctl plan <name>` works offline, without importing
huggingface_hub.

KV bytes per token (bf16 cache, 2 bytes) = layers x 2 (K and V) x KV heads per rank x head_dim x 2; per rank the KV heads
are max(1, kv_heads // tp) (vLLM `get_num_kv_heads`). All of these are GQA with one K and one V of head_dim per KV head
and layer (vLLM qwen3_moe.py, qwen3_vl.py, qwen3_vl_moe.py): no MLA, no window.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.core.kv import kv_bytes_per_token
from vramctl.core.params import active_param_count
from vramctl.registry import list_models, load_model

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    hf_id: str
    alias: str
    architecture: str
    published_params: float | int
    """The total the model card states (a float, rounded as published) or the checkpoint's exact safetensors total
    (an int: from its model.safetensors.index.json, a tensor-by-tensor inventory, or a bundled checkpoint of the same
    shapes)."""
    published_active: float | None
    """Activated parameters per token as the model card states them (MoE), None for a dense model."""
    layers: int
    kv_heads: int
    head_dim: int
    gpu: str
    tp: int
    max_model_len: int

    def kv_per_token(self, tp: int = 1) -> int:
        return self.layers * 2 * max(1, self.kv_heads // tp) * self.head_dim * 2


CASES = [
    # model card: "30.5B in total and 3.3B activated"; safetensors total 61,064,245,248 bytes of bf16 (below)
    Case(
        "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "qwen3-coder-30b-a3b",
        "Qwen3MoeForCausalLM",
        61_064_245_248 // 2,
        3.3e9,
        48,
        4,
        128,
        "h100-sxm",
        1,
        32768,
    ),
    # model card: "480B in total, 35B activated"; 62 layers, 96 / 8 heads
    Case(
        "Qwen/Qwen3-Coder-480B-A35B-Instruct",
        "qwen3-coder-480b",
        "Qwen3MoeForCausalLM",
        480e9,
        35e9,
        62,
        8,
        128,
        "h200",
        8,
        32768,
    ),
    # safetensors total 31,070,754,032 (the Hub page: 31.07B params)
    Case(
        "Qwen/Qwen3-VL-30B-A3B-Instruct",
        "qwen3-vl-30b-a3b",
        "Qwen3VLMoeForConditionalGeneration",
        31_070_754_032,
        3.3e9,  # the Qwen3-30B-A3B decoder's "3.3B activated", plus the tower below
        48,
        4,
        128,
        "h100-sxm",
        1,
        32768,
    ),
    # the Qwen3-32B decoder (Hub total 32,762,123,264) + the tower with mergers into 5120 (595,266,800)
    Case(
        "Qwen/Qwen3-VL-32B-Instruct",
        "qwen3-vl-32b",
        "Qwen3VLForConditionalGeneration",
        32_762_123_264 + 595_266_800,
        None,
        64,
        8,
        128,
        "h100-sxm",
        2,
        32768,
    ),
    # safetensors total 235,670,022,896 = the Qwen3-235B-A22B decoder (Hub total 235,093,634,560) + Qwen3-VL-8B's
    # tower (576,388,336)
    Case(
        "Qwen/Qwen3-VL-235B-A22B-Instruct",
        "qwen3-vl-235b-a22b",
        "Qwen3VLMoeForConditionalGeneration",
        235_670_022_896,
        22e9,
        94,
        4,
        128,
        "h100-sxm",
        8,
        32768,
    ),
    # model card: "30.5B in total and 3.3B activated"; the shapes of Qwen/Qwen3-30B-A3B (Hub total 30,532,122,624)
    Case(
        "Qwen/Qwen3-30B-A3B-Instruct-2507",
        "qwen3-30b-a3b-instruct-2507",
        "Qwen3MoeForCausalLM",
        30_532_122_624,
        3.3e9,
        48,
        4,
        128,
        "h100-sxm",
        1,
        65536,
    ),
    # model card: "235B in total and 22B activated"; the shapes of Qwen/Qwen3-235B-A22B (Hub total 235,093,634,560)
    Case(
        "Qwen/Qwen3-235B-A22B-Instruct-2507",
        "qwen3-235b-a22b-instruct-2507",
        "Qwen3MoeForCausalLM",
        235_093_634_560,
        22e9,
        94,
        4,
        128,
        "h200",
        8,
        131072,
    ),
    # safetensors total 32,763,876,352 (model card: 32.5B)
    Case(
        "Qwen/QwQ-32B",
        "qwq-32b",
        "Qwen2ForCausalLM",
        32_763_876_352,
        None,
        64,
        8,
        128,
        "h100-sxm",
        2,
        32768,
    ),
]
IDS = [c.alias for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_resolves_by_hf_id_alias_and_name(case: Case) -> None:
    spec = load_model(case.hf_id)
    assert spec.name == case.hf_id and spec.architecture == case.architecture
    assert load_model(case.alias) is spec
    assert load_model(case.hf_id.split("/", 1)[1]) is spec
    assert load_model(case.hf_id.lower()) is spec
    sources = dict(spec.sources)
    assert sources["config"].startswith(f"https://huggingface.co/{case.hf_id}/blob/main/config.json")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_parameters_match_the_published_count(case: Case) -> None:
    spec = load_model(case.alias)
    assert abs(spec.param_count - case.published_params) <= 0.01 * case.published_params
    if isinstance(case.published_params, int):  # an exact safetensors total: the formula must land on it
        assert spec.param_count == case.published_params
    assert spec.quantization is None and spec.weight_bytes == 2 * spec.param_count  # bf16 checkpoints


@pytest.mark.parametrize("case", [c for c in CASES if c.published_active], ids=lambda c: c.alias)
def test_active_parameters_match_the_model_card(case: Case) -> None:
    spec = load_model(case.alias)
    language_active = active_param_count(spec) - spec.vision_params
    assert case.published_active is not None
    assert (
        abs(language_active - case.published_active) <= 0.03 * case.published_active
    )  # cards round to 2 digits


def test_safetensors_total_where_known() -> None:
    # Qwen3-Coder-30B-A3B-Instruct model.safetensors.index.json: "total_size": 61064245248 (every tensor bf16)
    assert load_model("qwen3-coder-30b-a3b").weight_bytes == 61_064_245_248


def test_vision_towers() -> None:
    # the Qwen3-VL tower (vramctl/registry/vision_towers.py) differs only in the merger's output width
    assert load_model("qwen3-vl-235b-a22b").vision_params == load_model("qwen3-vl-8b").vision_params
    assert load_model("qwen3-vl-30b-a3b").vision_params == 538_631_408  # mergers into hidden 2048
    assert load_model("qwen3-vl-32b").vision_params == 595_266_800  # mergers into hidden 5120


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_kv_bytes_per_token_by_hand(case: Case) -> None:
    spec = load_model(case.alias)
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (
        case.layers,
        case.kv_heads,
        case.head_dim,
    )
    assert spec.mla is None and spec.sliding_window is None
    for tp in (1, 2, 4, 8):
        assert kv_bytes_per_token(spec, tp=tp) == case.kv_per_token(tp), tp


def test_hand_values_spot_checks() -> None:
    # Qwen3-Coder-480B at TP 8: 62 x 2 x 1 x 128 x 2; Qwen3-VL-32B: 64 x 2 x 8 x 128 x 2
    by_alias = {c.alias: c for c in CASES}
    assert by_alias["qwen3-coder-480b"].kv_per_token(8) == 31_744
    assert by_alias["qwen3-vl-32b"].kv_per_token() == 262_144


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_plans_from_the_serve_command(
    case: Case, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # an empty HF cache and no network: only the bundled profile can answer
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    argv = ["plan", "--json", "--gpu", case.gpu, "--", "vllm", "serve", case.hf_id]
    argv += ["-tp", str(case.tp), "--max-model-len", str(case.max_model_len)]
    code = main(argv)
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out.get("verdict_message")
    assert out["verdict"] == "fits"
    assert out["model"]["name"] == case.hf_id
    assert out["kv_bytes_per_token"] == case.kv_per_token(case.tp)
    assert out["kv_tokens"] >= out["max_model_len"] == case.max_model_len


def test_plan_by_name_offline_never_imports_the_hub_client(tmp_path: Path) -> None:
    names = [c.hf_id for c in CASES] + [c.alias for c in CASES]
    script = (
        "import sys\n"
        "from vramctl.cli.main import main\n"
        f"for name in {names!r}:\n"
        "    code = main(['plan', name, '--gpu', 'b200', '-tp', '8', '--max-model-len', '8192', '--json'])\n"
        "    assert code == 0, (name, code)\n"
        "assert 'huggingface_hub' not in sys.modules, 'huggingface_hub imported'\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_CACHE", None)
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]


def test_listed_by_the_models_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    listed = {m["id"] for m in json.loads(capsys.readouterr().out)["models"]}
    assert {c.hf_id for c in CASES} <= listed
    assert len(listed) == len(list_models())
