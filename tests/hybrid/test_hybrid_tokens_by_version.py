"""A hybrid's blocks, tokens and concurrency as each vLLM version reports them (`VllmRules.tokens_from_concurrency`,
`VllmRules.mamba_state_blocks`, `VllmRules.hybrid_prefix_caching_default`, `VllmRules.mamba2_prefill_checkpoint`).

Two tiny synthetic configs (the engine tier's, tests/engine/configs): a Qwen3-Next-style 1 attention + 3 Gated
DeltaNet layers, and a Falcon-H1-style model with attention and Mamba2 side by side in 4 layers. Per version the
expected numbers are worked by hand from vLLM's sources (cited in vramctl/core/engines/vllm/rules.py):

- GPU KV cache size: num_blocks // len(groups) × block (≤ 0.20.0), int(max_concurrency × max_model_len) (0.20.1 →);
- max_concurrency = num_blocks / Σ over groups of the blocks one max_model_len request takes;
- a state group takes 1 block with prefix caching off; 2 in mamba_cache_mode 'align' (the default from 0.28,
  asked for with --enable-prefix-caching on 0.15-0.27 by a class without mamba 'all' mode); + 1 prefill
  checkpoint block for Mamba2 from 0.32.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from vramctl.cli.main import main
from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.plan import plan
from vramctl.core.settings import ServeSettings, parse_version
from vramctl.registry import load_gpu, load_model

CONFIGS = Path(__file__).parent.parent / "engine" / "configs"
QWEN_NEXT = str(CONFIGS / "qwen3-next-hybrid")
FALCON_H1 = str(CONFIGS / "falcon-h1-hybrid")
KV = 67_108_864


def run(capsys: pytest.CaptureFixture[str], config: str, version: str, *flags: str) -> dict[str, Any]:
    # --max-num-seqs 256: below the Falcon case's 409 blocks, which vLLM >= 0.23 requires with full CUDA graphs
    command = ["vllm", "serve", config, "--max-model-len", "1000", "--kv-cache-memory-bytes", str(KV)]
    command += ["--max-num-seqs", "256", *flags]
    code = main(["plan", "--gpu", "H100", "--engine-version", version, "--json", "--", *command])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data: dict[str, Any] = json.loads(captured.out)
    return data


# Qwen3-Next-style, bf16, TP 1: attention 2 KV heads × 64 × 2 × 2 B = 512 B per token; GDN conv (2·4·32 + 8·32) × 3
# × 2 B = 3,072 B + SSM (8, 32, 32) × 2 B = 16,384 B = 19,456 B; block 16 × cdiv(19,456, 16 × 512) = 48, page
# 24,576 B; 1 + 3 layers → groups of 1 (1 attention + 3 state); 67,108,864 // 24,576 = 2,730 blocks.
# A 1,000-token request: cdiv(1,000, 48) = 21 attention blocks + 3 × (1 | 2) state blocks = 24 | 27.
QWEN_NEXT_CASES = [
    # version, flags, mode, blocks per request, tokens
    ("0.11.0", (), "none", 24, 2730 // 4 * 48),  # 32,736
    ("0.11.0", ("--enable-prefix-caching",), "none", 24, 32_736),  # switched off for every hybrid
    ("0.14.0", ("--enable-prefix-caching",), "none", 24, 32_736),  # switched off: no mamba prefix caching
    ("0.15.0", ("--enable-prefix-caching",), "align", 27, 32_736),  # 'align' for a Gated DeltaNet class
    ("0.20.0", (), "none", 24, 32_736),
    ("0.20.1", (), "none", 24, int(2730 / 24 * 1000)),  # 113,750: the tokens come from the concurrency
    ("0.20.1", ("--enable-prefix-caching",), "align", 27, int(2730 / 27 * 1000)),  # 101,111
    ("0.27.0", (), "none", 24, 113_750),
    ("0.28.0", (), "align", 27, 101_111),  # prefix caching on by default for hybrids
    ("0.32.0", (), "align", 27, 101_111),
    ("0.32.0", ("--no-enable-prefix-caching",), "none", 24, 113_750),
]


@pytest.mark.parametrize(("version", "flags", "mode", "per_request", "tokens"), QWEN_NEXT_CASES)
def test_gated_delta_net_hybrid_by_version(
    capsys: pytest.CaptureFixture[str],
    version: str,
    flags: tuple[str, ...],
    mode: str,
    per_request: int,
    tokens: int,
) -> None:
    d = run(capsys, QWEN_NEXT, version, *flags)
    h = d["hybrid"]
    assert (h["attention_block_size"], h["page_bytes"], h["group_size"], d["num_blocks"]) == (48, 24_576, 1, 2730)
    assert (h["mamba_cache_mode"], d["blocks_per_request"], d["kv_tokens"]) == (mode, per_request, tokens)
    assert d["max_concurrency"] == pytest.approx(2730 / per_request, abs=1e-4)
    assert "not modelled" not in " ".join(d["explanations"])


# Falcon-H1-style: 4 attention + 4 Mamba2 layers, block 80, page 40,960 B, groups of 4 (1 + 1): 409 blocks; a request
# cdiv(1,000, 80) = 13 attention blocks + 1 ('none') | 2 ('align', 0.28-0.31) | 3 ('align' + the Mamba2 prefill
# checkpoint block, 0.32 →). On 0.15-0.27 --enable-prefix-caching gives this Mamba2 class mode 'all'
# (test_mamba2_all_mode); on 0.12-0.14 per-block state: not modelled.
FALCON_CASES = [
    ("0.20.0", (), "none", 14, 409 // 2 * 80, False),  # 16,320
    ("0.20.1", (), "none", 14, int(409 / 14 * 1000), False),  # 29,214
    ("0.14.0", ("--enable-prefix-caching",), "none", 14, 16_320, True),  # kept on per block: not modelled
    ("0.28.0", (), "align", 15, int(409 / 15 * 1000), False),  # 27,266
    ("0.31.0", (), "align", 15, 27_266, False),
    ("0.32.0", (), "align", 16, int(409 / 16 * 1000), False),  # 25,562
]


@pytest.mark.parametrize(("version", "flags", "mode", "per_request", "tokens", "unmodelled"), FALCON_CASES)
def test_mamba2_hybrid_by_version(
    capsys: pytest.CaptureFixture[str],
    version: str,
    flags: tuple[str, ...],
    mode: str,
    per_request: int,
    tokens: int,
    unmodelled: bool,
) -> None:
    d = run(capsys, FALCON_H1, version, *flags)
    h = d["hybrid"]
    assert (h["attention_block_size"], h["group_size"], d["num_blocks"]) == (80, 4, 409)
    assert (h["mamba_cache_mode"], d["blocks_per_request"], d["kv_tokens"]) == (mode, per_request, tokens)
    assert ("not modelled" in " ".join(d["explanations"])) == unmodelled


# Mode 'all' (0.15-0.31), Falcon-H1-style: mamba page 35,072 B, attention 2 heads x 64 x 2 x 2 B = 512 B per token:
# cdiv(35,072, 512) = 69 tokens per state; chunk lcm(128, 16) = 128 -> block 128 x cdiv(69, 128) = 128 tokens, page
# 65,536 B; 4 layers per group: 64 MiB // (4 x 65,536) = 256 blocks; a 1,000-token request: cdiv(1,000, 128) = 8
# attention + 8 state blocks = 16; 256 / 16 = 16x, 16,000 tokens (0.20.1 →). --mamba-block-size 256: block 256, page
# 131,072 B, 128 blocks, cdiv(1,000, 256) = 4 + 4 per request, 128 / 8 = 16x, 16,000 tokens (--max-num-seqs 128:
# vLLM 0.23 → wants max_num_seqs within the blocks).
ALL_CASES = [
    ("0.20.1", ("--enable-prefix-caching",), 128, 256, 16, 16_000),
    ("0.28.0", ("--mamba-cache-mode", "all"), 128, 256, 16, 16_000),  # prefix caching on by default from 0.28
    ("0.31.0", ("--mamba-cache-mode", "all"), 128, 256, 16, 16_000),
    ("0.31.0", ("--mamba-cache-mode", "all", "--mamba-block-size", "256", "--max-num-seqs", "128"), 256, 128, 8, 16_000),
    ("0.15.0", ("--enable-prefix-caching",), 128, 256, 16, 256 // 2 * 128),  # before 0.20.1: blocks // groups x block
]


@pytest.mark.parametrize(("version", "flags", "block", "blocks", "per_request", "tokens"), ALL_CASES)
def test_mamba2_all_mode(
    capsys: pytest.CaptureFixture[str],
    version: str,
    flags: tuple[str, ...],
    block: int,
    blocks: int,
    per_request: int,
    tokens: int,
) -> None:
    d = run(capsys, FALCON_H1, version, *flags)
    h = d["hybrid"]
    assert (h["mamba_cache_mode"], h["attention_block_size"], d["num_blocks"]) == ("all", block, blocks)
    assert (h["state_blocks_per_request"], d["blocks_per_request"], d["kv_tokens"]) == (
        per_request // 2, per_request, tokens
    )
    assert "not modelled" not in " ".join(d["explanations"])


@pytest.mark.parametrize(
    ("version", "flags", "says"),
    [
        ("0.32.0", ("--mamba-cache-mode", "all"), "invalid choice: 'all'"),
        ("0.14.0", ("--mamba-cache-mode", "align"), "no such flag"),
        ("0.20.1", ("--mamba-cache-mode", "every"), "invalid choice"),
        ("0.11.0", ("--mamba-block-size", "128"), "no such flag"),
    ],
)
def test_mamba_cache_mode_is_checked_per_version(
    capsys: pytest.CaptureFixture[str], version: str, flags: tuple[str, ...], says: str
) -> None:
    command = ["vllm", "serve", FALCON_H1, "--max-model-len", "1000", "--kv-cache-memory-bytes", "67108864", *flags]
    code = main(["plan", "--gpu", "H100", "--engine-version", version, "--", *command])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "mode", "per_request"),
    [
        (("--mamba-cache-mode", "align"), "align", 15),  # 13 + 2 (0.31: no prefill checkpoint block)
        (("--mamba-cache-mode", "none"), "align", 15),  # 'none' is the default, replaced with prefix caching on
        (("--mamba-cache-mode", "all", "--no-enable-prefix-caching"), "none", 14),  # off: vLLM sets 'none'
    ],
)
def test_mamba_cache_mode_with_prefix_caching(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], mode: str, per_request: int
) -> None:
    d = run(capsys, FALCON_H1, "0.31.0", *flags)
    assert (d["hybrid"]["mamba_cache_mode"], d["blocks_per_request"]) == (mode, per_request)


def test_all_mode_falls_back_to_align_for_a_gated_delta_net_class(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next has no mamba prefix caching: vLLM falls back from 'all' to 'align' (two state blocks)."""
    d = run(capsys, QWEN_NEXT, "0.31.0", "--mamba-cache-mode", "all")
    align = run(capsys, QWEN_NEXT, "0.31.0", "--mamba-cache-mode", "align")
    assert d["hybrid"]["mamba_cache_mode"] == "align"
    assert d["hybrid"]["state_blocks_per_request"] == align["hybrid"]["state_blocks_per_request"] == 2 * d[
        "hybrid"
    ]["state_groups"]


