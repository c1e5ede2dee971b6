"""A deployment spec (docs/check.md): its types and `parse_spec`, which turns YAML text into a DeploySpec.

The engine flags (a `flags:` mapping named as on the command line, or the whole `command:`) are read through the
one flag registry (vramctl.core.engines.flags); any problem raises BadInputError naming the file and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import yaml

from vramctl.core.engines import flags as registry
from vramctl.core.engines.flags import EngineName
from vramctl.core.engines.sglang import SglangOptions
from vramctl.core.errors import BadInputError
from vramctl.core.safe_yaml import YamlBudgetError, load_yaml
from vramctl.core.serve_command import parse_serve_command
from vramctl.core.settings import ServeSettings
from vramctl.core.units import as_float, parse_bytes, parse_number

TOP_LEVEL_KEYS = (
    "name",
    "description",
    "model",
    "gpu",
    "gpu_memory",
    "engine",
    "engine_version",
    "version",
    "flags",
    "command",
    "host_memory",
    "free_memory",
    "requirements",
)
REQUIREMENT_KEYS = (
    "must_fit",
    "min_concurrency",
    "min_kv_tokens",
    "min_headroom",
    "max_utilization",
    "max_weights_fraction",
    "max_host_memory_fraction",
    "allow_at_risk",
)
IGNORED_FLAGS = registry.NO_MEMORY_EFFECT
"""Flags that do not change the memory budget: accepted and listed in the notes."""


@dataclass(frozen=True)
class ConcurrencyRequirement:
    context: int
    value: float


@dataclass(frozen=True)
class Requirements:
    must_fit: bool | None = None
    min_concurrency: tuple[ConcurrencyRequirement, ...] = ()
    min_kv_tokens: int | None = None
    min_headroom_bytes: int | None = None
    max_utilization: float | None = None
    max_weights_fraction: float | None = None
    max_host_memory_fraction: float | None = None
    allow_at_risk: bool = False
    """Accept a plan that fits only if the estimates hold (`at_risk`); by default such a plan fails."""

    def is_empty(self) -> bool:
        return replace(self, allow_at_risk=False) == Requirements()


@dataclass(frozen=True)
class DeploySpec:
    name: str
    model: str
    gpu: str | None
    gpu_memory_bytes: int | None
    engine: Literal["vllm", "sglang", "both"]
    engine_version: str | None
    settings: ServeSettings
    sglang_options: SglangOptions
    requirements: Requirements
    source: str = "spec"
    flags: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


# --- parsing -------------------------------------------------------------------------------------------------
class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one silently: a spec
    with two `model:` lines would check a model its author did not mean)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: construct_mapping reports it
            break
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first given at line {first})", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _bad(source: str, where: str, problem: str) -> BadInputError:
    return BadInputError(f"{source}: {where}: {problem}")


_ABSURD_INT = 1 << 53
"""No count in a spec is larger (2**53, exact as a float): beyond it the arithmetic overflows, not the check."""


def _as_int(value: Any, where: str, source: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise _bad(source, where, f"{value!r} is not an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            parsed = parse_number(value, what=where)
        except BadInputError:
            raise _bad(source, where, f"{value!r} is not an integer") from None
        if not parsed.is_integer():
            raise _bad(source, where, f"{value!r} is not an integer")
        number = int(parsed)
    else:
        raise _bad(source, where, f"{value!r} is not an integer")
    if number < minimum:
        raise _bad(source, where, f"{number} must be ≥ {minimum}")
    if number > _ABSURD_INT:
        digits = str(number)
        shown = digits if len(digits) <= 24 else f"{digits[:8]}… ({len(digits)} digits)"
        raise _bad(source, where, f"{shown} is absurdly large (at most {_ABSURD_INT:,})")
    return number


def _as_float(value: Any, where: str, source: str) -> float:
    try:
        return as_float(value, what=where)
    except BadInputError as exc:
        raise BadInputError(f"{source}: {exc}") from None


def _as_fraction(value: Any, where: str, source: str) -> float:
    number = _as_float(value, where, source)
    if not 0 < number <= 1:
        raise _bad(source, where, f"{number} must be in (0, 1]")
    return number


def _as_bool(value: Any, where: str, source: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.lower() in ("true", "yes", "1")
    if value is None:
        return True  # `--enforce-eager` with no value
    raise _bad(source, where, f"{value!r} is not true or false")


def _as_size(value: Any, where: str, source: str, *, default_unit: str = "B") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _bad(source, where, f"{value!r} is not a size (e.g. 4GiB)")
    try:
        return parse_bytes(value, default_unit=default_unit, what=where)
    except BadInputError as exc:
        raise BadInputError(f"{source}: {exc}") from None


def _as_memory(value: Any, where: str, source: str) -> int:
    """vramctl's memory sizes (`gpu_memory`, `host_memory`, `free_memory`): a bare number is GiB, as everywhere."""
    try:
        return registry.parse_memory_size(value, where)
    except BadInputError as exc:
        raise BadInputError(f"{source}: {exc}") from None


