"""The code `dataclasses` generates for each class, compiled once and kept like bytecode (the lean `explain-oom` run).

`@dataclass` writes the source of each class's `__init__`, `__repr__`, `__eq__`, ... and compiles it with `exec` when
the class is created: ~200 small functions for the ~40 dataclasses `explain-oom` imports, whose parsing and compiling
is ~0.03 s of CPU on every run, a sixth of its start-up (`docs/perf/explain-oom.md`). `install()` puts a compiled-code
cache in front of that one `exec`: the source text is the key, and the code object is what `compile` makes of that
text with no inherited compiler flags, as `dataclasses`' own `exec` call does (its module has no `__future__`
imports), so each class gets the very functions it got before. `save()` writes the code compiled during the run as
`marshal` data with the Python version into this package's `__pycache__`; it is used only by the same Python version.
As with `.pyc` files nothing is written where the directory is read-only, and a missing or unreadable file is
compiled again. `VRAMCTL_CACHE=0` turns it off (neither read nor written), as for the other caches
(`vramctl/diagnose/yamlcache.py`).

This module imports nothing of the package: it is installed before the dataclass modules are imported.
"""

from __future__ import annotations

import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

CACHE_FILE = Path(__file__).resolve().parent / "__pycache__" / f"dataclass-code.{sys.implementation.cache_tag}.marshal"
MAX_ENTRIES = 4000
"""Above this many sources (classes changed over many versions of the package) the file starts again from the run's."""

_cache: dict[str, CodeType] = {}
_compiled: dict[str, CodeType] = {}
_installed: list[Any] = []


def enabled() -> bool:
    """`VRAMCTL_CACHE` as `yamlcache.cache_enabled` reads it (that module imports the diagnosis package)."""
    return os.environ.get("VRAMCTL_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def _cached_exec(source: Any, globals: Any = None, locals: Any = None) -> None:
    """`exec` of `dataclasses`: a source string's compiled code from the cache (compiled and added on a miss)."""
    if not isinstance(source, str):
        exec(source, globals, locals)
        return
    code = _cache.get(source)
    if code is None:
        code = _compiled[source] = _cache[source] = compile(source, "<string>", "exec", dont_inherit=True)
    exec(code, globals, locals)


def install() -> None:
    """Serve the `exec` calls of `dataclasses` from the cache, for this process (once; a no-op when turned off or
    where `dataclasses` makes its functions some other way)."""
    if _installed or not enabled():
        return
    import dataclasses

    if getattr(dataclasses, "exec", exec) is not exec:  # someone else's wrapper: left alone
        return
    try:
        held = marshal.loads(CACHE_FILE.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        held = None
    if isinstance(held, tuple) and len(held) == 2 and held[0] == sys.version and isinstance(held[1], dict):
        _cache.update(held[1])
    dataclasses.exec = _cached_exec  # type: ignore[attr-defined]  # the module's global name wins over the builtin
    _installed.append(dataclasses)


def save() -> None:
    """Write the code compiled during this run into the cache file (nothing when every class came from it)."""
    if not _installed or not _compiled:
        return
    entries = _cache if len(_cache) <= MAX_ENTRIES else dict(_compiled)
    try:
        blob = marshal.dumps((sys.version, entries))
        CACHE_FILE.parent.mkdir(exist_ok=True)
        tmp = CACHE_FILE.with_name(f"{CACHE_FILE.name}.{os.getpid()}.tmp")
        try:
            tmp.write_bytes(blob)
            os.chmod(tmp, 0o644)  # readable by whoever can read the package, as a .pyc is
            os.replace(tmp, CACHE_FILE)  # atomic: a concurrent run reads the old file or the whole new one
        finally:
            tmp.unlink(missing_ok=True)
    except (OSError, ValueError):
        return
    _compiled.clear()