VERSIONS = ("0.10.2", "0.11.0", "0.12.0", "0.14.0", "0.15.0", "0.20.0", "0.20.1", "0.27.0", "0.28.0", "0.32.0")


@settings(max_examples=40, deadline=None)
@given(
    version=hs.sampled_from(VERSIONS),
    config=hs.sampled_from((QWEN_NEXT, FALCON_H1)),
    max_model_len=hs.integers(1, 8192),
    kv_bytes=hs.integers(8 << 20, 1 << 30),
    prefix=hs.sampled_from((None, True, False)),
)
def test_tokens_and_concurrency_follow_the_version(
    version: str, config: str, max_model_len: int, kv_bytes: int, prefix: bool | None
) -> None:
    model, gpu = load_model(config), load_gpu("H100")
    r = plan(
        model,
        gpu,
        ServeSettings(
            engine_version=version,
            max_model_len=max_model_len,
            kv_cache_memory_bytes=kv_bytes,
            enable_prefix_caching=prefix,
        ),
    )
    h = r.hybrid
    assert h is not None
    groups = h.attention_groups + h.state_groups
    v = parse_version(version)
    mamba2 = config == FALCON_H1
    # the mode, from the version alone (independent of vramctl.core.mamba_cache)
    if prefix is False or (prefix is None and v < (0, 28, 0)) or v < (0, 12, 0):
        align = False
    elif v >= (0, 28, 0):
        align = True
    else:  # asked for on 0.12-0.27: 'align' only for a class without mamba 'all' mode, from 0.15
        align = not mamba2 and v >= (0, 15, 0)
    # asked for on 0.15-0.27, a Mamba2 class runs 'all': a state block per block of max_model_len
    every = prefix is True and mamba2 and (0, 15, 0) <= v < (0, 28, 0)
    assert h.mamba_cache_mode == ("all" if every else "align" if align else "none")
    block = h.kv.block_size
    state_blocks = -(-max_model_len // block) if every else (2 + (mamba2 and v >= (0, 32, 0))) if align else 1
    assert r.blocks_per_request == h.attention_groups * -(-max_model_len // block) + h.state_groups * state_blocks
    assert r.num_blocks == h.num_blocks
    if r.num_blocks:
        assert r.max_concurrency == pytest.approx(r.num_blocks / r.blocks_per_request)
        expected = (
            int(r.num_blocks / r.blocks_per_request * max_model_len)
            if v >= (0, 20, 1)
            else r.num_blocks // groups * block
        )
        assert r.kv_tokens == expected
    assert rules_for(version).tokens_from_concurrency == (v >= (0, 20, 1))