def _convert(entry: registry.EngineFlag, value: Any, where: str, source: str) -> Any:
    """A flag's value, read by its registry entry; a count is ≥ -1 (`-1`: the engines' "unset")."""
    try:
        converted = entry.parse(value, where)
    except BadInputError as exc:
        raise BadInputError(f"{source}: {exc}") from None
    if entry.kind == "count":
        return _as_int(converted, where, source, minimum=-1)
    if entry.kind == "counts" and any(item < 1 for item in converted):
        raise _bad(source, where, f"{value!r}: every size must be ≥ 1")
    return converted


_FLAG_TAKES_VALUE: dict[str, bool] = registry.takes_value()
"""How `command:` splits the flags the registry knows, whichever engine's (the rest as serve_command guesses)."""


def split_serve_command(
    command: str, *, source: str = "spec"
) -> tuple[EngineName, str | None, dict[str, Any]]:
    """`vllm serve MODEL --flags` / `python -m sglang.launch_server --model-path MODEL --flags` → (engine, model,
    flags by name), split by vramctl.core.serve_command.parse_serve_command (the one serve-command parser) and
    held to this module's stricter rules: a stray word is an error, and `apply_flags` rejects unknown flags."""
    try:
        parsed = parse_serve_command(command, flag_takes_value=_FLAG_TAKES_VALUE)
    except BadInputError as exc:
        problem = str(exc).removeprefix("serve command: ")
        where = "command"
        if problem.startswith("-"):
            flag, _, problem = problem.partition(": ")
            where = f"command {flag}"
        raise _bad(source, where, problem) from None
    if parsed.stray:
        raise _bad(source, "command", f"unexpected argument {parsed.stray[0]!r}")
    engine: EngineName = "vllm" if parsed.engine == "vllm" else "sglang"
    flags: dict[str, Any] = {name: True if value is None else value for name, value in parsed.flags}
    return engine, parsed.model, flags


def apply_flags(
    engines: tuple[EngineName, ...],
    flags: Mapping[str, Any],
    settings: ServeSettings,
    options: SglangOptions,
    *,
    source: str = "spec",
) -> tuple[ServeSettings, SglangOptions, str | None, tuple[str, ...]]:
    """Fold engine flags (command-line names) into ServeSettings / SglangOptions; unknown flags are errors."""
    changes: dict[str, Any] = {}
    opt_changes: dict[str, Any] = {}
    model: str | None = None
    ignored: list[str] = []
    for raw_name, raw_value in flags.items():
        if not isinstance(raw_name, str):
            raise _bad(source, "flags", f"flag name {raw_name!r} is not a string")
        name = registry.bare(raw_name)
        where = f"flags.{raw_name}"
        if name in IGNORED_FLAGS:
            ignored.append(f"--{name}")
            continue
        match = registry.lookup(name, engines)
        if match is None:
            raise _bad(source, where, f"unknown flag --{name} for {'/'.join(engines)}")
        if not set(match.engines) & set(engines):
            raise _bad(source, where, f"--{name} is a {'/'.join(match.engines)} flag, not {'/'.join(engines)}")
        entry = match.entry
        if entry.target.startswith("load."):
            raise _bad(
                source,
                where,
                f"--{name} changes the model's config, which a spec does not read; point `model:` at a local "
                "config.json that holds the change",
            )
        converted = _convert(entry, raw_value, where, source)
        if match.negated:
            converted = not converted
        if entry.target == "model":
            model = str(converted)
        elif entry.target.startswith("options."):
            opt_changes[entry.target.removeprefix("options.")] = converted
        else:
            changes.update(entry.setting_changes(converted))
    try:
        new_settings = replace(settings, **changes)
        new_options = replace(options, **opt_changes)
    except TypeError as exc:  # pragma: no cover - the registry's targets are fields
        raise _bad(source, "flags", str(exc)) from None
    notes = (f"flags not modelled (no effect on GPU memory): {', '.join(ignored)}",) if ignored else ()
    return new_settings, new_options, model, notes


