"""`vramctl plan` on hybrid models, end to end: vLLM and SGLang numbers, JSON keys, the ledger, refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from vramctl.cli.main import main
from vramctl.core.engines import sglang as sg
from vramctl.core.plan import plan
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_gpu, load_model

HERE = Path(__file__).parent
QWEN = str(HERE / "configs" / "qwen3-next-80b-a3b-instruct")
NEMOTRON = str(HERE / "configs" / "nvidia-nemotron-nano-9b-v2")
GiB = 1 << 30


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["plan", *args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data: dict[str, Any] = json.loads(captured.out)
    return data


def test_vllm_plan_numbers_from_the_formulas(capsys: pytest.CaptureFixture[str]) -> None:
    # A given pool of 10 GiB: bytes per block = 12 layers × 278,528 = 3,342,336 → 10 GiB // that = 3,212 blocks;
    # per 32,768-token request cdiv(32,768, 272) = 121 attention blocks + 3 state groups × 2 blocks (prefix caching
    # is on by default for hybrids from vLLM 0.28: mamba_cache_mode 'align', vramctl/core/mamba_cache.py) = 127 →
    # 3,212 / 127 = 25.29x; GPU KV cache size (0.28 →) = int(25.2913 × 32,768) = 828,746 tokens.
    d = run_json(
        capsys,
        QWEN,
        "--gpu",
        "H200",
        "-tp",
        "4",
        "--max-model-len",
        "32768",
        "--kv-cache-memory-bytes",
        "10GiB",
        "--engine-version",
        "0.33.0",
    )
    assert (d["block_size"], d["bytes_per_block"], d["num_blocks"]) == (272, 3_342_336, 3212)
    assert (d["blocks_per_request"], d["max_concurrency"], d["kv_tokens"]) == (127, 25.2913, 828_746)
    assert d["kv_bytes_per_token"] == 12 * 1024
    h = d["hybrid"]
    assert (h["state_layers"], h["full_attention_layers"], h["state_kind"]) == (36, 12, "gated_delta_net")
    assert h["state_bytes_per_request"] == 36 * 274_432 * 2
    assert h["state_bytes_per_request_padded"] == 36 * 278_528 * 2
    assert (h["attention_blocks_per_request"], h["state_blocks_per_request"]) == (121, 6)
    assert h["attention_bytes_per_request"] == 12 * 121 * 278_528
    assert h["state_bytes_at_max_concurrency"] == 25 * 36 * 278_528 * 2
    assert h["mamba_page_padding_pct"] == 1.49 and h["mamba_cache_mode"] == "align"
    assert h["log_lines"] == [
        "Setting attention block size to 272 tokens to ensure that attention page size is >= mamba page size.",
        "Padding mamba page size by 1.49% to ensure that mamba page size and attention page size are exactly equal.",
    ]
    terms = d["terms"]
    assert sum(t["bytes"] for t in terms.values()) == d["capacity_bytes"]
    assert "Gated DeltaNet state" in terms["kv_cache"]["note"]


def test_vllm_034_aligns_the_hybrid_block_to_its_default_block(capsys: pytest.CaptureFixture[str]) -> None:
    # vLLM 0.34: the alignment is max(kernel alignment, cache_config.block_size) = 64, its default block
    # (vllm/config/cache.py:185, vllm/platforms/interface.py:1079-1086): block 64 × cdiv(274,432, 64 × 1,024) = 320;
    # page 320 × 1,024 = 327,680 B; 12 × 327,680 = 3,932,160 B per block → 10 GiB // that = 2,730 blocks; per
    # 32,768-token request cdiv(32,768, 320) = 103 + 6 state blocks = 109 → 25.0459x, int(25.0459 × 32,768) tokens.
    d = run_json(
        capsys, QWEN, "--gpu", "H200", "-tp", "4", "--max-model-len", "32768", "--kv-cache-memory-bytes", "10GiB"
    )
    assert d["engine_version"] == "0.34.0"
    assert (d["block_size"], d["bytes_per_block"], d["num_blocks"]) == (320, 3_932_160, 2730)
    assert (d["blocks_per_request"], d["max_concurrency"], d["kv_tokens"]) == (109, 25.0459, 820_703)
    h = d["hybrid"]
    assert h["mamba_page_padding_pct"] == 19.4
    assert h["log_lines"][0] == (
        "Setting attention block size to 320 tokens to ensure that attention page size is >= mamba page size."
    )


@pytest.mark.parametrize(
    ("version", "flag", "mode", "per_request", "tokens"),
    [
        # prefix caching off: one state block per request and group (mamba_cache_mode 'none')
        ("0.33.0", "--no-enable-prefix-caching", "none", 124, 848_796),
        # before 0.28 hybrids keep prefix caching off by default; from 0.20.1 the tokens are int(concurrency × len)
        ("0.27.0", None, "none", 124, 848_796),
        ("0.20.1", None, "none", 124, 848_796),
        # up to 0.20.0 the tokens are num_blocks // groups × block = 3,212 // 4 × 272
        ("0.20.0", None, "none", 124, 218_416),
        # asked for on 0.15-0.27: 'align' for a class without mamba 'all' mode (Qwen3-Next: Gated DeltaNet)
        ("0.27.0", "--enable-prefix-caching", "align", 127, 828_746),
        ("0.15.0", "--enable-prefix-caching", "align", 127, 218_416),
        # 0.12-0.14 switch it off for such a class, 0.10.2-0.11 for every hybrid
        ("0.14.0", "--enable-prefix-caching", "none", 124, 218_416),
        ("0.11.0", "--enable-prefix-caching", "none", 124, 218_416),
        ("0.28.0", None, "align", 127, 828_746),
        ("0.28.0", "--enable-prefix-caching", "align", 127, 828_746),
    ],
)
def test_prefix_caching_decides_the_state_blocks_per_request(
    capsys: pytest.CaptureFixture[str], version: str, flag: str | None, mode: str, per_request: int, tokens: int
) -> None:
    command = ["vllm", "serve", QWEN, "-tp", "4", "--max-model-len", "32768", "--kv-cache-memory-bytes", "10GiB"]
    d = run_json(capsys, "--gpu", "H200", "--engine-version", version, "--", *command, *([flag] if flag else []))
    assert d["num_blocks"] == 3212
    assert (d["blocks_per_request"], d["kv_tokens"], d["hybrid"]["mamba_cache_mode"]) == (per_request, tokens, mode)
    said = " ".join(d["explanations"])
    assert "not modelled" not in said


def test_vllm_text_shows_the_state_term(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", NEMOTRON, "--gpu", "H100", "--max-model-len", "131072", "--engine-version", "0.33.0"])
    out = capsys.readouterr().out
    assert code == 0
    flat = " ".join(out.split())
    assert "27 Mamba2 layers keep a fixed state per request" in flat
    # vLLM's NemotronH hook runs the SSM state in float32 (config.py NemotronHForCausalLMConfig): mamba page
    # 73,728 + 128 × 80 × 128 × 4 = 5,316,608 B; block 16 × cdiv(5,316,608, 16 × 4,096) = 16 × 82 = 1,312 tokens.
    assert "raises the attention block to 1312 tokens" in flat
    assert "state block(s)" in flat


def test_nemotron_ssm_dtype_by_version(capsys: pytest.CaptureFixture[str]) -> None:
    new = run_json(capsys, NEMOTRON, "--gpu", "H100", "--engine-version", "0.33.0")["hybrid"]
    assert (new["ssm_state_dtype_bytes"], new["state_page_bytes"], new["attention_block_size"]) == (
        4,
        5_316_608,
        1312,
    )
    assert new["mamba_page_padding_pct"] == 1.08  # (1,312 × 4,096 − 5,316,608) / 5,316,608
    # Before the hook (0.11): `auto` = bf16, page 2,695,168 B, block 672.
    old = run_json(capsys, NEMOTRON, "--gpu", "H100", "--engine-version", "0.11.0")["hybrid"]
    assert (old["ssm_state_dtype_bytes"], old["attention_block_size"]) == (2, 672)
    # 4 attention + 27 Mamba2 layers: groups of 4 → 1 attention + 7 state groups.
    assert (new["group_size"], new["attention_groups"], new["state_groups"]) == (4, 1, 7)


def test_default_plan_fits_and_binds_on_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, QWEN, "--gpu", "H200", "-tp", "4")
    assert d["verdict"] == "fits"
    h = d["hybrid"]
    assert d["num_blocks"] == d["kv_cache_bytes"] // d["bytes_per_block"]
    assert d["blocks_per_request"] == h["attention_blocks_per_request"] + h["state_blocks_per_request"]
    assert d["max_concurrency"] == round(d["num_blocks"] / d["blocks_per_request"], 4)


def test_non_hybrid_json_has_no_hybrid_key(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "llama-3-8b", "--gpu", "H100")
    assert "hybrid" not in d and "mamba_state" not in d["terms"]


def test_sglang_mamba_pool(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, QWEN, "--gpu", "H200", "-tp", "4", "--engine", "sglang")
    s = d["sglang"]
    m = s["mamba"]
    # 36 GDN layers × (conv (2048, 3) bf16 = 12,288 B + SSM (8, 128, 128) float32 = 524,288 B) = 19,316,736 B.
    assert m["mamba_cache_per_req_bytes"] == 36 * (2048 * 3 * 2 + 8 * 128 * 128 * 4) == 19_316_736
    assert m["ssm_dtype"] == "float32" and m["mamba_ratio"] == 3
    # rest × 0.9 / 1.9 goes to state slots; the token pool gets what is left, over the 12 attention layers.
    budget = m["rest_before_gib"] * 0.9 / 1.9 * GiB
    assert m["max_mamba_cache_size"] == pytest.approx(budget // m["mamba_cache_per_req_bytes"], abs=1)
    assert s["bytes_per_token"] == 12 * 1 * 256 * 2 * 2
    assert s["max_total_num_tokens"] == pytest.approx(
        m["rest_after_gib"] * GiB // s["bytes_per_token"], abs=2
    )
    assert s["max_running_requests"] <= m["max_mamba_cache_size"] // 3
    assert d["terms"]["mamba_state"]["bytes"] == m["mamba_pool_bytes"]
    assert sum(t["bytes"] for t in d["terms"].values()) == d["capacity_bytes"]
    assert "hybrid" not in d  # the top level is SGLang's: its state is under sglang.mamba


def test_sglang_flags_of_the_mamba_pool() -> None:
    model, gpu = load_model(QWEN), load_gpu("H200")
    base = ServeSettings(engine="sglang", tensor_parallel_size=4)
    given = sg.plan_sglang(model, gpu, base, options=sg.SglangOptions(max_mamba_cache_size=300))
    assert given.extra["mamba"]["max_mamba_cache_size"] == 300
    assert given.extra["mamba"]["mamba_pool_bytes"] == 300 * 19_316_736
    assert given.max_running_requests <= 100  # 300 // ratio 3
    no_radix = sg.plan_sglang(
        model,
        gpu,
        base.with_changes(max_running_requests=64),
        options=sg.SglangOptions(disable_radix_cache=True),
    )
    assert (
        no_radix.extra["mamba"]["max_mamba_cache_size"] == 64 and no_radix.extra["mamba"]["mamba_ratio"] == 1
    )
    bf16 = sg.plan_sglang(model, gpu, base, options=sg.SglangOptions(mamba_ssm_dtype="bfloat16"))
    assert bf16.extra["mamba"]["mamba_cache_per_req_bytes"] == 36 * (12_288 + 262_144)
    default = sg.plan_sglang(model, gpu, base)
    more_kv = sg.plan_sglang(model, gpu, base, options=sg.SglangOptions(mamba_full_memory_ratio=0.3))
    assert more_kv.extra["mamba"]["max_mamba_cache_size"] < default.extra["mamba"]["max_mamba_cache_size"]
    assert more_kv.max_total_num_tokens > default.max_total_num_tokens


def test_no_state_slots_is_the_engine_error() -> None:
    model, gpu = load_model(NEMOTRON), load_gpu("L4")
    plan = sg.plan_sglang(
        model, gpu, ServeSettings(engine="sglang"), options=sg.SglangOptions(max_mamba_cache_size=0)
    )
    assert plan.verdict == "no-kv-cache-memory"
    assert plan.message.startswith("Not enough GPU memory for hybrid (mamba/linear-attention) state cache.")
    assert "max_mamba_cache_size=0" in plan.message


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--engine-version", "0.9.2"], "--engine-version 0.9.2: "),
        (["--engine", "sglang", "--engine-version", "0.5.2"], "--engine-version 0.5.2: "),
        (["--engine", "sglang", "-pp", "2"], "--pipeline-parallel-size 2: "),
        (["-tp", "3"], "--tensor-parallel-size 3"),
    ],
)
def test_versions_and_shapes_refused(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code = main(["plan", QWEN, "--gpu", "H200", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("vramctl: error: ") and needle in err


def _write(tmp_path: Path, cfg: dict[str, Any]) -> str:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


BASE = {
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"model_type": "plamo2", "mamba_d_state": 64}, "model_type 'plamo2'"),
        ({"model_type": "lfm2_moe", "layer_types": ["conv"] * 4}, "no full_attention layer"),
        ({"model_type": "lfm2_moe", "tie_word_embeddings": False}, "ties the lm_head"),
        ({"model_type": "mystery", "layer_types": ["conv", "full_attention"] * 2}, "layer shapes are unknown"),
        ({"model_type": "minimax_text_01", "attn_type_list": [0, 1, 0, 1]}, "model_type 'minimax_text_01'"),
        ({"model_type": "nemotron_h", "hybrid_override_pattern": "MX*E"}, "'X' layers"),
        ({"model_type": "nemotron_h", "hybrid_override_pattern": "-**-"}, "no Mamba ('M') layer"),
        ({"model_type": "nemotron_h", "layers_block_type": ["mamba", "conv"]}, "'layers_block_type' must list"),
        ({"model_type": "granitemoehybrid", "layer_types": ["mamba", "conv"] * 2}, "'linear_attention' / 'full"),
        ({"model_type": "kimi_linear", "layer_types": ["linear_attention"] * 4}, "model_type 'kimi_linear'"),
        ({"model_type": "mystery", "ssm_state_size": 16}, "field 'ssm_state_size'"),
        ({"model_type": "mystery", "layer_types": ["linear_attention"] * 4}, "layer shapes are unknown"),
        ({"model_type": "nemotron_h", "hybrid_override_pattern": "M*"}, "'hybrid_override_pattern' must be"),
    ],
)
def test_unsupported_hybrids_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, Any], needle: str
) -> None:
    code = main(["plan", _write(tmp_path, {**BASE, **extra}), "--gpu", "H100"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and needle in err, err


def test_gap_explains_the_state_pool(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, QWEN, "--gpu", "H200", "-tp", "4", "--engine", "both")
    gap = {item["name"]: item for item in d["gap"]}
    assert gap["mamba_state"]["bytes"] == d["sglang"]["mamba"]["mamba_pool_bytes"]
    assert "its own pool" in gap["mamba_state"]["sentence"]
    assert d["hybrid"]["state_layers"] == 36  # the top level is vLLM's


@settings(max_examples=25, deadline=None)
@given(
    tp=hs.sampled_from([1, 2, 4, 8]),
    length=hs.integers(min_value=1024, max_value=131072),
    util=hs.floats(min_value=0.5, max_value=0.97),
    engine=hs.sampled_from(["vllm", "sglang"]),
)
def test_ledgers_sum_and_blocks_add_up(
    tp: int, length: int, util: float, engine: Literal["vllm", "sglang"]
) -> None:
    model, gpu = load_model(NEMOTRON), load_gpu("H200")
    settings_ = ServeSettings(
        engine=engine, tensor_parallel_size=tp, max_model_len=length, gpu_memory_utilization=round(util, 2)
    )
    result = plan(model, gpu, settings_)
    assert sum(t.bytes for t in result.ledger.terms) == result.capacity_bytes
    if engine == "vllm":
        h = result.hybrid
        assert h is not None
        assert result.blocks_per_request == h.attention_blocks_per_request + h.state_blocks_per_request
        assert h.attention_blocks_per_request == -(-length // result.block_size)
        assert result.block_size * h.kv.attention_token_bytes == h.kv.page_bytes >= h.kv.state_page_bytes
    else:
        m = result.sglang.extra["mamba"]
        assert result.ledger.bytes_of("mamba_state") == m["mamba_pool_bytes"]
        assert result.sglang.max_running_requests <= max(0, m["max_mamba_cache_size"]) // 3
