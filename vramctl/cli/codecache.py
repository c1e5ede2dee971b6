"""What a run of `explain-oom --json LOG` compiles at start-up, compiled once and kept like bytecode.

Two kinds of code are compiled afresh by every Python process and are not covered by `.pyc` files:

- **the functions `@dataclass` writes** (`__init__`, `__repr__`, `__eq__`, ... of each class, as source text given to
  `exec`): ~200 of them for the ~40 dataclasses the diagnosis imports, ~0.03 s of parsing and compiling per run;
- **regular expressions**: the modules' and the catalogue's patterns, parsed and compiled by `re` into SRE programs
  (lists of integers): ~110 of them per run, ~0.03 s, two of the catalogue's generic patterns ~0.01 s each.

`install()` puts a cache in front of both, for this process: the `exec` that `dataclasses` calls (its module's global
name; the code object is what `compile` makes of the source text with no inherited compiler flags, as `dataclasses`'
own `exec` call does, its module having no `__future__` imports), and `re`'s compiler (`re._compiler.compile`, called
by `re` only for a pattern not in its own cache: what it hands to `_sre.compile` for that pattern and those flags is
recorded, and replayed on the next run; a recording is kept only when replaying it gives a pattern equal to the one
compiled, which compares the flags and the whole program). So each class gets the very functions, and each pattern
the very program, it got before (`tests/diagnose/test_oom_startup_caches.py`). `finish()` puts both modules back and
writes what was compiled meanwhile, as `marshal` data with the Python version, into this package's `__pycache__`
(each entry named by checksums and holding its source text or pattern, compared before use; read only when used);
only the same Python version uses it. As with `.pyc` files nothing is written where the directory is read-only, and a
missing or unreadable file is compiled again. `VRAMCTL_CACHE=0` turns it off (neither read nor written), as for the
other caches (`vramctl/diagnose/yamlcache.py`). Measured in docs/perf/explain-oom.md.

This module imports nothing of the package: it is installed before the dataclass modules are imported.
"""

from __future__ import annotations

import marshal
import os
import sys
import zlib
from array import array
from collections.abc import Callable
from pathlib import Path
from types import CodeType
from typing import Any

CACHE_FILE = Path(__file__).resolve().parent / "__pycache__" / f"startup-code.{sys.implementation.cache_tag}.marshal"
MAX_ENTRIES = 5000
"""Above this many entries (code changed over many versions of the package) the file is emptied, and what the next
runs compile is kept again."""

_entries: dict[tuple[int, int, int], bytes] = {}
"""The file's entries: the checksum of what was compiled (`_key`) -> its compiled form as `marshal` data, read only when
used (a file kept by many runs, of many commands, holds far more than one run needs)."""
_new: list[int] = [0]  # entries compiled during this run
_installed: list[Callable[[], object]] = []  # what puts each hooked module back


def _key(kind: bytes, text: str | bytes) -> tuple[int, int, int]:
    """A short name for a dataclass function's source or a pattern with its flags (`kind`): its length and two
    checksums. The entry itself holds the source or pattern, which is compared before the entry is used."""
    data = kind + (text if isinstance(text, bytes) else b"s" + text.encode("utf-8", "surrogatepass"))
    return len(data), zlib.crc32(data), zlib.adler32(data)


