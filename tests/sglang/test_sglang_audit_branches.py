"""Audit of issue 2 item 5 through the CLI: SGLang branches reachable from `vramctl plan` (VLM adjustment from
the checkpoint's vision_config, serve-command flags and env that only SglangOptions holds, the 10 GiB floor)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vramctl.cli.main import main


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    try:
        rc = main(["plan", "--json", *args])
    except SystemExit as exc:  # pragma: no cover - main returns
        rc = int(exc.code or 0)
    out = capsys.readouterr().out
    return rc, json.loads(out)


def test_vlm_adjustment_applies_to_a_multimodal_checkpoint(capsys: pytest.CaptureFixture[str]) -> None:
    # LLaVA-NeXT's CLIP ViT-L: 24 layers × 1024 hidden → complexity 1, f = 1, × 0.95 (sglang.md §1.3 item 4).
    rc, text = _plan(capsys, "llama-3-8b", "--engine", "sglang")
    rc_vlm, vlm = _plan(capsys, "llava-v1.6-mistral-7b", "--engine", "sglang")
    assert rc == rc_vlm == 0
    assert text["sglang"]["mem_fraction_static"] == 0.83
    assert vlm["sglang"]["mem_fraction_static"] == pytest.approx(0.83 * 0.95)
    assert any("VLM adjustment" in line for line in vlm["sglang"]["branch"])


def test_vlm_factor_follows_the_tower_size(capsys: pytest.CaptureFixture[str]) -> None:
    # Gemma-3-27B's SigLIP: 27 layers × 1152 → c = 27·1152²/(24·1024²), f = 1 − 0.1·(c − 1).
    _, gemma = _plan(capsys, "gemma-3-27b", "--engine", "sglang")
    c = 27 * 1152**2 / (24 * 1024**2)
    assert gemma["sglang"]["mem_fraction_static"] == pytest.approx(0.83 * 0.95 * (1 - 0.1 * (c - 1)))
    _, text_only = _plan(capsys, "gemma-3-1b", "--engine", "sglang")  # no vision tower
    assert text_only["sglang"]["mem_fraction_static"] == 0.83


def test_post_capture_env_in_the_serve_command(capsys: pytest.CaptureFixture[str]) -> None:
    rc, d = _plan(
        capsys,
        "--",
        "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "meta-llama/Meta-Llama-3-8B-Instruct",
    )
    assert rc == 0
    assert d["sglang"]["post_capture_kv_sizing"] is True
    assert d["sglang"]["reserved_mib"] == 1536 + 128  # sglang.md §1.7: 0.980
    assert d["sglang"]["mem_fraction_static"] == 0.98
    assert not any("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING" in e for e in d["explanations"])


def test_dp_attention_flags_in_the_serve_command(capsys: pytest.CaptureFixture[str]) -> None:
    rc, d = _plan(
        capsys,
        "--",
        "python -m sglang.launch_server --model-path meta-llama/Meta-Llama-3-70B-Instruct --tp 8 "
        "--enable-dp-attention --dp-size 8",
    )
    assert rc == 0
    parts = d["sglang"]["reserve"]["graph_parts"]
    # max_bs 512 (tp ≥ 4) × dp 8 × 3, and × 1.5 more above 300 (sglang.md §1.4).
    assert parts["dp_attention"] == 512 * 8 * 3 + 512 * 8 * 1.5
    assert not any("--dp-size" in e or "--enable-dp-attention" in e for e in d["explanations"])


def test_ten_gib_floor(capsys: pytest.CaptureFixture[str]) -> None:
    # chunked 2048 on an H100: 512 + 3072 + 128 + 512 + 8 × 42 = 4560 MiB < 10 GiB → the floor (gpu_mem > 60 GiB).
    _, d = _plan(capsys, "llama-3-8b", "--engine", "sglang", "--chunked-prefill-size", "2048")
    assert d["sglang"]["reserved_mib"] == 10240
    assert d["sglang"]["reserve"]["floor_applied"] is True
    assert d["sglang"]["mem_fraction_static"] == round((81559 - 10240) / 81559, 3)


def test_fraction_trade_for_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 2 item 6 for SGLang: the same sizing at each --mem-fraction-static, the one in use marked.
    rc, d = _plan(capsys, "llama-3-8b", "--engine", "sglang")
    assert rc == 0
    rows = d["utilization_table"]
    fractions = [r["utilization"] for r in rows]
    assert fractions == sorted(fractions) and 0.83 in fractions and 0.75 in fractions and 0.96 in fractions
    current = next(r for r in rows if r["current"])
    assert current["utilization"] == d["sglang"]["mem_fraction_static"]
    assert current["kv_tokens"] == d["kv_tokens"] == d["sglang"]["max_total_num_tokens"]
    assert current["delta_kv_bytes"] == 0
    # each row is SGLang's own plan at that fraction
    for r in rows:
        if r["current"]:
            continue
        _, at = _plan(
            capsys, "llama-3-8b", "--engine", "sglang", "--mem-fraction-static", str(r["utilization"])
        )
        assert at["sglang"]["max_total_num_tokens"] == r["kv_tokens"]
    tokens = [r["kv_tokens"] for r in rows]
    assert tokens == sorted(tokens)  # a larger fraction never gives fewer tokens
    # at or below SGLang's default: ok; above it: less than SGLang's own reserve
    assert all(r["risk"] == "ok" for r in rows if r["utilization"] <= 0.83)
    assert all(r["risk"] in ("tight", "thin") for r in rows if r["utilization"] > 0.83)
    assert main(["plan", "llama-3-8b", "--engine", "sglang"]) == 0
    out = capsys.readouterr().out
    assert "fraction trade" in out and "above SGLang's default 0.830" in " ".join(out.split())
