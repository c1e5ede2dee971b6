"""The scan's shortcuts give exactly what the plain methods give; the inventory decides what the catalogue cannot.

- candidate lines found with the trie alternation of many anchors == one literal search per anchor;
- the shipped catalogue's lazily compiled patterns == the patterns compiled up front (names, matches);
- the inventory loaded without its up-front checks == the checked one;
- a root line the catalogue reads as not-oom for want of a hint, or as a sanity check, while the source inventory
  maps it to a memory failure, gets the inventory's facts; a not-oom read from the numbers or the context stays.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramctl.diagnose import catalogue as catalogue_module
from vramctl.diagnose import inventory as inv
from vramctl.diagnose.catalogue import CATALOGUE_PATH, load_catalogue
from vramctl.diagnose.classify import TRIE_MIN_ANCHORS, _Scanner, diagnose_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "oom"


def _literal_candidates(data: bytes, lo: int, hi: int, anchors: tuple[bytes, ...]) -> list[tuple[int, int]]:
    """The reference: every line holding an anchor that starts at or after lo and ends by hi."""
    found: dict[int, int] = {}
    for anchor in anchors:
        for m in re.finditer(re.escape(anchor), data[:hi]):
            if m.start() < lo:
                continue
            start = data.rfind(b"\n", 0, m.start()) + 1
            end = data.find(b"\n", m.start())
            found[start] = len(data) if end < 0 else end
    return sorted(found.items())


@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "trie"])
@pytest.mark.parametrize("log", sorted(FIXTURES.glob("*.log"))[:40], ids=lambda p: p.name)
def test_trie_candidates_equal_literal_search(log: Path, native: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VRAMCTL_NATIVE_SCAN", native)  # the native pass (where hyperscan is installed) and the trie
    cat = load_catalogue()
    assert len(cat.all_anchors) > TRIE_MIN_ANCHORS  # the trie path is the one under test
    scanner = _Scanner(cat)
    data = log.read_bytes()
    for lo, hi in ((0, len(data)), (0, len(data) // 2), (data.find(b"\n") + 1, len(data))):
        hi = data.rfind(b"\n", 0, hi) + 1 if hi < len(data) else hi
        assert scanner._candidates(data, lo, hi, cat.all_anchors) == _literal_candidates(
            data, lo, hi, cat.all_anchors
        )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["Traceback (most recent call last)", "CUDA out of memory", "Error", "KV ", "took", "plain words",
             "oad", "Load", "xx", "\n", " ", "emory", "atchdog"]
        ),
        max_size=40,
    )
)
def test_trie_candidates_equal_literal_search_on_made_up_text(pieces: list[str]) -> None:
    cat = load_catalogue()
    data = "".join(pieces).encode()
    scanner = _Scanner(cat)
    for native in ("1", "0"):  # the native pass (where hyperscan is installed) and the trie alternation
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("VRAMCTL_NATIVE_SCAN", native)
            assert scanner._candidates(data, 0, len(data), cat.all_anchors) == _literal_candidates(
                data, 0, len(data), cat.all_anchors
            )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(["Memory", "emory", "rror", "rrorr", "Kill", "SIG", "watchdog", "atchdo", "g", "x", "\n", " "]),
        max_size=40,
    ),
    st.integers(0, 40),
)
def test_failure_anchor_candidates_equal_literal_search(pieces: list[str], cut: int) -> None:
    cat = load_catalogue()
    data = "".join(pieces).encode()
    lo = data.find(b"\n", 0, cut) + 1 if cut else 0
    scanner = _Scanner(cat)
    for native in ("1", "0"):  # the native pass (where hyperscan is installed) and one literal pass per anchor
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("VRAMCTL_NATIVE_SCAN", native)
            assert scanner._candidates(data, lo, len(data), cat.failure_anchors) == _literal_candidates(
                data, lo, len(data), cat.failure_anchors
            )


def test_lazy_catalogue_patterns_equal_compiled_ones() -> None:
    lazy = load_catalogue()
    full = catalogue_module._load(CATALOGUE_PATH)  # every pattern compiled and checked, as for a given path
    assert [s.id for s in lazy.signatures] == [s.id for s in full.signatures]
    for a, b in zip(lazy.signatures, full.signatures, strict=True):
        for p, q in zip(a.patterns, b.patterns, strict=True):
            assert p.pattern == q.pattern
            assert set(p.groupindex) == set(q.groupindex), a.id
            assert p.compiled.pattern == q.compiled.pattern


def test_catalogue_given_by_path_still_rejects_a_bad_regex(tmp_path: Path) -> None:
    text = CATALOGUE_PATH.read_text(encoding="utf-8")
    bad = tmp_path / "catalogue.yaml"
    bad.write_text(text.replace("pattern: '.'", "pattern: '(unclosed'", 1), encoding="utf-8")
    with pytest.raises(catalogue_module.CatalogueError, match="bad regex"):
        load_catalogue(bad)


def test_unchecked_inventory_equals_checked() -> None:
    checked = inv.load_inventory()
    quick = inv.load_inventory(check=False)
    assert [e.id for e in quick] == [e.id for e in checked]
    for a, b in zip(quick, checked, strict=True):
        assert a == b
        assert a.regex.pattern == b.regex.pattern


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device", "host-shm-exhausted"),
        ("RuntimeError: unable to write to file </torch_4242_1234567_0>: No space left on device (28)",
         "host-shm-exhausted"),
        ("AssertionError: Error in memory profiling. Initial free memory 30.5 GiB, current free memory 31.2 GiB. "
         "This happens when other processes sharing the same container release GPU memory while vLLM is profiling "
         "during initialization.", "gpu-util-exceeds-free-memory"),
        # a full disk stays a full disk: nothing, not even the inventory, places it in /dev/shm
        ("OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/model.safetensors'", "not-oom"),
    ],
)
def test_inventory_decides_what_the_catalogue_reads_as_not_oom(line: str, cause: str) -> None:
    result = diagnose_text(line + "\n")
    assert result.cause == cause
    if cause == "gpu-util-exceeds-free-memory":
        assert result.confidence == "low"
        assert any("inventory" in why for why in result.why)


def test_not_oom_read_from_the_numbers_stays() -> None:
    # SGLang's idle self-check with more free slots than it holds: an accounting bug (the catalogue's rule reads the
    # numbers), though the inventory maps the wording to a leak
    text = (
        "ValueError: token_to_kv_pool_allocator memory leak detected! available_size=3189424, protected_size=0, "
        "self.max_total_num_tokens=3185200\n"
    )
    assert diagnose_text(text).cause == "not-oom"