def _parse_requirements(raw: Any, source: str) -> Requirements:
    if raw is None:
        return Requirements()
    if not isinstance(raw, dict):
        raise _bad(source, "requirements", "must be a mapping (e.g. min_kv_tokens: 400000)")
    for key in raw:
        if key not in REQUIREMENT_KEYS:
            raise _bad(
                source, f"requirements.{key}", f"unknown requirement (known: {', '.join(REQUIREMENT_KEYS)})"
            )
    concurrency: list[ConcurrencyRequirement] = []
    seen: set[ConcurrencyRequirement] = set()
    if "min_concurrency" in raw:
        items = raw["min_concurrency"]
        items = items if isinstance(items, list) else [items]
        for n, item in enumerate(items):
            where = "requirements.min_concurrency" + (
                f"[{n}]" if isinstance(raw["min_concurrency"], list) else ""
            )
            if not isinstance(item, dict) or set(item) != {"context", "value"}:
                raise _bad(source, where, "must be a mapping {context: TOKENS, value: SEQUENCES}")
            value = _as_float(item["value"], f"{where}.value", source)
            if value <= 0:
                raise _bad(source, f"{where}.value", f"{value} must be > 0")
            requirement = ConcurrencyRequirement(_as_int(item["context"], f"{where}.context", source), value)
            if requirement not in seen:  # the same requirement twice (an alias repeated) is checked once
                seen.add(requirement)
                concurrency.append(requirement)
    return Requirements(
        must_fit=_as_bool(raw["must_fit"], "requirements.must_fit", source) if "must_fit" in raw else None,
        min_concurrency=tuple(concurrency),
        min_kv_tokens=_as_int(raw["min_kv_tokens"], "requirements.min_kv_tokens", source)
        if "min_kv_tokens" in raw
        else None,
        min_headroom_bytes=_as_size(
            raw["min_headroom"], "requirements.min_headroom", source, default_unit="GiB"
        )
        if "min_headroom" in raw
        else None,
        max_utilization=_as_fraction(raw["max_utilization"], "requirements.max_utilization", source)
        if "max_utilization" in raw
        else None,
        max_weights_fraction=_as_fraction(
            raw["max_weights_fraction"], "requirements.max_weights_fraction", source
        )
        if "max_weights_fraction" in raw
        else None,
        max_host_memory_fraction=_as_fraction(
            raw["max_host_memory_fraction"], "requirements.max_host_memory_fraction", source
        )
        if "max_host_memory_fraction" in raw
        else None,
        allow_at_risk=_as_bool(raw["allow_at_risk"], "requirements.allow_at_risk", source)
        if "allow_at_risk" in raw
        else False,
    )


def _load(text: str, source: str) -> dict[Any, Any]:
    """The spec's YAML as a mapping with only known top-level keys."""
    try:
        data = load_yaml(text, loader=_UniqueKeyLoader)  # a SafeLoader subclass: safe; aliases budgeted
    except YamlBudgetError as exc:
        raise BadInputError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        problem = getattr(exc, "problem", None) or "malformed"
        if isinstance(exc, yaml.reader.ReaderError):  # a control character (NUL, ...) in the text
            where, problem = "YAML", f"unacceptable character #x{exc.character:04x} at offset {exc.position}"
        raise _bad(source, where, f"malformed YAML ({problem})") from None
    except RecursionError:
        raise _bad(source, "YAML", "nested too deeply to be a deployment spec") from None
    except ValueError:  # PyYAML's int(): more than Python's 4,300-digit limit for reading an integer
        raise _bad(source, "YAML", "a number too long to read (over 4,300 digits)") from None
    if not isinstance(data, dict):
        raise _bad(source, "top level", "must be a mapping with at least `model` and `gpu`")
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise _bad(source, str(key), f"unknown key (known: {', '.join(TOP_LEVEL_KEYS)})")
    if "flags" in data and "command" in data:
        raise _bad(source, "command", "give either `flags` or `command`, not both")
    return data


def _flags_and_engine(
    data: dict[Any, Any], source: str
) -> tuple[Literal["vllm", "sglang", "both"], str | None, dict[str, Any]]:
    """(engine, the command's model, the engine flags by name) from `engine` and `flags:` / `command:`."""
    engine_raw = data.get("engine")
    model: str | None = None
    flags: dict[str, Any] = {}
    if "command" in data:
        if not isinstance(data["command"], str):
            raise _bad(source, "command", "must be a string (`vllm serve MODEL --flags`)")
        cmd_engine, model, flags = split_serve_command(data["command"], source=source)
        if engine_raw is None:
            engine_raw = cmd_engine
        elif engine_raw != cmd_engine and engine_raw != "both":
            raise _bad(source, "engine", f"{engine_raw!r} but the command runs {cmd_engine}")
    elif data.get("flags") is not None:
        if not isinstance(data["flags"], dict):
            raise _bad(
                source, "flags", "must be a mapping of engine flags (e.g. gpu-memory-utilization: 0.9)"
            )
        flags = dict(data["flags"])
    if engine_raw is None:
        return "vllm", model, flags
    if engine_raw in ("vllm", "sglang", "both"):
        return engine_raw, model, flags  # type: ignore[return-value]
    raise _bad(source, "engine", f"{engine_raw!r} is not one of vllm, sglang, both")


