"""A pre-quantised hybrid derived from its name (vramctl/registry/derived.py): which of the tensors the dense layout
formula does not book (Gated DeltaNet / Mamba mixers, the gated attention's q rows) a quantiser packs.

The reference is an independent walk over the checkpoint's tensors (transformers modeling_qwen3_5.py names) in the
layout the public Qwen3.6-27B AutoRound int4 checkpoints state on their model cards: every Linear of the text
decoder blocks and of the MTP block packed as GPTQ int4 (qweight, a 16-bit scale and a packed zero point per group
of 128), `linear_attn.in_proj_a` / `in_proj_b`, conv1d, norms, the vision tower, the embeddings, the lm_head and
`mtp.fc` in 16 bits. vLLM logs that checkpoint's size as "Checkpoint size: 17.69 GiB" (weight_utils.py, in the
start-up logs of noonghunna/club-3090 issues #104 and #142, threads no evaluation set uses).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vramctl.core.params import mtp_layer_rank_bytes, state_mixer_linear_params
from vramctl.registry import list_models, load_model
from vramctl.registry._catalog import MODELS
from vramctl.registry.derived import LAYOUT_BAND, derive_from_name
from vramctl.registry.models import spec_from_config

GiB = 2**30
LOGGED_CHECKPOINT_GIB = 17.69
"""`Checkpoint size: 17.69 GiB` — vLLM's weight_utils.py line for Lorbus/Qwen3.6-27B-int4-AutoRound (two decimals)."""


def _int4(rows: int, cols: int, group: int = 128) -> int:
    """GPTQ int4 bytes of a rows (out) × cols (in) Linear: qweight, fp16 scales, packed int4 zeros (no g_idx)."""
    groups = cols // group
    return rows * cols // 2 + 2 * groups * rows + groups * rows // 2


def _autoround_checkpoint_bytes(cfg: dict[str, Any], *, with_mtp: bool) -> int:
    t = cfg["text_config"]
    h, heads, kv, hd = t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    kh, vh = t["linear_num_key_heads"], t["linear_num_value_heads"]
    kd, vd, kern = t["linear_key_head_dim"], t["linear_value_head_dim"], t["linear_conv_kernel_dim"]
    n, inter = t["num_hidden_layers"], t["intermediate_size"]
    n_full = n // t["full_attention_interval"]
    n_linear = n - n_full
    key, value = kh * kd, vh * vd
    attention = _int4(2 * heads * hd, h) + 2 * _int4(kv * hd, h) + _int4(h, heads * hd) + 2 * 2 * hd
    mixer = _int4(2 * key + value, h) + _int4(value, h) + _int4(h, value)  # in_proj_qkv, in_proj_z, out_proj
    mixer += 2 * (
        2 * vh * h + (2 * key + value) * kern + 2 * vh + vd
    )  # in_proj_a/b, conv1d, dt_bias, A_log, norm
    mlp = 2 * _int4(inter, h) + _int4(h, inter)
    norms = 2 * 2 * h
    total = n_full * attention + n_linear * mixer + n * (mlp + norms)
    total += 2 * 2 * t["vocab_size"] * h + 2 * h  # embed_tokens, lm_head (untied), final norm
    total += 2 * load_model("Qwen/Qwen3.6-27B").vision_params  # the vision tower (bundled profile's count)
    if with_mtp:  # one full-attention block + fc (16 bits) + three norms + the block's norms
        total += attention + mlp + norms + 2 * (h * 2 * h) + 3 * 2 * h
    return total


def _base_config() -> dict[str, Any]:
    path = MODELS.find("Qwen/Qwen3.6-27B")
    assert path is not None
    return dict(MODELS.document(path)["config"])


def test_the_independent_walk_reproduces_the_logged_checkpoint_size() -> None:
    """The reference layout itself against vLLM's logged size (the zero points are in; g_idx is not)."""
    walk = _autoround_checkpoint_bytes(_base_config(), with_mtp=True)
    assert abs(walk / GiB - LOGGED_CHECKPOINT_GIB) < 0.005


def test_derived_autoround_hybrid_matches_the_checkpoint() -> None:
    """The derived weights (+ the MTP layer vLLM loads for `--speculative-config mtp`) are the checkpoint's bytes: the
    Gated DeltaNet projections and the gated q rows packed, not left halfway (21.5 GiB before)."""
    spec = derive_from_name("Lorbus/Qwen3.6-27B-int4-AutoRound", "test")
    assert spec is not None and spec.derived is not None
    walk = _autoround_checkpoint_bytes(_base_config(), with_mtp=False)
    assert abs(spec.weight_bytes - walk) <= 0.005 * walk
    with_mtp = spec.weight_bytes + mtp_layer_rank_bytes(spec, 1)
    assert abs(with_mtp / GiB - LOGGED_CHECKPOINT_GIB) <= 0.003 * LOGGED_CHECKPOINT_GIB
    # the band no longer spans "mixers kept" vs "mixers packed" (±4.6 GiB before): layout details only, plus the
    # small tensors whose packing recipes differ
    assert spec.derived.weight_band_bytes <= 1.5 * LAYOUT_BAND * spec.weight_bytes


