"""Read a whole serve command into ServeSettings: `vllm serve MODEL --flags…`,
`python -m vllm.entrypoints.openai.api_server --model MODEL …`, `python -m sglang.launch_server --model-path MODEL …`,
`sglang serve --model-path MODEL …`, with `VAR=value` environment prefixes.

Flags are read as the engines name them (`--flag value` and `--flag=value`), through the one flag registry
(vramctl.core.engines.flags: which flags each engine has, their aliases and how each value is read, e.g. vLLM's
human-readable integers `32k` = 32,000, `32K` = 32,768; `vllm/utils/argparse_utils.py:30-70`); flags that do not
change the memory plan are ignored with a note, never an error. Every flag is also kept as written
(`ServeCommand.flags`, in order) so that a stricter reader (`vramctl check`'s `command:`,
`vramctl.core.check.apply_flags`) can apply its own rules to the same split: this is the one place a serve command
line is split into its launcher, model and flags.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vramctl.core.engines import flags
from vramctl.core.errors import BadInputError
from vramctl.core.settings import ServeSettings


@dataclass(frozen=True)
class ServeCommand:
    engine: str
    """`vllm` or `sglang`."""
    model: str | None
    changes: tuple[tuple[str, Any], ...]
    """ServeSettings field → value, in the order given."""
    notes: tuple[str, ...]
    flags: tuple[tuple[str, str | None], ...] = ()
    """Every flag as written, in order: (name without the leading dashes, `_` as `-`; its value, None when
    bare). The model flag (`--model`, `--model-path`) is not repeated here."""
    stray: tuple[str, ...] = ()
    """Words that are neither a flag nor a flag's value (after the model)."""
    env: tuple[tuple[str, str], ...] = ()
    """`VAR=value` prefixes, in order."""

    def apply(self, settings: ServeSettings) -> ServeSettings:
        values = dict(self.changes)
        values.setdefault("engine", self.engine)
        return settings.with_changes(**values)


def parse_human_int(text: str, flag: str) -> int:
    """vLLM's human-readable int: `8192`, `32k` (10^3), `32K` (2^10), `1_000` (the registry's `count`)."""
    return flags.parse_count(text, flag)


def parse_max_model_len(text: str, flag: str = "--max-model-len") -> int:
    """`auto` / `-1` = vLLM's auto-fit (kept as -1, vLLM's own value; vramctl.core.plan.AUTO_MAX_MODEL_LEN)."""
    return flags.parse_max_model_len(text, flag)


_IGNORED_WITH_REASON = {
    "-O": "optimization level: from vLLM 0.12 it sets the CUDA-graph mode (-O0 none, -O1 piecewise); before, "
    "the compilation level, which does not change the memory plan",
    "--compilation-config": "compilation config: only its graph capture sizes and mode change the memory plan",
    "-cc": "compilation config: only its graph capture sizes and mode change the memory plan",
}

_VLLM_ENTRY = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_SGLANG_ENTRY = ("sglang.launch_server",)


def split_words(command: str | Sequence[str]) -> list[str]:
    """A serve command's words: shell rules (quotes, `#` comments), line continuations (`\\` + newline) dropped."""
    if isinstance(command, str):
        try:
            words = shlex.split(command, comments=True)
        except ValueError as exc:
            raise BadInputError(f"serve command: cannot split it ({exc})") from None
    else:
        words = [str(w) for w in command]
    return [w for w in words if w != "\\" and w.strip()]


