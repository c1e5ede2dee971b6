"""The CLI side of the one flag registry (vramctl.core.engines.flags): an engine flag's help text and the reading
of its value, for every command that takes engine flags (`plan`, `diff`, `profile`, `suggest`, `validate`), and
vramctl's own memory sizes and the model argument, read alike on every command.

Typer declares each option in the command's signature (docs/cli.md is generated from them); what the option
means, how its value is read and its help come from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from vramctl.core.engines import flags as registry
from vramctl.core.errors import BadInputError


def flag_help(name: str, extra: str = "") -> str:
    """The registry's help for the flag (`--max-model-len`), with `extra` after it."""
    text = registry.by_name(name).help
    return f"{text} {extra}".strip()


def option_entry(option: str) -> registry.EngineFlag | None:
    """The registry entry behind a command's option (its Python name, `max_model_len`), None for vramctl's own."""
    try:
        return registry.by_name(option.replace("_", "-"))
    except KeyError:
        return None


def read_engine_options(
    options: Mapping[str, Any], names: Iterable[str], sources: dict[str, str] | None = None
) -> dict[str, Any]:
    """The options `names` that were given, read by their registry entries: ServeSettings field → value.

    A value typed as text (`32k`, `8GiB`, `auto`) is read the way a serve command's is; a bool only when set.
    `sources`, when given, gets field → the option that set it."""
    changes: dict[str, Any] = {}
    set_by: dict[str, str] = {}
    for name in names:
        value = options.get(name)
        entry = option_entry(name)
        if entry is None:
            raise KeyError(f"{name}: not an engine flag of the registry")
        if value is None or (entry.kind == "bool" and value is False and not entry.negatable):
            continue
        if entry.target in set_by:
            raise BadInputError(f"{set_by[entry.target]} and {entry.name} set the same thing; give one of them")
        set_by[entry.target] = entry.name
        if sources is not None:
            sources[entry.target] = name
        changes.update(entry.setting_changes(entry.parse(value, entry.name)))
    return changes


def read_memory(text: str | None, flag: str) -> int | None:
    """vramctl's own memory sizes (`--gpu-memory`, `--free-memory`, `--host-memory`, `--device-memory`,
    `--min-free`): a bare number is GiB, a unit may be written (vramctl.core.engines.flags.parse_memory_size)."""
    return None if text is None else registry.parse_memory_size(text, flag)


def one_model(positional: str | None, option: str | None) -> str | None:
    """MODEL as the positional or `--model`: both accepted on every command that takes a model; two different
    models are bad input."""
    if positional is not None and option is not None and positional != option:
        raise BadInputError(f"MODEL {positional!r} and --model {option!r}: two models; give one of them")
    return positional if positional is not None else option


MEMORY_HELP = "a bare number is GiB"
"""Said in each memory size's help: vramctl's one rule for a size written without a unit."""
