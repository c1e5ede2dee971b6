"""A separate draft model in `--speculative-config` (`eagle`, `eagle3`, `draft_model`): its weights per rank and its
KV layers in the plan (vramctl/core/engines/vllm_speculative.py cites vLLM's sources).

Hand-worked numbers, Llama-3.1-8B-Instruct target (32 layers, 8 KV heads x 128, hidden 4096, vocab 128,256, bf16):
- its KV: 32 layers x 2 x 8 x 128 x 2 B = 131,072 B per token;
- an EAGLE-3 head of its shape (config of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: 1 layer, draft vocab 32,000), TP 1:
  layer q 4096x4096 + k, v 2x1024x4096 + o 4096x4096 + MLP 3x14336x4096 + 2 norms = 218,112,000 elements
  (436,224,000 B); layer 0 reads 2h into qkv: + 6144x4096 = 25,165,824; hidden_norm + final norm 2x4096; fc
  3x4096x4096 = 50,331,648 (these three: 75,505,664 elements, 151,011,328 B, + d2t 32,000 x 8 B = 151,267,328 B);
  lm_head 32,000 (a multiple of 64) x 4096 x 2 B = 262,144,000 B; the embedding is the target's (shared):
  849,635,328 B on one rank, about the 850 MB that checkpoint ships. Its one layer adds 4,096 B per token
  (135,168).
- Llama-3.2-1B-Instruct as `draft_model` (16 layers, 8 KV heads x 64, tied): 2,471,628,800 B of weights + its
  rotary cache; 16 layers x 2 x 8 x 64 x 2 B = 32,768 B per token = 8 target-width layers (163,840 per token).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from vramctl.cli.main import main
from vramctl.core.engines import vllm_speculative as SP
from vramctl.core.errors import BadInputError
from vramctl.core.plan import plan_vllm
from vramctl.core.settings import ServeSettings
from vramctl.core.weights import rope_cache_bytes
from vramctl.registry import load_draft_model, load_gpu, load_model

TARGET = "meta-llama/Llama-3.1-8B-Instruct"
SMALL = "meta-llama/Llama-3.2-1B-Instruct"
EAGLE3_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 2048,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 1,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
}
EAGLE_CONFIG: dict[str, Any] = {
    **{k: v for k, v in EAGLE3_CONFIG.items() if k != "draft_vocab_size"},
    "architectures": ["LlamaForCausalLMEagle"],
}


def folder(tmp_path: Path, name: str, config: dict[str, Any]) -> str:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def spec_settings(draft_name: str, method: str | None, *, tp: int = 1, tokens: int = 3, **extra: Any) -> ServeSettings:
    return ServeSettings(
        engine_version="0.32.0",
        max_model_len=8192,
        tensor_parallel_size=tp,
        speculative_method=method,
        num_speculative_tokens=tokens,
        speculative_model=draft_name,
        speculative_draft=load_draft_model(draft_name),
        **extra,
    )


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --- the formulas, by hand ----------------------------------------------------------------------------------------
def test_eagle3_head_weights_by_hand(tmp_path: Path) -> None:
    draft_name = folder(tmp_path, "eagle3-head", EAGLE3_CONFIG)
    target = load_model(TARGET)
    for tp in (1, 2):
        sp = SP.resolve_settings(target, "0.32.0", spec_settings(draft_name, "eagle3", tp=tp))
        assert sp is not None and sp.draft is not None and sp.draft_tensor_parallel_size == tp
        w = SP.draft_weights(target, sp, dtype="bfloat16")
        assert w is not None
        # one decoder layer: q + o split by tp, k / v by KV heads, MLP split, 2 norms whole
        layer = (4096 * 4096 * 2 + 2 * 1024 * 4096 + 3 * 14336 * 4096) // tp + 2 * 4096
        assert w.layers == layer * 2
        assert w.embedding == 0 and w.shared_embedding == 128256 * 4096 // tp * 2
        assert w.lm_head == 32000 // tp * 4096 * 2
        # wider first qkv (split), hidden_norm + final norm, fc 3h x h whole on each rank, d2t int64
        assert w.extra == (6144 * 4096 // tp) * 2 + 2 * 4096 * 2 + 3 * 4096 * 4096 * 2 + 32000 * 8
    sp1 = SP.resolve_settings(target, "0.32.0", spec_settings(draft_name, "eagle3"))
    assert sp1 is not None
    assert SP.drafter_rank_bytes(target, sp1, dtype="bfloat16", tp=1) == 436_224_000 + 262_144_000 + 151_267_328 == 849_635_328


def test_eagle_head_shares_the_lm_head_and_has_no_final_norm(tmp_path: Path) -> None:
    draft_name = folder(tmp_path, "eagle-head", EAGLE_CONFIG)
    target = load_model(TARGET)
    sp = SP.resolve_settings(target, "0.32.0", spec_settings(draft_name, "eagle"))
    assert sp is not None
    w = SP.draft_weights(target, sp, dtype="bfloat16")
    assert w is not None
    assert (w.lm_head, w.embedding) == (0, 0)
    # fc 2h x h, less layer 0's input_layernorm
    assert w.extra == 2 * 4096 * 4096 * 2 - 4096 * 2
    # pipeline parallel: vLLM loads the draft's own embedding (`get_pp_group().world_size == 1` only)
    own = SP.draft_weights(target, sp, dtype="bfloat16", pipeline_parallel_size=2)
    assert own is not None and own.embedding == 128256 * 4096 * 2 and own.shared_embedding == 0


def test_a_small_bundled_model_as_draft_model() -> None:
    target, draft = load_model(TARGET), load_model(SMALL)
    sp = SP.resolve_settings(target, "0.32.0", spec_settings(SMALL, None))
    assert sp is not None and sp.method == "draft_model"
    assert (sp.draft_layers, sp.drafter_kv_layers) == (16, 8)  # 16 layers of 8 x 64 = 8 layers of 8 x 128
    layer = (2048 * 2048 * 2 + 2 * 512 * 2048 + 3 * 8192 * 2048 + 2 * 2048) * 2
    weights = 16 * layer + 128256 * 2048 * 2 + 2048 * 2
    assert weights == 2_471_628_800
    assert SP.drafter_rank_bytes(target, sp, dtype="bfloat16", tp=1) == weights + rope_cache_bytes(draft, "bfloat16")


def test_draft_kv_and_weights_in_the_plan(tmp_path: Path) -> None:
    target, gpu = load_model(TARGET), load_gpu("h100-sxm")
    base = plan_vllm(target, gpu, ServeSettings(engine_version="0.32.0", max_model_len=8192))
    assert base.kv_bytes_per_token == 131_072
    for draft_name, method, per_token in (
        (folder(tmp_path, "eagle3-head", EAGLE3_CONFIG), "eagle3", 135_168),
        (SMALL, "draft_model", 163_840),
    ):
        s = spec_settings(draft_name, method)
        r = plan_vllm(target, gpu, s)
        assert r.kv_bytes_per_token == per_token
        assert r.bytes_per_block == 16 * per_token
        assert r.num_blocks == r.kv_cache_bytes // r.bytes_per_block < base.num_blocks
        weights = {t.name: t.bytes for t in r.ledger.terms}["weights"]
        base_weights = {t.name: t.bytes for t in base.ledger.terms}["weights"]
        sp = SP.resolve_settings(target, "0.32.0", s)
        assert sp is not None
        assert weights - base_weights == SP.drafter_rank_bytes(target, sp, dtype="bfloat16", tp=1)
        assert sum(t.bytes for t in r.ledger.terms) == r.capacity_bytes
        assert any("join the KV groups" in n for n in r.explanations)


common = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@common
@given(
    draft=hs.sampled_from(["eagle3", "eagle", "draft_model"]),
    tp=hs.sampled_from([1, 2, 4, 8]),
    draft_tp_one=hs.booleans(),
    tokens=hs.integers(min_value=1, max_value=8),
    u=hs.floats(min_value=0.3, max_value=0.95),
    gpu=hs.sampled_from(["h100-sxm", "a100-40gb", "l4"]),
)
def test_ledger_with_a_draft_sums_to_capacity(
    tmp_path_factory: pytest.TempPathFactory, draft: str, tp: int, draft_tp_one: bool, tokens: int, u: float, gpu: str
) -> None:
    base = tmp_path_factory.getbasetemp()
    configs = {"eagle3": EAGLE3_CONFIG, "eagle": EAGLE_CONFIG}
    if draft in configs:
        path = base / f"{draft}-head"
        if not path.exists():
            path.mkdir()
            (path / "config.json").write_text(json.dumps(configs[draft]))
        name = str(path)
    else:
        name = SMALL
    draft_tp = 1 if draft_tp_one and draft != "draft_model" else None
    s = spec_settings(
        name, draft, tp=tp, tokens=tokens, gpu_memory_utilization=u, speculative_draft_tensor_parallel_size=draft_tp
    )
    target = load_model(TARGET)
    r = plan_vllm(target, load_gpu(gpu), s)
    assert sum(t.bytes for t in r.ledger.terms) == r.capacity_bytes
    plain = plan_vllm(target, load_gpu(gpu), s.with_changes(num_speculative_tokens=0))
    assert r.num_blocks <= plain.num_blocks and r.kv_bytes_per_token > plain.kv_bytes_per_token


# --- the CLI --------------------------------------------------------------------------------------------------------
def test_cli_plan_with_an_eagle3_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = folder(tmp_path, "head", EAGLE3_CONFIG)
    config = json.dumps({"method": "eagle3", "model": draft, "num_speculative_tokens": 3})
    code, out, err = run(capsys, "plan", "--json", TARGET, "--gpu", "h100-sxm", "--max-model-len", "8192",
                         "--speculative-config", config)
    assert code == 0, err
    d = json.loads(out)
    sp = d["settings"]["speculative"]
    assert (sp["method"], sp["draft_model"], sp["draft_layers"], sp["drafter_kv_layers"]) == ("eagle3", draft, 1, 1)
    assert d["kv_bytes_per_token"] == 135_168
    code, out, _ = run(capsys, "plan", TARGET, "--gpu", "h100-sxm", "--max-model-len", "8192",
                       "--speculative-config", config)
    assert code == 0 and "counted shared with the target" in " ".join(out.split())


def test_cli_serve_command_infers_eagle3_from_the_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = folder(tmp_path, "my-EAGLE3-llama", EAGLE3_CONFIG)
    config = json.dumps({"model": draft, "num_speculative_tokens": 2})
    code, out, err = run(capsys, "plan", "--json", "--gpu", "h100-sxm", "--", "vllm", "serve", TARGET,
                         "--max-model-len", "8192", "--speculative-config", config)
    assert code == 0, err
    assert json.loads(out)["settings"]["speculative"]["method"] == "eagle3"


def test_cli_ngram_has_no_draft_weights(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--json", TARGET, "--gpu", "h100-sxm", "--max-model-len", "8192"]
    code, out, _ = run(capsys, *args)
    plain = json.loads(out)
    code, out, err = run(capsys, *args, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}')
    assert code == 0, err
    d = json.loads(out)
    assert d["kv_bytes_per_token"] == plain["kv_bytes_per_token"]
    assert d["terms"]["weights"]["bytes"] == plain["terms"]["weights"]["bytes"]
    assert any("no draft weights" in n for n in d["explanations"])
    # no drafter forward and no drafter graphs; only the target's extra capture sizes (decode_query_len 5) cost KV
    profile = d["settings"]["speculative"]["profile_run"]
    assert (profile["drafter_activation_bytes"], profile["drafter_graph_bytes"]) == (0, 0)
    more = len(d["settings"]["cudagraph_capture_sizes"]) - len(plain["settings"]["cudagraph_capture_sizes"])
    assert more == profile["capture_sizes_added"] > 0
    grown = d["terms"]["cuda_graph"]["bytes"] - plain["terms"]["cuda_graph"]["bytes"]
    assert grown > 0 and d["num_blocks"] < plain["num_blocks"]


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"method": "eagle3", "model": "nobody/no-such-draft-xyz", "num_speculative_tokens": 3}, "cannot be loaded"),
        ({"method": "eagle3", "model": "no-such-draft-xyz", "num_speculative_tokens": 3}, "local folder"),
        ({"method": "eagle", "num_speculative_tokens": 3}, "needs the draft model"),
        ({"method": "eagle3", "model": SMALL, "num_speculative_tokens": -2}, "num_speculative_tokens -2"),
        ({"model": SMALL, "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1}, "only the target's 2"),
        ({"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 3}, "vocab_size"),
        ({"model": SMALL, "num_speculative_tokens": 3, "draft_tensor_parallel_size": 0}, "at least 1"),
        ({"model": 7, "num_speculative_tokens": 3}, "not a model name"),
    ],
)
def test_cli_bad_draft_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, config: dict[str, Any], says: str
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network in tests
    code, _, err = run(capsys, "plan", TARGET, "--gpu", "h100-sxm", "-tp", "2", "--speculative-config",
                       json.dumps(config))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in err


def test_cli_malformed_json_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", TARGET, "--speculative-config", '{"method": "eagle3", "model": ')
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_a_draft_of_another_width_on_a_sliding_window_target_is_refused(tmp_path: Path) -> None:
    target = load_model("google/gemma-3-27b-it")  # 16 KV heads x 128, sliding + full layers
    draft = folder(tmp_path, "eagle3-head", EAGLE3_CONFIG)  # 8 KV heads x 128
    with pytest.raises(BadInputError, match="not modelled"):
        SP.resolve_settings(target, "0.32.0", spec_settings(draft, "eagle3"))


def test_check_spec_loads_the_draft_beside_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder(tmp_path, "head", EAGLE3_CONFIG)
    spec = tmp_path / "deploy.yaml"
    spec.write_text(
        f"model: {TARGET}\ngpu: h100-sxm\nflags:\n  max-model-len: 8192\n  speculative-config: "
        "'{\"method\": \"eagle3\", \"model\": \"./head\", \"num_speculative_tokens\": 3}'\n"
    )
    code, out, err = run(capsys, "check", str(spec), "--json")
    assert code == 0, err
    data = json.loads(out)
    plan = data["engines"][0]
    assert plan["bytes_per_token"] == 135_168
    spec.write_text(spec.read_text().replace("./head", "./missing-head"))
    code, _, err = run(capsys, "check", str(spec))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot be loaded" in err


# --- SGLang: --speculative-draft-model-path ------------------------------------------------------------------------
def sglang_plan(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    code, out, err = run(capsys, "plan", "--json", "--gpu", "h100-sxm", "--engine-version", "0.5.23", "--",
                         "python", "-m", "sglang.launch_server", "--model-path", TARGET, "--context-length", "8192",
                         "--tp", "2", *flags)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_sglang_draft_model_path_grows_the_cell_and_the_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = sglang_plan(capsys)
    head = folder(tmp_path, "head", EAGLE3_CONFIG)
    eagle3 = sglang_plan(capsys, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", head)
    # TP 2: the target's cell 32 layers x 2 x 4 heads x 128 x 2 B = 65,536; SGLang's cell x (1 + 1 / 32)
    assert (plain["kv_bytes_per_token"], eagle3["kv_bytes_per_token"]) == (65_536, 67_584)
    grown = eagle3["terms"]["weights"]["bytes"] - plain["terms"]["weights"]["bytes"]
    assert grown == -(-849_635_328 // 2)  # the head's bytes at TP 1 (the test above), over 2 ranks
    standalone = sglang_plan(
        capsys, "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", SMALL
    )
    assert standalone["kv_bytes_per_token"] == 65_536 * 3 // 2  # x (1 + 16 / 32): SGLang's width-blind rule
    grown = standalone["terms"]["weights"]["bytes"] - plain["terms"]["weights"]["bytes"]
    assert grown == -(-(2_471_628_800 + rope_cache_bytes(load_model(SMALL), "auto")) // 2)


def test_sglang_unknown_draft_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = run(capsys, "plan", "--gpu", "h100-sxm", "--", "python", "-m", "sglang.launch_server",
                       "--model-path", TARGET, "--speculative-algorithm", "EAGLE",
                       "--speculative-draft-model-path", "nobody/no-such-eagle-xyz")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot be loaded" in err
