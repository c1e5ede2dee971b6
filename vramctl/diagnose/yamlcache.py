"""The shipped YAML data files (catalogue, source inventory), parsed once per content and kept like bytecode.

explain-oom reads `catalogue.yaml` on every run and `inventory.yaml` on every log with a failure: libyaml's safe
loader takes ~0.05 s for each (the Python-side object construction), and importing PyYAML ~0.02 s, of a run whose
target is a small multiple of `grep`. The parsed data (plain dicts, lists, strings, numbers) is written beside the file
in `__pycache__/` as `marshal` data together with the file's bytes and the Python version, named by checksums of the
bytes, and read back in ~1 ms by the next run, which uses it only when the bytes and the version are the same (never a
stale read; PyYAML is then not imported at all). As with `.pyc` files: nothing is written where the directory is
read-only, the cache of an older content is removed, and an unreadable cache is parsed again. It is data, not
bytecode, so `PYTHONDONTWRITEBYTECODE` does not turn it off; `VRAMCTL_CACHE=0` does (neither read nor written).
`literals.py` keeps its compiled Hyperscan databases the same way (`read_cache` / `write_cache`), and the shipped
catalogue keeps the objects built from its data (`load_built_cached`).
"""

from __future__ import annotations

import marshal
import os
import pickle
import sys
import tempfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["CACHE_ENV", "cache_enabled", "load_built_cached", "load_yaml_cached", "read_cache", "write_cache"]

T = TypeVar("T")

CACHE_ENV = "VRAMCTL_CACHE"
"""`VRAMCTL_CACHE=0`: neither read nor write the caches in the package's `__pycache__` (YAML data, Hyperscan
databases)."""
PACKAGE_CACHE = Path(__file__).resolve().parent / "__pycache__"


def cache_enabled() -> bool:
    return os.environ.get(CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def read_cache(cache: Path) -> Any:
    """The data of a cache file, or None when it is missing or unreadable."""
    try:
        return marshal.loads(cache.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def _parse(raw: bytes) -> Any:
    import yaml  # only on a cache miss: PyYAML's import is ~0.02 s of a run's start-up

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present
    return yaml.load(raw.decode("utf-8"), Loader=loader)  # a safe loader (CSafeLoader / SafeLoader)


def load_yaml_cached(path: Path) -> Any:
    """`yaml.safe_load` of the file, from the marshal cache beside it when one is there for these bytes."""
    raw = path.read_bytes()
    if not cache_enabled():
        return _parse(raw)
    cache = path.parent / "__pycache__" / f"{path.name}.{checksum(raw)}.marshal"
    # the cache holds the file's bytes and the Python version with the data: used only when both are the same
    held = read_cache(cache)
    if isinstance(held, tuple) and len(held) == 3 and held[0] == sys.version and held[1] == raw:
        return held[2]
    data = _parse(raw)
    write_cache(cache, (sys.version, raw, data))
    return data


def load_built_cached(path: Path, build: Callable[[], T], sources: Sequence[Path]) -> T:
    """What `build()` makes of the data file `path`, from a pickle beside it in `__pycache__/` when one is there for
    these bytes and this code.

    The shipped catalogue's objects take ~0.03 s to build on every run (checks, ~140 expressions parsed, key tables);
    unpickling them takes a quarter of that. The pickle holds the file's bytes, the Python version and the size and
    modification time of each of `sources` (the modules whose code builds the objects, as a `.pyc` is checked against
    its source): it is used only when all are the same, otherwise the objects are built and written again. A pickle
    in the package's own `__pycache__` is trusted as its `.pyc` files are. `VRAMCTL_CACHE=0` turns it off."""
    if not cache_enabled():
        return build()
    try:
        raw = path.read_bytes()
        stamp = [(source.name, st.st_size, st.st_mtime_ns) for source in sources for st in (source.stat(),)]
    except OSError:
        return build()
    key = (sys.version, raw, stamp)
    cache = path.parent / "__pycache__" / f"{path.name}.{checksum(raw)}.pickle"
    try:
        with cache.open("rb") as fh:
            held = pickle.load(fh)
        if isinstance(held, tuple) and len(held) == 2 and held[0] == key:
            return held[1]  # type: ignore[no-any-return]
    except Exception:  # missing, unreadable, or pickled by other code: built again
        pass
    built = build()
    write_cache(cache, (key, built), dumps=pickle.dumps)
    return built


def checksum(raw: bytes) -> str:
    """A short name for some bytes (a cache file's name; the content itself is compared before use)."""
    return f"{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}{len(raw):x}"


def write_cache(cache: Path, data: Any, dumps: Callable[[Any], bytes] = marshal.dumps) -> None:
    """Write `data` (marshal-able, or what `dumps` takes) atomically to `cache` (`STEM.DIGEST.marshal`, `.pickle`),
    and remove the caches of the same stem for other contents. Nothing happens where the directory cannot be
    written."""
    try:
        blob = dumps(data)  # ValueError for a type marshal does not know (a YAML timestamp): not cached
        cache.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=cache.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.chmod(tmp, 0o644)  # readable by whoever can read the package, as a .pyc is
            os.replace(tmp, cache)  # atomic: a concurrent run reads the old state or the whole new file
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        stem = cache.name.split(".")[:-2]
        for old in cache.parent.glob(".".join(stem) + ".*" + cache.suffix):  # earlier contents of the file
            if old.name != cache.name and old.name.count(".") == cache.name.count("."):
                old.unlink(missing_ok=True)
    except (OSError, ValueError, TypeError, AttributeError, pickle.PicklingError):
        pass
