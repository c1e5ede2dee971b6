"""Attention-free (pure Mamba) models planned as vLLM V1 sizes them (docs/hybrid.md, "Pure Mamba").

vLLM (0.32.0, vllm/model_executor/models/config.py `MambaModelConfig`; vllm/config/model.py
`is_prefix_caching_supported`): prefix caching is off for attention-free models, the MambaSpec block is
max_model_len, every layer shares one page size so all layers form one KV-cache group, a request holds one block:
blocks = KV bytes // (layers × state page), concurrency = blocks, tokens = blocks × max_model_len. The tiny
Mamba2 below is tests/engine/configs/mamba2-pure, which vLLM 0.32.0's CPU build ran with these numbers
(tests/engine/cases.yaml `mamba2-pure-default`: 124 blocks of 1,024 tokens, 126,976 tokens, 124.00x).
Parameter counts are transformers 5.19's models built on the meta device from the same configs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vramctl.cli.main import main
from vramctl.core import kv
from vramctl.core.errors import BadInputError
from vramctl.registry.models import spec_from_config

HERE = Path(__file__).resolve().parent
ENGINE_CONFIGS = HERE.parent / "engine" / "configs"
MAMBA2 = ENGINE_CONFIGS / "mamba2-pure"
MAMBA1 = ENGINE_CONFIGS / "mamba1-pure"
KV_64MIB = "67108864"

MAMBA1_BIAS_AUTO = {
    "model_type": "mamba",
    "architectures": ["MambaForCausalLM"],
    "hidden_size": 96,
    "num_hidden_layers": 3,
    "state_size": 8,
    "expand": 2,
    "conv_kernel": 4,
    "time_step_rank": "auto",
    "vocab_size": 300,
    "use_bias": True,
    "use_conv_bias": False,
    "tie_word_embeddings": False,
}
FALCON_MAMBA_SMALL = {
    "model_type": "falcon_mamba",
    "architectures": ["FalconMambaForCausalLM"],
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "state_size": 16,
    "expand": 2,
    "conv_kernel": 4,
    "vocab_size": 200,
}
MAMBA2_BIAS_TIED = {
    "model_type": "mamba2",
    "architectures": ["Mamba2ForCausalLM"],
    "hidden_size": 128,
    "num_hidden_layers": 3,
    "num_heads": 8,
    "head_dim": 32,
    "expand": 2,
    "n_groups": 2,
    "state_size": 32,
    "conv_kernel": 4,
    "vocab_size": 500,
    "use_bias": True,
    "use_conv_bias": False,
    "tie_word_embeddings": True,
}


def _config(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "config.json").read_text())
    return data


@pytest.mark.parametrize(
    ("config", "meta_params"),
    [
        (MAMBA1_BIAS_AUTO, 249_504),  # biases on, conv bias off, dt_rank auto = ceil(96 / 16), untied
        (FALCON_MAMBA_SMALL, 78_272),  # intermediate_size absent: expand × hidden; tied by default
        (MAMBA2_BIAS_TIED, 419_424),
        (_config(MAMBA2), 2_252_640),
        (_config(MAMBA1), 2_014_464),
    ],
)
def test_parameters_match_transformers_meta_build(config: dict[str, Any], meta_params: int) -> None:
    spec = spec_from_config(config, where="config.json", name="m")
    assert spec.param_count == meta_params
    assert spec.is_attention_free and spec.num_state_layers == config["num_hidden_layers"]
    assert spec.weight_bytes == 2 * meta_params  # no dtype given: bf16


def test_state_shapes_follow_vllm() -> None:
    m2 = spec_from_config(_config(MAMBA2), where="c", name="m2")
    shapes = kv.state_shapes(m2, tp=1, element_bytes=2, mamba_ssm_cache_dtype="float32")
    # mamba2_state_shape: conv (512 + 2 × 1 × 64, 4 − 1), SSM (8 heads, 64, 64), float32 SSM
    assert (shapes.conv, shapes.ssm) == ((640, 3), (8, 64, 64))
    assert shapes.page_bytes == 640 * 3 * 2 + 8 * 64 * 64 * 4 == 134_912
    m1 = spec_from_config(_config(MAMBA1), where="c", name="m1")
    s1 = kv.state_shapes(m1, tp=2, element_bytes=2)
    # mamba1_state_shape: conv (intermediate / tp, kernel − 1), SSM (intermediate / tp, state_size)
    assert (s1.conv, s1.ssm) == ((256, 3), (256, 16))


def _plan(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    code = main(["plan", *args, "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else {}), out.err


def test_engine_case_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.32.0's CPU build on tests/engine/configs/mamba2-pure (64 MiB, max_model_len 1,024, float32 SSM state
    on CPU, no CUDA graphs): 124 blocks of 1,024 tokens, 126,976 tokens, 124.00x."""
    code, d, err = _plan(
        ["--engine-version", "0.32.0", "--", "vllm", "serve", str(MAMBA2), "--max-model-len", "1024",
         "--kv-cache-memory-bytes", KV_64MIB, "--mamba-ssm-cache-dtype", "float32", "--enforce-eager"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert (d["block_size"], d["num_blocks"], d["kv_tokens"], d["max_concurrency"]) == (1024, 124, 126_976, 124.0)
    assert d["bytes_per_block"] == 4 * 134_912 and d["blocks_per_request"] == 1
    assert d["kv_bytes_per_token"] == 0
    h = d["hybrid"]
    assert (h["full_attention_layers"], h["state_layers"], h["attention_groups"], h["state_groups"]) == (0, 4, 0, 1)
    assert (h["page_bytes"], h["mamba_page_padding_pct"], h["mamba_cache_mode"]) == (134_912, 0.0, "none")
    assert h["log_lines"] == []


def test_mamba1_engine_case_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.32.0's CPU build on tests/engine/configs/mamba1-pure (`mamba1-pure-default`): conv (512, 3) in bf16 +
    SSM (512, 16) in float32 = 35,840 B per layer, 4 layers: 468 blocks of 1,024, 479,232 tokens, 468.00x."""
    code, d, err = _plan(
        ["--engine-version", "0.32.0", "--", "vllm", "serve", str(MAMBA1), "--max-model-len", "1024",
         "--kv-cache-memory-bytes", KV_64MIB, "--mamba-ssm-cache-dtype", "float32", "--enforce-eager"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert d["bytes_per_block"] == 4 * (512 * 3 * 2 + 512 * 16 * 4) == 143_360
    assert (d["block_size"], d["num_blocks"], d["kv_tokens"], d["max_concurrency"]) == (1024, 468, 479_232, 468.0)
    assert d["hybrid"]["state_kind"] == "mamba1"


# 8192: the config names no context length, so vLLM assumed 2048 but takes a longer --max-model-len as given
@pytest.mark.parametrize("max_model_len", [512, 2048, 8192])
def test_block_is_max_model_len_and_tokens_are_blocks_times_it(
    capsys: pytest.CaptureFixture[str], max_model_len: int
) -> None:
    code, d, err = _plan(
        [str(MAMBA2), "--gpu", "H100", "--max-model-len", str(max_model_len), "--kv-cache-memory-bytes", "1GiB",
         "--max-num-seqs", "64"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    page = 640 * 3 * 2 + 8 * 64 * 64 * 2  # bf16 SSM state off the CPU: 69,376 B
    blocks = 2**30 // (4 * page)
    assert d["block_size"] == max_model_len
    assert (d["num_blocks"], d["max_concurrency"]) == (blocks, float(blocks))
    assert d["kv_tokens"] == blocks * max_model_len


def test_versions_before_028_log_the_same_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    """Before 0.28 vLLM logged num_blocks // groups × block_size: one group, block = max_model_len, the same."""
    code, d, err = _plan(
        [str(MAMBA2), "--gpu", "H100", "--max-model-len", "1024", "--kv-cache-memory-bytes", KV_64MIB,
         "--engine-version", "0.11.0", "--max-num-seqs", "64"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert d["kv_tokens"] == d["num_blocks"] * 1024


def test_max_num_seqs_above_the_blocks_stops_full_cuda_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    """`CompilationConfig`'s check (vllm/config/compilation.py, 0.32.0): one Mamba block per decode sequence."""
    base = [str(MAMBA2), "--gpu", "H100", "--max-model-len", "1024", "--kv-cache-memory-bytes", KV_64MIB]
    code, d, _ = _plan(base, capsys)
    assert code == 1 and d["verdict"] == "kv-cache-too-small-for-max-model-len"
    assert d["num_blocks"] == 241 and d["settings"]["max_num_seqs"] == 1024
    assert d["verdict_message"].startswith("max_num_seqs (1024) exceeds available Mamba cache blocks (241).")
    for extra in (["--max-num-seqs", "241"], ["--enforce-eager"], ["--engine-version", "0.22.0"]):
        code, d, err = _plan([*base, *extra], capsys)
        assert code == 0 and d["verdict"] == "fits", (extra, err)
    code, d, _ = _plan([*base, "--max-num-seqs", "242"], capsys)
    assert code == 1


def test_text_names_the_state_pool(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", str(MAMBA1), "--gpu", "L4", "--max-model-len", "2048", "--kv-cache-memory-bytes", KV_64MIB,
                 "--max-num-seqs", "64"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "Attention-free (Mamba1 in every layer)" in out
    assert "the default for attention-free models" in out and "blocks × max_model_len" in out


def test_block_size_flag_does_not_shape_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    # the engine tier passes the block size vLLM reports (1,024 here) back as --block-size
    args = [str(MAMBA2), "--gpu", "H100", "--max-model-len", "1024", "--kv-cache-memory-bytes", KV_64MIB]
    code, plain, _ = _plan([*args, "--max-num-seqs", "64"], capsys)
    code2, given, err = _plan([*args, "--max-num-seqs", "64", "--block-size", "1024"], capsys)
    assert code == code2 == 0, err
    assert (given["block_size"], given["num_blocks"]) == (plain["block_size"], plain["num_blocks"]) == (1024, 241)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--", "vllm", "serve", str(MAMBA2), "--enable-prefix-caching"], "--enable-prefix-caching"),
        ([str(MAMBA2), "--gpu", "H100", "--engine", "sglang"], "--engine sglang"),
        ([str(MAMBA2), "--gpu", "H100", "-tp", "3"], "--tensor-parallel-size 3"),
        ([str(MAMBA2), "--gpu", "H100", "--engine-version", "0.9.2"], "--engine-version 0.9.2"),
    ],
)
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    code = main(["plan", *args])
    err = capsys.readouterr().err
    assert code == 2
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_mamba2_heads_must_span_the_mixer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MAMBA2_BIAS_TIED, "num_heads": 7}))
    code = main(["plan", str(path), "--gpu", "H100"])
    err = capsys.readouterr().err
    assert code == 2 and "num_heads (7) × head_dim (32) must equal expand × hidden_size (256)" in err
    with pytest.raises(BadInputError):
        spec_from_config({**MAMBA2_BIAS_TIED, "num_heads": 7}, where="c", name="m")


