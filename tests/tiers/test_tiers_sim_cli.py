"""`vramctl tiers simulate` as a user runs it: output, JSON keys, sweeps, plots, synthetic traces, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramctl.cli.main import main
from vramctl.core.errors import BadInputError
from vramctl.tiers.simulate import SimConfig, TierConfig, lru_sweep, simulate
from vramctl.tiers.trace import parse_synthetic, synthetic_trace

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "mooncake"
CONVERSATION = str(DATA / "conversation_trace.jsonl")
SYNTHETIC = str(DATA / "synthetic_trace.jsonl")
needs_data = pytest.mark.skipif(not Path(CONVERSATION).exists(), reason="../shared/data/mooncake not present")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["tiers", "simulate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def write_lines(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


GOOD = '{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]}'


@needs_data
def test_two_tier_json_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "--trace",
        SYNTHETIC,
        "--gpu-capacity",
        "1e6",
        "--host-capacity",
        "3e6",
        "--model",
        "llama-3-8b",
        "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    for key in (
        "requests",
        "input_tokens",
        "token_hit_rate",
        "request_hit_rate",
        "tiers",
        "economics",
        "config",
    ):
        assert key in doc
    assert doc["requests"] == 3993
    assert [t["name"] for t in doc["tiers"]] == ["gpu", "host"]
    for tier in doc["tiers"]:
        for key in ("name", "capacity_tokens", "hit_tokens", "written_bytes"):
            assert key in tier
        assert tier["written_bytes"] == tier["written_tokens"] * 131_072
    assert doc["tiers"][0]["capacity_tokens"] == 1_000_000
    assert round(doc["token_hit_rate"], 3) == 0.315  # inclusive write-through = LRU(3e6), tiers.md §2.3
    host = doc["economics"]["tiers"][0]
    assert host["name"] == "host" and host["recompute_avoided_s"] > host["transfer_s"] > 0


@needs_data
def test_text_output_labels_both_hit_rates(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--trace", CONVERSATION, "--gpu-capacity", "3e6")
    assert code == 0
    assert "13.8%" in out and "token-weighted" in out and "hit%req" in out


@needs_data
def test_sweep_json_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    plot = tmp_path / "hit.svg"
    code, out, err = run(
        capsys,
        "--trace",
        CONVERSATION,
        "--sweep",
        "1e6,3e6,50000000,unlimited",
        "--json",
        "--plot",
        str(plot),
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["method"] == "stack-distance" and doc["requests"] == 12_031
    rates = [round(p["token_hit_rate"], 3) for p in doc["sweep"]]
    assert rates == [0.054, 0.138, 0.371, 0.374]
    assert [p["tiers"][0]["capacity_tokens"] for p in doc["sweep"]] == [
        1_000_000,
        3_000_000,
        50_000_000,
        None,
    ]
    assert plot.read_text().lstrip().startswith("<?xml")
    assert not list(tmp_path.glob(".hit.svg.*"))  # no temporary left behind


@needs_data
def test_sweep_with_a_host_tier_replays(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--trace", SYNTHETIC, "--host-capacity", "1e7", "--sweep", "1e6,3e6", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["method"] == "replay"
    assert [round(p["token_hit_rate"], 3) for p in doc["sweep"]] == [0.577, 0.577]
    # The text names the fixed lower tier and adds the GPU's own share; a one-tier sweep has no such column.
    code, out, _ = run(capsys, "--trace", SYNTHETIC, "--host-capacity", "1e7", "--sweep", "1e6")
    assert code == 0
    assert "lower tiers held fixed: host 10,000,000 tok" in out and "GPU tier alone % tok" in out
    assert "14.5%" in out  # GPU 1e6 alone, under the host tier (tiers.md §2.3 two-tier table: 0.145)
    code, out, _ = run(capsys, "--trace", SYNTHETIC, "--sweep", "1e6")
    assert code == 0 and "GPU tier alone" not in out and "lower tiers" not in out


def test_capacity_in_bytes_uses_the_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = write_lines(tmp_path, [GOOD, GOOD.replace('"timestamp": 0', '"timestamp": 1')])
    code, out, err = run(
        capsys, "--trace", trace, "--gpu-capacity", "1GiB", "--model", "llama-3-8b", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["tiers"][0]["capacity_tokens"] == 8192  # 2^30 / 131,072
    code, _, err = run(capsys, "--trace", trace, "--gpu-capacity", "1GiB")
    assert code == 2 and "--model" in err


def test_synthetic_cli(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "--synthetic", "sessions=20,turns=4,think=exp:60,prompt=600,answer=100,seed=3", "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["requests"] == 80 and doc["token_hit_rate"] > 0.3


def test_saved_synthetic_trace_replays_the_same(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    saved = tmp_path / "chat.jsonl"
    spec = "sessions=15,turns=3,think=exp:30,prompt=exp:700,answer=200,system=600,seed=5"
    code, first, err = run(
        capsys,
        "--synthetic",
        spec,
        "--gpu-capacity",
        "8192",
        "--host-capacity",
        "3e4",
        "--save-trace",
        str(saved),
        "--json",
    )
    assert code == 0, err
    code, second, err = run(
        capsys, "--trace", str(saved), "--gpu-capacity", "8192", "--host-capacity", "3e4", "--json"
    )
    assert code == 0, err
    a, b = json.loads(first), json.loads(second)
    assert a["tiers"] == b["tiers"] and a["requests"] == b["requests"] == 45


def test_synthetic_is_deterministic_and_seeded() -> None:
    spec = parse_synthetic(
        "sessions=30,turns=5,think=exp:240,prompt=exp:400,answer=uniform:50:150,system=1024,seed=7"
    )
    a, b = synthetic_trace(spec), synthetic_trace(spec)
    assert a == b
    c = synthetic_trace(
        parse_synthetic(
            "sessions=30,turns=5,think=exp:240,prompt=exp:400,answer=uniform:50:150,system=1024,seed=8"
        )
    )
    assert c != a
    assert list(a.timestamps_s) == sorted(a.timestamps_s)
    assert a.num_requests == 150


def test_synthetic_matches_the_bench_multiturn_closed_form() -> None:
    # tiers.md §2.4: round r sends r·L + (r−1)·O tokens. With 1-token blocks and an unlimited cache the
    # previous round's input is reused: ((r−1)L + (r−2)O) for r ≥ 2; L=2048, O=1, R=10 -> 0.818.
    spec = parse_synthetic("sessions=3,turns=10,think=10,prompt=2048,answer=1,seed=1")
    result = lru_sweep(synthetic_trace(spec, block_size=1), [None])[0]
    hit = sum((r - 1) * 2048 + (r - 2) for r in range(2, 11))
    total = sum(r * 2048 + (r - 1) for r in range(1, 11))
    assert result.token_hit_rate == pytest.approx(hit / total)
    assert round(result.token_hit_rate, 3) == 0.818


def test_synthetic_shared_system_prompt_is_shared_across_sessions() -> None:
    spec = parse_synthetic("sessions=50,turns=1,prompt=100,answer=0,system=2048,seed=0")
    result = simulate(synthetic_trace(spec, block_size=512), SimConfig(tiers=(TierConfig("gpu", None),)))
    # 4 full system blocks hit for every session after the first.
    assert result.hit_tokens == 49 * 2048


# ---- bad input: one line, exit 2, nothing written ------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        ([GOOD, "{not json"], "line 2: not valid JSON"),
        (
            [GOOD, '{"timestamp": 1, "input_length": 10, "output_length": 1}'],
            "line 2: missing field 'hash_ids'",
        ),
        (['{"input_length": 10, "output_length": 1, "hash_ids": [1]}'], "line 1: missing field 'timestamp'"),
        ([GOOD, '{"timestamp": 1, "output_length": 1, "hash_ids": [1]}'], "missing field 'input_length'"),
        (
            [GOOD, '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": []}'],
            "line 2: hash_ids is empty",
        ),
        (
            [GOOD.replace('"timestamp": 0', '"timestamp": 5'), GOOD],
            "line 2: timestamp 0 is earlier than line 1",
        ),
        (
            ['{"timestamp": 0, "input_length": "x", "output_length": 1, "hash_ids": [1]}'],
            "input_length must be an integer",
        ),
        (['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, 2, 3]}'], "--trace-block-size"),
        (
            ['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1.5]}'],
            "integers or strings",
        ),
        (["[1, 2]"], "expected a JSON object"),
        ([""], "no requests"),
    ],
)
def test_bad_traces(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lines: list[str], needle: str
) -> None:
    trace = write_lines(tmp_path, lines)
    plot = tmp_path / "never.png"
    code, out, err = run(capsys, "--trace", trace, "--sweep", "1e6", "--plot", str(plot))
    assert code == 2
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert not plot.exists() and out == ""


def test_unsorted_trace_replays_with_sort_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = write_lines(tmp_path, [GOOD.replace('"timestamp": 0', '"timestamp": 5'), GOOD])
    code, out, _ = run(capsys, "--trace", trace, "--sort-trace", "--json")
    assert code == 0 and json.loads(out)["requests"] == 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu-capacity", "0"], "--gpu-capacity 0: a capacity must be positive"),
        (["--gpu-capacity", "-5"], "--gpu-capacity -5: a capacity must be positive"),
        (["--host-capacity", "-1e6"], "--host-capacity -1e6"),
        (["--gpu-capacity", "100"], "less than one 512-token block"),
        (["--sweep", "1e6,0"], "a capacity must be positive"),
        (["--write-policy", "write_around"], "--write-policy write_around: unknown policy"),
        (["--eviction", "mru"], "--eviction mru: unknown policy"),
        (["--hierarchy", "weird"], "--hierarchy weird"),
        (
            ["--hierarchy", "exclusive", "--host-capacity", "1e6", "--write-policy", "write_through"],
            "write_back",
        ),
        (["--write-policy", "lazy"], "--host-capacity"),
        (["--disk-capacity", "1e7"], "--disk-capacity needs --host-capacity"),
        (["--block-size", "0"], "--trace-block-size 0"),
        (["--prefill-rate", "-3"], "--prefill-rate -3: must be positive"),
        (["--achieved-flops", "lots"], "--achieved-flops"),
        (["--gpu-capacity", "lots"], "--gpu-capacity"),
        (["--plot", "x.pdf", "--sweep", "1e6"], ".png or .svg"),
        (["--plot", "x.png"], "--sweep"),
    ],
)
def test_bad_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], needle: str) -> None:
    trace = write_lines(tmp_path, [GOOD])
    code, _, err = run(capsys, "--trace", trace, *args)
    assert code == 2
    assert needle in err and err.count("\n") == 1


def test_missing_trace_and_both_sources(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "--trace", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "no such file" in err
    code, _, err = run(capsys)
    assert code == 2 and "exactly one of --trace" in err
    code, _, err = run(capsys, "--synthetic", "sessions=0")
    assert code == 2 and "sessions=0" in err
    code, _, err = run(capsys, "--synthetic", "think=exp:-1")
    assert code == 2 and err.startswith("vramctl: error: --synthetic think='exp:-1'") and err.count("\n") == 1
    code, _, err = run(capsys, "--synthetic", "prompt=zz:1")
    assert code == 2 and "--synthetic prompt='zz:1': unknown distribution" in err
    code, _, err = run(capsys, "--synthetic", "turns=3,think=gamma:2")
    assert code == 2 and "unknown distribution" in err
    code, _, err = run(capsys, "--synthetic", "sessions=10,turns=10,prompt=1e12")
    assert code == 2 and "block accesses" in err


def test_library_errors_are_bad_input() -> None:
    with pytest.raises(BadInputError, match="exclusive"):
        simulate(
            synthetic_trace(parse_synthetic("sessions=2,turns=2")),
            SimConfig(tiers=(TierConfig("gpu", 4096), TierConfig("host", 8192)), hierarchy="exclusive"),
        )


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("3e6", 3_000_000), ("445,632", 445_632), ("3M tokens", 3_000_000), ("30ktok", 30_000)],
)
def test_capacity_spellings(capsys: pytest.CaptureFixture[str], text: str, tokens: int) -> None:
    code, out, err = run(capsys, "--synthetic", "sessions=3,turns=2", "--gpu-capacity", text, "--json")
    assert code == 0, err
    assert json.loads(out)["tiers"][0]["capacity_tokens"] == tokens


def test_bare_suffix_is_ambiguous_without_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--synthetic", "sessions=3", "--gpu-capacity", "3M")
    assert code == 2 and "'3M tokens'" in err


# ---- fuzz: whatever the file holds, the parser answers with a trace or one BadInputError -------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vramctl.tiers.trace import parse_mooncake_lines  # noqa: E402

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=10,
)
_fields = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": _json_values,
        "input_length": _json_values,
        "output_length": _json_values,
        "hash_ids": _json_values,
    },
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_fields.map(json.dumps), st.text(max_size=30)), min_size=0, max_size=5),
    st.integers(1, 64),
)
def test_parser_never_raises_anything_but_bad_input(lines: list[str], block_size: int) -> None:
    try:
        trace = parse_mooncake_lines(lines, block_size=block_size)
    except BadInputError as exc:
        assert "\n" not in str(exc)
    else:
        assert trace.num_requests >= 1 and all(length >= 1 for length in trace.input_lengths)


@needs_data
def test_three_tier_table_in_bytes_is_not_cut(capsys: pytest.CaptureFixture[str]) -> None:
    # With --model every amount is in bytes ("366.19 GiB"): the table must still fit 80 columns uncut.
    code, out, err = run(
        capsys,
        "--trace",
        SYNTHETIC,
        "--gpu-capacity",
        "1e6",
        "--host-capacity",
        "3e6",
        "--disk-capacity",
        "1e7",
        "--model",
        "llama-3-8b",
    )
    assert code == 0, err
    assert "…" not in out
    rows: dict[str, str] = {}
    for line in out.splitlines():  # the table's rows come before the terminal chart's
        if line.split() and line.split()[0] in ("gpu", "host", "disk"):
            rows.setdefault(line.split()[0], line)
    assert rows["host"].rstrip().endswith("366.19 GiB")  # peak host memory: 3e6 tokens × 131,072 B
    assert rows["disk"].rstrip().endswith("1.19 TiB")


def test_a_byte_order_mark_and_crlf_are_accepted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(
        b"\xef\xbb\xbf"
        + (GOOD + "\r\n").encode()
        + (GOOD.replace('"timestamp": 0', '"timestamp": 1') + "\r\n").encode()
    )
    code, out, err = run(capsys, "--trace", str(path), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (
        doc["requests"] == 2 and doc["tiers"][0]["hit_tokens"] == 1000
    )  # the second request hits both blocks
