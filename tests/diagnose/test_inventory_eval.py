"""scripts/eval_oom.py on a tiny synthetic folder: every measure it reports is checked by hand here."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "eval_oom.py"

# Lines in the engines' formats with made-up numbers (no third-party log text).
LOGS = {
    "001": (
        "INFO 10-01 12:00:00 [gpu_worker.py:100] Starting vLLM\n"
        "ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU memory "
        "utilization (0.95, 45.01 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
        "processes.\n"
    ),
    "002": (
        "ValueError: To serve at least one request with the model's max seq len (40960), (5.62 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (4.50 GiB). Based on the available memory, "
        "the estimated maximum model length is 32768. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.\n"
    ),
    "003": "INFO 10-01 12:00:00 [api_server.py:1] Uvicorn running on http://0.0.0.0:8000\n",
    "004": "RuntimeError: CUDA error: an illegal memory access was encountered\n",
    "005": "INFO 10-01 12:00:00 [api_server.py:1] all fine, nothing failed here\n",
}
LABELS = [
    {
        "id": "001",
        "root_cause": "gpu-util-exceeds-free-memory",
        "phase": "startup-check",
        "confidence": "high",
    },
    # deliberately mislabelled: the script must count it wrong
    {"id": "002", "root_cause": "no-kv-cache-memory", "phase": "kv-alloc", "confidence": "medium"},
    # a real failure (label) whose log holds none: reported as no-failure
    {"id": "003", "root_cause": "host-oom-killer", "phase": "weights-load", "confidence": "low"},
    {"id": "004", "root_cause": "not-oom", "phase": "serving", "confidence": "high"},
    {"id": "005", "root_cause": "no-failure", "phase": "unknown", "confidence": "high"},
]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for case_id, text in LOGS.items():
        (tmp_path / f"{case_id}.log").write_text(text)
    cases = [{**case, "source": {"url": f"https://example.invalid/{case['id']}"}} for case in LABELS]
    (tmp_path / "index.yaml").write_text(yaml.safe_dump({"cases": cases}))
    return tmp_path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, cwd=ROOT
    )


@pytest.mark.parametrize("mode", [[], ["--cli"]])
def test_scores_by_hand(folder: Path, mode: list[str]) -> None:
    done = _run(str(folder), "--json", *mode)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["logs"] == 5 and result["failures"] == 3 and result["negatives"] == 2
    # trusted labels: 001 right, 002 wrong (kv-cache-too-small), 004 right, 005 right
    assert result["cause_right"] == {"right": 3, "n": 4, "share": 0.75}
    assert result["failures_reported_no_failure"] == 1
    assert result["negatives_right"]["right"] == 2 and result["negatives_exact"]["right"] == 2
    # phases over trusted failures with a phase: 001 and 002
    assert result["phase_right"]["n"] == 2
    assert result["fix_with_flag_and_number"]["n"] == 3
    assert sum(level["n"] for level in result["calibration"].values()) == 4
    assert result["errors"] == 0


def test_selection_and_table(folder: Path) -> None:
    done = _run(str(folder), "--select", "divisible:2", "--cases")
    assert done.returncode == 0, done.stderr
    assert "| logs (failures / negatives)" in done.stdout and "2 (1 / 1)" in done.stdout
    assert "004" in done.stdout and "001" not in done.stdout.split("\n\n")[-1]


def test_bad_folder_is_one_line(tmp_path: Path) -> None:
    done = _run(str(tmp_path))
    assert done.returncode == 2 and "no index.yaml" in done.stderr and "Traceback" not in done.stderr


def _load_script() -> object:
    spec = importlib.util.spec_from_file_location("eval_oom", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["eval_oom"] = module
    spec.loader.exec_module(module)
    return module


def test_score_counts_each_measure() -> None:
    ev: Any = _load_script()
    cases = [
        ev.Case("1", Path("1.log"), "sampler-warmup-oom", "profiling", "high", ""),
        ev.Case("2", Path("2.log"), "no-kv-cache-memory", "kv-alloc", "medium", ""),
        ev.Case("3", Path("3.log"), "host-oom-killer", None, "low", ""),
        ev.Case("4", Path("4.log"), "not-oom", None, "high", ""),
        ev.Case("5", Path("5.log"), "no-failure", None, "medium", ""),
    ]
    answers = [
        ev.Answer("sampler-warmup-oom", "profiling", "high", (("--max-num-seqs", 512),)),
        ev.Answer("activation-spike", "kv-alloc", "high", (("--max-model-len", "205,728"), (None, None))),
        ev.Answer("no-failure", "unknown", "low", ()),
        ev.Answer("no-failure", "unknown", "low", ()),
        ev.Answer("not-oom", "unknown", "medium", (("--gpu-memory-utilization", None),)),
    ]
    result = ev.score(cases, answers)
    assert result["cause_right"] == {"right": 1, "n": 4, "share": 0.25}
    assert result["cause_right_all"]["right"] == 1
    assert result["phase_right"] == {"right": 2, "n": 2, "share": 1.0}
    assert result["cause_and_phase_right"]["right"] == 1
    assert result["failures_reported_no_failure"] == 1
    assert result["negatives_right"] == {"right": 2, "n": 2, "share": 1.0}
    assert result["negatives_exact"]["right"] == 0
    assert result["fix_with_flag_and_number"] == {"right": 2, "n": 3, "share": 0.667}
    assert result["values_with_separators"] == 1
    assert result["calibration"]["high"] == {"right": 1, "n": 2, "share": 0.5}
    assert result["calibration"]["medium"]["n"] == 1 and result["calibration"]["low"]["n"] == 1


def test_frozen_set_labels_are_valid_and_new() -> None:
    """tests/fixtures/oom_eval: taxonomy labels, one thread per case, no log text, none from the shared samples."""
    from vramctl.diagnose.inventory import LABELS, PHASES

    index = yaml.safe_load((ROOT / "tests" / "fixtures" / "oom_eval" / "index.yaml").read_text())
    cases = index["cases"]
    assert len(cases) >= 40
    urls = [case["source"]["url"] for case in cases]
    assert len(set(urls)) == len(urls), "one log per thread"
    for case in cases:
        assert set(case) <= {"id", "source", "engine", "phase", "root_cause", "confidence"}, (
            "labels only, no log text"
        )
        assert case["root_cause"] in (*LABELS, "no-failure"), case["id"]
        assert case["phase"] in PHASES, case["id"]
        assert case["confidence"] in ("high", "medium", "low"), case["id"]
        assert case["source"]["url"].startswith("https://github.com/"), case["id"]
    negatives = [c for c in cases if c["root_cause"] in ("not-oom", "no-failure")]
    assert len(negatives) >= 8
    shared = ROOT.parent / "shared" / "samples"
    if not shared.is_dir():
        pytest.skip("needs ../shared (the development samples) to check the set is disjoint from them")
    seen = set()
    for name in ("oom", "oom-dev", "startup"):
        text = (shared / name / "index.yaml").read_text()
        seen |= set(re.findall(r"https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/\d+", text))
    assert not seen & set(urls)


HELD_OUT = (
    "index.yaml",
    "fresh2.yaml",
    "fresh3.yaml",
    "fresh4.yaml",
    "fresh5.yaml",
    "fresh6.yaml",
    "fresh7.yaml",
    "fresh8.yaml",
    "fresh9.yaml",
    "fresh10.yaml",
    "fresh11.yaml",
    "fresh12.yaml",
)


def _assert_label_fields(case: dict[str, Any]) -> None:
    """One case of a label file: labels and sources only, with known cause labels, phases and confidences."""
    from vramctl.diagnose.inventory import LABELS, PHASES

    assert set(case) <= {"id", "source", "engine", "phase", "root_cause", "confidence"}, case["id"]
    assert case["root_cause"] in (*LABELS, "no-failure"), case["id"]
    assert case["phase"] in PHASES, case["id"]
    assert case["confidence"] in ("high", "medium", "low"), case["id"]


@pytest.mark.parametrize(
    ("name", "min_cases", "min_failures", "even_only"),
    [
        ("fresh3.yaml", 40, 30, False),
        ("fresh4.yaml", 35, 27, True),
        ("fresh5.yaml", 40, 30, True),
        ("fresh6.yaml", 39, 27, True),
        ("fresh7.yaml", 22, 13, True),
        ("fresh8.yaml", 25, 14, True),
        ("fresh9.yaml", 30, 19, True),
        ("fresh10.yaml", 22, 14, True),
        ("fresh11.yaml", 21, 13, True),
    ],
)
def test_held_out_label_file_is_valid(name: str, min_cases: int, min_failures: int, even_only: bool) -> None:
    """A held-out label file: known cause labels and phases, labels and sources only, one thread per case."""
    cases = yaml.safe_load((ROOT / "tests" / "fixtures" / "oom_eval" / name).read_text())["cases"]
    assert len(cases) >= min_cases
    ids = [str(case["id"]) for case in cases]
    assert len(set(ids)) == len(ids)
    urls = [case["source"]["url"] for case in cases]
    assert len(set(urls)) == len(urls), "one log per thread"
    for case in cases:
        _assert_label_fields(case)
        source = case["source"]
        kind = {"issue": "issues", "pull": "pull"}[source["kind"]]
        assert source["url"] == f"https://github.com/{source['repo']}/{kind}/{source['number']}", case["id"]
        if even_only:
            assert source["number"] % 2 == 0, "odd thread numbers belong to development sets"
    failures = [c for c in cases if c["root_cause"] not in ("not-oom", "no-failure")]
    assert len(failures) >= min_failures and len(cases) - len(failures) >= 8


def test_held_out_web_page_label_file_is_valid() -> None:
    """fresh-12: labels and sources of web pages other than GitHub threads, at most three pages per site; a page that
    mirrors a GitHub thread names it, and no other label file of tests/fixtures/oom_eval cites that thread."""
    from collections import Counter
    from urllib.parse import urlparse

    cases = yaml.safe_load((ROOT / "tests" / "fixtures" / "oom_eval" / "fresh12.yaml").read_text())["cases"]
    assert len(cases) >= 28
    ids = [str(case["id"]) for case in cases]
    assert len(set(ids)) == len(ids)
    urls = [case["source"]["url"] for case in cases]
    assert len(set(urls)) == len(urls), "one log per page"
    sites: Counter[str] = Counter()
    mirrored: set[str] = set()
    for case in cases:
        _assert_label_fields(case)
        source = case["source"]
        assert source["kind"] == "page", case["id"]
        host = urlparse(source["url"]).hostname or ""
        assert host and not host.endswith("github.com"), "fresh-12 holds no GitHub thread"
        assert host.removeprefix("www.") == source["site"].removeprefix("www."), case["id"]
        sites[source["site"]] += 1
        if "mirrors" in source:
            repo, _, number = str(source["mirrors"]).partition("#")
            mirrored.add(f"https://github.com/{repo}/issues/{int(number)}")
    assert max(sites.values()) <= 3, "at most three pages per site"
    failures = [c for c in cases if c["root_cause"] not in ("not-oom", "no-failure")]
    assert len(failures) >= 18 and len(cases) - len(failures) >= 10
    cited: set[str] = set()
    for path in (ROOT / "tests" / "fixtures" / "oom_eval").glob("*.yaml"):
        if path.name != "fresh12.yaml":
            cited |= {c["source"]["url"] for c in yaml.safe_load(path.read_text())["cases"]}
    assert not mirrored & cited, "a mirrored thread is already in another label file"


def test_held_out_sets_are_disjoint() -> None:
    """No thread is in two held-out label files (a log judged twice is not held out twice)."""
    seen: dict[str, str] = {}
    for name in HELD_OUT:
        for case in yaml.safe_load((ROOT / "tests" / "fixtures" / "oom_eval" / name).read_text())["cases"]:
            url = case["source"]["url"]
            assert url not in seen, f"{url} is in {seen.get(url)} and {name}"
            seen[url] = name


@pytest.mark.parametrize("name", ["dev6.yaml", "dev7.yaml", "dev8.yaml", "dev9.yaml", "dev10.yaml", "dev11.yaml", "dev12.yaml"])
def test_an_odd_numbered_label_file_is_a_valid_development_set(name: str) -> None:
    """dev6 - dev12: known labels and phases, labels and sources only, odd thread numbers, no thread of any other file."""
    folder = ROOT / "tests" / "fixtures" / "oom_eval"
    cases = yaml.safe_load((folder / name).read_text())["cases"]
    assert len(cases) >= 30
    urls = [case["source"]["url"] for case in cases]
    assert len(set(urls)) == len(urls), "one log per thread"
    for case in cases:
        _assert_label_fields(case)
        assert case["source"]["number"] % 2 == 1, "even thread numbers belong to held-out sets"
    others: set[str] = set()
    for path in folder.glob("*.yaml"):
        if path.name != name:
            others |= {c["source"]["url"] for c in yaml.safe_load(path.read_text())["cases"]}
    assert not others & set(urls)


def test_dev13_is_a_valid_web_page_development_set() -> None:
    """dev13: labels and sources of web pages other than GitHub threads (a development set), at most three pages per
    site, one log per page; no page and no mirrored thread is cited by any other label file (held-out sets included)."""
    from collections import Counter
    from urllib.parse import urlparse

    from vramctl.diagnose.inventory import LABELS, PHASES

    folder = ROOT / "tests" / "fixtures" / "oom_eval"
    cases = yaml.safe_load((folder / "dev13.yaml").read_text())["cases"]
    assert len(cases) >= 30
    urls = [case["source"]["url"] for case in cases]
    assert len(set(urls)) == len(urls), "one log per page"
    sites: Counter[str] = Counter()
    mirrored: set[str] = set()
    for case in cases:
        assert set(case) <= {"id", "source", "engine", "phase", "root_cause", "confidence"}, case["id"]
        assert case["root_cause"] in (*LABELS, "no-failure"), case["id"]
        assert case["phase"] in PHASES, case["id"]
        assert case["confidence"] in ("high", "medium", "low"), case["id"]
        source = case["source"]
        assert source["kind"] == "page", case["id"]
        host = urlparse(source["url"]).hostname or ""
        assert host and not host.endswith("github.com"), case["id"]
        assert host.removeprefix("www.") == source["site"].removeprefix("www."), case["id"]
        sites[source["site"]] += 1
        if "mirrors" in source:
            repo, _, number = str(source["mirrors"]).partition("#")
            mirrored.add(f"https://github.com/{repo}/issues/{int(number)}")
    assert max(sites.values()) <= 3, "at most three pages per site"
    others: set[str] = set()
    for path in folder.glob("*.yaml"):
        if path.name != "dev13.yaml":
            for c in yaml.safe_load(path.read_text())["cases"]:
                others.add(c["source"]["url"])
                if "mirrors" in c["source"]:
                    repo, _, number = str(c["source"]["mirrors"]).partition("#")
                    others.add(f"https://github.com/{repo}/issues/{int(number)}")
    assert not others & (set(urls) | mirrored)
