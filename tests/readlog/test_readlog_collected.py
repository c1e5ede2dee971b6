"""Golden tests: the start-up logs of public GitHub threads (tests/fixtures/startup_collected).

Each NNN.log is a reconstruction: the engine lines the thread posted, re-rendered from the engines' format
strings with the thread's numbers and settings (new timestamps, pids and paths; no person-written text). Its
`#` header names the source; read-log skips it as an annotation. The checks are the ones the shared
samples get (_readlog_golden.py): every `logged:` number read, the engine and version, the ledger summing
to its capacity, settings equal to the index's. On top:
`--compare-plan` runs (and plans) wherever the log names a model the registry knows, and never crashes on
any collected or sample log (exit 0, 2 or 3, one-line errors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from _readlog_golden import (
    check_engine_and_version,
    check_ledger,
    check_logged,
    check_settings,
    check_tokens_agree_with_concurrency,
    report,
)

from vramctl.cli.main import main
from vramctl.core.ledger import KV_CACHE, WEIGHTS

COLLECTED = Path(__file__).resolve().parents[1] / "fixtures" / "startup_collected"
ENTRIES: list[dict[str, Any]] = yaml.safe_load((COLLECTED / "index.yaml").read_text())["datapoints"]
IDS = [f"{e['id']}-{e['log_file']}" for e in ENTRIES]
SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples" / "startup"


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_logged_values(entry: dict[str, Any]) -> None:
    check_logged(entry, COLLECTED)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_engine_and_version(entry: dict[str, Any]) -> None:
    check_engine_and_version(entry, COLLECTED)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_ledger_sums_and_rounding(entry: dict[str, Any]) -> None:
    check_ledger(entry, COLLECTED)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_tokens_agree_with_concurrency(entry: dict[str, Any]) -> None:
    check_tokens_agree_with_concurrency(entry, COLLECTED)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_settings_match_the_index(entry: dict[str, Any]) -> None:
    check_settings(entry, COLLECTED)


def test_every_collected_log_is_in_the_index() -> None:
    assert {p.name for p in COLLECTED.glob("*.log")} == {e["log_file"] for e in ENTRIES}


def test_collector_header_is_not_read() -> None:
    """The `#` source lines carry numbers too (dates, issue numbers): none of them becomes a fact."""
    for entry in ENTRIES:
        rep = report(COLLECTED, entry["log_file"])
        lines = (COLLECTED / entry["log_file"]).read_text(errors="replace").splitlines()
        header = {
            i for i, text in enumerate(lines, start=1) if text.startswith("#") and "blocks:" not in text
        }
        assert not [o for o in rep.all_observations if o.line in header], entry["log_file"]


# ---- specific wordings the collected logs showed --------------------------------------------------------


def test_ascend_suggestion_line_reads_every_term() -> None:
    """vllm-ascend: `Actual usage: … for weights, … for NPU graph memory`, `--kv-cache-memory=N (X GiB)`."""
    rep = report(COLLECTED, "022.log")
    assert rep.ledger is not None
    terms = {t.name: t for t in rep.ledger.terms}
    assert terms[WEIGHTS].bytes == round(1.14 * 2**30)
    assert terms["cuda_graph"].bytes == round(0.04 * 2**30)
    assert rep.kv_cache_memory_bytes_suggestion == 57403864576
    # vLLM's suggestion: requested − (weights + activation + non-torch + graph) − 150 MiB (vllm.md §2.4).
    used = sum(terms[n].bytes for n in (WEIGHTS, "activation_peak", "non_torch", "cuda_graph"))
    assert rep.requested_bytes is not None
    expected = rep.requested_bytes - used - 150 * 2**20
    assert abs(rep.kv_cache_memory_bytes_suggestion - expected) <= 5 * 0.005 * 2**30


def test_first_suggestion_wording_is_one_line() -> None:
    rep = report(COLLECTED, "012.log")
    assert rep.semantics == "v1"
    assert rep.kv_cache_memory_bytes_suggestion == 151519866880
    assert rep.ledger is not None and rep.ledger.bytes_of("cuda_graph") == round(0.65 * 2**30)


def test_old_and_new_v1_block_wordings() -> None:
    """`# GPU blocks: 127626` (V1 before PR #13596) and `GPU KV cache size: 2,042,016 tokens` (after)."""
    rep = report(COLLECTED, "009.log")
    assert rep.variant == "V1"
    assert rep.num_blocks == 127626
    assert rep.kv_tokens == 2042016 == 127626 * 16
    assert rep.max_concurrency == pytest.approx(997.08)


def test_repeated_lines_are_not_counted_twice() -> None:
    """`Maximum concurrency` printed twice, the CUDA-graph hint once per rank: one fact, one row each."""
    rep = report(COLLECTED, "005.log")
    assert rep.max_concurrency == pytest.approx(2.48)
    # The two printed lines, wherever they sit (the fixture was rebuilt with a one-line header, which moved
    # them from 8-9 to 7-8): both are read, each as its own row.
    lines = (COLLECTED / "005.log").read_text().splitlines()
    printed = [i for i, text in enumerate(lines, start=1) if "Maximum concurrency for" in text]
    assert len(printed) == 2
    assert [o.line for o in rep.observations if o.key == "max_concurrency"] == printed
    assert rep.kv_tokens == 75840
    rep = report(COLLECTED, "010.log")
    assert rep.gpu_memory_utilization == pytest.approx(0.92)
    assert rep.facts["gpu_memory_utilization_without_graph_profiling"].value == pytest.approx(0.9129)
    assert rep.facts["gpu_memory_utilization_to_keep_kv"].value == pytest.approx(0.9271)
    assert rep.terms and sum(1 for t in rep.terms if t.name == "cuda_graph") == 1


def test_hybrid_attention_block_size() -> None:
    rep = report(COLLECTED, "017.log")
    assert rep.variant == "V1"
    assert rep.settings["block_size"].value == 544
    assert rep.facts["mamba_page_padding_pct"].value == pytest.approx(2.64)


def test_sglang_capture_end_in_both_orders() -> None:
    rep = report(COLLECTED, "018.log")
    by_rank = {o.process: o for o in rep.observations if o.key == "graph_end_avail"}
    assert by_rank["TP1"].value == round(11.22 * 2**30)
    usage = {o.process: o for o in rep.observations if o.key == "graph_mem_usage"}
    assert usage["TP0"].value == round(1.00 * 2**30)
    rep = report(COLLECTED, "014.log")
    assert rep.facts["graph_end_avail"].text == "0.00 GiB"  # SGLang's "GB" is bytes / 2**30


# ---- --compare-plan and the CLI on every real log --------------------------------------------------------


def _all_logs() -> list[Path]:
    logs = sorted(COLLECTED.glob("*.log"))
    if SAMPLES.is_dir():
        logs += sorted(SAMPLES.glob("*.log"))
    return logs


@pytest.mark.parametrize("log", _all_logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("extra", [(), ("--json",), ("--markdown",)], ids=["rich", "json", "markdown"])
def test_compare_plan_never_crashes(
    log: Path, extra: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["read-log", str(log), "--compare-plan", *extra])
    out, err = capsys.readouterr()
    assert code in (0, 2, 3), (code, err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("vramctl: error: --compare-plan"), err
    if code == 0:
        assert out.strip()


KNOWN_MODEL: dict[str, tuple[tuple[str, str], str | None]] = {
    "001.log": (("--gpu-memory", "15.77GiB"), "meta-llama/Llama-3.1-8B-Instruct"),
    "006.log": (("--gpu", "h100-sxm"), "Qwen/Qwen3-14B"),
    "007.log": (("--gpu", "h100-sxm"), None),
    "008.log": (("--gpu", "h100-sxm"), None),
    "015.log": (("--gpu-memory", "288GiB"), "Qwen/Qwen3-30B-A3B"),
}
"""Collected logs whose model the registry knows (`vramctl models`): a capacity for logs that do not print
one, and --model where the log names no model or a local path the registry does not know by its last
component."""


@pytest.mark.parametrize("log_file", sorted(KNOWN_MODEL))
def test_compare_plan_on_known_models(log_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    (flag, value), model = KNOWN_MODEL[log_file]
    args = ["read-log", str(COLLECTED / log_file), "--compare-plan", "--json"]
    rep = report(COLLECTED, log_file)
    if rep.capacity_bytes is None:
        args += [flag, value]
    if model is not None:
        args += ["--model", model]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    rows = {r["name"]: r for r in doc["comparison"]["rows"]}
    assert rows["capacity"]["planned"] > 0
    assert rows[KV_CACHE]["planned"] is not None
    # The plan's weights for the model are within 15% of the weights the engine logged.
    if rows.get(WEIGHTS) and rows[WEIGHTS]["logged"] is not None:
        assert abs(rows[WEIGHTS]["percent"]) < 15, rows[WEIGHTS]


def test_graph_hint_bounds_the_device_total() -> None:
    """010.log ran on RTX 3090s (23.58 GiB): the hint's util − util_without = estimate ÷ total brackets it."""
    import re

    rep = report(COLLECTED, "010.log")
    note = next(n for n in rep.notes if "implies a device total" in n)
    m = re.search(r"of ([\d.]+)-([\d.]+) GiB", note)
    assert m is not None and float(m.group(1)) <= 23.58 <= float(m.group(2))
    # With a capacity there is nothing to hint.
    from vramctl.diagnose.reader import iter_log_lines
    from vramctl.diagnose.startup import parse_startup_log

    given = parse_startup_log(iter_log_lines(COLLECTED / "010.log"), gpu_memory_bytes=round(23.58 * 2**30))
    assert not [n for n in given.notes if "implies a device total" in n]


def test_sglang_torch_kv_dtype_is_planned_with_the_flag_spelling() -> None:
    from vramctl.diagnose.startup import parse_startup_log, settings_from_report

    rep = parse_startup_log(
        [
            "[TP0] Load weight begin. avail mem=78.66 GB",
            "[TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 832000, K size: 25.39 GB, "
            "V size: 25.39 GB",
        ]
    )
    assert rep.settings["kv_cache_dtype"].value == "float8_e4m3fn"
    assert settings_from_report(rep).kv_cache_dtype == "fp8_e4m3"