GRANITE_ALL_MAMBA = ENGINE_CONFIGS / "granite-4-h-all-mamba"


def test_all_mamba_granite_is_a_hybrid_class_without_attention_pages(capsys: pytest.CaptureFixture[str]) -> None:
    """GraniteMoeHybridForCausalLM is an `IsHybrid` class: with every layer Mamba2, vLLM 0.32 still turns prefix
    caching on ('align': 2 + 1 blocks per request) but has no attention page to raise or pad to, so the page is
    the unpadded state and the block the cache block size (tests/engine/cases.yaml `granite-4-h-all-mamba-default`:
    164 blocks of 16, 55,978 tokens, 54.67x on the CPU build; `-noprefix`: blocks of max_model_len, one each)."""
    spec = spec_from_config(_config(GRANITE_ALL_MAMBA), where="c", name="g")
    assert spec.is_state_only and not spec.is_attention_free
    base = ["--engine-version", "0.32.0", "--", "vllm", "serve", str(GRANITE_ALL_MAMBA), "--max-model-len", "1024",
            "--kv-cache-memory-bytes", KV_64MIB, "--mamba-ssm-cache-dtype", "float32", "--enforce-eager"]  # fmt: skip
    page = 608 * 3 * 2 + 8 * 64 * 48 * 4  # conv (512 + 2 × 48, 3) bf16 + SSM (8, 64, 48) float32 = 101,952 B
    code, d, err = _plan([*base, "--block-size", "16"], capsys)
    assert code == 0, err
    assert d["bytes_per_block"] == 4 * page and d["hybrid"]["mamba_page_padding_pct"] == 0.0
    assert (d["block_size"], d["num_blocks"], d["blocks_per_request"]) == (16, 164, 3)
    assert (d["kv_tokens"], d["max_concurrency"], d["hybrid"]["mamba_cache_mode"]) == (55_978, 54.6667, "align")
    assert d["hybrid"]["log_lines"] == []
    code, d, err = _plan([*base, "--no-enable-prefix-caching"], capsys)
    assert code == 0, err
    assert (d["block_size"], d["num_blocks"], d["blocks_per_request"], d["kv_tokens"]) == (1024, 164, 1, 167_936)


