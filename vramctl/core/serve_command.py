"""Read a whole serve command into ServeSettings: `vllm serve MODEL --flags…`,
`python -m vllm.entrypoints.openai.api_server --model MODEL …`, `python -m sglang.launch_server --model-path MODEL …`,
`sglang serve --model-path MODEL …`, with `VAR=value` environment prefixes.

Flags are read as the engines name them (`--flag value` and `--flag=value`); flags that do not change the memory
plan are ignored with a note, never an error. Every flag is also kept as written (`ServeCommand.flags`, in order) so
that a stricter reader (`vramctl check`'s `command:`, `vramctl.core.check.apply_flags`) can apply its own rules to
the same split: this is the one place a serve command line is split into its launcher, model and flags. Values use the engines' own parsers' rules: vLLM's human-readable
integers (`32k` = 32,000, `32K` = 32,768; `vllm/utils/argparse_utils.py:30-70`), SGLang's plain numbers.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vramctl.core.errors import BadInputError
from vramctl.core.settings import ServeSettings
from vramctl.core.units import parse_bytes, parse_number


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


def _int(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        return parse_human_int(text, flag)

    return parse


def parse_human_int(text: str, flag: str) -> int:
    """vLLM's human-readable int: `8192`, `32k` (10^3), `32K` (2^10), `1_000`."""
    raw = text.strip()
    if raw and raw[-1] in "kKmMgGtT" and raw[:-1].replace("_", "").replace(".", "", 1).isdigit():
        return parse_bytes(raw, what=flag)
    value = parse_number(raw, what=flag)
    if value != int(value):
        raise BadInputError(f"{flag} {text!r}: not an integer")
    return int(value)


