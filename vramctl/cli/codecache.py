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
compiled, which compares the flags and the whole program). So each class gets the very functions, and each pattern the
very program, it got before (`tests/diagnose/test_oom_startup_caches.py`). `save()` writes what was compiled during the
run, as `marshal` data with the Python version, into this package's `__pycache__`; only the same Python version uses
it. As with `.pyc` files nothing is written where the directory is read-only, and a missing or unreadable file is
compiled again. `VRAMCTL_CACHE=0` turns it off (neither read nor written), as for the other caches
(`vramctl/diagnose/yamlcache.py`). Measured in docs/perf/explain-oom.md.

This module imports nothing of the package: it is installed before the dataclass modules are imported.
"""

from __future__ import annotations

import marshal
import os
import sys
from array import array
from pathlib import Path
from types import CodeType
from typing import Any

CACHE_FILE = Path(__file__).resolve().parent / "__pycache__" / f"startup-code.{sys.implementation.cache_tag}.marshal"
MAX_ENTRIES = 4000
"""Above this many entries of a kind (code changed over many versions of the package) that kind is dropped from the
file, and compiled and kept again by the next runs."""

_functions: dict[str, CodeType] = {}  # dataclass function source -> its code
_regexes: dict[tuple[str | bytes, int], tuple[tuple[Any, ...], tuple[int, ...]]] = {}
"""(pattern, flags) -> the arguments of `_sre.compile` as kept in the file (`_to_file`)."""
_new: list[int] = [0]  # entries compiled during this run
_installed: list[Any] = []


def enabled() -> bool:
    """`VRAMCTL_CACHE` as `yamlcache.cache_enabled` reads it (that module imports the diagnosis package)."""
    return os.environ.get("VRAMCTL_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def _cached_exec(source: Any, globals: Any = None, locals: Any = None) -> None:
    """`exec` of `dataclasses`: a source string's compiled code from the cache (compiled and added on a miss)."""
    if not isinstance(source, str):
        exec(source, globals, locals)
        return
    code = _functions.get(source)
    if code is None:
        code = _functions[source] = compile(source, "<string>", "exec", dont_inherit=True)
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
        key = (p, flags)
        kept = _regexes.get(key)
        if kept is not None:
            try:
                return sre.compile(*_from_file(kept))
            except Exception:  # a recording this Python cannot replay: compiled as usual
                del _regexes[key]
        recorder = _Recorder(sre)
        compiler._sre = recorder
        try:
            pattern = original(p, flags)
        finally:
            compiler._sre = sre
        if keep and len(recorder.calls) == 1:
            try:
                kept = _to_file(recorder.calls[0])
                marshal.dumps(kept)
                if sre.compile(*_from_file(kept)) == pattern:  # Pattern equality: flags, pattern and the whole program
                    _regexes[key] = kept
                    _new[0] += 1
            except (ValueError, TypeError, OverflowError):  # not marshal data, not an unsigned int: not kept
                pass
        return pattern

    compile_cached.__wrapped__ = original  # type: ignore[attr-defined]  # (the tests compare with it)
    return compile_cached


def install() -> None:
    """Serve the `exec` calls of `dataclasses` and the compiler of `re` from the cache, for this process (once; a
    no-op when turned off; either part is left out where its module is not shaped as on CPython 3.11-3.13)."""
    if _installed or not enabled():
        return
    import dataclasses
    import re

    try:
        held = marshal.loads(CACHE_FILE.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        held = None
    if isinstance(held, tuple) and len(held) == 3 and held[0] == sys.version:
        if isinstance(held[1], dict):
            _functions.update(held[1])
        if isinstance(held[2], dict):
            _regexes.update(held[2])
    if getattr(dataclasses, "exec", exec) is exec:  # the builtin, or a wrapper of someone else's: left alone
        dataclasses.exec = _cached_exec  # type: ignore[attr-defined]  # the module's global name wins over the builtin
    compiler = getattr(re, "_compiler", None)
    if compiler is not None and callable(getattr(compiler, "compile", None)) and hasattr(compiler, "_sre"):
        compiler.compile = _regex_compiler(compiler)
    _installed.append(True)


def save() -> None:
    """Write the code compiled during this run into the cache file (nothing when all of it came from the file)."""
    if not _installed or not _new[0]:
        return
    functions = _functions if len(_functions) <= MAX_ENTRIES else {}
    regexes = _regexes if len(_regexes) <= MAX_ENTRIES else {}
    try:
        blob = marshal.dumps((sys.version, functions, regexes))
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
    _new[0] = 0
