"""vramctl's own flags written inside a pasted serve command (`vramctl plan -- vllm serve M --gpu l40s --json`).

No engine has `--gpu`, `--json` or `--engine`: such a flag after `--` is vramctl's, and is honoured as if it had
been written before `--` — never dropped with an "ignored" note (which planned an H100 for `--gpu l40s`). One the
command does not take there (`--engine` in `vramctl diff`, whose sides are --from / --to) is refused the way the
engine refuses an argument it does not know (vLLM: "unrecognized arguments"), with what to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramctl.core.errors import BadInputError

OWN_FLAGS: dict[str, tuple[str, bool]] = {
    "--gpu": ("gpu", True),
    "--gpu-memory": ("gpu_memory", True),
    "--free-memory": ("free_memory", True),
    "--host-memory": ("host_memory", True),
    "--engine": ("engine", True),
    "--engine-version": ("engine_version", True),
    "--entrypoint": ("entrypoint", True),
    "--offline": ("offline", False),
    "--json": ("json_out", False),
    "--markdown": ("markdown", False),
    "--kv-cache-memory-suggestion": ("kv_cache_memory_suggestion", False),
}
"""Flag → (the command's option name, whether it takes a value). None of these is a vLLM or SGLang flag."""

DIFF_FLAGS: dict[str, tuple[str, bool]] = {
    "--from": ("from_side", True),
    "--to": ("to_side", True),
    "--from-flags": ("from_flags", True),
    "--to-flags": ("to_flags", True),
}
"""`vramctl diff`'s own flags (no engine has them either)."""


def split_own_flags(
    words: list[str],
    own: Mapping[str, tuple[str, bool]] = OWN_FLAGS,
    *,
    refused: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """The serve command without vramctl's own flags, and those flags' values (`--gpu=l40s` or `--gpu l40s`).

    `refused`: vramctl flags this command does not take after `--` → what to write instead (one BadInputError)."""
    rest: list[str] = []
    found: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        flag, eq, inline = word.partition("=")
        if refused and flag in refused:
            raise BadInputError(
                f"{flag} after the serve command: not a vLLM or SGLang argument, and not one this command takes "
                f"there; {refused[flag]}"
            )
        if flag not in own:
            rest.append(word)
            i += 1
            continue
        name, takes_value = own[flag]
        if not takes_value:
            if eq:
                raise BadInputError(f"{flag}: takes no value (got {word!r})")
            found[name] = True
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            value = words[i + 1]
            i += 2
        else:
            raise BadInputError(f"{flag}: needs a value")
        if name in found and found[name] != value:
            raise BadInputError(f"{flag} given twice in the serve command ({found[name]!r}, {value!r})")
        found[name] = value
    return rest, found


def merge_own_flags(
    options: dict[str, Any], found: dict[str, Any], own: Mapping[str, tuple[str, bool]] = OWN_FLAGS
) -> dict[str, Any]:
    """The command's options with the flags found after `--`; the same flag with two values is bad input."""
    merged = dict(options)
    for name, value in found.items():
        before = merged.get(name)
        if before not in (None, False) and before != value:
            flag = next(f for f, (n, _) in own.items() if n == name)
            raise BadInputError(f"{flag}: {before!r} before `--` and {value!r} in the serve command; give one")
        merged[name] = value
    return merged
