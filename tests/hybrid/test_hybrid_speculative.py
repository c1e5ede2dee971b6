"""vLLM speculative decoding (`--speculative-config`) in the plan: vramctl/core/engines/vllm_speculative.py.

Per plan, with n = num_speculative_tokens (sources cited in that module):
- an MTP method loads the checkpoint's MTP layer(s) (weights on the last stage) and adds as many full-attention
  layers to the KV groups;
- a hybrid's state groups take n more blocks per request (`num_speculative_blocks`, vLLM 0.15 →) and every conv
  state n more columns (`conv_kernel - 1 + num_spec`), which can raise the attention block.
Numbers are worked by hand below; the worked deployment is a real start-up (Qwen3.6-27B, vLLM 0.20.2) whose logged
tokens and concurrency the plan must give.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from vramctl.cli.main import main
from vramctl.core.check.spec import parse_spec
from vramctl.core.params import mtp_layer_rank_bytes
from vramctl.core.plan import plan
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_gpu, load_model

CONFIGS = Path(__file__).parent.parent / "engine" / "configs"
QWEN_NEXT = str(CONFIGS / "qwen3-next-hybrid")
QWEN_NEXT_MTP = str(CONFIGS / "qwen3-next-mtp-hybrid")
FALCON_H1 = str(CONFIGS / "falcon-h1-hybrid")
KV = 67_108_864


def run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["plan", "--json", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data: dict[str, Any] = json.loads(captured.out)
    return data


def serve(capsys: pytest.CaptureFixture[str], config: str, version: str, *flags: str) -> dict[str, Any]:
    command = ["vllm", "serve", config, "--max-model-len", "1000", "--kv-cache-memory-bytes", str(KV), *flags]
    return run(capsys, "--gpu", "H100", "--engine-version", version, "--", *command)


# --- the worked deployment --------------------------------------------------------------------------------------
# Qwen3.6-27B (16 full-attention + 48 Gated DeltaNet layers, 1 MTP layer), TP 2, fp8_e5m2 KV, prefix caching on
# ('align'), MTP 3, KV pool 10.99 GiB, vLLM 0.20.2. By hand: attention 2 KV heads × 256 × 2 × 1 B = 1,024 B per token;
# GDN conv (2·16·128 + 48·128) / 2 = 5,120 channels × (3 + 3) columns × 2 B = 61,440 B + SSM float32 (24, 128, 128) ×
# 4 B = 1,572,864 B = 1,634,304 B; block 16 × cdiv(1,634,304, 16 × 1,024) = 1,600 (1,568 without MTP); page
# 1,638,400 B; 17 + 48 layers → groups of 17 (1 attention + 3 state); 10.99 GiB // (17 × 1,638,400) = 423 blocks;
# per request cdiv(262,144, 1,600) = 164 + 3 × (2 + 3) = 179; 423 / 179 = 2.3631x; int(2.3631 × 262,144) = 619,479
# — the engine logged 619,479 tokens and 2.36x (tests/fixtures/startup_eval/index.yaml, p03 / p04).
WORKED = [
    "vllm", "serve", "Qwen/Qwen3.6-27B", "-tp", "2", "--max-model-len", "262144", "--kv-cache-dtype", "fp8_e5m2",
    "--kv-cache-memory-bytes", "10.99GiB", "--enable-prefix-caching",
]


@pytest.mark.parametrize(
    "spec",
    [
        ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}'],
        ["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "3"],
        ['--speculative_config={"method":"qwen3_5_mtp","num_speculative_tokens":3}'],
        ["-sc", '{"num_speculative_tokens": 3, "method": "mtp"}'],
    ],
)
def test_the_worked_qwen3_6_deployment_gives_the_logged_tokens(
    capsys: pytest.CaptureFixture[str], spec: list[str]
) -> None:
    d = run(capsys, "--gpu", "H200", "--engine-version", "0.20.2", "--", *WORKED, *spec)
    h = d["hybrid"]
    assert (h["attention_block_size"], h["page_bytes"], h["conv_state_shape"]) == (1600, 1_638_400, [5120, 6])
    assert (h["full_attention_layers"], h["state_layers"], h["group_size"]) == (17, 48, 17)
    assert (d["num_blocks"], h["attention_blocks_per_request"], h["state_blocks_per_request"]) == (423, 164, 15)
    assert d["kv_tokens"] == 619_479 and round(d["max_concurrency"], 2) == 2.36
    speculative = dict(d["settings"]["speculative"])
    assert set(speculative.pop("profile_run")) >= {"drafter_activation_bytes", "rejection_sampler_bytes"}
    assert speculative == {
        "method": spec_method(spec), "num_speculative_tokens": 3, "drafter_kv_layers": 1, "extra_state_blocks": 3,
        "extra_conv_columns": 3,
    }


def spec_method(words: list[str]) -> str:
    return "qwen3_5_mtp" if "qwen3_5_mtp" in " ".join(words) else "mtp"


def test_the_worked_deployment_without_speculative_decoding(capsys: pytest.CaptureFixture[str]) -> None:
    """The same start-up planned without the speculative config: 459 blocks of 1,568, 168 + 3 × 2 per request."""
    d = run(capsys, "--gpu", "H200", "--engine-version", "0.20.2", "--", *WORKED)
    h = d["hybrid"]
    assert (h["attention_block_size"], h["group_size"], d["num_blocks"]) == (1568, 16, 459)
    assert (d["blocks_per_request"], d["kv_tokens"]) == (174, 691_517)


def test_mtp_weights_are_charged_on_top(capsys: pytest.CaptureFixture[str]) -> None:
    base = run(capsys, "--gpu", "H200", "--engine-version", "0.20.2", "--", *WORKED)
    mtp = run(
        capsys, "--gpu", "H200", "--engine-version", "0.20.2", "--", *WORKED,
        "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}',
    )
    model = load_model("Qwen/Qwen3.6-27B")
    layer = mtp_layer_rank_bytes(model, 2)
    # by hand, per rank: attention q + gate (2 × 24 × 256 = 12,288 rows) 12,288 × 5,120 / 2 + k, v 4 × 256 × 5,120
    # / 2 each + o 5,120 × 6,144 / 2 + q/k norms 2 × 256; MLP 3 × 17,408 × 5,120 / 2; fc 5,120 × 10,240 / 2;
    # 2 + 3 norms of 5,120; all × 2 B
    attention = 12_288 * 5_120 // 2 + 2 * 4 * 256 * 5_120 // 2 + 5_120 * 6_144 // 2 + 2 * 256
    params = attention + 3 * 17_408 * 5_120 // 2 + 5_120 * 10_240 // 2 + 5 * 5_120
    assert layer == 2 * params
    assert mtp["terms"]["weights"]["bytes"] == base["terms"]["weights"]["bytes"] + layer
    assert any("1 MTP layer(s)" in note for note in mtp["explanations"])


# --- synthetic configs ------------------------------------------------------------------------------------------
# qwen3-next-mtp-hybrid: 1 attention + 3 GDN layers, num_nextn_predict_layers 1, bf16, TP 1. Attention 2 × 64 × 2 ×
# 2 B = 512 B per token; GDN conv 512 channels × (3 + n) × 2 B + SSM (8, 32, 32) × 2 B = 16,384 B.
# n = 2: conv 5,120 B, page 21,504 → block 16 × cdiv(21,504, 8,192) = 48, page 24,576; with the MTP layer 2 + 3
#   layers → groups of 2 (1 attention + 2 state); 64 MiB // (2 × 24,576) = 1,365 blocks; a 1,000-token request
#   cdiv(1,000, 48) = 21 + 2 × (2 + 2) = 29 blocks ('align', 0.32); 1,365 / 29 = 47.07x; 47,068 tokens.
# n = 8: conv 11,264 B, page 27,648 → block 64, page 32,768; 65,536 B per block → 1,024 blocks; 16 + 2 × (2 + 8) = 36;
#   28.44x; 28,444 tokens.
SYNTHETIC = [
    # n, block, groups, blocks, per request, tokens
    (2, 48, 2, 1365, 29, 47_068),
    (8, 64, 2, 1024, 36, 28_444),
]


@pytest.mark.parametrize(("n", "block", "group", "blocks", "per_request", "tokens"), SYNTHETIC)
def test_mtp_on_a_tiny_gated_delta_net_hybrid(
    capsys: pytest.CaptureFixture[str], n: int, block: int, group: int, blocks: int, per_request: int, tokens: int
) -> None:
    spec = json.dumps({"method": "qwen3_next_mtp", "num_speculative_tokens": n})
    d = serve(capsys, QWEN_NEXT_MTP, "0.32.0", "--speculative-config", spec)
    h = d["hybrid"]
    assert h["conv_state_shape"] == [512, 3 + n]
    assert (h["attention_block_size"], h["group_size"], h["full_attention_layers"]) == (block, group, 2)
    assert (d["num_blocks"], d["blocks_per_request"], d["kv_tokens"]) == (blocks, per_request, tokens)


def test_ngram_adds_state_blocks_and_columns_but_no_layer(capsys: pytest.CaptureFixture[str]) -> None:
    """ngram drafts from the prompt: no MTP layer, but the state still keeps n more blocks and columns. 1 + 3
    layers, groups of 1; n = 2: block 48, page 24,576, 2,730 blocks; 21 + 3 × (2 + 2) = 33; 82,727 tokens."""
    d = serve(capsys, QWEN_NEXT_MTP, "0.32.0", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}')
    h = d["hybrid"]
    assert (h["full_attention_layers"], h["group_size"], d["num_blocks"]) == (1, 1, 2730)
    assert (d["blocks_per_request"], d["kv_tokens"]) == (33, int(2730 / 33 * 1000))


@pytest.mark.parametrize(
    ("version", "flags", "per_request", "columns"),
    [
        ("0.14.0", (), 21 + 2 * 1, 5),  # MambaSpec counts one page before 0.15; Qwen3-Next passes num_spec already
        ("0.15.0", ("--enable-prefix-caching",), 21 + 2 * (2 + 2), 5),
        ("0.20.2", (), 21 + 2 * (1 + 2), 5),
    ],
)
def test_speculative_blocks_by_version(
    capsys: pytest.CaptureFixture[str], version: str, flags: tuple[str, ...], per_request: int, columns: int
) -> None:
    spec = '{"method": "mtp", "num_speculative_tokens": 2}'
    d = serve(capsys, QWEN_NEXT_MTP, version, "--speculative-config", spec, *flags)
    assert d["hybrid"]["conv_state_shape"] == [512, columns]
    assert d["blocks_per_request"] == per_request


def test_mamba1_and_short_conv_keep_their_columns(capsys: pytest.CaptureFixture[str]) -> None:
    for config, columns in ((CONFIGS / "jamba-hybrid", 3), (CONFIGS / "lfm2-hybrid", 2)):
        plain = serve(capsys, str(config), "0.32.0")
        d = serve(capsys, str(config), "0.32.0", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}')
        assert d["hybrid"]["conv_state_shape"] == plain["hybrid"]["conv_state_shape"]
        assert d["hybrid"]["conv_state_shape"][1] == columns
        assert d["blocks_per_request"] == plain["blocks_per_request"] + 3 * d["hybrid"]["state_groups"]


def test_a_dense_mtp_model_gets_one_more_kv_layer() -> None:
    """DeepSeek-V3 (61 MLA layers + 1 MTP layer): bytes per block grow by 62 / 61, weights by one MTP layer."""
    model, gpu = load_model("deepseek-ai/DeepSeek-V3"), load_gpu("H200")
    base = ServeSettings(tensor_parallel_size=8, max_model_len=32768, kv_cache_memory_bytes=20 << 30)
    plain = plan(model, gpu, base)
    mtp = plan(model, gpu, base.with_changes(speculative_method="deepseek_mtp", num_speculative_tokens=1))
    assert mtp.bytes_per_block * 61 == plain.bytes_per_block * 62
    weights = {t.name: t.bytes for t in plain.ledger.terms}["weights"]
    assert {t.name: t.bytes for t in mtp.ledger.terms}["weights"] == weights + mtp_layer_rank_bytes(model, 8)


# --- N = 0 is no speculative decoding -----------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(
    version=hs.sampled_from(("0.11.0", "0.14.0", "0.15.0", "0.20.2", "0.28.0", "0.32.0")),
    config=hs.sampled_from((QWEN_NEXT, QWEN_NEXT_MTP, FALCON_H1, "Qwen/Qwen3-8B", "deepseek-ai/DeepSeek-V3")),
    method=hs.sampled_from(("mtp", "ngram", "eagle", "qwen3_next_mtp")),
    max_model_len=hs.integers(16, 8192),
    prefix=hs.sampled_from((None, True, False)),
)
def test_zero_draft_tokens_equals_no_speculative_config(
    version: str, config: str, method: str, max_model_len: int, prefix: bool | None
) -> None:
    model, gpu = load_model(config), load_gpu("H100")
    base = ServeSettings(
        engine_version=version, max_model_len=max_model_len, kv_cache_memory_bytes=KV, enable_prefix_caching=prefix
    )
    zero = base.with_changes(speculative_method=method, num_speculative_tokens=0)
    assert plan(model, gpu, zero).to_json() == plan(model, gpu, base).to_json()


@settings(max_examples=25, deadline=None)
@given(n=hs.integers(1, 12), max_model_len=hs.integers(64, 8192))
def test_more_draft_tokens_never_add_concurrency(n: int, max_model_len: int) -> None:
    model, gpu = load_model(QWEN_NEXT_MTP), load_gpu("H100")
    base = ServeSettings(engine_version="0.32.0", max_model_len=max_model_len, kv_cache_memory_bytes=KV)
    fewer = plan(model, gpu, base.with_changes(speculative_method="mtp", num_speculative_tokens=n - 1))
    more = plan(model, gpu, base.with_changes(speculative_method="mtp", num_speculative_tokens=n))
    assert more.max_concurrency <= fewer.max_concurrency


# --- the flag, everywhere it is read ------------------------------------------------------------------------------
def test_the_flag_in_a_check_spec_and_a_serve_command() -> None:
    text = (
        "gpu: h100-sxm\nengine: vllm\nmodel: Qwen/Qwen3.6-27B\n"
        "flags:\n  speculative-config: {method: mtp, num_speculative_tokens: 2}\n"
    )
    assert "speculative-config" in str(parse_spec(text).flags)
    cmd = parse_serve_command(
        "vllm serve Qwen/Qwen3.6-27B --speculative-config.method=mtp --speculative-config.num_speculative_tokens=4"
    )
    changes = dict(cmd.changes)
    assert (changes["speculative_method"], changes["num_speculative_tokens"]) == ("mtp", 4)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"method": "mtp"}', "num_speculative_tokens is missing"),
        ("mtp", "not a JSON object"),
        ('{"method": "mtp", "num_speculative_tokens": -1}', "expected 0 to 64"),
        ('{"method": "mtp", "num_speculative_tokens": "x"}', "num_speculative_tokens"),
    ],
)
def test_a_bad_config_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], value: str, message: str) -> None:
    code = main(["plan", "Qwen/Qwen3.6-27B", "--gpu", "H100", "--speculative-config", value])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_read_log_reads_the_config_from_the_args_line(tmp_path: Path) -> None:
    from vramctl.diagnose.startup import parse_startup_log, settings_from_report

    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO 12-03 08:00:00 [utils.py:233] non-default args: {'model': 'Qwen/Qwen3.6-27B', 'tensor_parallel_size': 2, "
        "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}, 'max_model_len': 262144}\n"
    )
    report = parse_startup_log(log.read_text().splitlines())
    s = settings_from_report(report)
    assert (s.speculative_method, s.num_speculative_tokens, s.max_model_len) == ("mtp", 3, 262144)


@pytest.mark.parametrize(
    ("version", "mode", "per_request"), [("0.19.0", "all", 8 + 8), ("0.20.2", "align", 13 + 2 + 2)]
)
def test_prefix_caching_of_a_mamba2_class_with_speculative_decoding(
    capsys: pytest.CaptureFixture[str], version: str, mode: str, per_request: int
) -> None:
    """Falcon-H1-style (block 80, 1 + 1 groups): from 0.20 prefix caching + speculative decoding gives this Mamba2
    class 'align' (n = 2 state blocks on top); 0.19 runs 'all': the block aligned to the 128-token chunk,
    cdiv(1,000, 128) = 8 attention + 8 state blocks, num_speculative_blocks not counted before 0.24."""
    spec = '{"method": "ngram", "num_speculative_tokens": 2}'
    d = serve(capsys, FALCON_H1, version, "--enable-prefix-caching", "--speculative-config", spec)
    assert (d["hybrid"]["mamba_cache_mode"], d["blocks_per_request"]) == (mode, per_request)
    assert d["hybrid"]["conv_state_shape"][1] == 3 + 2
    assert "not modelled, planned with one state block" not in " ".join(d["explanations"])


def test_an_mtp_method_on_a_model_without_mtp_layers_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "Qwen/Qwen3-8B", "--gpu", "H100", "-sc", '{"method": "mtp", "num_speculative_tokens": 2}'])
    err = capsys.readouterr().err
    assert code == 2 and "no multi-token-prediction layers" in err and len(err.strip().splitlines()) == 1
