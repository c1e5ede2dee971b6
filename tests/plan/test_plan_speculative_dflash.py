"""A DFlash drafter in `--speculative-config` (`"method": "dflash"`): its weights per rank, its KV layers and its
profile-run phase in the plan (vramctl/core/engines/vllm_speculative.py cites vLLM 0.32.0's qwen3_dflash.py and
v1/spec_decode/dflash.py).

Hand-worked numbers, Qwen3-8B target (36 layers, 8 KV heads x 128, hidden 4096, vocab 151,936, bf16) and a
synthesised 5-layer DFlash draft of its shape (architectures ["DFlashDraftModel"], intermediate 12,288,
dflash_config.target_layer_ids of 5 layers, mask_token_id set; the layout of a "Qwen3-8B-DFlash-b16" config):
- one draft layer: q 4096x4096 + k, v 2x1024x4096 + o 4096x4096 + MLP 3x12288x4096 + 2 norms x 4096 + q / k norms
  2 x 128 = 192,946,432 elements (385,892,864 B in bf16); 5 layers 1,929,464,320 B at TP 1;
- fc 5 x 4096 -> 4096 (whole on each rank) + hidden_norm + norm + mask_embedding (3 x 4096) = 83,898,368 elements,
  167,796,736 B; embedding and lm_head the target's: 2,097,261,056 B (1.95 GiB) on one rank;
- KV: 36 x 2 x 8 x 128 x 2 B = 147,456 B per token; + 5 draft layers of the same width = 41 x 4,096 = 167,936.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core.engines import vllm_speculative as SP
from vramctl.core.errors import BadInputError
from vramctl.core.plan import plan_vllm
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_draft_model, load_gpu, load_model

TARGET = "Qwen/Qwen3-8B"
DFLASH_CONFIG: dict[str, Any] = {
    "architectures": ["DFlashDraftModel"],
    "block_size": 16,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_attention_heads": 32,
    "num_hidden_layers": 5,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "model_type": "qwen3",
    "vocab_size": 151936,
    "rms_norm_eps": 1e-06,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "num_target_layers": 36,
}
LAYER = (4096 * 4096 * 2 + 2 * 1024 * 4096 + 3 * 12288 * 4096 + 2 * 4096 + 2 * 128) * 2
EXTRA = (5 * 4096 * 4096 + 3 * 4096) * 2


def folder(tmp_path: Path, name: str, config: dict[str, Any]) -> str:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def settings_for(draft_name: str, *, tp: int = 1, tokens: int = 15, version: str = "0.32.0", **extra: Any) -> ServeSettings:
    return ServeSettings(
        engine_version=version,
        max_model_len=8192,
        tensor_parallel_size=tp,
        speculative_method="dflash",
        num_speculative_tokens=tokens,
        speculative_model=draft_name,
        speculative_draft=load_draft_model(draft_name),
        **extra,
    )


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_dflash_is_counted_as_a_draft_model() -> None:
    assert SP.needs_draft_model("dflash", "/some/dir")
    # vLLM picks dflash for a draft named *dflash* without a method (speculative.py:1338-1343)
    assert SP.draft_method(None, "z-lab/Qwen3-8B-DFlash-b16") == "dflash"
    assert SP.needs_draft_model(None, "z-lab/Qwen3-8B-DFlash-b16")


def test_dflash_weights_by_hand(tmp_path: Path) -> None:
    draft_name = folder(tmp_path, "qwen3-8b-dflash", DFLASH_CONFIG)
    target = load_model(TARGET)
    for tp in (1, 2):
        sp = SP.resolve_settings(target, "0.32.0", settings_for(draft_name, tp=tp))
        assert sp is not None and sp.draft is not None and sp.draft_layers == 5 and sp.drafter_kv_layers == 5
        w = SP.draft_weights(target, sp, dtype="bfloat16")
        assert w is not None
        layer = ((4096 * 4096 * 2 + 2 * 1024 * 4096 + 3 * 12288 * 4096) // tp + 2 * 4096 + 2 * 128) * 2
        assert w.layers == 5 * layer
        assert (w.embedding, w.lm_head) == (0, 0)
        assert w.shared_embedding == 151936 // tp * 4096 * 2
        assert w.extra == EXTRA  # fc and the three h-vectors are whole on every rank
    sp1 = SP.resolve_settings(target, "0.32.0", settings_for(draft_name))
    assert sp1 is not None
    assert SP.drafter_rank_bytes(target, sp1, dtype="bfloat16", tp=1) == 5 * LAYER + EXTRA == 2_097_261_056


def test_fc_width_follows_target_layer_ids_and_use_aux(tmp_path: Path) -> None:
    target = load_model(TARGET)
    three = {**DFLASH_CONFIG, "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 17, 33]}}
    none = {**DFLASH_CONFIG, "dflash_config": {"mask_token_id": 151669}}
    no_aux = {**DFLASH_CONFIG, "dflash_config": {"mask_token_id": 151669, "use_aux_hidden_state": False}}
    for name, config, fc in (("three", three, 3), ("none", none, 5), ("no-aux", no_aux, 0)):
        sp = SP.resolve_settings(target, "0.32.0", settings_for(folder(tmp_path, name, config)))
        assert sp is not None
        w = SP.draft_weights(target, sp, dtype="bfloat16")
        assert w is not None and w.extra == (fc * 4096 * 4096 + 3 * 4096) * 2


def test_a_reduced_draft_vocab_loads_its_own_lm_head_and_map(tmp_path: Path) -> None:
    config = {**DFLASH_CONFIG, "draft_vocab_size": 32000}
    target = load_model(TARGET)
    sp = SP.resolve_settings(target, "0.32.0", settings_for(folder(tmp_path, "small-vocab", config)))
    assert sp is not None
    w = SP.draft_weights(target, sp, dtype="bfloat16")
    assert w is not None and w.lm_head == 32000 * 4096 * 2 and w.extra == EXTRA + 32000 * 8


def test_dflash_kv_and_weights_in_the_plan(tmp_path: Path) -> None:
    target, gpu = load_model(TARGET), load_gpu("h100-sxm")
    base = plan_vllm(target, gpu, ServeSettings(engine_version="0.32.0", max_model_len=8192))
    assert base.kv_bytes_per_token == 147_456
    s = settings_for(folder(tmp_path, "qwen3-8b-dflash", DFLASH_CONFIG))
    r = plan_vllm(target, gpu, s)
    assert r.kv_bytes_per_token == 167_936
    assert r.bytes_per_block == 16 * 167_936
    assert r.num_blocks == r.kv_cache_bytes // r.bytes_per_block < base.num_blocks
    weights = {t.name: t.bytes for t in r.ledger.terms}["weights"]
    base_weights = {t.name: t.bytes for t in base.ledger.terms}["weights"]
    assert weights - base_weights == 2_097_261_056
    assert sum(t.bytes for t in r.ledger.terms) == r.capacity_bytes
    text = " ".join(r.explanations)
    assert "join the KV groups" in text and "the lm_head is the target's" in text
    assert "not counted" not in text


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("tokens", [1, 7, 15])
@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-40gb", "l4"])
def test_ledger_with_dflash_sums_to_capacity(tmp_path: Path, tp: int, tokens: int, gpu: str) -> None:
    s = settings_for(folder(tmp_path, "d", DFLASH_CONFIG), tp=tp, tokens=tokens)
    target = load_model(TARGET)
    r = plan_vllm(target, load_gpu(gpu), s)
    assert sum(t.bytes for t in r.ledger.terms) == r.capacity_bytes
    plain = plan_vllm(target, load_gpu(gpu), s.with_changes(num_speculative_tokens=0))
    assert r.num_blocks <= plain.num_blocks and r.kv_bytes_per_token > plain.kv_bytes_per_token


def test_the_profile_run_charges_the_context_projection(tmp_path: Path) -> None:
    """dflash.py:215-269: the fused K/V projection of all max_num_batched_tokens context states, not a forward of
    the drafter at that many tokens (its queries are at most max_num_seqs x (1 + k))."""
    target = load_model(TARGET)
    sp = SP.resolve_settings(target, "0.32.0", settings_for(folder(tmp_path, "d", DFLASH_CONFIG)))
    assert sp is not None
    tokens, factor = 65536, 1.0
    phase = SP._dflash_phase(sp, tokens=tokens, num_reqs=4, act_bytes=2, forward_factor=factor)
    assert phase == tokens * (4096 + 4 * 5 * 1024) * 2  # normed h + fused K/V and its permuted copy
    charged = SP.drafter_activation_bytes(
        target, sp, tokens=tokens, tp=1, act_bytes=2, forward_factor=factor, num_reqs=4
    )
    assert charged >= 0
    charges = SP.profile_charges(
        target, sp, version="0.32.0", max_num_batched_tokens=8192, max_num_seqs=256, tp=1, act_bytes=2,
        capture_sizes=(1, 2, 4), cudagraph_mode=None, regime="full-and-piecewise",
    )
    assert charges.drafter_layers == 5 and charges.drafter_graph_pieces == 3 * (5 + 1)


@pytest.mark.parametrize(
    ("change", "version", "says"),
    [
        ({}, "0.19.0", "has no DFlash drafter"),
        ({"dflash_config": {"target_layer_ids": [1, 9]}}, "0.32.0", "mask_token_id"),
        ({"dflash_config": {"mask_token_id": 1, "use_swa": True, "swa_window_size": 2048}}, "0.32.0", "sliding"),
        ({"layer_types": ["sliding_attention"] * 5, "sliding_window": 2048}, "0.32.0", "sliding"),
    ],
)
def test_refused_dflash_setups(tmp_path: Path, change: dict[str, Any], version: str, says: str) -> None:
    name = folder(tmp_path, "d", {**DFLASH_CONFIG, **change})
    with pytest.raises(BadInputError, match=says):
        SP.resolve_settings(load_model(TARGET), version, settings_for(name, version=version))


def test_an_architecture_vllm_does_not_register_is_refused(tmp_path: Path) -> None:
    # EAGLEConfig renames it DFlashQwen3DFlashDraftModel, which vLLM's registry does not hold
    name = folder(tmp_path, "d", {**DFLASH_CONFIG, "architectures": ["Qwen3DFlashDraftModel"]})
    with pytest.raises(BadInputError, match="DFlashQwen3DFlashDraftModel"):
        SP.resolve_settings(load_model(TARGET), "0.32.0", settings_for(name))


def test_another_dflash_layout_is_said_not_counted(tmp_path: Path) -> None:
    # DFlash2DraftModel is vLLM's qwen3_dflash2 (another layout): loaded but not modelled
    name = folder(tmp_path, "d", {**DFLASH_CONFIG, "architectures": ["DFlash2DraftModel"]})
    target = load_model(TARGET)
    sp = SP.resolve_settings(target, "0.32.0", settings_for(name))
    assert sp is not None and sp.draft is None and sp.drafter_kv_layers == 0
    r = plan_vllm(target, load_gpu("h100-sxm"), settings_for(name))
    assert any("dflash draft model's weights and KV are not counted" in n for n in r.explanations)
    assert sum(t.bytes for t in r.ledger.terms) == r.capacity_bytes


# --- the CLI --------------------------------------------------------------------------------------------------------
def test_cli_plan_with_a_dflash_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = folder(tmp_path, "Qwen3-8B-DFlash-b16", DFLASH_CONFIG)
    config = json.dumps({"method": "dflash", "model": draft, "num_speculative_tokens": 15})
    args = ("plan", "--json", TARGET, "--gpu", "h100-sxm", "--max-model-len", "8192", "--engine-version", "0.32.0")
    code, out, err = run(capsys, *args, "--speculative-config", config)
    assert code == 0, err
    d = json.loads(out)
    sp = d["settings"]["speculative"]
    assert (sp["method"], sp["draft_model"], sp["draft_layers"], sp["drafter_kv_layers"]) == ("dflash", draft, 5, 5)
    assert d["kv_bytes_per_token"] == 167_936
    code, plain_out, _ = run(capsys, *args)
    plain = json.loads(plain_out)
    assert d["terms"]["weights"]["bytes"] - plain["terms"]["weights"]["bytes"] == 2_097_261_056
    assert sp["profile_run"]["drafter_layers"] == 5
    # without a method: inferred from the name, as vLLM does
    config = json.dumps({"model": draft, "num_speculative_tokens": 15})
    code, out, err = run(capsys, *args, "--speculative-config", config)
    assert code == 0, err
    assert json.loads(out)["settings"]["speculative"]["method"] == "dflash"
    code, _, err = run(capsys, *args[:-1], "0.19.0", "--speculative-config", config)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "0.20" in err


def test_drafter_graphs_stop_at_the_first_size_holding_its_queries(tmp_path: Path) -> None:
    """dflash.py:40, 229: the dummy run clamps the tokens to max_num_seqs x (1 + n) and pads them to a capture size,
    captured once per size (cuda_graph.py:259-267)."""
    target = load_model(TARGET)
    sp = SP.resolve_settings(target, "0.32.0", settings_for(folder(tmp_path, "d", DFLASH_CONFIG)))
    assert sp is not None
    sizes = (1, 2, 4, 8, 16, 24, 32, 64, 128, 256, 512)
    assert SP.dflash_capture_sizes(sp, sizes, max_num_seqs=1) == (1, 2, 4, 8, 16)
    assert SP.dflash_capture_sizes(sp, sizes, max_num_seqs=2) == (1, 2, 4, 8, 16, 24, 32)
    assert SP.dflash_capture_sizes(sp, sizes, max_num_seqs=256) == sizes
    charges = SP.profile_charges(
        target, sp, version="0.32.0", max_num_batched_tokens=8192, max_num_seqs=1, tp=1, act_bytes=2,
        capture_sizes=sizes, cudagraph_mode=None, regime="full-and-piecewise",
    )
    assert (charges.drafter_capture_sizes, charges.drafter_graph_pieces) == (5, 5 * 6)
    assert charges.to_json()["drafter_capture_sizes"] == 5
