"""`vramctl check deploy.yaml`: does a deployment meet its memory requirements? A CI gate, pure.

A spec (docs/check.md) names the model, the card, the engine (+ version), the engine flags (a mapping
named as on the command line, or the whole `command:`), the host's RAM, and `requirements`:

    must_fit: true                                  # the engine starts (verdict `fits`)
    min_concurrency: {context: 8192, value: 32}     # sequences of `context` tokens the KV pool holds at once
    min_kv_tokens: 400000                           # KV token slots
    min_headroom: 4GiB                              # the ledger's slack: left on the card after every term
    max_utilization: 0.95                           # --gpu-memory-utilization / --mem-fraction-static
    max_weights_fraction: 0.5                       # weights per rank / the card
    max_host_memory_fraction: 0.8                   # a host KV tier's pinned RAM / the host's RAM
    allow_at_risk: false                            # accept a plan that fits only if the estimates hold

With any requirement given, a vLLM plan that fits only if its estimates hold (at the pessimistic edge of their
± bands it does not start) fails the `at_risk` check unless `allow_at_risk: true`.

`parse_spec` turns YAML text into a DeploySpec (BadInputError naming the field on any problem);
`run_check` plans it (vramctl.core.plan.plan for vLLM, vramctl.core.engines.sglang.plan_sglang for SGLang)
and evaluates each requirement per engine into a CheckResult; exit code 0 when all hold, 1 otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import yaml

from vramctl.core.engines.sglang import SglangOptions, SglangPlan, plan_sglang
from vramctl.core.errors import BadInputError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.host_tier import HostTierPlan, plan_host_tier
from vramctl.core.ledger import SLACK, WEIGHTS
from vramctl.core.safe_yaml import YamlBudgetError, load_yaml
from vramctl.core.serve_command import parse_human_int, parse_loader_mode, parse_serve_command
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import as_float, cdiv, format_bytes, format_count, parse_bytes, parse_number
from vramctl.core.utilization import utilization_for_kv

EngineName = Literal["vllm", "sglang"]

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

# --- engine flags --------------------------------------------------------------------------------------------
FlagKind = Literal["int", "float", "bool", "str", "size", "tokens", "ints", "loader-mode"]


@dataclass(frozen=True)
class FlagSpec:
    target: str
    """A ServeSettings field, `options.<field>` for SglangOptions, or `model`."""
    kind: FlagKind
    engines: tuple[EngineName, ...]


_BOTH: tuple[EngineName, ...] = ("vllm", "sglang")
_V: tuple[EngineName, ...] = ("vllm",)
_S: tuple[EngineName, ...] = ("sglang",)

FLAGS: dict[str, FlagSpec] = {
    # common
    "model": FlagSpec("model", "str", _BOTH),
    "tensor-parallel-size": FlagSpec("tensor_parallel_size", "int", _BOTH),
    "tp": FlagSpec("tensor_parallel_size", "int", _BOTH),
    "pipeline-parallel-size": FlagSpec("pipeline_parallel_size", "int", _BOTH),
    "pp": FlagSpec("pipeline_parallel_size", "int", _BOTH),
    "kv-cache-dtype": FlagSpec("kv_cache_dtype", "str", _BOTH),
    "dtype": FlagSpec("dtype", "str", _BOTH),
    "quantization": FlagSpec("quantization", "str", _BOTH),
    "q": FlagSpec("quantization", "str", _V),
    # vLLM (vllm/engine/arg_utils.py names)
    "gpu-memory-utilization": FlagSpec("gpu_memory_utilization", "float", _V),
    "device-memory-utilization": FlagSpec("gpu_memory_utilization", "float", _V),  # vLLM's alias (`vllm/engine/arg_utils.py` (vLLM v0.33.0))
    "max-model-len": FlagSpec("max_model_len", "tokens", _V),
    "max-num-batched-tokens": FlagSpec("max_num_batched_tokens", "tokens", _V),
    "max-num-seqs": FlagSpec("max_num_seqs", "int", _V),
    "max-num-active-seqs": FlagSpec("max_num_active_seqs", "int", _V),
    "block-size": FlagSpec("block_size", "int", _V),
    "enforce-eager": FlagSpec("enforce_eager", "bool", _V),
    "kv-cache-memory-bytes": FlagSpec("kv_cache_memory_bytes", "size", _V),
    "kv-cache-memory": FlagSpec("kv_cache_memory_bytes", "size", _V),
    "enable-chunked-prefill": FlagSpec("enable_chunked_prefill", "bool", _V),
    "async-scheduling": FlagSpec("async_scheduling", "bool", _V),
    "data-parallel-size": FlagSpec("data_parallel_size", "int", _V),
    "enable-expert-parallel": FlagSpec("enable_expert_parallel", "bool", _V),
    "ep": FlagSpec("enable_expert_parallel", "bool", _V),
    "enable-lora": FlagSpec("enable_lora", "bool", _V),
    "mamba-cache-dtype": FlagSpec("mamba_cache_dtype", "str", _V),
    "mamba-ssm-cache-dtype": FlagSpec("mamba_ssm_cache_dtype", "str", _V),
    "max-loras": FlagSpec("max_loras", "int", _V),
    "max-lora-rank": FlagSpec("max_lora_rank", "int", _V),
    "fully-sharded-loras": FlagSpec("fully_sharded_loras", "bool", _V),
    "kv-offloading-size": FlagSpec("kv_offloading_size_gib", "float", _V),
    "max-cudagraph-capture-size": FlagSpec("max_cudagraph_capture_size", "int", _V),
    "cudagraph-capture-sizes": FlagSpec("cudagraph_capture_sizes", "ints", _V),
    "cuda-graph-sizes": FlagSpec("cudagraph_capture_sizes", "ints", _V),
    # vLLM 0.30 → 0.33 features (vramctl.core.engines.vllm_features)
    "load-format": FlagSpec("load_format", "str", _BOTH),
    "model-loader-extra-config": FlagSpec("weight_cache_mode", "loader-mode", _V),
    "kv-offloading-backend": FlagSpec("kv_offloading_backend", "str", _V),
    "enable-sleep-mode": FlagSpec("enable_sleep_mode", "bool", _V),
    "enable-nccl-comm-suspend": FlagSpec("enable_nccl_comm_suspend", "bool", _V),
    "sleep-mode-offload-cudagraph": FlagSpec("sleep_mode_offload_cudagraph", "bool", _V),
    # SGLang (python/sglang/srt/server_args.py names)
    "model-path": FlagSpec("model", "str", _S),
    "tp-size": FlagSpec("tensor_parallel_size", "int", _S),
    "pp-size": FlagSpec("pipeline_parallel_size", "int", _S),
    "context-length": FlagSpec("max_model_len", "int", _S),
    "mem-fraction-static": FlagSpec("mem_fraction_static", "float", _S),
    "chunked-prefill-size": FlagSpec("chunked_prefill_size", "int", _S),
    "max-running-requests": FlagSpec("max_running_requests", "int", _S),
    "max-total-tokens": FlagSpec("max_total_tokens", "int", _S),
    "max-prefill-tokens": FlagSpec("max_prefill_tokens", "int", _S),
    "page-size": FlagSpec("page_size", "int", _S),
    "cuda-graph-max-bs": FlagSpec("cuda_graph_max_bs", "int", _S),
    "disable-cuda-graph": FlagSpec("disable_cuda_graph", "bool", _S),
    "enable-hierarchical-cache": FlagSpec("enable_hierarchical_cache", "bool", _S),
    "enable-hicache": FlagSpec("enable_hierarchical_cache", "bool", _S),
    "hicache-ratio": FlagSpec("hicache_ratio", "float", _S),
    "hicache-size": FlagSpec("hicache_size_gb", "float", _S),
    "dp-size": FlagSpec("options.dp_size", "int", _S),
    "dp": FlagSpec("options.dp_size", "int", _S),
    "enable-dp-attention": FlagSpec("options.enable_dp_attention", "bool", _S),
    "disaggregation-mode": FlagSpec("options.disaggregation_mode", "str", _S),
    "moe-a2a-backend": FlagSpec("options.moe_a2a_backend", "str", _S),
    "speculative-algorithm": FlagSpec("options.speculative_algorithm", "str", _S),
    "speculative-num-draft-tokens": FlagSpec("options.speculative_num_draft_tokens", "int", _S),
    "attention-backend": FlagSpec("options.attention_backend", "str", _S),
    "enable-memory-saver": FlagSpec("options.enable_memory_saver", "bool", _S),
    "swa-full-tokens-ratio": FlagSpec("options.swa_full_tokens_ratio", "float", _S),
    "disable-hybrid-swa-memory": FlagSpec("options.disable_hybrid_swa_memory", "bool", _S),
    "max-mamba-cache-size": FlagSpec("options.max_mamba_cache_size", "int", _S),
    "mamba-ssm-dtype": FlagSpec("options.mamba_ssm_dtype", "str", _S),
    "mamba-full-memory-ratio": FlagSpec("options.mamba_full_memory_ratio", "float", _S),
    "disable-radix-cache": FlagSpec("options.disable_radix_cache", "bool", _S),
}
_VLLM_SHORT_FLAGS = {"dp": "data-parallel-size"}
"""vLLM short flags whose name another engine's FLAGS entry already takes."""
IGNORED_FLAGS = frozenset(
    {
        "host",
        "port",
        "trust-remote-code",
        "served-model-name",
        "api-key",
        "disable-log-requests",
        "disable-log-stats",
        "enable-prefix-caching",
        "no-enable-prefix-caching",
        "log-level",
        "uvicorn-log-level",
        "tokenizer",
        "tokenizer-path",
        "revision",
        "seed",
        "random-seed",
        "download-dir",
        "enable-metrics",
        "chat-template",
        "tool-call-parser",
        "enable-auto-tool-choice",
        "reasoning-parser",
        "generation-config",
        "disable-custom-all-reduce",
        "base-gpu-id",
        "disaggregation-ib-device",
        "schedule-policy",
        "hicache-write-policy",
        "hicache-io-backend",
        "hicache-mem-layout",
        "hicache-storage-backend",
    }
)
"""Flags that do not change the memory budget: accepted and listed in the notes."""
BOOL_NEGATIONS = {
    "no-enable-chunked-prefill": "enable-chunked-prefill",
    "no-async-scheduling": "async-scheduling",
    "no-enforce-eager": "enforce-eager",
    "no-enable-expert-parallel": "enable-expert-parallel",
    "no-enable-lora": "enable-lora",
    "no-enable-sleep-mode": "enable-sleep-mode",
    "no-enable-nccl-comm-suspend": "enable-nccl-comm-suspend",
    "no-sleep-mode-offload-cudagraph": "sleep-mode-offload-cudagraph",
}


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