def _version(data: dict[Any, Any], source: str) -> str | None:
    version_raw = data.get("engine_version", data.get("version"))
    if isinstance(version_raw, (int, float)) and not isinstance(version_raw, bool):
        key = "engine_version" if "engine_version" in data else "version"
        raise _bad(
            source,
            key,
            f'write the version as a string ("{version_raw}" may not be what you meant: YAML reads '
            "0.20 as the number 0.2)",
        )
    if version_raw is not None and not isinstance(version_raw, str):
        raise _bad(source, "engine_version", f"{version_raw!r} is not a version string")
    return version_raw


def _memory(data: dict[Any, Any], source: str) -> tuple[str | None, int | None, int | None, int | None]:
    """(gpu, gpu_memory, host_memory, free_memory): a bare number is GiB (vramctl.core.engines.flags)."""
    gpu = data.get("gpu")
    if gpu is not None and not isinstance(gpu, str):
        raise _bad(source, "gpu", "must be a GPU name (e.g. h100-sxm)")
    gpu_memory = _as_memory(data["gpu_memory"], "gpu_memory", source) if "gpu_memory" in data else None
    if gpu is None and gpu_memory is None:
        raise _bad(source, "gpu", "missing: give `gpu: h100-sxm` or `gpu_memory: 79.18GiB`")
    if gpu_memory is not None and gpu_memory <= 0:
        raise _bad(source, "gpu_memory", f"{data['gpu_memory']!r} must be more than 0 (e.g. 79.18GiB)")
    host = _as_memory(data["host_memory"], "host_memory", source) if "host_memory" in data else None
    if host is not None and host <= 0:
        raise _bad(source, "host_memory", f"{data['host_memory']!r} must be more than 0 (e.g. 512GiB)")
    free = _as_memory(data["free_memory"], "free_memory", source) if "free_memory" in data else None
    return gpu, gpu_memory, host, free


def _with_env(command: str, settings: ServeSettings, options: SglangOptions) -> tuple[ServeSettings, SglangOptions]:
    """`VAR=value` prefixes the engines read at start-up (as `vramctl plan -- …` honours them)."""
    env = dict(parse_serve_command(command, flag_takes_value=_FLAG_TAKES_VALUE).env)
    on = ("1", "true", "yes", "on")
    if "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in env:
        value = env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"].strip().lower() in on
        settings = replace(settings, estimate_cudagraphs=value)
    if "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING" in env:
        value = env["SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"].strip().lower() in on
        options = replace(options, post_capture_kv_sizing=value)
    return settings, options


def parse_spec(text: str, *, source: str = "spec") -> DeploySpec:
    """YAML text → DeploySpec. Any problem raises BadInputError naming the file and the field."""
    data = _load(text, source)
    notes: list[str] = []
    engine, model, flags = _flags_and_engine(data, source)
    version = _version(data, source)
    if "model" in data:
        if not isinstance(data["model"], str) or not data["model"].strip():
            raise _bad(source, "model", "must be a model name or path (e.g. llama-3-8b)")
        if model is not None and model != data["model"]:
            notes.append(f"model {data['model']!r} from the spec overrides {model!r} from the command")
        model = data["model"].strip()
    gpu, gpu_memory, host, free = _memory(data, source)
    engines: tuple[EngineName, ...] = ("vllm", "sglang") if engine == "both" else (engine,)
    base = ServeSettings(
        engine=engine,
        engine_version=version,
        gpu_memory_bytes=gpu_memory,
        host_memory_bytes=host,
        free_memory_bytes=free,
    )
    settings, options, flag_model, flag_notes = apply_flags(
        engines, flags, base, SglangOptions(), source=source
    )
    notes.extend(flag_notes)
    if "command" in data:
        settings, options = _with_env(data["command"], settings, options)
    model = model if model is not None else flag_model
    if model is None:
        raise _bad(source, "model", "missing: give `model: llama-3-8b` (or a model in `command`)")
    if engine == "both" and version is not None:
        notes.append(f"engine_version {version} applies to vLLM; SGLang uses its latest rules")
    requirements = _parse_requirements(data.get("requirements"), source)
    if requirements.max_host_memory_fraction is not None and host is None:
        raise _bad(
            source, "host_memory", "missing: requirements.max_host_memory_fraction needs the host's RAM"
        )
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise _bad(source, "name", "must be a string")
    return DeploySpec(
        name=name or model,
        model=model,
        gpu=gpu,
        gpu_memory_bytes=gpu_memory,
        engine=engine,
        engine_version=version,
        settings=settings,
        sglang_options=options if engine == "sglang" else replace(options, version=None),
        requirements=requirements,
        source=source,
        flags=flags,
        notes=tuple(notes),
    )