def test_gated_delta_net_mixer_projections_from_the_config() -> None:
    t = _base_config()["text_config"]
    h, key = t["hidden_size"], t["linear_num_key_heads"] * t["linear_key_head_dim"]
    value = t["linear_num_value_heads"] * t["linear_value_head_dim"]
    base = load_model("Qwen/Qwen3.6-27B")
    assert state_mixer_linear_params(base) == h * (2 * key + value) + h * value + value * h
    assert state_mixer_linear_params(load_model("meta-llama/Llama-3.1-8B-Instruct")) is None


def _hybrids() -> list[str]:
    return [
        m.name
        for m in list_models()
        if not m.quantization and m.state_space is not None and state_mixer_linear_params(m) is not None
    ]


@pytest.mark.parametrize("base", _hybrids())
def test_recipes_that_pack_every_decoder_linear_are_smaller_and_surer(base: str) -> None:
    """Every bundled hybrid whose mixer split is known: AutoRound / GPTQ (which pack the mixers) derive fewer bytes
    with a narrower band than a marker whose recipes differ (AWQ: the same bytes per packed Linear, int4 in groups of
    128 with zero points), and fewer than the 16-bit base."""
    stem = base.rsplit("/", 1)[-1]
    packed = derive_from_name(f"org/{stem}-int4-AutoRound", "test")
    unsure = derive_from_name(f"org/{stem}-AWQ", "test")
    assert packed is not None and unsure is not None
    assert packed.derived is not None and unsure.derived is not None
    assert packed.weight_bytes <= unsure.weight_bytes
    assert packed.derived.weight_band_bytes <= unsure.derived.weight_band_bytes
    assert 0 < packed.weight_bytes < load_model(base).weight_bytes


def test_plan_of_the_derived_checkpoint_as_served(tmp_path: Path) -> None:
    """`vramctl plan` on the club-3090 dual recipe (the flags of its logged args line, noonghunna/club-3090 #91):
    weights per rank are half the logged checkpoint + the 32 MiB rotary cache (10.88 GiB before), and the KV pool is
    within 6 % of the 619,479 tokens the engine logged (556,506 before the packing fix; 669,272 once packed but without
    the vision encoder's profiling pass, which vLLM 0.20 runs for this multimodal checkpoint; 591,654 with it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(tmp_path), HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    args = [
        "plan", "Lorbus/Qwen3.6-27B-int4-AutoRound", "--gpu", "rtx-3090", "-tp", "2", "--max-model-len", "262144",
        "--dtype", "float16", "--kv-cache-dtype", "fp8_e5m2", "--max-num-seqs", "2", "--max-num-batched-tokens",
        "8192", "--enable-prefix-caching", "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}',
        "--engine-version", "0.20.1", "--json",
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "vramctl", *args], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["model"]["derived_from"]["base"] == "Qwen/Qwen3.6-27B"
    weights = out["terms"]["weights"]["bytes"] / GiB
    assert abs(weights - (LOGGED_CHECKPOINT_GIB / 2 + 1 / 32)) <= 0.015 * weights
    assert abs(out["kv_tokens"] - 619_479) <= 0.06 * 619_479


@pytest.mark.parametrize(
    ("quantization_config", "mtp_16_bit"),
    [
        ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
          "block_name_to_quantize": "model.language_model.layers,mtp.layers"}, False),
        ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True,
          "block_name_to_quantize": ["model.language_model.layers"]}, True),
        ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True}, False),  # no block list: all packed
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": {"-:.*mtp.*": {}}}, True),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, False),
    ],
)  # fmt: skip
def test_the_mtp_layers_precision_follows_the_quantization_config(
    quantization_config: dict[str, Any], mtp_16_bit: bool
) -> None:
    """vLLM builds the MTP layers unquantised when the config leaves them out (INCConfig's block list, GPTQ's
    `dynamic` "-:" entries, qwen3_5_mtp.py): the MTP layer `--speculative-config mtp` loads is charged in 16 bits."""
    cfg = {**_base_config(), "quantization_config": quantization_config}
    spec = spec_from_config(cfg, where="config.json", name="x")
    assert spec.mtp_unquantised is mtp_16_bit
    plain = spec_from_config(_base_config(), where="config.json", name="x")
    mtp = mtp_layer_rank_bytes(spec, 2)
    if mtp_16_bit:
        assert mtp == mtp_layer_rank_bytes(plain, 2)
    else:
        assert mtp < 0.4 * mtp_layer_rank_bytes(plain, 2)