def _as_tokens(value: Any, where: str, source: str) -> int:
    """vLLM's human-readable token counts: `8192`, `8k` (decimal), `8K` (binary)."""
    if isinstance(value, str) and value.strip()[-1:] in tuple("kKmMgGtT"):
        try:
            return _as_int(parse_human_int(value, where), where, source)
        except BadInputError as exc:
            raise BadInputError(f"{source}: {exc}") from None
    return _as_int(value, where, source)


def _convert(kind: FlagKind, value: Any, where: str, source: str) -> Any:
    if kind == "int":
        return _as_int(value, where, source, minimum=-1)
    if kind == "tokens":
        return _as_tokens(value, where, source)
    if kind == "float":
        return _as_float(value, where, source)
    if kind == "bool":
        return _as_bool(value, where, source)
    if kind == "size":
        return _as_size(value, where, source)
    if kind == "loader-mode":  # `--model-loader-extra-config`: the ipc_cache loader's mode (vllm_external_weights)
        try:
            return parse_loader_mode(value)
        except BadInputError as exc:
            raise _bad(source, where, str(exc)) from None
    if kind == "ints":
        items = value.replace(",", " ").split() if isinstance(value, str) else value
        if not isinstance(items, list) or not items:
            raise _bad(source, where, f"{value!r} is not a list of integers")
        return tuple(_as_int(item, where, source) for item in items)
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise _bad(source, where, f"{value!r} is not a string")
    return str(value)


