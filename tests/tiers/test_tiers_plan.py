"""`vramctl tiers plan`: the seed chapter's Llama-3-8B numbers, the formulas, the CLI, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.core.kv import kv_bytes_per_token
from vramctl.core.units import GiB
from vramctl.registry import load_gpu, load_model
from vramctl.tiers.bandwidths import SCHEMA, load_bandwidths, loads_bandwidths
from vramctl.tiers.crossover import (
    HostMemoryCheck,
    flops_per_token,
    judge_tier,
    nominal_tiers,
    parse_tier_option,
    plan_tiers,
    prefill_rate,
    residency_model,
)

LLAMA = load_model("llama-3-8b")
H100 = load_gpu("h100-sxm")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["tiers", "plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def seed_plan() -> dict[str, object]:
    rate = prefill_rate(LLAMA, H100, achieved_flops=400e12)
    plan = plan_tiers(
        model=LLAMA, gpu=H100, bytes_per_token=kv_bytes_per_token(LLAMA), rate=rate, links=nominal_tiers(H100)
    )
    return plan.to_json()


def test_seed_numbers() -> None:
    doc = seed_plan()
    assert doc["bytes_per_token"] == 131_072
    rate = doc["prefill_rate"]["tokens_per_s"]  # type: ignore[index]
    assert rate == pytest.approx(22_000, rel=0.01)
    tiers = {t["name"]: t for t in doc["tiers"]}  # type: ignore[attr-defined]
    assert round(tiers["host"]["advantage"]) == 22
    assert tiers["host"]["r_star_read_tokens_per_s"] == pytest.approx(64e9 / 131_072)
    assert tiers["host"]["r_star_swap_tokens_per_s"] == pytest.approx(64e9 / 131_072 / 2)
    assert tiers["host"]["verdict"] == "fetching beats recomputing by 22.2x"
    assert tiers["10gbe"]["fetch_wins"] is False and tiers["10gbe"]["min_tokens_worth_fetching"] is None
    assert tiers["nvme"]["fetch_wins"] and tiers["100gbe"]["fetch_wins"]
    # seed: 8,192 tokens are 1 GiB of KV, 16.8 ms at 64 GB/s (+ the 10 µs fixed cost)
    assert doc["fetch_bytes"] == GiB
    assert tiers["host"]["fetch_time_s"] == pytest.approx(0.0168, abs=1e-4)


def test_flops_per_token_formula() -> None:
    # 2 × 8,030,261,248 + 2 × 32 layers × 8192 × 32 heads × 128
    assert flops_per_token(LLAMA, 8192) == 2 * 8_030_261_248 + 2 * 32 * 8192 * 32 * 128
    assert flops_per_token(LLAMA, 2048) < flops_per_token(LLAMA, 8192)
    with pytest.raises(BadInputError):
        flops_per_token(LLAMA, 0)


def test_default_rate_is_forty_percent_of_peak_and_tp_scales_it() -> None:
    one = prefill_rate(LLAMA, H100)
    assert one.achieved_flops == pytest.approx(0.4 * H100.dense_bf16_flops)
    two = prefill_rate(LLAMA, H100, tp=2)
    assert two.tokens_per_s == pytest.approx(2 * one.tokens_per_s)
    given = prefill_rate(LLAMA, H100, prefill_rate_tokens_per_s=5000)
    assert given.tokens_per_s == 5000 and given.source == "given"


def test_residency_seed_band() -> None:
    res = residency_model(gpu_tokens=445_632, host_tokens=891_264, arrival_tokens_per_s=2000)
    assert res.gpu_window_s == pytest.approx(222.8, abs=0.05)
    assert res.host_window_inclusive_s == pytest.approx(445.6, abs=0.05)
    assert res.host_window_exclusive_s == pytest.approx(668.4, abs=0.05)
    assert res.band("inclusive") == pytest.approx((222.816, 445.632))
    default = residency_model(gpu_tokens=445_632, host_tokens=None, arrival_tokens_per_s=2000)
    assert default.host_tokens == 891_264  # SGLang --hicache-ratio 2.0
    small = residency_model(gpu_tokens=1000, host_tokens=500, arrival_tokens_per_s=10)
    assert small.band("inclusive") is None and small.band("exclusive") == (100.0, 150.0)


def test_host_memory_seed_109_gib() -> None:
    check = HostMemoryCheck(
        host_tokens=891_264, bytes_per_token=131_072, ranks=1, machine_bytes=128 * GiB, machine_source="x"
    )
    assert check.pinned_bytes_total is not None
    assert round(check.pinned_bytes_total / GiB) == 109
    assert check.fits
    tight = HostMemoryCheck(
        host_tokens=891_264, bytes_per_token=131_072, ranks=2, machine_bytes=128 * GiB, machine_source="x"
    )
    assert tight.fits is False
    assert tight.max_host_tokens_per_rank == (118 * GiB) // 2 // 131_072


def test_threshold_below_which_a_fetch_is_not_worth_it() -> None:
    link = parse_tier_option("slow=2")
    verdict = judge_tier(link, bytes_per_token=131_072, rate=10_000, tokens=1000)
    # latency / (1/R − b/B) = 50e-6 / (1e-4 − 6.5536e-5)
    assert verdict.min_tokens_worth_fetching == pytest.approx(50e-6 / (1e-4 - 131_072 / 2e9))
    # at exactly that many tokens fetch and recompute take the same time
    n = verdict.min_tokens_worth_fetching
    assert n is not None
    assert link.latency_s + n * 131_072 / 2e9 == pytest.approx(n / 10_000)


def test_cli_seed_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "--achieved-flops",
        "400e12",
        "--gpu-tokens",
        "445632",
        "--arrival-rate",
        "2000",
        "--host-memory",
        "128GiB",
    )
    assert code == 0, err
    assert "131,072 B of KV per token" in out
    assert "host: fetching beats recomputing by 22.2x" in out
    assert "10gbe: recomputing wins" in out
    assert "222.8-445.6 s" in out and "222.8-668.4 s" in out
    assert "108.80 GiB" in out and "fits" in out


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "llama-3-8b",
        "--gpu",
        "h100-sxm",
        "--tier",
        "cxl=32",
        "--tokens",
        "4096",
        "--json",
        "--host-memory",
        "64GiB",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["tokens"] == 4096 and doc["tiers"][-1]["name"] == "cxl" and doc["tiers"][-1]["kind"] == "given"
    assert doc["host_memory"]["machine_bytes"] == 64 * GiB and doc["residency"] is None
    assert doc["sglang_prefetch_threshold_tokens"] == 256


def test_cli_tp_halves_the_per_rank_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-tp", "2", "--json", "--host-memory", "1TiB")
    assert code == 0
    assert json.loads(out)["bytes_per_token"] == 65_536


def test_cli_host_ram_does_not_fit_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "--gpu-tokens", "445632", "--arrival-rate", "2000", "--host-memory", "64GiB", "-tp", "1"
    )
    assert code == 1 and "does NOT fit" in out


def test_cli_bandwidths_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(
        json.dumps(
            {
                "schema": SCHEMA,
                "tiers": {
                    "host-pinned": {
                        "read_bytes_per_s": 5.0e10,
                        "write_bytes_per_s": 4.8e10,
                        "method": "gather",
                        "verified": True,
                    },
                    "disk-direct": {
                        "read_bytes_per_s": 3.2e9,
                        "write_bytes_per_s": 2e9,
                        "method": "O_DIRECT",
                        "verified": True,
                        "latency_s": 2e-4,
                    },
                },
                "environment": {"host": "test"},
            }
        )
    )
    code, out, err = run(capsys, "--bandwidths", str(path), "--json", "--host-memory", "1TiB")
    assert code == 0, err
    tiers = {t["name"]: t for t in json.loads(out)["tiers"]}
    assert tiers["host-pinned"]["kind"] == "measured" and tiers["host-pinned"]["read_bytes_per_s"] == 5.0e10
    assert tiers["disk-direct"]["latency_s"] == 2e-4
    assert tiers["disk-direct"]["latency_source"].startswith("measured")


def test_cli_plot_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plot = tmp_path / "cross.png"
    code, out, _ = run(capsys, "--plot", str(plot), "--host-memory", "1TiB")
    assert code == 0 and f"wrote {plot}" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--prefill-rate", "1000", "--achieved-flops", "4e14"], "give one or the other"),
        (["--prefill-rate", "0"], "--prefill-rate 0"),
        (["--achieved-flops", "-1"], "--achieved-flops"),
        (["--tier", "cxl"], "expected NAME=GB/s"),
        (["--tier", "cxl=fast"], "not a bandwidth"),
        (["--tier", "host=10"], "already in the table"),
        (["--tokens", "0"], "--tokens 0"),
        (["--gpu-tokens", "1000"], "--arrival-rate"),
        (["--gpu", "h9000"], "unknown GPU"),
        (["nosuchmodel-xyz"], "unknown model"),
        (["--bandwidths", "/nonexistent/b.json"], "no such file"),
        (["--plot", "chart.jpg"], ".png or .svg"),
        (["--host-memory", "lots"], "--host-memory"),
        (["-tp", "0"], "--tensor-parallel-size 0"),
    ],
)
def test_cli_bad_input(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    code, out, err = run(capsys, *args)
    assert out == ""
    assert code == 2
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ("[]", "expected a JSON object"),
        ('{"schema": "other/1", "tiers": {}}', "schema is 'other/1'"),
        (f'{{"schema": "{SCHEMA}", "tiers": {{}}}}', "non-empty"),
        (
            f'{{"schema": "{SCHEMA}", "tiers": {{"host-pinned": {{"read_bytes_per_s": 1}}}}}}',
            "missing key 'write_bytes_per_s'",
        ),
        (
            f'{{"schema": "{SCHEMA}", "tiers": {{"h": {{"read_bytes_per_s": -1, "write_bytes_per_s": 1, "method": "m", "verified": true}}}}}}',
            "positive",
        ),
        (
            f'{{"schema": "{SCHEMA}", "tiers": {{"h": {{"read_bytes_per_s": 1, "write_bytes_per_s": 1, "method": "m", "verified": "yes"}}}}}}',
            "verified must be true or false",
        ),
        ("{oops", "not valid JSON (line 1"),
    ],
)
def test_bandwidths_validation(doc: str, needle: str) -> None:
    with pytest.raises(BadInputError, match=needle.replace("(", r"\(").replace("'", ".")):
        loads_bandwidths(doc)


def test_bandwidths_round_trip(tmp_path: Path) -> None:
    doc = {
        "schema": SCHEMA,
        "tiers": {
            "host-pageable": {
                "read_bytes_per_s": 2e10,
                "write_bytes_per_s": 1.5e10,
                "method": "copy",
                "verified": False,
                "extra": 1,
            }
        },
        "environment": {"gpu": "none"},
        "future_key": [1, 2],
    }
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    parsed = load_bandwidths(path)
    tier = parsed.get("host-pageable")
    assert tier is not None and tier.verified is False and tier.latency_s is None
    assert parsed.to_json()["tiers"]["host-pageable"]["read_bytes_per_s"] == 2e10
    assert parsed.environment == {"gpu": "none"}


@pytest.mark.parametrize("text", ["400e12", "400T", "400 TFLOP/s", "4e14 flop/s"])
def test_cli_flops_spellings(capsys: pytest.CaptureFixture[str], text: str) -> None:
    code, out, _ = run(capsys, "--achieved-flops", text, "--json", "--host-memory", "1TiB")
    assert code == 0
    assert json.loads(out)["prefill_rate"]["achieved_flops"] == 4e14


def test_cli_prefill_rate_given(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--prefill-rate", "22k", "--json", "--host-memory", "1TiB")
    assert code == 0
    doc = json.loads(out)
    assert doc["prefill_rate"] == {**doc["prefill_rate"], "tokens_per_s": 22_000.0, "source": "given"}
    host = next(t for t in doc["tiers"] if t["name"] == "host")
    assert host["advantage"] == pytest.approx(64e9 / 131_072 / 22_000)


def test_cli_gpu_tokens_auto_uses_the_vllm_plan(capsys: pytest.CaptureFixture[str]) -> None:
    from vramctl.core.plan import plan_vllm
    from vramctl.core.settings import ServeSettings

    expected = plan_vllm(LLAMA, H100, ServeSettings(max_model_len=8192)).kv_tokens
    code, out, _ = run(
        capsys, "--gpu-tokens", "auto", "--arrival-rate", "2000", "--json", "--host-memory", "1TiB"
    )
    assert code == 0
    res = json.loads(out)["residency"]
    assert res["gpu_tokens"] == expected > 0 and res["gpu_tokens_source"].startswith("vramctl plan")
    assert res["host_tokens"] == 2 * expected


def test_cli_plot_without_matplotlib_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    plot = tmp_path / "c.png"
    code, out, err = run(capsys, "--plot", str(plot))
    assert code == 2 and "pip install 'vramctl[plot]'" in err and err.count("\n") == 1
    assert out == "" and not plot.exists()


def test_cli_table_fits_80_columns_with_measured_and_given_tiers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A measured tier's and a --tier's names stay on one line (no wrapped "(measured)" rows) and no cell is
    # cut with an ellipsis; the legend line spells out the marks.
    path = tmp_path / "bench.json"
    path.write_text(
        json.dumps(
            {
                "schema": SCHEMA,
                "tiers": {
                    "disk-buffered": {
                        "read_bytes_per_s": 1.58e9,
                        "write_bytes_per_s": 0.9e9,
                        "method": "page cache",
                        "verified": True,
                    }
                },
            }
        )
    )
    code, out, err = run(capsys, "--bandwidths", str(path), "--tier", "cxl=30", "--host-memory", "1TiB")
    assert code == 0, err
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "…" not in out
    assert any(line.startswith("disk-buffered (m) ") and "recompute" in line for line in lines)
    assert any(line.startswith("cxl (g) ") and "fetch" in line for line in lines)
    assert "(m) measured by `tiers bench`" in out and "(g) given with --tier" in out