def parse_serve_command(
    command: str | Sequence[str], *, flag_takes_value: Mapping[str, bool] | None = None
) -> ServeCommand:
    """Parse a vLLM or SGLang serve command (a string or its words).

    The flags it reads are vramctl.core.engines.flags' entries for the command's engine. `flag_takes_value` (flag
    name without dashes → whether it takes a value) tells how to split other flags (e.g. another engine's, for
    `vramctl check`); other unknown flags take the next word as their value unless it is itself a flag."""
    words = split_words(command)
    env = _pop_env(words)
    if not words:
        raise BadInputError("serve command: empty (expected e.g. `vllm serve MODEL --flags` after `--`)")
    engine, rest = _engine_and_args(words)
    reading = _Reading(engine, flag_takes_value or {})
    if engine == "vllm" and rest and not rest[0].startswith("-"):
        reading.model = rest.pop(0)
    if engine == "vllm":
        rest = _expand_vllm_config_file(rest, model_in_cli=reading.model is not None, notes=reading.notes)
    reading.read(rest)
    if env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS") is not None and engine == "vllm":
        reading.changes.append(
            ("estimate_cudagraphs", env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"].strip() == "1")
        )
    if env.get("VLLM_USE_FLASHINFER_SAMPLER") is not None and engine == "vllm":
        # vllm/envs.py: bool(int(value)); the profile run's sampler (vramctl.core.engines.vllm_runtime)
        reading.changes.append(
            ("flashinfer_sampler", env["VLLM_USE_FLASHINFER_SAMPLER"].strip() not in ("0", ""))
        )
    if env.get("VLLM_USE_V1") is not None and engine == "vllm":
        reading.changes.append(("use_v1_env", env["VLLM_USE_V1"].strip() == "1"))
    honoured = {
        "vllm": ("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "VLLM_USE_FLASHINFER_SAMPLER", "VLLM_USE_V1"),
        "sglang": ("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING",),
    }
    for key in env:
        if key not in honoured.get(engine, ()):
            reading.notes.append(f"ignored the environment variable {key}")
    return ServeCommand(
        engine=engine,
        model=reading.model,
        changes=tuple(reading.changes),
        notes=tuple(reading.notes),
        flags=tuple(reading.raw_flags),
        stray=tuple(reading.stray),
        env=tuple(env.items()),
    )


def _pop_env(words: list[str]) -> dict[str, str]:
    """`VAR=value` prefixes (and `env VAR=value`), taken off the front of `words`."""
    env: dict[str, str] = {}
    while (
        words
        and "=" in words[0]
        and not words[0].startswith("-")
        and words[0].split("=", 1)[0].isidentifier()
    ):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if words and words[0] == "env":
        words.pop(0)
        while words and "=" in words[0] and not words[0].startswith("-"):
            key, value = words.pop(0).split("=", 1)
            env[key] = value
    return env


class _Reading:
    """One pass over a serve command's flags: the registry's entries for the engine set fields, the rest are
    kept as written (and noted)."""

    def __init__(self, engine: str, extra: Mapping[str, bool]) -> None:
        self.engine = engine
        self.extra = extra
        self.table = flags.serve_table("vllm" if engine == "vllm" else "sglang")
        self.model: str | None = None
        self.changes: list[tuple[str, Any]] = []
        self.raw_flags: list[tuple[str, str | None]] = []
        self.stray: list[str] = []
        self.notes: list[str] = []
        self.rest: list[str] = []
        self.spec_dotted: dict[str, Any] = {}
        self.i = 0

    def _value(self, flag: str, eq: str, inline: str) -> str:
        if eq:
            return inline
        if self.i < len(self.rest):
            self.i += 1
            return self.rest[self.i - 1]
        raise BadInputError(f"{flag}: needs a value in the serve command")

    def read(self, rest: list[str]) -> None:
        self.rest, self.i = rest, 0
        while self.i < len(rest):
            word = rest[self.i]
            self.i += 1
            if not word.startswith("-"):
                self.notes.append(f"ignored the stray argument {word!r}")
                self.stray.append(word)
                continue
            flag, eq, inline = word.partition("=")
            if self.engine == "vllm":
                flag = _vllm_flag_spelling(flag)
            name = flag.lstrip("-").replace("_", "-")
            if self.engine == "vllm" and flag.startswith("-O") and flag[2:].isdigit() and not eq:
                # `-O3`: vLLM's FlexibleArgumentParser reads it as `-O 3` (vllm/utils/argparse_utils.py, v0.32.0)
                flag, eq, inline = "-O", "=", flag[2:]
                name = "O"
            if self.engine == "vllm" and flag == "-O":
                self._optimization(word, flag, eq, inline)
            elif self.engine == "vllm" and flag.partition(".")[0] in ("--speculative-config", "-sc") and "." in flag:
                # `--speculative-config.num_speculative_tokens 3`: vLLM's FlexibleArgumentParser gathers the dotted
                # keys of one flag into one JSON dict (vllm/utils/argparse_utils.py, v0.32.0); read once at the end
                key = flag.partition(".")[2].replace("-", "_")
                text = self._value(flag, eq, inline)
                self.raw_flags.append((name, text))
                try:
                    self.spec_dotted[key] = json.loads(text)
                except json.JSONDecodeError:
                    self.spec_dotted[key] = text
            elif self.engine == "vllm" and _is_compilation_config(flag):
                cc_value = self._value(flag, eq, inline)
                self.raw_flags.append((name, cc_value))
                self.changes.extend(_compilation_config_changes(flag, cc_value, self.notes))
            elif flag in self.table:
                self._known(flag, name, eq, inline)
            else:
                self._unknown(flag, name, eq, inline)
        if self.spec_dotted:
            parsed = flags.by_name("--speculative-config").parse(dict(self.spec_dotted), "--speculative-config")
            self.changes.extend(parsed.changes())

    def _optimization(self, word: str, flag: str, eq: str, inline: str) -> None:
        """`-O N` / `-ON` / `-O=N`: the optimization level (0.12 →; before, the compilation level, resolved by the
        plan's version); `-O '{…}'`: the compilation config (its alias before 0.12)."""
        value = self._value(flag, eq, inline)
        self.raw_flags.append(("O", value))
        if value.strip().startswith("{"):
            self.changes.extend(_compilation_config_changes(flag, value, self.notes))
            return
        level = flags.by_name("--optimization-level").parse(value, flag)
        self.changes.append(("optimization_level", level))
        self.notes.append(f"read {word if word != flag else f'{flag} {value}'}: {_IGNORED_WITH_REASON['-O']}")

    def _known(self, flag: str, name: str, eq: str, inline: str) -> None:
        entry, bare_value = self.table[flag]
        if bare_value is not None:  # a bool: `--enforce-eager`, `--no-enforce-eager`, `--enforce-eager=false`
            value = flags.parse_bool(inline, flag) if eq else True
            self.raw_flags.append((name, inline if eq else None))
            if entry.is_setting:
                self.changes.append((entry.target, value if bare_value else not value))
            return
        text = self._value(flag, eq, inline)
        if entry.kind == "counts" and not eq:
            # vLLM declares the sizes `nargs="+"`: `--cudagraph-capture-sizes 1 2 4 8` takes every number
            while self.i < len(self.rest) and _looks_numeric(self.rest[self.i]):
                text += " " + self.rest[self.i]
                self.i += 1
        parsed = entry.parse(text, flag)
        if entry.target == "model":
            self.model = str(parsed)
            return
        self.raw_flags.append((name, text))
        if entry.is_setting:  # SglangOptions (vramctl.core.check.apply_flags) and loader inputs are read from flags
            self.changes.extend(entry.setting_changes(parsed))

    def _unknown(self, flag: str, name: str, eq: str, inline: str) -> None:
        """An unknown or irrelevant flag: skip its value if it has one."""
        known_arity = self.extra.get(name)
        flag_value: str | None
        if eq:
            flag_value = inline
        elif known_arity is True:
            flag_value = self._value(flag, eq, inline)
        elif known_arity is None and self.i < len(self.rest) and not _is_flag(self.rest[self.i]):
            flag_value = self.rest[self.i]
            self.i += 1
        else:
            flag_value = None
        self.raw_flags.append((name, flag_value))
        reason = _IGNORED_WITH_REASON.get(flag, "does not change the memory plan (or is not modelled)")
        self.notes.append(f"ignored {flag}: {reason}")


def _vllm_flag_spelling(flag: str) -> str:
    """vLLM's FlexibleArgumentParser reads `--max_model_len` as `--max-model-len`: underscores become dashes between
    `--` and the first `.` (`vllm/utils/argparse_utils.py`, `parse_args`, v0.32.0)."""
    if not flag.startswith("--"):
        return flag
    head, dot, tail = flag[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail


def _is_compilation_config(flag: str) -> bool:
    base = flag.partition(".")[0]
    return base in ("--compilation-config", "-cc")


def _compilation_config_changes(flag: str, value: str, notes: list[str]) -> list[tuple[str, Any]]:
    """vLLM's `--compilation-config` / `-cc` (and `-O` before 0.12): a JSON object (`-cc '{"cudagraph_mode":
    "PIECEWISE"}'`) or one dotted key (`-cc.max_cudagraph_capture_size=128`, `-cc.cudagraph_capture_sizes+=1,2,4`
    for a comma list), as vLLM's FlexibleArgumentParser turns both into one JSON dict (v0.32.0), read by the
    registry's entry (`flags.parse_compilation_config`). Keys that do not change the memory plan are noted."""
    base, _, dotted = flag.partition(".")
    config: Any = value
    if dotted:
        key = dotted.rstrip("+").replace("-", "_")
        if dotted.endswith("+"):
            item: Any = [part for part in value.split(",") if part]
        else:
            try:
                item = json.loads(value)
            except json.JSONDecodeError:
                item = value
        config = {key: item}
    parsed = flags.by_name("--compilation-config").parse(config, base)
    if parsed.level is not None:  # `-cc 3`: the compilation level
        notes.append(f"ignored {base} {value}: {_IGNORED_WITH_REASON.get(base, 'not read')}")
    for key in parsed.ignored:
        notes.append(f"ignored {base} {key}: does not change the memory plan")
    changes: list[tuple[str, Any]] = parsed.changes()
    return changes


_MAX_CONFIG_FILE_BYTES = 1 << 20


def _expand_vllm_config_file(rest: list[str], *, model_in_cli: bool, notes: list[str]) -> list[str]:
    """`--config FILE.yaml`: vLLM puts the file's keys before the command line's other flags, so the command line
    wins (`FlexibleArgumentParser._pull_args_from_config` / `load_config_file`, v0.32.0): `key: value` becomes
    `--key value`, `true` a bare `--key`, `false` `--no-key`, a list `--key a b`, a mapping its JSON."""
    positions = [n for n, word in enumerate(rest) if word == "--config" or word.startswith("--config=")]
    if not positions:
        return rest
    if len(positions) > 1:
        raise BadInputError("--config: given more than once (vLLM refuses that too)")
    at = positions[0]
    word = rest[at]
    if word.startswith("--config="):
        path_text, end = word.split("=", 1)[1], at + 1
    elif at + 1 < len(rest):
        path_text, end = rest[at + 1], at + 2
    else:
        raise BadInputError("--config: needs a YAML file")
    path = Path(path_text)
    if path.suffix not in (".yaml", ".yml"):
        raise BadInputError(f"--config {path_text}: vLLM reads only a .yaml / .yml file")
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MAX_CONFIG_FILE_BYTES + 1)
    except OSError as exc:
        raise BadInputError(f"--config {path_text}: cannot read it ({exc.strerror or exc})") from None
    if len(raw) > _MAX_CONFIG_FILE_BYTES:
        raise BadInputError(f"--config {path_text}: larger than 1 MiB; not a vLLM config file")
    try:
        loaded = yaml.safe_load(raw.decode("utf-8", "replace"))
    except yaml.YAMLError as exc:
        raise BadInputError(f"--config {path_text}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise BadInputError(f"--config {path_text}: expected a mapping of flag: value")
    expanded: list[str] = []
    for key, value in loaded.items():
        if key == "model" and model_in_cli:
            continue  # the positional model wins over the file's
        if isinstance(value, bool):
            if value:
                expanded.append(f"--{key}")
            else:
                expanded.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                expanded.append(f"--{key}")
                expanded.extend(str(v) for v in value)
        elif isinstance(value, dict):
            expanded.extend([f"--{key}", json.dumps(value)])
        else:
            expanded.extend([f"--{key}", str(value)])
    notes.append(f"read --config {path_text}: {len(loaded)} setting(s), the command line's flags win")
    return expanded + rest[:at] + rest[end:]


def _is_flag(word: str) -> bool:
    return word.startswith("-") and not _looks_numeric(word)


def _looks_numeric(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _engine_and_args(words: list[str]) -> tuple[str, list[str]]:
    head = words[0].rsplit("/", 1)[-1]
    if head == "vllm":
        if len(words) > 1 and words[1] == "serve":
            return "vllm", words[2:]
        raise BadInputError(f"serve command: `vllm {' '.join(words[1:2])}` is not `vllm serve`")
    if head == "sglang":
        if len(words) > 1 and words[1] in ("serve", "launch_server"):
            return "sglang", words[2:]
        return "sglang", words[1:]
    if head.startswith("python"):
        if len(words) > 2 and words[1] == "-m":
            module = words[2]
            if module in _VLLM_ENTRY or module.startswith("vllm."):
                return "vllm", words[3:]
            if module in _SGLANG_ENTRY or module.startswith("sglang."):
                return "sglang", words[3:]
            raise BadInputError(f"serve command: python -m {module} is neither vLLM nor SGLang")
        raise BadInputError(
            "serve command: expected `python -m vllm.entrypoints.openai.api_server …` or "
            "`python -m sglang.launch_server …`"
        )
    raise BadInputError(
        "serve command: expected `vllm serve MODEL …`, `python -m sglang.launch_server --model-path MODEL …` or "
        f"`sglang serve …`; {words[0]!r} is not a vLLM or SGLang launcher"
    )
