"""Golden tests: every real start-up log in ../shared/samples/startup against its index.yaml `logged:` values.

The checks (key → fact mapping, headline and alternates, engine and version, ledger sums, settings) are
shared with the collected logs' test and live in _readlog_golden.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from _readlog_golden import (
    SETTING_KEYS,
    check_engine_and_version,
    check_ledger,
    check_logged,
    check_settings,
    check_tokens_agree_with_concurrency,
    report,
)

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples" / "startup"
INDEX = yaml.safe_load((SAMPLES / "index.yaml").read_text()) if SAMPLES.is_dir() else {"datapoints": []}
# Without the real logs one placeholder entry stands in, so each test reports its skip and why (the module's
# `shared` mark) instead of pytest's bare "empty parameter set".
ENTRIES = INDEX["datapoints"] or [{"id": "absent", "log_file": "../shared/samples/startup"}]
IDS = [f"{e['id']}-{e['log_file']}" for e in ENTRIES]
pytestmark = pytest.mark.shared("samples/startup")  # every test here reads the real logs

ABSENT_FROM_EXCERPT: dict[tuple[str, str], str] = {
    (
        "015",
        "kv_cache_memory_suggested_bytes",
    ): "the index records it but the excerpt in 015.log does not print it",
}
"""Index values that the log excerpt does not contain (checked: the test fails if one appears)."""


def _report(log_file: str) -> Any:
    return report(SAMPLES, log_file)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_logged_values(entry: dict[str, Any]) -> None:
    check_logged(entry, SAMPLES, absent_from_excerpt=ABSENT_FROM_EXCERPT)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_engine_and_version(entry: dict[str, Any]) -> None:
    check_engine_and_version(entry, SAMPLES)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_ledger_sums_and_rounding(entry: dict[str, Any]) -> None:
    check_ledger(entry, SAMPLES)


@pytest.mark.shared("samples/startup")
def test_035_graph_line() -> None:
    report = _report("035.log")
    assert report.facts["cuda_graph_actual"].text == "6.32 GiB"
    assert report.facts["graph_seconds"].value == 38


def test_every_sample_is_in_the_index() -> None:
    listed = {e["log_file"] for e in ENTRIES}
    on_disk = {p.name for p in SAMPLES.glob("*.log")}
    assert on_disk <= listed


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_tokens_agree_with_concurrency(entry: dict[str, Any]) -> None:
    check_tokens_agree_with_concurrency(entry, SAMPLES)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_settings_match_the_index(entry: dict[str, Any]) -> None:
    """Every setting read-log reads from the log equals the index's setting for that run."""
    check_settings(entry, SAMPLES)


@pytest.mark.shared("samples/startup")
def test_settings_are_read_from_most_logs() -> None:
    read = sum(
        1
        for e in ENTRIES
        for key, name in SETTING_KEYS.items()
        if e.get(key) is not None and _report(e["log_file"]).settings.get(name) is not None
    )
    assert read >= 170  # 174 of the index's stated settings are in the log excerpts and read
