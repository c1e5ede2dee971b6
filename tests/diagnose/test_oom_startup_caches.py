"""explain-oom's start-up caches give the objects the uncached path gives (docs/perf/explain-oom.md, session 8).

- `vramctl/cli/codecache.py`: the code `dataclasses` generates and the programs `re` compiles, compiled once and kept
  in `__pycache__`. A class made from the cache has the very functions (bytecode, constants, names, flags,
  annotations) of one made without it, and a pattern the very program (`Pattern ==` compares flags and program),
  cold or warm; a garbage file is compiled again; `VRAMCTL_CACHE=0` reads and writes nothing.
- the shipped catalogue's pickle holds its marker phrases, equal to those worked out afresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# a fresh interpreter: optionally the cache (its file in argv[2]), then dataclasses of every kind the package uses, and
# a fingerprint of every generated function
_SCRIPT = r"""
import json, re, sys
from pathlib import Path
mode, path = sys.argv[1], sys.argv[2]
if mode == "cache":
    from vramctl.cli import codecache
    codecache.CACHE_FILE = Path(path)
    codecache.install()
from dataclasses import dataclass, field

@dataclass(frozen=True, slots=True)
class Frozen:
    name: str
    size_bytes: int = 0
    tags: tuple[str, ...] = ()

@dataclass
class Mutable:
    items: list[int] = field(default_factory=list)
    note: "str | None" = None

@dataclass(order=True)
class Ordered:
    rank: int
    label: str = "x"

out = {}
for cls in (Frozen, Mutable, Ordered):
    for name, fn in sorted(vars(cls).items()):
        code = getattr(fn, "__code__", None)
        if code is None:
            continue
        out[f"{cls.__name__}.{name}"] = [
            code.co_code.hex(), re.sub(r" at 0x[0-9a-f]+", "", repr(code.co_consts)), list(code.co_names),
            list(code.co_varnames), code.co_flags,
            repr(getattr(fn, "__annotations__", None)), repr(fn.__defaults__), repr(fn.__kwdefaults__),
        ]
assert Frozen("a", 1) == Frozen("a", 1) and repr(Mutable()) == "Mutable(items=[], note=None)"
assert Ordered(1) < Ordered(2)
# patterns of every shape: the catalogue's (groups, lookarounds, inline flags), flags, bytes
from vramctl.diagnose.catalogue import load_catalogue
patterns = sorted({p.pattern for sig in load_catalogue().signatures for p in sig.patterns})[:80]
cases = [(p, 0) for p in patterns] + [
    (r"(?P<a>x)(?(a)y|z)", 0), ("Ab+c", re.IGNORECASE), ("^a.b$", re.MULTILINE | re.DOTALL), (rb"\x00[\x01-\x1f]+", 0),
    (r"\w+\s\d{2,}", re.ASCII), ("(?x) a b # comment", 0),
]
fresh = []
for pattern, flags in cases:
    compiled = re.compile(pattern, flags)
    fresh.append([repr(compiled), compiled.flags, compiled.groups, sorted(compiled.groupindex.items())])
    out["regex " + repr((pattern, int(flags)))] = fresh[-1]
    original = getattr(re._compiler.compile, "__wrapped__", None)  # the cache is installed: re's own compiler
    if original is not None:  # the program itself (Pattern equality), from the file on a warm run
        assert original(pattern, int(flags)) == compiled, pattern
if mode == "cache":
    out["compiled"] = codecache._new[0]
    codecache.finish()
    assert "exec" not in vars(__import__("dataclasses")) and not hasattr(re._compiler.compile, "__wrapped__")
print(json.dumps(out))
"""


def _fingerprint(mode: str, cache: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode, str(cache)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    data: dict[str, object] = json.loads(run.stdout)
    return data


def test_code_cache_makes_the_same_functions_and_patterns(tmp_path: Path) -> None:
    cache = tmp_path / "startup-code.marshal"
    plain = _fingerprint("plain", cache)
    cold = _fingerprint("cache", cache)
    assert cache.is_file()
    warm = _fingerprint("cache", cache)
    assert int(str(cold.pop("compiled"))) > 0  # compiled and written on the first run
    assert warm.pop("compiled") == 0  # every function from the file on the next
    assert cold == plain
    assert warm == plain


def test_code_cache_survives_garbage_and_can_be_turned_off(tmp_path: Path) -> None:
    cache = tmp_path / "startup-code.marshal"
    plain = _fingerprint("plain", cache)
    cache.write_bytes(b"not marshal data \x00\xff")
    garbage = _fingerprint("cache", cache)
    assert int(str(garbage.pop("compiled"))) > 0
    assert garbage == plain
    off = tmp_path / "off.marshal"
    env = dict(os.environ, VRAMCTL_CACHE="0")
    turned_off = _fingerprint("cache", off, env)
    assert turned_off.pop("compiled") == 0
    assert turned_off == plain
    assert not off.exists()


def test_code_cache_keeps_only_this_python(tmp_path: Path) -> None:
    """A file written by another Python version is not used (its bytecode would not run here)."""
    import marshal

    cache = tmp_path / "startup-code.marshal"
    cold = _fingerprint("cache", cache)
    _, entries = marshal.loads(cache.read_bytes())
    assert entries
    cache.write_bytes(marshal.dumps(("3.0.0 (another build)", entries)))
    other = _fingerprint("cache", cache)
    assert other.pop("compiled") == cold.pop("compiled")  # all compiled again


@pytest.mark.parametrize("cached", [True, False], ids=["pickled", "built"])
def test_catalogue_marker_phrases_as_worked_out(cached: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The marker phrases the shipped catalogue comes with (pickled with it) equal those worked out afresh from its
    markers and keys."""
    from vramctl.diagnose import catalogue

    if not cached:
        monkeypatch.setenv("VRAMCTL_CACHE", "0")
    catalogue._shipped.cache_clear()
    try:
        cat = catalogue.load_catalogue()
        shipped = dict(cat.marker_phrases)
        fresh = catalogue.Catalogue.marker_phrases.func(cat)  # the cached property's own computation
    finally:
        catalogue._shipped.cache_clear()
    assert shipped == fresh
    assert shipped  # the markers answer to some phrases


def test_code_cache_entry_is_used_only_for_its_own_text(tmp_path: Path) -> None:
    """An entry whose checksum names another source or pattern (a collision, a file edited by hand) is not used: the
    text kept in the entry is compared first."""
    import marshal

    cache = tmp_path / "startup-code.marshal"
    plain = _fingerprint("plain", cache)
    _fingerprint("cache", cache)
    _, entries = marshal.loads(cache.read_bytes())
    blobs = list(entries.values())
    swapped = {key: blobs[(i + 1) % len(blobs)] for i, key in enumerate(entries)}  # every entry under another's name
    cache.write_bytes(marshal.dumps((sys.version, swapped)))
    crossed = _fingerprint("cache", cache)
    assert int(str(crossed.pop("compiled"))) >= len(blobs) - 1  # (all but a coincidence) compiled again
    assert crossed == plain
