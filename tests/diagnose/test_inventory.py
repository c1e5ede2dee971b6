"""The inventory of memory-related messages (vramctl/diagnose/inventory.yaml): schema, coverage, matching, detection.

- coverage (mapped / found) per component is printed and must stay at or above 95 %;
- every example matches its own entry (a full match, numbers included) and no entry with the opposite
  failure flag;
- every example of a failure entry is a failure for explain-oom (the library call behind the command:
  never `no-failure`). Entries today's classifier does not detect yet are listed in KNOWN_MISSES: they
  are reported (xfail, not strict) so that the list shrinks as detection improves, never silently.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from vramctl.diagnose import inventory as inv
from vramctl.diagnose.classify import diagnose_text

ENTRIES = inv.load_inventory()
MIN_COVERAGE = 0.95

KNOWN_MISSES: frozenset[str] = frozenset()
"""Entries whose examples explain-oom does not detect yet (no-failure) or reads as not-oom. Empty since 2026-12-02:
the generic vocabulary beneath the catalogue detects the 35 listed when the inventory was written, and the last three
(nccl-shm-extend, torch-shm-open-failed: a /dev/shm file that cannot grow; vllm-memory-profiling-error: profiling
broken by another tenant) are decided from their entries' facts (`classify._inventory_reading`). An id added here is
reported by test_known_misses_report until detection covers it."""


def _examples(failure: bool | None) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    for entry in ENTRIES:
        flag = entry.facts.failure if entry.facts is not None else None
        if failure is None or flag is failure:
            out.extend((entry.id, i, ex) for i, ex in enumerate(entry.examples))
    return out


def test_coverage_is_at_least_95_percent(capsys: pytest.CaptureFixture[str]) -> None:
    mapped, found = inv.coverage(ENTRIES)
    with capsys.disabled():
        print(f"\ninventory coverage: {mapped}/{found} = {mapped / found:.1%}")
        for component, (m, f) in sorted(inv.counts_by_component(ENTRIES).items()):
            print(f"  {component:18} {m:3}/{f:<3}")
    assert found >= 120, "the inventory lists every message site found; it cannot be this small"
    assert mapped / found >= MIN_COVERAGE, f"coverage {mapped}/{found} is under {MIN_COVERAGE:.0%}"


def test_every_component_of_the_issue_is_covered() -> None:
    components = {e.component for e in ENTRIES}
    assert set(inv.COMPONENTS) <= components


def test_each_entry_cites_its_source_and_versions() -> None:
    for entry in ENTRIES:
        assert entry.source and entry.versions, entry.id
        assert entry.url is None or entry.url.startswith("https://"), entry.id
        assert "shared/" not in entry.source and "reference/" not in (entry.url or ""), entry.id


@pytest.mark.parametrize(("entry_id", "index", "example"), _examples(None))
def test_example_matches_its_own_entry_and_no_contradiction(entry_id: str, index: int, example: str) -> None:
    entry = next(e for e in ENTRIES if e.id == entry_id)
    matches = inv.match_all(example)
    full = [m for m in matches if not m.partial]
    assert entry_id in {m.entry.id for m in full}, (
        f"{entry_id} example {index} does not match its own pattern"
    )
    assert inv.match(example) is not None and inv.match(example).entry.id == entry_id, (  # type: ignore[union-attr]
        f"{entry_id} example {index}: best match is {inv.match(example)}"
    )
    if entry.facts is not None:
        contradicting = [
            m.entry.id
            for m in full
            if m.entry.facts is not None and m.entry.facts.failure != entry.facts.failure
        ]
        assert not contradicting, f"{entry_id} example {index} also matches {contradicting}"


@pytest.mark.parametrize(("entry_id", "index", "example"), _examples(True))
def test_failure_examples_are_failures_for_explain_oom(entry_id: str, index: int, example: str) -> None:
    result = diagnose_text(example + "\n")
    if entry_id in KNOWN_MISSES and (not result.found_failure or result.cause == "not-oom"):
        pytest.xfail(f"known miss of today's classifier: {entry_id}")
    assert result.found_failure, f"{entry_id} example {index} reported as no-failure"
    assert result.cause != "not-oom", f"{entry_id} example {index}: a memory failure read as not-oom"


def test_known_misses_report(capsys: pytest.CaptureFixture[str]) -> None:
    """Print which known misses the classifier now detects (so the list can shrink) and which it still misses."""
    detected: list[str] = []
    missed: list[str] = []
    for entry in ENTRIES:
        if entry.id not in KNOWN_MISSES:
            continue
        results = [diagnose_text(example + "\n") for example in entry.examples]
        ok = all(r.found_failure and r.cause != "not-oom" for r in results)
        (detected if ok else missed).append(entry.id)
    with capsys.disabled():
        print(f"\nknown misses now detected ({len(detected)}): {', '.join(detected) or '-'}")
        print(f"still missed ({len(missed)}): {', '.join(missed) or '-'}")
    assert len(detected) + len(missed) == len(KNOWN_MISSES)


def test_known_misses_name_real_failure_entries() -> None:
    ids = {e.id for e in ENTRIES if e.facts is not None and e.facts.failure}
    assert ids >= KNOWN_MISSES


def test_numbers_are_converted() -> None:
    found = inv.match(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB. GPU 0 has a total capacity of "
        "23.57 GiB of which 612.00 MiB is free. Process 77 has 4.00 GiB memory in use. Including non-PyTorch "
        "memory, this process has 22.95 GiB memory in use. Of the allocated memory 21.90 GiB is allocated by "
        "PyTorch, and 186.13 MiB is reserved by PyTorch but unallocated."
    )
    assert found is not None and found.entry.id == "torch-cuda-oom-2x" and not found.partial
    assert found.values["tried_bytes"] == round(1.74 * 2**30)
    assert found.values["free_bytes"] == 612 * 2**20
    assert found.values["this_process_bytes"] == round(22.95 * 2**30)
    assert found.values["reserved_unallocated_bytes"] == round(186.13 * 2**20)
    assert found.values["pid"] == 77
    v1 = inv.match(
        "ValueError: To serve at least one request with the model's max seq len (262,144), (9.29 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (9.28 GiB). Based on the available "
        "memory, the estimated maximum model length is 260,800."
    )
    assert (
        v1 is not None and v1.values["estimated_max_len"] == 260800 and v1.values["max_model_len"] == 262144
    )
    assert v1.values["available_bytes"] == round(9.28 * 2**30)
    ray = inv.match(
        "Task was killed due to the node running low on memory. Memory on the node (IP: 10.0.0.5, ID: ab) where the task (pid=1) was running was 60.12GB / 62.00GB "
        "(0.9697), which exceeds the memory usage threshold of 0.95."
    )
    assert ray is not None and ray.values["total_bytes"] == 62 * 10**9


def test_wrapped_quoted_and_escaped_text_still_matches() -> None:
    base = (
        "ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU memory "
        "utilization (0.95, 45.01 GiB). Decrease GPU memory utilization"
    )
    wrapped = "\n".join(base[i : i + 80] for i in range(0, len(base), 80))
    quoted = "\n".join("> " + line for line in wrapped.split("\n"))
    escaped = '{"log": "' + base.replace(" on startup", "\\n on startup") + '"}'
    ansi = "#033[33m" + base + "#033[0m"
    for text in (wrapped, escaped, ansi):
        found = inv.match(text)
        assert found is not None and found.entry.id == "vllm-free-memory-on-startup" and not found.partial, (
            text
        )
        assert found.values["free_bytes"] == round(31.44 * 2**30)
    found = inv.match(quoted)
    assert found is not None and found.entry.id == "vllm-free-memory-on-startup"


def test_elided_message_matches_on_its_anchor_without_numbers() -> None:
    found = inv.match(
        "ValueError: To serve at least one request with the model's max seq len (32768) ... estimated"
    )
    assert found is not None and found.entry.id == "vllm-max-seq-len-v1"
    assert found.partial and not found.values


def test_plain_lines_match_nothing() -> None:
    for line in (
        "INFO 10-01 12:00:00 [gpu_worker.py:276] Available KV cache memory: 21.14 GiB",
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
        "INFO 10-01 12:00:00 gpu_executor.py:122] # GPU blocks: 2048, # CPU blocks: 512",
        "oom_kill 0",
        "under_oom 0",
        '"OOMKilled": false,',
        "Exit Code: 0",
    ):
        found = inv.match(line)
        assert found is None or not found.failure, (line, found)


def test_match_is_fast() -> None:
    line = "INFO 10-01 12:00:00 [loader.py:45] Loading safetensors checkpoint shards: 50% Completed | 1/2 [00:01<00:01]"
    inv.match(line)
    start = time.perf_counter()
    for _ in range(2000):
        inv.match(line)
    per_line_us = (time.perf_counter() - start) / 2000 * 1e6
    assert per_line_us < 300, f"{per_line_us:.0f} µs per line (a line with no anchor)"


def _write(tmp_path: Path, entries: list[dict[str, object]]) -> str:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"entries": entries}))
    return str(path)


GOOD: dict[str, object] = {
    "id": "x-one",
    "component": "vllm",
    "source": "vllm/x.py",
    "versions": "0.1",
    "site": "raise",
    "message": "Boom out of memory",
    "pattern": "Boom {size:tried}",
    "anchor": "Boom",
    "example": "Boom 2 GiB",
    "facts": {"failure": True, "kind": "cuda-oom"},
}


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"component": "nope"}, "component"),
        ({"site": "nope"}, "site"),
        ({"pattern": "Boom ("}, "does not compile"),
        ({"example": "nothing"}, "anchor"),
        ({"example": "Boom nothing"}, "does not match its example"),
        ({"facts": {"failure": True, "kind": "not-oom"}}, "contradicts"),
        ({"facts": {"failure": True, "kind": "cuda-oom", "label": "made-up"}}, "label"),
        ({"facts": {"failure": True, "kind": "cuda-oom", "phase": "lunch"}}, "phase"),
        ({"facts": None}, "exactly one"),
        ({"extra": 1}, "unknown keys"),
        ({"anchor": "ab"}, "3 or more"),
    ],
)
def test_schema_is_checked_on_load(tmp_path: Path, change: dict[str, object], complaint: str) -> None:
    entry = {**GOOD, **change}
    entry = {k: v for k, v in entry.items() if v is not None}
    with pytest.raises(inv.InventoryError, match=re.escape(complaint)):
        inv.load_inventory(_write(tmp_path, [entry]))


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    with pytest.raises(inv.InventoryError, match="duplicate"):
        inv.load_inventory(_write(tmp_path, [GOOD, GOOD]))


def test_the_loader_stays_pure() -> None:
    code = "import sys, vramctl.diagnose.inventory as i; i.match('x'); print(sorted({'torch', 'typer', 'rich'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
