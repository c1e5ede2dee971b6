"""What speculative decoding adds to vLLM's profile run and graph capture (vramctl/core/engines/vllm_speculative.py
cites the sources; the version switches are VllmRules.speculative_*).

Hand-worked numbers, Llama-3.1-8B-Instruct (hidden 4,096, vocab 128,256, bf16), max_num_seqs 256, 8,192 batched
tokens:
- the rejection sampler's warm-up (0.12 - 0.32): one dummy draft token per request, 2 × 256 rows of bf16 dummy
  logits in place of the sampler's 256 and an fp32 raw-logits copy of the 256 bonus rows: 256 × 128,256 × (2 × 2 + 4)
  = 262,668,288 B, whatever num_speculative_tokens;
- the capture sizes on 0.32 with 2 draft tokens (decode_query_len 3): ceiling min(256 × 3 × 2, 512) = 512, the grid
  [1, 2, 4, 8 … 248, 256 … 512 step 16] (51 sizes) plus the uniform decode sizes 3k ≤ 512 for k in [1, 2, 4, 8 …
  168]: 3, 6, 12, 24, 48, …, 504, of which 3, 6, 12 and 264, 312, 360, 408, 456, 504 are new (60 sizes).
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
from vramctl.core.engines.vllm.rules import rules_for
from vramctl.core.engines.vllm.scheduler import default_capture_sizes, uniform_decode_sizes
from vramctl.core.plan import plan_vllm
from vramctl.core.settings import ServeSettings
from vramctl.registry import load_gpu, load_model

TARGET = "meta-llama/Llama-3.1-8B-Instruct"
CONFIGS = Path(__file__).parent.parent / "engine" / "configs"
QWEN_NEXT_MTP = str(CONFIGS / "qwen3-next-mtp-hybrid")
GPU = load_gpu("h100-sxm")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["plan", "--json", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data: dict[str, Any] = json.loads(captured.out)
    return data


def terms(d: dict[str, Any]) -> dict[str, int]:
    return {name: t["bytes"] for name, t in d["terms"].items()}


# --- the version switches ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "rejection", "drafters", "capture"),
    [
        ("0.7.3", "none", "none", "unscaled"),
        ("0.8.5", "overlapped", "none", "unscaled"),
        ("0.11.0", "overlapped", "eagle", "unscaled"),
        ("0.12.0", "bonus-sampler", "eagle", "unscaled"),
        ("0.14.0", "bonus-sampler", "eagle", "scaled-max"),
        ("0.20.2", "bonus-sampler", "all", "scaled-max"),
        ("0.28.0", "bonus-sampler", "all", "scaled-max"),
        ("0.30.0", "bonus-sampler", "all", "decode-sizes"),
        ("0.32.0", "bonus-sampler", "all", "decode-sizes"),
        ("0.33.0", "none", "all", "decode-sizes"),
        ("0.34.0", "none", "all", "decode-sizes"),
    ],
)
def test_the_profile_run_switches_by_version(version: str, rejection: str, drafters: str, capture: str) -> None:
    r = rules_for(version)
    assert (r.speculative_rejection_warmup, r.speculative_profile_drafters, r.speculative_capture_sizes) == (
        rejection, drafters, capture
    )


@pytest.mark.parametrize(
    ("version", "modes", "all_spec"),
    [("0.14.0", (), False), ("0.15.0", ("all", "align", "none"), False), ("0.24.0", ("all", "align", "none"), True),
     ("0.31.0", ("all", "align", "none"), True), ("0.32.0", ("align", "none"), True)],
)
def test_the_mamba_cache_modes_by_version(version: str, modes: tuple[str, ...], all_spec: bool) -> None:
    r = rules_for(version)
    assert (r.mamba_cache_modes, r.mamba_all_speculative_blocks) == (modes, all_spec)


# --- capture sizes ----------------------------------------------------------------------------------------------


def test_capture_sizes_grow_by_the_decode_query_length_on_0_32() -> None:
    plain = default_capture_sizes(256, 8192, GPU, "0.32.0")
    spec = default_capture_sizes(256, 8192, GPU, "0.32.0", decode_query_len=3)
    assert len(plain) == 51 and set(plain) < set(spec)
    # 3k for k in 1, 2, 4, 8 … 168: 3, 6, 12 and the multiples of 24 from 256 that are not multiples of 16
    assert sorted(set(spec) - set(plain)) == [3, 6, 12, 264, 312, 360, 408, 456, 504]
    assert {s for s in uniform_decode_sizes(256, 3, GPU) if s <= 512} <= set(spec)


def test_from_0_30_the_count_is_not_monotone_in_the_draft_tokens() -> None:
    """n = 2 adds 3k sizes off the grid (60); n = 3 adds 4k sizes, all already multiples of 8 or 16 (51)."""
    counts = [len(default_capture_sizes(256, 8192, GPU, "0.32.0", decode_query_len=1 + n)) for n in (0, 2, 3)]
    assert counts == [51, 60, 51]


def test_capture_sizes_on_0_20_scale_only_the_ceiling() -> None:
    """0.20.2: min(16 × 3 × 2, 512) = 96 → 1, 2, 4, 8 … 96 (15 sizes); without: min(32, 512) → 7 (+ max_num_seqs 16)."""
    assert default_capture_sizes(16, 8192, GPU, "0.20.2", decode_query_len=3) == (1, 2, 4, *range(8, 97, 8))
    assert default_capture_sizes(16, 8192, GPU, "0.20.2") == (1, 2, 4, 8, 16, 24, 32)
    assert default_capture_sizes(16, 8192, GPU, "0.12.0", decode_query_len=3) == (1, 2, 4, 8, 16, 24, 32)


@settings(max_examples=60, deadline=None)
@given(seqs=hs.integers(1, 1024), tokens=hs.integers(1, 16384), n=hs.integers(1, 16))
def test_the_scaled_ceiling_is_monotone_in_the_draft_tokens(seqs: int, tokens: int, n: int) -> None:
    """0.14 - 0.29 only raise the ceiling with n: the sizes for n + 1 hold those for n. (From 0.30 the uniform
    decode sizes k × (1 + n) replace each other, so the count is not monotone there: vLLM's grid.)"""
    small = default_capture_sizes(seqs, tokens, GPU, "0.28.0", decode_query_len=1 + n)
    large = default_capture_sizes(seqs, tokens, GPU, "0.28.0", decode_query_len=2 + n)
    assert set(small) <= set(large)


# --- the terms --------------------------------------------------------------------------------------------------


def test_the_rejection_sampler_warm_up_is_worked_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    base = [TARGET, "--gpu", "h100-sxm", "--engine-version", "0.32.0", "--max-num-seqs", "256"]
    plain = run(capsys, *base)
    d = run(capsys, *base, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}')
    profile = d["settings"]["speculative"]["profile_run"]
    assert profile["rejection_sampler_bytes"] == 256 * 128_256 * (2 * 2 + 4) == 262_668_288
    # n-gram: no drafter forward, no drafter graphs; the activation grows by exactly the warm-up
    assert (profile["drafter_activation_bytes"], profile["drafter_graph_bytes"], profile["drafter_layers"]) == (0, 0, 0)
    assert terms(d)["activation_peak"] - terms(plain)["activation_peak"] == 262_668_288
    assert "rejection sampler warm-up 0.24 GiB" in d["terms"]["activation_peak"]["formula"]
    # decode_query_len 3 adds target graphs; the ledger still sums
    assert profile["capture_sizes"] == len(d["settings"]["cudagraph_capture_sizes"]) > 51
    assert profile["capture_sizes_added"] == profile["capture_sizes"] - 51
    assert terms(d)["cuda_graph"] > terms(plain)["cuda_graph"]
    assert sum(terms(d).values()) == d["capacity_bytes"]


def test_the_rejection_warm_up_does_not_depend_on_the_draft_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    """One dummy draft token per request in `_dummy_sampler_run`, whatever num_speculative_tokens."""
    base = [TARGET, "--gpu", "h100-sxm", "--engine-version", "0.32.0", "--max-num-seqs", "128"]
    parts = [
        run(capsys, *base, "-sc", json.dumps({"method": "ngram", "num_speculative_tokens": n}))["settings"][
            "speculative"
        ]["profile_run"]["rejection_sampler_bytes"]
        for n in (1, 4, 9)
    ]
    assert parts[0] == parts[1] == parts[2] == 128 * 128_256 * 8


@pytest.mark.parametrize("version", ["0.11.0", "0.33.0", "0.34.0"])
def test_no_rejection_warm_up_charge_outside_0_12_to_0_32(capsys: pytest.CaptureFixture[str], version: str) -> None:
    d = run(
        capsys, TARGET, "--gpu", "h100-sxm", "--engine-version", version, "--max-num-seqs", "256",
        "-sc", '{"method": "ngram", "num_speculative_tokens": 2}',
    )
    assert d["settings"]["speculative"]["profile_run"]["rejection_sampler_bytes"] == 0


def test_the_mtp_drafter_runs_and_is_captured(capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen3-Next-style with one MTP layer on 0.32: its forward at max_num_batched_tokens holds the target's hidden
    states and its 2h fc input above the target's working set; its graphs are (1 + 1) pieces per capture size."""
    base = ["--gpu", "H100", "--engine-version", "0.32.0", "--", "vllm", "serve", QWEN_NEXT_MTP, "--max-model-len",
            "1024", "--max-num-seqs", "64"]
    d = run(capsys, *base, "-sc", '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}')
    profile = d["settings"]["speculative"]["profile_run"]
    sizes = len(d["settings"]["cudagraph_capture_sizes"])
    assert profile["drafter_layers"] == 1 and profile["drafter_graph_pieces"] == sizes * (1 + 1)
    assert profile["drafter_activation_bytes"] > 0 and profile["drafter_graph_bytes"] > 0
    assert "+ drafter graphs" in d["terms"]["cuda_graph"]["formula"]
    assert sum(terms(d).values()) == d["capacity_bytes"]
    eager = run(capsys, *base, "-sc", '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2, "enforce_eager": true}')
    assert eager["settings"]["speculative"]["profile_run"]["drafter_graph_bytes"] == 0
    assert terms(d)["cuda_graph"] - terms(eager)["cuda_graph"] == profile["drafter_graph_bytes"]
    full = run(capsys, *base, "-sc", '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}',
               "--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY"}')
    assert full["settings"]["speculative"]["profile_run"]["drafter_graph_bytes"] == 0  # no piecewise capture


def test_a_draft_model_is_not_profiled_before_0_20(capsys: pytest.CaptureFixture[str]) -> None:
    """0.11 - 0.19 run only EAGLE / MTP drafters in `_dummy_run` (`use_eagle()`)."""
    spec = SP.Speculative("draft_model", 3, 8, 0, 0, draft_layers=16)
    assert not SP.profiled_drafter(spec, "0.14.0")
    mtp = SP.Speculative("mtp", 3, 1, 0, 0)
    assert SP.profiled_drafter(mtp, "0.14.0") and not SP.profiled_drafter(mtp, "0.8.5")


# --- properties -------------------------------------------------------------------------------------------------

LLAMA = load_model(TARGET)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=hs.sampled_from(("0.10.2", "0.11.0", "0.14.0", "0.20.2", "0.28.0", "0.32.0", "0.33.0", "0.34.0")),
    n=hs.integers(0, 8),
    seqs=hs.integers(1, 1024),
    tokens=hs.sampled_from((2048, 8192, 16384)),
    eager=hs.booleans(),
)
def test_speculative_parts_are_non_negative_and_zero_without_it(
    version: str, n: int, seqs: int, tokens: int, eager: bool
) -> None:
    common = dict(engine_version=version, max_num_seqs=seqs, max_num_batched_tokens=tokens, max_model_len=4096,
                  enforce_eager=eager)
    plain = plan_vllm(LLAMA, GPU, ServeSettings(**common))  # type: ignore[arg-type]
    r = plan_vllm(
        LLAMA, GPU, ServeSettings(**common, speculative_method="ngram", num_speculative_tokens=n)  # type: ignore[arg-type]
    )
    assert sum(t.bytes for t in r.ledger.terms) == r.capacity_bytes
    sp = r.settings.speculative  # type: ignore[union-attr]
    if n == 0:
        assert sp is None and r.ledger.terms == plain.ledger.terms
        return
    assert sp is not None and sp.profile is not None
    p = sp.profile
    assert min(p.drafter_activation_bytes, p.rejection_sampler_bytes, p.drafter_graph_bytes) >= 0
    by_name = {t.name: t.bytes for t in r.ledger.terms}
    plain_by_name = {t.name: t.bytes for t in plain.ledger.terms}
    assert by_name["activation_peak"] - plain_by_name["activation_peak"] == p.rejection_sampler_bytes
    if eager:  # no graphs at all: no cuda_graph term, no drafter graphs
        assert by_name.get("cuda_graph", 0) == plain_by_name.get("cuda_graph", 0) == p.drafter_graph_bytes == 0