def test_models_names_the_state_kind(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["models", str(MAMBA2), "--json"])
    model = json.loads(capsys.readouterr().out)["models"][0]
    assert code == 0 and (model["attention"], model["param_count"]) == ("mamba2", 2_252_640)


def test_mamba2_default_shape_on_an_h100(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/hybrid.md's worked example: 64 layers × 2,158,592 B per request; fewer states than the H100's default
    max_num_seqs fit at 32k, so the default serve stops; 256 sequences fit."""
    config = HERE / "configs" / "mamba2-transformers-default"
    args = [str(config), "--gpu", "H100", "--max-model-len", "32768"]
    code, d, _ = _plan(args, capsys)
    assert code == 1 and d["verdict_message"].startswith("max_num_seqs (1024) exceeds available Mamba cache blocks")
    code, d, err = _plan([*args, "--max-num-seqs", "256"], capsys)
    assert code == 0, err
    assert d["bytes_per_block"] == 64 * (10_240 * 3 * 2 + 128 * 64 * 128 * 2) == 138_149_888
    assert d["block_size"] == 32_768 and d["num_blocks"] == d["kv_cache_bytes"] // 138_149_888
    assert d["kv_tokens"] == d["num_blocks"] * 32_768 and d["max_concurrency"] == d["num_blocks"]
    assert d["model"]["param_count"] == 7_285_403_648


def test_read_log_takes_the_cpu_platforms_ssm_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM's CPU platform logs "Reset SSM cache type to float32 …" (vllm/platforms/cpu.py, 0.32.0); a state-only
    pool is sized by it, so read-log keeps it and --compare-plan plans with it (lines written for this test in the
    engine's format)."""
    log = tmp_path / "serve.log"
    log.write_text(
        "(APIServer pid=1) INFO 12-03 07:31:12 [utils.py:286] non-default args: {'model': "
        f"'{MAMBA2}', 'max_model_len': 1024, 'enforce_eager': True, 'kv_cache_memory_bytes': 67108864}}\n"
        "(APIServer pid=1) WARNING 12-03 07:31:12 [platforms/cpu.py:317] Reset SSM cache type to float32 for "
        "accelerated GDN mamba backend 'mamba2'.\n"
        "(EngineCore pid=2) INFO 12-03 07:31:35 [v1/core/kv_cache_utils.py:2327] CPU KV cache size: 126,976 tokens, "
        "Maximum concurrency for 1,024 tokens per request: 124.00x\n"
    )
    code = main(["read-log", str(log), "--compare-plan", "--gpu-memory", "20GiB", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["settings"]["mamba_ssm_cache_dtype"] == "float32"
    rows = {row["name"]: row for row in report["comparison"]["rows"]}
    assert (rows["kv_tokens"]["planned"], rows["kv_tokens"]["logged"]) == (126_976, 126_976)
    assert rows["max_concurrency"]["planned"] == rows["max_concurrency"]["logged"] == 124.0