def enabled() -> bool:
    """`VRAMCTL_CACHE` as `yamlcache.cache_enabled` reads it (that module imports the diagnosis package)."""
    return os.environ.get("VRAMCTL_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def _cached_exec(source: Any, globals: Any = None, locals: Any = None) -> None:
    """`exec` of `dataclasses`: a source string's compiled code from the cache (compiled and added on a miss)."""
    if not isinstance(source, str):
        exec(source, globals, locals)
        return
    key = _key(b"f", source)
    code = None
    blob = _entries.get(key)
    if blob is not None:
        held = marshal.loads(blob)
        if isinstance(held, tuple) and len(held) == 2 and held[0] == source and isinstance(held[1], CodeType):
            code = held[1]
    if code is None:
        code = compile(source, "<string>", "exec", dont_inherit=True)
        _entries[key] = marshal.dumps((source, code))
        _new[0] += 1
    exec(code, globals, locals)


class _Recorder:
    """`_sre` as `re._compiler` sees it while one pattern is compiled: `compile`'s arguments are kept."""

    def __init__(self, sre: Any) -> None:
        self.sre = sre
        self.calls: list[tuple[Any, ...]] = []

    def compile(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.sre.compile(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sre, name)


def _plain(value: Any) -> Any:
    """An argument of `_sre.compile` as marshal data. The program (a list of opcodes, `int` subclasses: named
    constants) is kept as the bytes of an unsigned-int array: marshal reads those at once, where a list of ~8,000
    integers takes it a while (the file's ~110 programs: 4.6 ms against 0.3 ms)."""
    if isinstance(value, list) and all(type(v) is not bool and isinstance(v, int) for v in value):
        return _Program(array("I", value).tobytes())
    if isinstance(value, int) and type(value) is not int and type(value) is not bool:
        return int(value)
    return value


class _Program(bytes):
    """A program's opcodes as the bytes of an unsigned-int array (an argument of `_sre.compile` in the file)."""


def _to_file(args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """`_sre.compile`'s arguments as kept in the file: plain values, and the positions holding a program's bytes."""
    plain = tuple(_plain(arg) for arg in args)
    return tuple(bytes(a) if isinstance(a, _Program) else a for a in plain), tuple(
        i for i, a in enumerate(plain) if isinstance(a, _Program)
    )


def _from_file(kept: tuple[tuple[Any, ...], tuple[int, ...]]) -> tuple[Any, ...]:
    """`_sre.compile`'s arguments from their form in the file."""
    args, programs = kept
    return tuple(array("I", arg).tolist() if i in programs else arg for i, arg in enumerate(args))


def _regex_compiler(compiler: Any) -> Any:
    """`re._compiler.compile` served from the cache."""
    original = compiler.compile
    sre = compiler._sre
    # the programs are kept as unsigned-int arrays: where an SRE opcode has another size, none are kept
    keep = int(getattr(sre, "CODESIZE", 0)) == array("I").itemsize
    debug = int(getattr(compiler, "SRE_FLAG_DEBUG", 128))  # `re.DEBUG` prints the program as it compiles it

    def compile_cached(p: Any, flags: int = 0) -> Any:
        if not isinstance(p, (str, bytes)) or type(flags) is not int or flags & debug:
            return original(p, flags)
        key = _key(b"r%d:" % flags, p)
        blob = _entries.get(key)
        if blob is not None:
            try:
                kept = marshal.loads(blob)
                args = _from_file(kept)
                if args[0] == p and type(args[0]) is type(p):
                    return sre.compile(*args)
            except Exception:  # a recording this Python cannot replay: compiled as usual
                pass
            del _entries[key]
        recorder = _Recorder(sre)
        compiler._sre = recorder
        try:
            pattern = original(p, flags)
        finally:
            compiler._sre = sre
        if keep and len(recorder.calls) == 1:
            try:
                kept = _to_file(recorder.calls[0])
                blob = marshal.dumps(kept)
                args = _from_file(kept)
                # Pattern equality: flags, pattern and the whole program
                if args[0] == p and type(args[0]) is type(p) and sre.compile(*args) == pattern:
                    _entries[key] = blob
                    _new[0] += 1
            except (ValueError, TypeError, OverflowError):  # not marshal data, not an unsigned int: not kept
                pass
        return pattern

    compile_cached.__wrapped__ = original  # type: ignore[attr-defined]  # (the tests compare with it)
    return compile_cached


def install() -> None:
    """Serve the `exec` calls of `dataclasses` and the compiler of `re` from the cache, until `finish()` (a no-op when
    turned off or already installed; either part is left out where its module is not shaped as on CPython 3.11-3.13:
    `dataclasses` calling `exec` by its global name, `re._compiler` calling `_sre.compile`)."""
    if _installed or not enabled():
        return
    import dataclasses
    import re

    try:
        held = marshal.loads(CACHE_FILE.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        held = None
    if isinstance(held, tuple) and len(held) == 2 and held[0] == sys.version and isinstance(held[1], dict):
        _entries.update(held[1])
    if "exec" not in vars(dataclasses):  # the builtin (a wrapper of someone else's is left alone)
        dataclasses.exec = _cached_exec  # type: ignore[attr-defined]  # the module's global name wins over the builtin
        _installed.append(lambda: delattr(dataclasses, "exec"))
    compiler = getattr(re, "_compiler", None)
    if compiler is not None and callable(getattr(compiler, "compile", None)) and hasattr(compiler, "_sre"):
        original = compiler.compile
        compiler.compile = _regex_compiler(compiler)
        _installed.append(lambda: setattr(compiler, "compile", original))
    _installed.append(lambda: None)  # installed, whatever was left out


def finish() -> None:
    """Write the code compiled since `install()` into the cache file (nothing when all of it came from the file), and
    put `dataclasses` and `re` back as they were (a caller in the same process compiles as usual afterwards)."""
    while _installed:
        _installed.pop()()
    if not _new[0]:
        return
    _new[0] = 0
    if len(_entries) > MAX_ENTRIES:  # code changed over many versions of the package: start again
        _entries.clear()
    try:
        blob = marshal.dumps((sys.version, _entries))
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