_FLAG_TAKES_VALUE: dict[str, bool] = {
    **{name: spec.kind != "bool" for name, spec in FLAGS.items()},
    **{name: False for name in BOOL_NEGATIONS},
}
"""How `command:` splits the flags this module knows (the rest as vramctl.core.serve_command guesses)."""


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
        name = raw_name.lstrip("-").replace("_", "-")
        value = raw_value
        if name in BOOL_NEGATIONS:
            name, value = BOOL_NEGATIONS[name], not _as_bool(raw_value, f"flags.{raw_name}", source)
        if name in IGNORED_FLAGS:
            ignored.append(f"--{name}")
            continue
        if engines == ("vllm",):
            # vLLM's `-dp` is --data-parallel-size; SGLang's `--dp` is --dp-size (the FLAGS entry)
            name = _VLLM_SHORT_FLAGS.get(name, name)
        spec = FLAGS.get(name)
        if spec is None:
            raise _bad(source, f"flags.{raw_name}", f"unknown flag --{name} for {'/'.join(engines)}")
        if not set(spec.engines) & set(engines):
            raise _bad(
                source,
                f"flags.{raw_name}",
                f"--{name} is a {'/'.join(spec.engines)} flag, not {'/'.join(engines)}",
            )
        converted = _convert(spec.kind, value, f"flags.{raw_name}", source)
        if spec.target == "model":
            model = str(converted)
        elif spec.target.startswith("options."):
            opt_changes[spec.target.removeprefix("options.")] = converted
        else:
            changes[spec.target] = converted
    try:
        new_settings = replace(settings, **changes)
        new_options = replace(options, **opt_changes)
    except TypeError as exc:  # pragma: no cover - FLAGS targets are fields
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