def _float(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        return parse_number(text, what=flag)

    return parse


def _str(_flag: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        return text

    return parse


def _bytes(flag: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        return parse_bytes(text, what=flag)

    return parse


def _sizes(flag: str) -> Callable[[str], tuple[int, ...]]:
    def parse(text: str) -> tuple[int, ...]:
        cleaned = text.strip().strip("[]")
        parts = [p for p in cleaned.replace(",", " ").split() if p]
        if not parts:
            raise BadInputError(f"{flag} {text!r}: expected a list of batch sizes")
        return tuple(parse_human_int(p, flag) for p in parts)

    return parse


def parse_loader_mode(value: Any, flag: str = "--model-loader-extra-config") -> str | None:
    """`--model-loader-extra-config JSON` (or a mapping): its `mode` (the ipc_cache loader's zero_copy / copy),
    None without one."""
    data = value
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except ValueError:
            raise BadInputError(f"{flag} {value!r}: not a JSON object") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{flag} {value!r}: not a JSON object")
    mode = data.get("mode")
    return None if mode is None else str(mode)


def _loader_mode(flag: str) -> Callable[[str], str | None]:
    def parse(text: str) -> str | None:
        return parse_loader_mode(text, flag)

    return parse


def parse_max_model_len(text: str, flag: str = "--max-model-len") -> int:
    """`auto` / `-1` = vLLM's auto-fit (kept as -1, vLLM's own value; vramctl.core.plan.AUTO_MAX_MODEL_LEN)."""
    if text.strip().lower() in ("auto", "-1"):
        return -1
    return parse_human_int(text, flag)


def _max_model_len(flag: str) -> Callable[[str], int | None]:
    def parse(text: str) -> int | None:
        return parse_max_model_len(text, flag)

    return parse


# flag → (ServeSettings field, parser)
_VLLM_VALUE_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--model": ("model", _str("--model")),
    "--gpu-memory-utilization": ("gpu_memory_utilization", _float("--gpu-memory-utilization")),
    "--device-memory-utilization": ("gpu_memory_utilization", _float("--device-memory-utilization")),
    "--max-model-len": ("max_model_len", _max_model_len("--max-model-len")),
    "--max-num-batched-tokens": ("max_num_batched_tokens", _int("--max-num-batched-tokens")),
    "--max-num-seqs": ("max_num_seqs", _int("--max-num-seqs")),
    "--max-num-active-seqs": ("max_num_active_seqs", _int("--max-num-active-seqs")),
    "--kv-cache-dtype": ("kv_cache_dtype", _str("--kv-cache-dtype")),
    "--quantization": ("quantization", _str("--quantization")),
    "-q": ("quantization", _str("-q")),
    "--block-size": ("block_size", _int("--block-size")),
    "--tensor-parallel-size": ("tensor_parallel_size", _int("--tensor-parallel-size")),
    "-tp": ("tensor_parallel_size", _int("-tp")),
    "--pipeline-parallel-size": ("pipeline_parallel_size", _int("--pipeline-parallel-size")),
    "-pp": ("pipeline_parallel_size", _int("-pp")),
    "--data-parallel-size": ("data_parallel_size", _int("--data-parallel-size")),
    "--max-loras": ("max_loras", _int("--max-loras")),
    "--mamba-cache-dtype": ("mamba_cache_dtype", _str("--mamba-cache-dtype")),
    "--mamba-ssm-cache-dtype": ("mamba_ssm_cache_dtype", _str("--mamba-ssm-cache-dtype")),
    "--max-lora-rank": ("max_lora_rank", _int("--max-lora-rank")),
    "-dp": ("data_parallel_size", _int("-dp")),
    "--kv-cache-memory-bytes": ("kv_cache_memory_bytes", _bytes("--kv-cache-memory-bytes")),
    "--kv-cache-memory": ("kv_cache_memory_bytes", _bytes("--kv-cache-memory")),
    "--dtype": ("dtype", _str("--dtype")),
    "--kv-offloading-size": ("kv_offloading_size_gib", _float("--kv-offloading-size")),
    "--max-cudagraph-capture-size": ("max_cudagraph_capture_size", _int("--max-cudagraph-capture-size")),
    "--cuda-graph-sizes": ("cudagraph_capture_sizes", _sizes("--cuda-graph-sizes")),
    "--cudagraph-capture-sizes": ("cudagraph_capture_sizes", _sizes("--cudagraph-capture-sizes")),
    # vLLM 0.30 → 0.33 features (vramctl.core.engines.vllm_features)
    "--load-format": ("load_format", _str("--load-format")),
    "--model-loader-extra-config": ("weight_cache_mode", _loader_mode("--model-loader-extra-config")),
    "--kv-offloading-backend": ("kv_offloading_backend", _str("--kv-offloading-backend")),
}
_VLLM_BOOL_FLAGS: dict[str, tuple[str, bool]] = {
    "--enforce-eager": ("enforce_eager", True),
    "--no-enforce-eager": ("enforce_eager", False),
    "--enable-chunked-prefill": ("enable_chunked_prefill", True),
    "--no-enable-chunked-prefill": ("enable_chunked_prefill", False),
    "--async-scheduling": ("async_scheduling", True),
    "--no-async-scheduling": ("async_scheduling", False),
    "--enable-expert-parallel": ("enable_expert_parallel", True),
    "--enable-lora": ("enable_lora", True),
    "--no-enable-lora": ("enable_lora", False),
    "--fully-sharded-loras": ("fully_sharded_loras", True),
    "-ep": ("enable_expert_parallel", True),
    "--no-enable-expert-parallel": ("enable_expert_parallel", False),
    # vLLM 0.30 → 0.33 features (vramctl.core.engines.vllm_features)
    "--enable-sleep-mode": ("enable_sleep_mode", True),
    "--no-enable-sleep-mode": ("enable_sleep_mode", False),
    "--enable-nccl-comm-suspend": ("enable_nccl_comm_suspend", True),
    "--no-enable-nccl-comm-suspend": ("enable_nccl_comm_suspend", False),
    "--sleep-mode-offload-cudagraph": ("sleep_mode_offload_cudagraph", True),
    "--no-sleep-mode-offload-cudagraph": ("sleep_mode_offload_cudagraph", False),
}

_SGLANG_VALUE_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--model-path": ("model", _str("--model-path")),
    "--model": ("model", _str("--model")),
    "--tp-size": ("tensor_parallel_size", _int("--tp-size")),
    "--tp": ("tensor_parallel_size", _int("--tp")),
    "--tensor-parallel-size": ("tensor_parallel_size", _int("--tensor-parallel-size")),
    "--pp-size": ("pipeline_parallel_size", _int("--pp-size")),
    "--pipeline-parallel-size": ("pipeline_parallel_size", _int("--pipeline-parallel-size")),
    "--mem-fraction-static": ("mem_fraction_static", _float("--mem-fraction-static")),
    "--chunked-prefill-size": ("chunked_prefill_size", _int("--chunked-prefill-size")),
    "--max-running-requests": ("max_running_requests", _int("--max-running-requests")),
    "--max-total-tokens": ("max_total_tokens", _int("--max-total-tokens")),
    "--max-prefill-tokens": ("max_prefill_tokens", _int("--max-prefill-tokens")),
    "--page-size": ("page_size", _int("--page-size")),
    "--cuda-graph-max-bs": ("cuda_graph_max_bs", _int("--cuda-graph-max-bs")),
    "--context-length": ("max_model_len", _int("--context-length")),
    "--kv-cache-dtype": ("kv_cache_dtype", _str("--kv-cache-dtype")),
    "--quantization": ("quantization", _str("--quantization")),
    "--dtype": ("dtype", _str("--dtype")),
    "--hicache-ratio": ("hicache_ratio", _float("--hicache-ratio")),
    "--hicache-size": ("hicache_size_gb", _float("--hicache-size")),
}
_SGLANG_BOOL_FLAGS: dict[str, tuple[str, bool]] = {
    "--disable-cuda-graph": ("disable_cuda_graph", True),
    "--enable-hierarchical-cache": ("enable_hierarchical_cache", True),
    "--enable-hicache": ("enable_hierarchical_cache", True),  # 0.5.23's alias (`python/sglang/srt/mem_cache/memory_pool_host.py` (SGLang v0.5.23) table)
}

_IGNORED_WITH_REASON = {
    "-O": "compilation level: does not change the memory plan",
    "--compilation-config": "compilation config: only its graph capture sizes change the memory plan",
    "-cc": "compilation config: only its graph capture sizes change the memory plan",
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

    `flag_takes_value` (flag name without dashes → whether it takes a value) tells how to split flags this module
    does not model (e.g. `vramctl check`'s SGLang options); other unknown flags take the next word as their value
    unless it is itself a flag."""
    words = split_words(command)
    extra = flag_takes_value or {}
    notes: list[str] = []
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
    if not words:
        raise BadInputError("serve command: empty (expected e.g. `vllm serve MODEL --flags` after `--`)")
    engine, rest = _engine_and_args(words)
    changes: list[tuple[str, Any]] = []
    raw_flags: list[tuple[str, str | None]] = []
    stray: list[str] = []
    model: str | None = None
    if engine == "vllm" and rest and not rest[0].startswith("-"):
        model = rest.pop(0)
    if engine == "vllm":
        rest = _expand_vllm_config_file(rest, model_in_cli=model is not None, notes=notes)
    value_flags = _VLLM_VALUE_FLAGS if engine == "vllm" else _SGLANG_VALUE_FLAGS
    bool_flags = _VLLM_BOOL_FLAGS if engine == "vllm" else _SGLANG_BOOL_FLAGS
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if not word.startswith("-"):
            notes.append(f"ignored the stray argument {word!r}")
            stray.append(word)
            continue
        flag, eq, inline = word.partition("=")
        if engine == "vllm":
            flag = _vllm_flag_spelling(flag)
        name = flag.lstrip("-").replace("_", "-")
        if engine == "vllm" and _is_compilation_config(flag):
            if eq:
                cc_value = inline
            elif i < len(rest):
                cc_value = rest[i]
                i += 1
            else:
                raise BadInputError(f"{flag}: needs a value in the serve command")
            raw_flags.append((name, cc_value))
            changes.extend(_compilation_config_changes(flag, cc_value, notes))
            continue
        if flag.startswith("-O") and flag != "-O" and len(flag) > 2:
            notes.append(f"ignored {word}: {_IGNORED_WITH_REASON['-O']}")
            raw_flags.append((name, None))
            continue
        if flag in bool_flags:
            bool_field, bool_value = bool_flags[flag]
            if eq:
                bool_value = inline.strip().lower() in ("1", "true", "yes", "on")
            changes.append((bool_field, bool_value))
            raw_flags.append((name, inline if eq else None))
            continue
        if flag in value_flags:
            field, parser = value_flags[flag]
            if eq:
                text = inline
            elif i < len(rest):
                text = rest[i]
                i += 1
            else:
                raise BadInputError(f"{flag}: needs a value in the serve command")
            if field == "cudagraph_capture_sizes" and not eq:
                # vLLM declares the sizes `nargs="+"`: `--cudagraph-capture-sizes 1 2 4 8` takes every number
                while i < len(rest) and _looks_numeric(rest[i]):
                    text += " " + rest[i]
                    i += 1
            parsed = parser(text)
            if field == "model":
                model = str(parsed)
            else:
                changes.append((field, parsed))
                raw_flags.append((name, text))
            continue
        # Unknown or irrelevant flag: skip its value if it has one.
        known_arity = extra.get(name)
        if eq:
            flag_value: str | None = inline
        elif known_arity is True:
            if i >= len(rest):
                raise BadInputError(f"{flag}: needs a value in the serve command")
            flag_value = rest[i]
            i += 1
        elif known_arity is None and i < len(rest) and not _is_flag(rest[i]):
            flag_value = rest[i]
            i += 1
        else:
            flag_value = None
        raw_flags.append((name, flag_value))
        reason = _IGNORED_WITH_REASON.get(flag, "does not change the memory plan (or is not modelled)")
        notes.append(f"ignored {flag}: {reason}")
    if env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS") is not None and engine == "vllm":
        changes.append(
            ("estimate_cudagraphs", env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"].strip() == "1")
        )
    honoured = {
        "vllm": "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS",
        "sglang": "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING",
    }
    for key in env:
        if key != honoured.get(engine):
            notes.append(f"ignored the environment variable {key}")
    return ServeCommand(
        engine=engine,
        model=model,
        changes=tuple(changes),
        notes=tuple(notes),
        flags=tuple(raw_flags),
        stray=tuple(stray),
        env=tuple(env.items()),
    )


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


_CC_SIZE_KEYS = {
    "cudagraph_capture_sizes": "cudagraph_capture_sizes",
    "max_cudagraph_capture_size": "max_cudagraph_capture_size",
}


def _compilation_config_changes(flag: str, value: str, notes: list[str]) -> list[tuple[str, Any]]:
    """The capture sizes in vLLM's `--compilation-config` / `-cc`: a JSON object (`-cc '{"cudagraph_capture_sizes":
    [1, 2, 4]}'`) or one dotted key (`-cc.max_cudagraph_capture_size=128`, `-cc.cudagraph_capture_sizes+=1,2,4` for
    a comma list), as vLLM's FlexibleArgumentParser turns both into one JSON dict (v0.32.0). Other keys do not
    change the memory plan and are noted."""
    base, _, dotted = flag.partition(".")
    config: dict[str, Any]
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
    else:
        try:
            loaded = json.loads(value)
        except json.JSONDecodeError:
            if value.strip().isdigit():  # `-cc 3`: the compilation level
                notes.append(f"ignored {base} {value}: {_IGNORED_WITH_REASON.get(base, 'not read')}")
                return []
            raise BadInputError(f"{base} {value!r}: not a JSON object") from None
        if not isinstance(loaded, dict):
            raise BadInputError(f"{base} {value!r}: not a JSON object")
        config = {str(k).replace("-", "_"): v for k, v in loaded.items()}
    changes: list[tuple[str, Any]] = []
    for key, item in config.items():
        field = _CC_SIZE_KEYS.get(key)
        if field is None:
            notes.append(f"ignored {base} {key}: does not change the memory plan")
            continue
        if field == "cudagraph_capture_sizes":
            items = item if isinstance(item, list) else [item]
            changes.append((field, _sizes(f"{base}.{key}")(" ".join(str(x) for x in items))))
        else:
            changes.append((field, parse_human_int(str(item), f"{base}.{key}")))
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