def parse_spec(text: str, *, source: str = "spec") -> DeploySpec:
    """YAML text → DeploySpec. Any problem raises BadInputError naming the file and the field."""
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
    notes: list[str] = []
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
    elif "flags" in data:
        if data["flags"] is None:
            flags = {}
        elif not isinstance(data["flags"], dict):
            raise _bad(
                source, "flags", "must be a mapping of engine flags (e.g. gpu-memory-utilization: 0.9)"
            )
        else:
            flags = dict(data["flags"])
    engine: Literal["vllm", "sglang", "both"]
    if engine_raw is None or engine_raw == "vllm":
        engine = "vllm"
    elif engine_raw == "sglang":
        engine = "sglang"
    elif engine_raw == "both":
        engine = "both"
    else:
        raise _bad(source, "engine", f"{engine_raw!r} is not one of vllm, sglang, both")
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
    version = version_raw
    if "model" in data:
        if not isinstance(data["model"], str) or not data["model"].strip():
            raise _bad(source, "model", "must be a model name or path (e.g. llama-3-8b)")
        if model is not None and model != data["model"]:
            notes.append(f"model {data['model']!r} from the spec overrides {model!r} from the command")
        model = data["model"].strip()
    gpu = data.get("gpu")
    if gpu is not None and not isinstance(gpu, str):
        raise _bad(source, "gpu", "must be a GPU name (e.g. h100-sxm)")
    gpu_memory = (
        _as_size(data["gpu_memory"], "gpu_memory", source, default_unit="GiB")
        if "gpu_memory" in data
        else None
    )
    if gpu is None and gpu_memory is None:
        raise _bad(source, "gpu", "missing: give `gpu: h100-sxm` or `gpu_memory: 79.18GiB`")
    if gpu_memory is not None and gpu_memory <= 0:
        raise _bad(source, "gpu_memory", f"{data['gpu_memory']!r} must be more than 0 (e.g. 79.18GiB)")
    host = (
        _as_size(data["host_memory"], "host_memory", source, default_unit="GiB")
        if "host_memory" in data
        else None
    )
    if host is not None and host <= 0:
        raise _bad(source, "host_memory", f"{data['host_memory']!r} must be more than 0 (e.g. 512GiB)")
    free = (
        _as_size(data["free_memory"], "free_memory", source, default_unit="GiB")
        if "free_memory" in data
        else None
    )
    engines: tuple[EngineName, ...] = ("vllm", "sglang") if engine == "both" else (engine,)  # type: ignore[assignment]
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
        # `VAR=value` prefixes the engines read at start-up (as `vramctl plan -- …` honours them).
        env = dict(parse_serve_command(data["command"], flag_takes_value=_FLAG_TAKES_VALUE).env)
        on = ("1", "true", "yes", "on")
        if "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS" in env:
            value = env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"].strip().lower() in on
            settings = replace(settings, estimate_cudagraphs=value)
        if "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING" in env:
            value = env["SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"].strip().lower() in on
            options = replace(options, post_capture_kv_sizing=value)
    if model is None:
        model = flag_model
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


# --- evaluation -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineOutcome:
    """The numbers a requirement is checked against, for one engine."""

    engine: EngineName
    version: str
    verdict: str
    verdict_message: str
    capacity_bytes: int
    kv_cache_bytes: int
    kv_tokens: int
    context_len: int
    max_concurrency: float
    headroom_bytes: int
    utilization: float
    utilization_flag: str
    weights_bytes: int
    bytes_per_token: int
    block_size: int
    num_blocks: int
    bytes_per_block: int
    non_kv_bytes: int
    """vLLM: requested − KV (constant in u); SGLang: weights (KV = mfs × pre − weights)."""
    free_before_load_bytes: int
    host_tier: HostTierPlan | None = None
    tensor_parallel_size: int = 1
    kv_heads_per_rank: int = 1
    """KV heads each rank holds (MHA/GQA); TP splits them until one is left."""
    is_mla: bool = False
    blocks_per_request: int = 0
    """vLLM: blocks one max_model_len request needs (0 for SGLang)."""
    max_sequences: int = 0
    """The scheduler's cap on running sequences: vLLM max_num_seqs, SGLang max_running_requests."""
    max_sequences_flag: str = ""
    model_max_len: int = 0
    """The model's own context limit (config.json max_position_embeddings)."""
    at_risk: bool = False
    """Fits with the estimates, not at the pessimistic edge of their bands (vramctl.core.plan.PlanResult)."""
    pessimistic: Any = None
    """The plan at the pessimistic edge (a PlanEdge), where the plan has a band."""
    fixes: tuple[Any, ...] = ()

    def blocks_for(self, context: int) -> float:
        """vLLM blocks one request of `context` tokens needs: the planner's blocks_per_request at max_model_len
        (sliding-window layers capped), scaled for another length; cdiv(context, block_size) for full attention."""
        full = cdiv(context, self.block_size)
        if context == self.context_len:
            return float(self.blocks_per_request)
        at_len = cdiv(self.context_len, self.block_size)
        return self.blocks_per_request * full / at_len if at_len else float(full)

    def kv_concurrency_at(self, context: int) -> float:
        """Sequences of `context` tokens the KV pool holds at once (what the engines print)."""
        if self.engine == "vllm":
            blocks = self.blocks_for(context)
            return self.num_blocks / blocks if blocks else 0.0
        return self.kv_tokens / context

    def concurrency_at(self, context: int) -> float:
        """What can run at once: the KV pool's concurrency, capped by the scheduler's sequence limit; none when
        `context` is longer than the server's max_model_len / context_length (the engine refuses such requests)."""
        if context > self.context_len:
            return 0.0
        kv = self.kv_concurrency_at(context)
        return min(kv, float(self.max_sequences)) if self.max_sequences else kv

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "engine_version": self.version,
            "verdict": self.verdict,
            "verdict_message": self.verdict_message,
            "capacity_bytes": self.capacity_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_tokens": self.kv_tokens,
            "context_len": self.context_len,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_sequences": self.max_sequences,
            "headroom_bytes": self.headroom_bytes,
            "utilization": self.utilization,
            "utilization_flag": self.utilization_flag,
            "weights_bytes": self.weights_bytes,
            "bytes_per_token": self.bytes_per_token,
            "host_tier": None if self.host_tier is None else self.host_tier.to_json(),
            "at_risk": self.at_risk,
            "pessimistic": None if self.pessimistic is None else self.pessimistic.to_json(),
        }


@dataclass(frozen=True)
class CheckItem:
    requirement: str
    engine: EngineName
    ok: bool
    actual: str
    required: str
    message: str
    """For a failure: the numbers and the flag to change."""

    def to_json(self) -> dict[str, Any]:
        return {
            "requirement": self.requirement,
            "engine": self.engine,
            "ok": self.ok,
            "actual": self.actual,
            "required": self.required,
            "message": self.message,
        }


@dataclass(frozen=True)
class CheckResult:
    spec: DeploySpec
    model_name: str
    gpu_name: str
    outcomes: tuple[EngineOutcome, ...]
    items: tuple[CheckItem, ...]
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(item.ok for item in self.items)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.OK if self.passed else ExitCode.CHECK_FAILED

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec.source,
            "name": self.spec.name,
            "model": self.model_name,
            "gpu": self.gpu_name,
            "engine": self.spec.engine,
            "passed": self.passed,
            "exit_code": int(self.exit_code),
            "failed": sum(1 for item in self.items if not item.ok),
            "engines": [outcome.to_json() for outcome in self.outcomes],
            "checks": [item.to_json() for item in self.items],
            "notes": list(self.notes),
        }


def _vllm_outcome(result: Any, settings: ServeSettings, model: ModelSpec, gpu: GpuSpec) -> EngineOutcome:
    ledger = result.ledger
    capacity = int(result.capacity_bytes)
    kv_tokens_slots = int(result.num_blocks) * int(result.block_size)
    host = plan_host_tier(
        model,
        gpu,
        settings,
        device_kv_tokens=kv_tokens_slots,
        kv_bytes_per_token=int(result.kv_bytes_per_token),
        engine="vllm",
    )
    return EngineOutcome(
        engine="vllm",
        version=str(result.engine_version),
        verdict=str(result.verdict),
        verdict_message=str(result.verdict_message),
        capacity_bytes=capacity,
        kv_cache_bytes=int(result.kv_cache_bytes),
        kv_tokens=int(result.kv_tokens),
        context_len=int(result.max_model_len),
        max_concurrency=float(result.max_concurrency),
        headroom_bytes=ledger.bytes_of(SLACK),
        utilization=float(result.settings.gpu_memory_utilization),
        utilization_flag="--gpu-memory-utilization",
        weights_bytes=ledger.bytes_of(WEIGHTS),
        bytes_per_token=int(result.kv_bytes_per_token),
        block_size=int(result.block_size),
        num_blocks=int(result.num_blocks),
        bytes_per_block=int(result.bytes_per_block),
        non_kv_bytes=int(result.requested_bytes) - int(result.kv_cache_bytes),
        free_before_load_bytes=capacity,
        blocks_per_request=int(result.blocks_per_request),
        # vLLM 0.31 →: --max-num-active-seqs caps the running requests below the runner's max_num_seqs
        max_sequences=int(result.settings.max_num_active_seqs or result.settings.max_num_seqs),
        max_sequences_flag="--max-num-active-seqs" if result.settings.max_num_active_seqs else "--max-num-seqs",
        host_tier=host,
        tensor_parallel_size=settings.tensor_parallel_size,
        kv_heads_per_rank=max(1, model.num_key_value_heads // settings.tensor_parallel_size),
        is_mla=model.is_mla,
        model_max_len=model.max_position_embeddings,
        at_risk=bool(getattr(result, "at_risk", False)),
        pessimistic=getattr(result, "pessimistic", None),
        fixes=tuple(getattr(result, "fixes", ())),
    )


def _sglang_outcome(
    plan: SglangPlan, settings: ServeSettings, model: ModelSpec, gpu: GpuSpec
) -> EngineOutcome:
    host = plan_host_tier(
        model,
        gpu,
        settings,
        device_kv_tokens=plan.max_total_num_tokens,
        kv_bytes_per_token=plan.bytes_per_token,
        engine="sglang",
        page_size=plan.page_size,
        version=plan.version,
    )
    return EngineOutcome(
        engine="sglang",
        version=plan.version,
        verdict=plan.verdict,
        verdict_message=plan.message,
        capacity_bytes=plan.capacity_bytes,
        kv_cache_bytes=plan.kv_cache_bytes,
        kv_tokens=plan.max_total_num_tokens,
        context_len=plan.context_len,
        max_concurrency=plan.concurrency_at_context,
        headroom_bytes=plan.ledger.bytes_of(SLACK),
        utilization=plan.mem_fraction_static,
        utilization_flag="--mem-fraction-static",
        weights_bytes=plan.weights_bytes,
        bytes_per_token=plan.bytes_per_token,
        block_size=plan.page_size,
        num_blocks=plan.max_total_num_tokens // max(1, plan.page_size),
        bytes_per_block=plan.bytes_per_token * plan.page_size,
        non_kv_bytes=plan.weights_bytes,
        free_before_load_bytes=plan.free_before_load_bytes,
        max_sequences=plan.max_running_requests,
        max_sequences_flag="--max-running-requests",
        host_tier=host,
        tensor_parallel_size=settings.tensor_parallel_size,
        kv_heads_per_rank=max(1, model.num_key_value_heads // settings.tensor_parallel_size),
        is_mla=model.is_mla,
        model_max_len=model.max_position_embeddings,
    )


def _utilization_for(o: EngineOutcome, kv_needed: int) -> float:
    """The utilisation / fraction that gives `kv_needed` bytes of KV, all else equal."""
    if o.engine == "vllm":
        return utilization_for_kv(o.capacity_bytes, o.non_kv_bytes, kv_needed)
    # SGLang: KV ≈ mfs × pre − weights.
    return math.ceil((kv_needed + o.weights_bytes) / o.free_before_load_bytes * 1000) / 1000


def _kv_available(o: EngineOutcome, util: float, factor: int) -> float:
    """KV bytes per rank at utilisation `util` with `factor` × the current TP (weights shrink by the factor)."""
    if o.engine == "vllm":
        return util * o.capacity_bytes - (o.non_kv_bytes - o.weights_bytes + o.weights_bytes / factor)
    return util * o.free_before_load_bytes - o.weights_bytes / factor


def _kv_needed_per_rank(o: EngineOutcome, kv_needed: int, factor: int) -> float:
    """MHA KV heads split over TP until each rank holds one; an MLA latent is on every rank."""
    if o.is_mla:
        return float(kv_needed)
    split = min(factor, max(1, o.kv_heads_per_rank))
    return kv_needed / split


def _more_kv_advice(o: EngineOutcome, kv_needed: int, settings: ServeSettings) -> str:
    """Which single change reaches `kv_needed` bytes of KV per rank, with the numbers."""
    short = kv_needed - o.kv_cache_bytes
    limit = 0.98 if o.engine == "vllm" else 0.95
    options: list[str] = []
    u = _utilization_for(o, kv_needed)
    if u <= limit:
        options.append(f"raise {o.utilization_flag} to {u:.3f} (from {o.utilization:.3f})")
    if settings.kv_cache_dtype in ("auto", "", "bfloat16", "float16", "bf16", "fp16"):
        u_fp8 = _utilization_for(o, kv_needed // 2)
        if u_fp8 <= max(limit, o.utilization):
            then = "" if u_fp8 <= o.utilization else f" with {o.utilization_flag} {u_fp8:.3f}"
            options.append(f"--kv-cache-dtype fp8 (half the bytes per token){then}")
    tp_flag = "--tensor-parallel-size" if o.engine == "vllm" else "--tp-size"
    for factor in (2, 4, 8):
        if _kv_available(o, o.utilization, factor) >= _kv_needed_per_rank(o, kv_needed, factor):
            split = 1 if o.is_mla else min(factor, max(1, o.kv_heads_per_rank))
            options.append(
                f"{tp_flag} {o.tensor_parallel_size * factor} (per rank: weights ÷{factor}, KV per token ÷{split})"
            )
            break
    head = f"needs {format_bytes(kv_needed)} of KV per rank at tp {o.tensor_parallel_size} ({format_bytes(short)} more)"
    if not options:
        can = max(1.0, _kv_available(o, o.utilization, 1))
        wider = next(
            (
                factor
                for factor in (16, 32, 64)
                if _kv_available(o, o.utilization, factor) >= _kv_needed_per_rank(o, kv_needed, factor)
            ),
            None,
        )
        more = (
            f"use more GPUs ({tp_flag} ≥ {o.tensor_parallel_size * wider})"
            if wider is not None
            else f"no tensor-parallel size up to {tp_flag} {o.tensor_parallel_size * 64} reaches it either"
        )
        return (
            f"{head}: no single change reaches it on this card (about {kv_needed / can:.1f}× what it holds); "
            f"lower the requirement or {more}"
        )
    return f"{head}: " + ", or ".join(options)


def _context_too_long(o: EngineOutcome, c: ConcurrencyRequirement) -> CheckItem:
    """A requirement at a context longer than the server's max_model_len / context_length: the engine refuses
    every such request (vLLM: "longer than the maximum model length"), so none run at once, whatever the KV."""
    len_flag = "--max-model-len" if o.engine == "vllm" else "--context-length"
    if o.model_max_len and c.context > o.model_max_len:
        advice = (
            f"the model itself stops at {format_count(o.model_max_len)} tokens (max_position_embeddings): "
            "lower the requirement's context or pick a longer-context model"
        )
    else:
        advice = f"raise {len_flag} to {c.context} (then check the KV again)"
    message = (
        f"the server refuses requests longer than {len_flag} {o.context_len}: no sequence of "
        f"{format_count(c.context)} tokens runs; {advice}"
    )
    return CheckItem(f"min_concurrency@{c.context}", o.engine, False, "0.00", f"≥ {c.value:g}", message)


def _at_risk_item(o: EngineOutcome) -> CheckItem:
    """A plan that starts only if every estimate holds: the numbers at the pessimistic edge and the fixes."""
    edge = o.pessimistic
    where = (
        f"{edge.verdict}: {max(0, edge.kv_cache_bytes) / (1 << 30):.2f} GiB of KV, {edge.max_concurrency:.2f}x of "
        f"one {o.context_len}-token request"
        if edge is not None
        else "it does not start"
    )
    fixes = ", or ".join(f.argument for f in o.fixes[:3])
    message = (
        f"fits only if the estimates hold: with every estimated term at the top of its ± band, {where}"
        + (f"; fix: {fixes}" if fixes else "")
        + "; or accept the risk with requirements.allow_at_risk: true"
    )
    return CheckItem(
        "at_risk",
        o.engine,
        False,
        "at risk" if edge is None else f"{edge.max_concurrency:.2f}x (pessimistic)",
        "fits (pessimistic)",
        message,
    )


def evaluate(spec: DeploySpec, outcomes: tuple[EngineOutcome, ...]) -> tuple[CheckItem, ...]:
    """Every requirement against every engine's outcome."""
    req = spec.requirements
    items: list[CheckItem] = []
    for o in outcomes:
        # The GPU side of a plan whose only failure is the host tier still has its KV pool: the KV requirements
        # are judged on it, `must_fit` (and max_host_memory_fraction) carries the host failure.
        fits = o.verdict in ("fits", "host-pinned-memory-failure")
        if req.must_fit is not None:
            ok = o.verdict == "fits" or not req.must_fit
            items.append(
                CheckItem(
                    "must_fit",
                    o.engine,
                    ok,
                    o.verdict,
                    "fits" if req.must_fit else "any",
                    "" if ok else o.verdict_message or o.verdict,
                )
            )
        if o.at_risk and not req.is_empty() and not req.allow_at_risk:
            items.append(_at_risk_item(o))
        for c in req.min_concurrency:
            if c.context > o.context_len:
                items.append(_context_too_long(o, c))
                continue
            actual = o.concurrency_at(c.context) if fits else 0.0
            ok = actual >= c.value
            message = ""
            if not ok and fits and o.kv_concurrency_at(c.context) >= c.value:
                message = (
                    f"the KV pool holds {o.kv_concurrency_at(c.context):.2f} sequences of "
                    f"{format_count(c.context)} tokens but the scheduler runs at most {o.max_sequences}: "
                    f"raise {o.max_sequences_flag} to {math.ceil(c.value)}"
                )
            elif not ok:
                if o.engine == "vllm":
                    kv_needed = math.ceil(math.ceil(c.value) * o.blocks_for(c.context)) * o.bytes_per_block
                else:
                    kv_needed = math.ceil(c.value * c.context) * o.bytes_per_token
                message = (
                    f"{actual:.2f} sequences of {format_count(c.context)} tokens < {c.value:g}; "
                    + _more_kv_advice(o, kv_needed, spec.settings)
                )
            items.append(
                CheckItem(
                    f"min_concurrency@{c.context}", o.engine, ok, f"{actual:.2f}", f"≥ {c.value:g}", message
                )
            )
        if req.min_kv_tokens is not None:
            ok = fits and o.kv_tokens >= req.min_kv_tokens
            message = ""
            if not ok:
                message = (
                    f"{format_count(o.kv_tokens)} KV tokens < {format_count(req.min_kv_tokens)}; "
                    + _more_kv_advice(o, req.min_kv_tokens * o.bytes_per_token, spec.settings)
                )
            items.append(
                CheckItem(
                    "min_kv_tokens",
                    o.engine,
                    ok,
                    str(o.kv_tokens),
                    f"≥ {req.min_kv_tokens}",
                    message,
                )
            )
        if req.min_headroom_bytes is not None:
            ok = o.headroom_bytes >= req.min_headroom_bytes
            message = ""
            if not ok:
                short = req.min_headroom_bytes - o.headroom_bytes
                base = o.capacity_bytes if o.engine == "vllm" else o.free_before_load_bytes
                target = math.floor((o.utilization - short / base) * 1000) / 1000
                message = (
                    f"{format_bytes(o.headroom_bytes)} left on the card < {format_bytes(req.min_headroom_bytes)}; "
                    f"lower {o.utilization_flag} to {target:.3f} (from {o.utilization:.3f}; "
                    f"costs {format_bytes(short)} of KV)"
                )
            items.append(
                CheckItem(
                    "min_headroom",
                    o.engine,
                    ok,
                    format_bytes(o.headroom_bytes),
                    f"≥ {format_bytes(req.min_headroom_bytes)}",
                    message,
                )
            )
        if req.max_utilization is not None:
            ok = o.utilization <= req.max_utilization + 1e-12
            message = ""
            if not ok:
                base = o.capacity_bytes if o.engine == "vllm" else o.free_before_load_bytes
                cost = int((o.utilization - req.max_utilization) * base)
                message = (
                    f"{o.utilization_flag} {o.utilization:.3f} > {req.max_utilization:g}; set {o.utilization_flag} "
                    f"{req.max_utilization:g} (costs about {format_bytes(cost)} of KV)"
                )
            items.append(
                CheckItem(
                    "max_utilization",
                    o.engine,
                    ok,
                    f"{o.utilization:.3f}",
                    f"≤ {req.max_utilization:g}",
                    message,
                )
            )
        if req.max_weights_fraction is not None:
            fraction = o.weights_bytes / o.capacity_bytes
            ok = fraction <= req.max_weights_fraction
            message = ""
            if not ok:
                tp = o.tensor_parallel_size
                while (
                    o.weights_bytes * o.tensor_parallel_size / (tp * o.capacity_bytes)
                    > req.max_weights_fraction
                ):
                    tp *= 2
                flag = "-tp" if o.engine == "vllm" else "--tp-size"
                message = (
                    f"weights take {fraction:.1%} of the card ({format_bytes(o.weights_bytes)} per rank) > "
                    f"{req.max_weights_fraction:.0%}; shard wider ({flag} {tp}) or load a quantised checkpoint"
                )
            items.append(
                CheckItem(
                    "max_weights_fraction",
                    o.engine,
                    ok,
                    f"{fraction:.3f}",
                    f"≤ {req.max_weights_fraction:g}",
                    message,
                )
            )
        if req.max_host_memory_fraction is not None:
            host = o.host_tier
            if host is None:
                items.append(
                    CheckItem(
                        "max_host_memory_fraction",
                        o.engine,
                        True,
                        "no host tier",
                        f"≤ {req.max_host_memory_fraction:g}",
                        "",
                    )
                )
            else:
                fraction = host.fraction_of_host or 0.0
                ok = fraction <= req.max_host_memory_fraction and host.status != "fail"
                message = (
                    ""
                    if ok
                    else (
                        f"{host.message}; the host tier may use at most {req.max_host_memory_fraction:.0%}: lower {host.flag}"
                    )
                )
                items.append(
                    CheckItem(
                        "max_host_memory_fraction",
                        o.engine,
                        ok,
                        f"{fraction:.3f}",
                        f"≤ {req.max_host_memory_fraction:g}",
                        message,
                    )
                )
    return tuple(items)


Planner = Callable[[ModelSpec, GpuSpec, ServeSettings], Any]


def run_check(
    spec: DeploySpec, model: ModelSpec, gpu: GpuSpec, *, vllm_planner: Planner | None = None
) -> CheckResult:
    """Plan the spec's deployment with each engine and check every requirement.

    `vllm_planner` defaults to vramctl.core.plan.plan (imported lazily: plan imports the engines).
    """
    outcomes: list[EngineOutcome] = []
    notes = list(spec.notes)
    if spec.engine in ("vllm", "both"):
        planner = vllm_planner
        if planner is None:
            from vramctl.core.plan import plan as default_planner

            planner = default_planner
        vllm_settings = replace(spec.settings, engine="vllm")
        result = planner(model, gpu, vllm_settings)
        outcomes.append(_vllm_outcome(result, vllm_settings, model, gpu))
    if spec.engine in ("sglang", "both"):
        sglang_settings = replace(
            spec.settings,
            engine="sglang",
            engine_version=spec.engine_version if spec.engine == "sglang" else None,
        )
        plan = plan_sglang(model, gpu, sglang_settings, options=spec.sglang_options)
        outcomes.append(_sglang_outcome(plan, sglang_settings, model, gpu))
    if spec.requirements.is_empty():
        notes.append("no requirements given: only the plan is shown (add `requirements:` to gate on it)")
    for n, o in enumerate(outcomes):
        if o.host_tier is not None and o.host_tier.status == "fail" and o.verdict == "fits":
            # The host pool cannot be pinned: the server does not start (as `vramctl plan` says).
            outcomes[n] = replace(
                o, verdict="host-pinned-memory-failure", verdict_message=str(o.host_tier.message)
            )
    for o in outcomes:
        if o.host_tier is not None and o.host_tier.status in ("warning", "fail"):
            notes.append(f"{o.engine}: {o.host_tier.message}")
    items = evaluate(spec, tuple(outcomes))
    return CheckResult(
        spec=spec,
        model_name=model.name,
        gpu_name=gpu.display_name
        if spec.gpu_memory_bytes is None
        else f"{gpu.display_name} ({format_bytes(spec.gpu_memory_bytes)})",
        outcomes=tuple(outcomes),
        items=items,
        notes=tuple(notes),
    )


__all__ = [
    "CheckItem",
    "CheckResult",
    "DeploySpec",
    "EngineOutcome",
    "Requirements",
    "apply_flags",
    "evaluate",
    "parse_spec",
    "run_check",
    "split_serve_command",
]
