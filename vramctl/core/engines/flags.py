"""The one flag registry: every engine flag vramctl reads, once.

Each entry names the flag as the engine spells it, its aliases (with the engines each alias exists in), how its
value is read (`kind`, units included), the engines it applies to, the field it sets (a ServeSettings field,
`options.<field>` of SglangOptions, or `model`), and its help text. Everything that reads an engine flag derives
from this table: the serve-command parser (vramctl.core.serve_command), `vramctl check`'s `flags:` / `command:`
(vramctl.core.check.spec), `vramctl plan` and `vramctl profile` / `suggest` / `validate` (their options' help and
value parsing), and read-log's reading of the engines' args lines (vramctl.diagnose.startup).

One spelling of a value works everywhere:

- counts (`--max-model-len`, `--max-num-seqs`, …) are vLLM's human-readable integers: `8192`, `32k` (32,000),
  `32K` (32,768), `1_000` (`vllm/utils/argparse_utils.py`, `human_readable_int`, vLLM 0.32);
- engine sizes keep the engine's unit for a bare number (`--kv-cache-memory-bytes 8000000000` is bytes, as in vLLM;
  `--kv-offloading-size 64` GiB; `--hicache-size 40` decimal GB, as in SGLang) and take any unit written out
  (`8G`, `54.4GiB`, `40GB`);
- vramctl's own memory sizes (`--gpu-memory`, `--free-memory`, `--host-memory`, `--device-memory`, `--min-free`,
  a spec's `gpu_memory` / `host_memory` / `free_memory`): a bare number is GiB (`80` = `80GiB`), as
  `parse_memory_size` reads it.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from vramctl.core.errors import BadInputError
from vramctl.core.units import GB, GiB, as_float, parse_bytes, parse_number

EngineName = Literal["vllm", "sglang"]
FlagKind = Literal[
    "count", "max-model-len", "float", "bool", "str", "bytes", "gib", "gb", "counts", "loader-mode",
    "compilation-config", "speculative-config", "mm-limits", "mm-max-pixels",
]

V: tuple[EngineName, ...] = ("vllm",)
S: tuple[EngineName, ...] = ("sglang",)
BOTH: tuple[EngineName, ...] = ("vllm", "sglang")

_ABSURD_MEMORY_GIB = 1 << 20
"""A bare memory size above 1,048,576 (GiB: a PiB) is bytes written without a unit, not a card."""


@dataclass(frozen=True)
class EngineFlag:
    name: str
    """As the engine spells it, with its dashes (`--max-model-len`)."""
    kind: FlagKind
    engines: tuple[EngineName, ...]
    target: str
    """A ServeSettings field, `options.<field>` (SglangOptions), `model`, or `load.<what>` (read by the model
    loader: the revision, config overrides)."""
    help: str
    aliases: Mapping[str, tuple[EngineName, ...]] = field(default_factory=dict)
    """Other spellings → the engines that accept them (`-tp` is vLLM's, `--tp` SGLang's)."""
    negatable: bool = False
    """A bool vLLM also accepts as `--no-<name>` (argparse's BooleanOptionalAction)."""
    log_keys: tuple[str, ...] = ()
    """Names the engines print for it in their args lines besides the flag's own (`max_seq_len`); with
    `in_logs`, read-log reads the setting."""
    in_logs: bool = False
    """read-log reads this setting from the engines' args lines (vramctl.diagnose.startup)."""
    cli: bool = True
    """`vramctl plan` (and `diff`) take it as an option too; False: only in a serve command after `--` or a check
    spec (SGLang's SglangOptions flags)."""

    @property
    def key(self) -> str:
        """The name without dashes (`max-model-len`): how a spec's `flags:` mapping names it."""
        return bare(self.name)

    def spellings(self, engine: EngineName | None = None) -> Iterator[str]:
        """The name and aliases (with dashes) that `engine` accepts (every one when None)."""
        if engine is None or engine in self.engines:
            yield self.name
        for alias, engines in self.aliases.items():
            if engine is None or engine in engines:
                yield alias

    def parse(self, value: Any, where: str | None = None) -> Any:
        """The value as the target field holds it; BadInputError naming `where` (default: the flag)."""
        return PARSERS[self.kind](value, where or self.name)

    @property
    def takes_value(self) -> bool:
        return self.kind != "bool"

    @property
    def is_setting(self) -> bool:
        """It sets ServeSettings fields (not the model, a loader input or an SglangOptions field)."""
        return "." not in self.target and self.target != "model"

    def setting_changes(self, parsed: Any) -> list[tuple[str, Any]]:
        """The ServeSettings fields a parsed value sets: its target, or for `--compilation-config` the fields its
        keys set (`CompilationConfig.changes`)."""
        if isinstance(parsed, (CompilationConfig, SpeculativeConfig)):
            return parsed.changes()
        return [(self.target, parsed)]


def bare(spelling: str) -> str:
    """`--max_model_len` → `max-model-len`: a flag's name without its dashes, `_` read as `-`."""
    return spelling.lstrip("-").replace("_", "-")


# --- value parsers ------------------------------------------------------------------------------------------------
def _text(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadInputError(f"{where}: {value!r} is not a value")
    return str(value)


def parse_count(value: Any, where: str) -> int:
    """vLLM's human-readable int: `8192`, `32k` (10^3), `32K` (2^10), `1_000`, `1e3`; YAML ints as they are."""
    if isinstance(value, bool):
        raise BadInputError(f"{where}: {value!r} is not an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise BadInputError(f"{where}: {value!r} is not an integer")
        number = int(value)
    else:
        raw = _text(value, where).strip()
        if raw and raw[-1] in "kKmMgGtT" and raw[:-1].replace("_", "").replace(".", "", 1).isdigit():
            return parse_bytes(raw, what=where)
        parsed = parse_number(raw, what=where)
        if parsed != int(parsed):
            raise BadInputError(f"{where} {value!r}: not an integer")
        number = int(parsed)
    return number


def parse_max_model_len(value: Any, where: str = "--max-model-len") -> int:
    """A count, or `auto` / `-1`: vLLM's auto-fit (kept as -1, vLLM's own value)."""
    if isinstance(value, str) and value.strip().lower() in ("auto", "-1"):
        return -1
    return parse_count(value, where)


def parse_float(value: Any, where: str) -> float:
    if isinstance(value, str):
        return parse_number(value, what=where)
    return as_float(value, what=where)


def parse_bool(value: Any, where: str) -> bool:
    """A bare flag (None) is true; `true/false/yes/no/on/off/1/0` as written."""
    if value is None or value is True or value is False:
        return value is not False
    if isinstance(value, (str, int)) and str(value).strip().lower() in _TRUE + _FALSE:
        return str(value).strip().lower() in _TRUE
    raise BadInputError(f"{where}: {value!r} is not true or false")


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def parse_str(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadInputError(f"{where}: {value!r} is not a string")
    return str(value)


def parse_size_bytes(value: Any, where: str) -> int:
    """An engine size whose bare number is bytes (`--kv-cache-memory-bytes`): `8G`, `54.4GiB`, `8589934592`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInputError(f"{where}: {value!r} is not a size (e.g. 8GiB)")
    return parse_bytes(value, what=where)


def _in_unit(unit: str, scale: int) -> Callable[[Any, str], float]:
    def parse(value: Any, where: str) -> float:
        """A size in `unit` (the engine's float flag): a bare number is `unit`, a written unit is converted."""
        if isinstance(value, str) and value.strip()[-1:].isalpha():
            return parse_bytes(value, what=where) / scale
        number = parse_float(value, where)
        if number > 2**62 / scale:
            raise BadInputError(f"{where} {number:g}: absurdly large")
        return number

    parse.__doc__ = f"A size whose bare number is {unit}; `64GiB`, `40GB` are converted."
    return parse


def parse_counts(value: Any, where: str) -> tuple[int, ...]:
    """A list of batch sizes: `1 2 4`, `1,2,4`, `[1, 2, 4]` or a YAML list."""
    if isinstance(value, str):
        items: Any = [p for p in value.strip().strip("[]").replace(",", " ").split() if p]
    else:
        items = value
    if not isinstance(items, (list, tuple)) or not items:
        raise BadInputError(f"{where}: {value!r} is not a list of integers")
    return tuple(parse_count(item, where) for item in items)


def parse_loader_mode(value: Any, where: str = "--model-loader-extra-config") -> str | None:
    """`--model-loader-extra-config JSON` (or a mapping): its `mode` (the ipc_cache loader's zero_copy / copy),
    None without one (vramctl.core.engines.vllm_external_weights)."""
    data = value
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except ValueError:
            raise BadInputError(f"{where} {value!r}: not a JSON object") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{where} {value!r}: not a JSON object")
    mode = data.get("mode")
    return None if mode is None else str(mode)


def parse_mm_limits(value: Any, where: str = "--limit-mm-per-prompt") -> tuple[tuple[str, int], ...]:
    """`--limit-mm-per-prompt`: JSON (`{"image": 0, "video": {"count": 1, ...}}`, `MultiModalConfig.limit_per_prompt`,
    vllm/config/multimodal.py, v0.32.0) or the older `image=16,video=2`: (modality, count) pairs, sorted."""
    if isinstance(value, str) and "=" in value and not value.lstrip().startswith("{"):
        pairs: dict[str, Any] = {}
        for part in value.split(","):
            key, sep, count = part.partition("=")
            if not sep or not key.strip():
                raise BadInputError(f"{where} {value!r}: not modality=count pairs")
            pairs[key.strip()] = count.strip()
        data: dict[str, Any] = pairs
    else:
        data = _json_object(value, where)
    out: dict[str, int] = {}
    for modality, raw in data.items():
        count = raw.get("count", 999) if isinstance(raw, dict) else raw
        try:
            number = parse_count(count, f"{where} {modality}")
        except BadInputError:
            raise BadInputError(f"{where}: {modality}={count!r} is not a count") from None
        if number < 0:
            raise BadInputError(f"{where}: {modality}={number} is negative")
        out[str(modality)] = number
    return tuple(sorted(out.items()))


def parse_mm_max_pixels(value: Any, where: str = "--mm-processor-kwargs") -> int | None:
    """`--mm-processor-kwargs` JSON: the image size cap it sets for a dynamic-resolution processor (Qwen2-VL family:
    `max_pixels`, or `size.longest_edge`; `Qwen2VLProcessingInfo`, vllm/model_executor/models/qwen2_vl.py, v0.32.0);
    None when it sets neither (the other keys move no memory term vramctl models)."""
    data = _json_object(value, where)
    size = data.get("size")
    raw = data.get("max_pixels")
    if raw is None and isinstance(size, dict):
        raw = size.get("longest_edge")
    if raw is None:
        return None
    pixels = parse_count(raw, f"{where} max_pixels")
    if pixels <= 0:
        raise BadInputError(f"{where}: max_pixels {pixels} must be positive")
    return pixels


CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
"""`CUDAGraphMode` (vllm/config/compilation.py, v0.11.2 – v0.33.0): the values `cudagraph_mode` takes."""


@dataclass(frozen=True)
class CompilationConfig:
    """vLLM's `--compilation-config` / `-cc` (`CompilationConfig`, vllm/config/compilation.py; v0.32.0 read): the keys
    that change the memory plan. `cudagraph_capture_sizes` and `max_cudagraph_capture_size` set the graph sizes
    (as the flags of the same names do), `cudagraph_mode` which graphs are captured (NONE: none; PIECEWISE;
    FULL_AND_PIECEWISE, the default from 0.12; FULL; FULL_DECODE_ONLY). `level`: a bare number (`-cc 3`,
    `-O 3` before 0.12), the compilation level, which changes no memory term; `ignored`: the other keys."""

    cudagraph_capture_sizes: tuple[int, ...] | None = None
    max_cudagraph_capture_size: int | None = None
    cudagraph_mode: str | None = None
    level: int | None = None
    ignored: tuple[str, ...] = ()

    def changes(self) -> list[tuple[str, Any]]:
        """The ServeSettings fields this config sets."""
        out: list[tuple[str, Any]] = []
        if self.cudagraph_capture_sizes is not None:
            out.append(("cudagraph_capture_sizes", self.cudagraph_capture_sizes))
        if self.max_cudagraph_capture_size is not None:
            out.append(("max_cudagraph_capture_size", self.max_cudagraph_capture_size))
        if self.cudagraph_mode is not None:
            out.append(("cudagraph_mode", self.cudagraph_mode))
        return out


def parse_cudagraph_mode(value: Any, where: str) -> str:
    """`NONE`, `PIECEWISE`, `FULL`, `FULL_DECODE_ONLY`, `FULL_AND_PIECEWISE` (any case, as vLLM reads the enum's
    name)."""
    text = parse_str(value, where).strip().upper()
    if text not in CUDAGRAPH_MODES:
        raise BadInputError(f"{where} {value!r}: vLLM's cudagraph_mode is one of {', '.join(CUDAGRAPH_MODES)}")
    return text


def _json_object(value: Any, where: str, *, python_literal: bool = False) -> dict[str, Any]:
    """A flag's JSON object (a string, or a mapping already) with `-` in its keys read as `_`; with
    `python_literal`, also a dict as Python prints it. Anything else is one BadInputError line."""
    data = value
    if isinstance(value, str):
        try:
            data = json.loads(value)
        except ValueError:
            try:
                if not python_literal:
                    raise ValueError(value)
                data = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise BadInputError(f"{where} {value!r}: not a JSON object") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{where} {value!r}: not a JSON object")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def parse_compilation_config(value: Any, where: str = "--compilation-config") -> CompilationConfig:
    """`--compilation-config JSON` (or a mapping, or a bare level number): the keys that change the memory plan
    (`CompilationConfig`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return CompilationConfig(level=value)
    if isinstance(value, str) and value.strip().isdigit():
        return CompilationConfig(level=int(value.strip()))
    config = _json_object(value, where)
    sizes = config.pop("cudagraph_capture_sizes", None)
    largest = config.pop("max_cudagraph_capture_size", None)
    mode = config.pop("cudagraph_mode", None)
    return CompilationConfig(
        cudagraph_capture_sizes=None
        if sizes is None
        else parse_counts(
            " ".join(str(x) for x in sizes) if isinstance(sizes, list) else sizes, f"{where}.cudagraph_capture_sizes"
        ),
        max_cudagraph_capture_size=None
        if largest is None
        else parse_count(str(largest), f"{where}.max_cudagraph_capture_size"),
        cudagraph_mode=None if mode is None else parse_cudagraph_mode(mode, f"{where}.cudagraph_mode"),
        ignored=tuple(config),
    )


@dataclass(frozen=True)
class SpeculativeConfig:
    """vLLM's `--speculative-config` (`SpeculativeConfig`, vllm/config/speculative.py; v0.32.0 read): the keys that
    change the memory plan. `method` (`mtp`, `qwen3_next_mtp`, `qwen3_5_mtp`, `deepseek_mtp`, `eagle`, `eagle3`,
    `ngram`, `draft_model`, …; vLLM infers it from `model` when absent), `num_speculative_tokens` (N) and the draft
    `model`; `ignored`: the other keys."""

    method: str | None = None
    num_speculative_tokens: int = 0
    model: str | None = None
    draft_tensor_parallel_size: int | None = None
    enforce_eager: bool | None = None
    """The drafter's own `enforce_eager` (None: the target's): no drafter CUDA graphs when true."""
    ignored: tuple[str, ...] = ()

    def changes(self) -> list[tuple[str, Any]]:
        """The ServeSettings fields this config sets."""
        return [
            ("speculative_method", self.method),
            ("num_speculative_tokens", self.num_speculative_tokens),
            ("speculative_model", self.model),
            ("speculative_draft_tensor_parallel_size", self.draft_tensor_parallel_size),
            ("speculative_enforce_eager", self.enforce_eager),
        ]


_SPEC_TOKENS_LIMIT = 64
"""More draft tokens than any recipe uses: a typo, refused rather than planned."""


def parse_speculative_config(value: Any, where: str = "--speculative-config") -> SpeculativeConfig:
    """`--speculative-config JSON` (or a mapping): method, num_speculative_tokens and the draft model
    (`SpeculativeConfig`). vLLM refuses a config without `num_speculative_tokens` unless its draft model says
    (`n_predict`); vramctl needs the number, so it refuses that too."""
    # read-log: an args line prints the dict as Python writes it ({'method': 'mtp', …})
    config = _json_object(value, where, python_literal=True)
    method = config.pop("method", None)
    model = config.pop("model", None)
    tokens = config.pop("num_speculative_tokens", None)
    if tokens is None:
        raise BadInputError(
            f"{where}: num_speculative_tokens is missing (vramctl does not read it from the draft model's "
            "n_predict); write it, e.g. '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'"
        )
    count = parse_count(tokens, f"{where}.num_speculative_tokens")
    if count < 0 or count > _SPEC_TOKENS_LIMIT:
        raise BadInputError(
            f"{where}.num_speculative_tokens {count}: expected 0 to {_SPEC_TOKENS_LIMIT} draft tokens"
        )
    if method is not None and (not isinstance(method, str) or not method.strip()):
        raise BadInputError(f"{where}.method {method!r}: not a method name (mtp, eagle, ngram, …)")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise BadInputError(f"{where}.model {model!r}: not a model name or path")
    draft_tp = config.pop("draft_tensor_parallel_size", None)
    if draft_tp is not None:
        draft_tp = parse_count(draft_tp, f"{where}.draft_tensor_parallel_size")
        if draft_tp < 1:
            raise BadInputError(f"{where}.draft_tensor_parallel_size {draft_tp}: must be at least 1")
    eager = config.pop("enforce_eager", None)
    if eager is not None:
        eager = parse_bool(eager, f"{where}.enforce_eager")
    return SpeculativeConfig(
        method=method.strip().lower() if isinstance(method, str) else None,
        num_speculative_tokens=count,
        model=model.strip() if isinstance(model, str) else None,
        draft_tensor_parallel_size=draft_tp,
        enforce_eager=eager,
        ignored=tuple(config),
    )


PARSERS: dict[FlagKind, Callable[[Any, str], Any]] = {
    "count": parse_count,
    "max-model-len": parse_max_model_len,
    "float": parse_float,
    "bool": parse_bool,
    "str": parse_str,
    "bytes": parse_size_bytes,
    "gib": _in_unit("GiB", GiB),
    "gb": _in_unit("GB", GB),
    "counts": parse_counts,
    "loader-mode": parse_loader_mode,
    "compilation-config": parse_compilation_config,
    "speculative-config": parse_speculative_config,
    "mm-limits": parse_mm_limits,
    "mm-max-pixels": parse_mm_max_pixels,
}


def parse_memory_size(value: Any, where: str) -> int:
    """vramctl's own memory sizes (a card, free memory, the host's RAM, an emulated device): int bytes.

    A bare number is GiB (`80` = `80GiB`), everywhere; a unit may be written (`79.18GiB`, `512MiB`, `80GB`,
    `85899345920B`). A bare number above a PiB is bytes written without their unit: refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInputError(f"{where}: {value!r} is not a size (e.g. 80GiB)")
    unitless = not isinstance(value, str) or not value.strip()[-1:].isalpha()
    try:
        number = parse_float(value, where) if unitless else 0.0
    except BadInputError:
        number = 0.0  # not a plain number: parse_bytes names the problem as a size's
    if number > _ABSURD_MEMORY_GIB:
        shown = str(value).strip()
        raise BadInputError(
            f"{where} {shown}: a bare number is GiB; write the unit (e.g. {shown}B for bytes, or 80GiB)"
        )
    size = parse_bytes(value, default_unit="GiB", what=where)
    return size


# --- the registry -------------------------------------------------------------------------------------------------
def _f(
    name: str,
    kind: FlagKind,
    engines: tuple[EngineName, ...],
    target: str,
    help: str,
    *,
    aliases: Mapping[str, tuple[EngineName, ...]] | None = None,
    negatable: bool = False,
    log_keys: tuple[str, ...] = (),
    in_logs: bool = False,
    cli: bool | None = None,
) -> EngineFlag:
    """`cli`: None = every flag but SGLang's SglangOptions ones is a `plan` option too."""
    cli = not target.startswith("options.") if cli is None else cli
    return EngineFlag(name, kind, engines, target, help, dict(aliases or {}), negatable, log_keys, in_logs, cli)


REGISTRY: tuple[EngineFlag, ...] = (
    # --- both engines (vllm/engine/arg_utils.py; python/sglang/srt/server_args.py) ---------------------------------
    _f("--model", "str", BOTH, "model", "HF id (org/name[@rev]), alias, or local config.json / folder.",
       aliases={"--model-path": S}, in_logs=True),
    _f("--tensor-parallel-size", "count", BOTH, "tensor_parallel_size", "Tensor-parallel ranks.",
       aliases={"-tp": V, "--tp": S, "--tp-size": S}, in_logs=True),
    _f("--pipeline-parallel-size", "count", BOTH, "pipeline_parallel_size", "Pipeline-parallel stages.",
       aliases={"-pp": V, "--pp": S, "--pp-size": S}, in_logs=True),
    _f("--kv-cache-dtype", "str", BOTH, "kv_cache_dtype", "auto, fp8, fp8_e4m3, fp8_e5m2, fp8_ds_mla, …",
       in_logs=True),
    _f("--dtype", "str", BOTH, "dtype", "Model dtype: auto, bfloat16, float16, float32.", in_logs=True),
    _f("--quantization", "str", BOTH, "quantization",
       "The engine's --quantization: fp8 or bitsandbytes quantise an unquantised checkpoint while it loads; "
       "another method must match the checkpoint's.", aliases={"-q": V}, in_logs=True),
    # --- read by the model loader (vramctl.registry.load_model), not a ServeSettings field --------------------------
    _f("--revision", "str", BOTH, "load.revision", "Hub branch, tag or commit of MODEL (or write org/name@rev)."),
    _f("--hf-overrides", "str", V, "load.hf_overrides",
       'vLLM: JSON applied to the model config, e.g. \'{"rope_scaling": {"rope_type": "yarn", ...}}\'.'),
    _f("--rope-scaling", "str", V, "load.rope_scaling", "Older vLLM: JSON rope_scaling (as --hf-overrides on that key)."),
    # --- vLLM (vllm/engine/arg_utils.py, vLLM 0.33) ----------------------------------------------------------------
    _f("--gpu-memory-utilization", "float", V, "gpu_memory_utilization", "vLLM's u in (0, 1].",
       aliases={"--device-memory-utilization": V}, in_logs=True),
    _f("--max-model-len", "max-model-len", V, "max_model_len",
       "Context length: 32768, 32k, 32K, or auto (vLLM's auto-fit).", log_keys=("max_seq_len",), in_logs=True),
    _f("--max-num-batched-tokens", "count", V, "max_num_batched_tokens",
       "Tokens of one scheduler step (8192, 8k).", in_logs=True),
    _f("--max-num-seqs", "count", V, "max_num_seqs", "Sequences the runner is sized for.", in_logs=True),
    _f("--max-num-active-seqs", "count", V, "max_num_active_seqs",
       "vLLM 0.31 →: requests admitted to run at once (≤ --max-num-seqs)."),
    _f("--block-size", "count", V, "block_size", "KV cache block: tokens per block (16, 32, …).", in_logs=True),
    _f("--enforce-eager", "bool", V, "enforce_eager", "No CUDA graphs.", negatable=True, in_logs=True),
    _f("--kv-cache-memory-bytes", "bytes", V, "kv_cache_memory_bytes",
       "Explicit KV size per rank (a bare number is bytes; 8G, 54.4GiB); skips the estimate.",
       aliases={"--kv-cache-memory": V}, in_logs=True),
    _f("--enable-chunked-prefill", "bool", V, "enable_chunked_prefill", "vLLM chunked prefill.",
       negatable=True, log_keys=("chunked_prefill_enabled",), in_logs=True),
    _f("--async-scheduling", "bool", V, "async_scheduling", "vLLM async scheduling (default on).",
       negatable=True),
    _f("--data-parallel-size", "count", V, "data_parallel_size",
       "vLLM engine replicas (totals across them in the notes).", aliases={"-dp": V},
       log_keys=("dp_size",), in_logs=True),
    _f("--enable-expert-parallel", "bool", V, "enable_expert_parallel",
       "vLLM: MoE experts spread whole over the TP × DP ranks.", aliases={"-ep": V}, negatable=True,
       in_logs=True),
    _f("--enable-lora", "bool", V, "enable_lora", "vLLM: adapter slots allocated with the weights.",
       negatable=True, in_logs=True),
    _f("--max-loras", "count", V, "max_loras", "vLLM adapter slots per batch (default 1).", in_logs=True),
    _f("--max-lora-rank", "count", V, "max_lora_rank", "vLLM: 1, 8, 16 (default) … 512.", in_logs=True),
    _f("--fully-sharded-loras", "bool", V, "fully_sharded_loras", "vLLM: LoRA sharded over TP."),
    _f("--enable-prefix-caching", "bool", V, "enable_prefix_caching",
       "vLLM prefix caching: a hybrid's state blocks per request ('align' mode: two; default on from 0.28).",
       negatable=True, in_logs=True),
    _f("--disable-custom-all-reduce", "bool", V, "disable_custom_all_reduce",
       "vLLM: NCCL carries the TP reductions, inside the CUDA graphs too.", in_logs=True),
    _f("--mamba-cache-dtype", "str", V, "mamba_cache_dtype", "vLLM: a hybrid's conv-state dtype.", in_logs=True),
    _f("--mamba-ssm-cache-dtype", "str", V, "mamba_ssm_cache_dtype", "vLLM: a hybrid's SSM-state dtype.",
       in_logs=True),
    _f("--mamba-cache-mode", "str", V, "mamba_cache_mode",
       "vLLM 0.15 →: a hybrid's state blocks with prefix caching: align (two per request), all (one per mamba "
       "block of the request, to 0.31), none.", in_logs=True),
    _f("--mamba-block-size", "count", V, "mamba_block_size",
       "vLLM: the mamba block (tokens) mode 'all' aligns the attention block to (default: the config's chunk size).",
       in_logs=True),
    _f("--kv-offloading-size", "gib", V, "kv_offloading_size_gib",
       "vLLM native KV offload: GiB across TP (a bare number is GiB; 64GiB, 68.7GB)."),
    _f("--max-cudagraph-capture-size", "count", V, "max_cudagraph_capture_size",
       "vLLM: the largest CUDA-graph batch."),
    _f("--cudagraph-capture-sizes", "counts", V, "cudagraph_capture_sizes",
       "vLLM: the CUDA-graph batch sizes (1 2 4 8 or 1,2,4,8).", aliases={"--cuda-graph-sizes": V}),
    _f("--compilation-config", "compilation-config", V, "compilation_config",
       "vLLM's JSON compilation config: cudagraph_capture_sizes, max_cudagraph_capture_size and cudagraph_mode "
       "(NONE, PIECEWISE, FULL_AND_PIECEWISE, …) change the graph pool; other keys no memory term.",
       aliases={"-cc": V}),
    _f("--optimization-level", "count", V, "optimization_level",
       "vLLM 0.12 →: -O0 no CUDA graphs, -O1 piecewise graphs, -O2 / -O3 full and piecewise (the default); "
       "before 0.12 -O is the compilation config (a level changes no memory term).",
       aliases={"-O": V}),
    _f("--speculative-config", "speculative-config", V, "speculative_config",
       'vLLM speculative decoding, JSON: {"method": "mtp", "num_speculative_tokens": 3} (mtp, qwen3_next_mtp, '
       "deepseek_mtp, eagle, eagle3, ngram, draft_model, …): MTP layers' or the draft model's (`model`, loaded like "
       "MODEL) weights and KV, a hybrid's extra state blocks and conv columns.", aliases={"-sc": V}, in_logs=True),
    # vLLM 0.30 → 0.33 features (vramctl.core.engines.vllm_features)
    _f("--load-format", "str", BOTH, "load_format",
       "vLLM: ipc_cache = weights held by a `vllm preload` daemon (0.30 →); other formats change nothing."),
    _f("--model-loader-extra-config", "loader-mode", V, "weight_cache_mode",
       "vLLM: the loader's JSON; its `mode` (zero_copy / copy) for ipc_cache.", cli=False),
    _f("--kv-offloading-backend", "str", V, "kv_offloading_backend", "vLLM: native (default) or lmcache."),
    _f("--enable-sleep-mode", "bool", V, "enable_sleep_mode", "vLLM: report what /sleep levels 1 and 2 free.",
       negatable=True),
    _f("--enable-nccl-comm-suspend", "bool", V, "enable_nccl_comm_suspend",
       "vLLM 0.30 →: sleep also frees NCCL communicators.", negatable=True),
    _f("--sleep-mode-offload-cudagraph", "bool", V, "sleep_mode_offload_cudagraph",
       "vLLM 0.32 →: sleep also offloads the graph pool.", negatable=True),
    # vLLM 0.34 (vllm/config/cache.py: enable_extensible_kv_cache)
    _f("--enable-extensible-kv-cache", "bool", V, "enable_extensible_kv_cache",
       "vLLM 0.34 →: size the KV pool after warm-up and graph capture (default on CUDA / ROCm; "
       "--no-enable-extensible-kv-cache: the profile estimate, u 0.92).", negatable=True),
    # multimodal encoder profiling (vramctl.core.engines.vllm.multimodal; vllm/config/multimodal.py, v0.32.0)
    _f("--limit-mm-per-prompt", "mm-limits", V, "limit_mm_per_prompt",
       'vLLM: items per prompt by modality (JSON {"image": 0}); 0 for every modality: no encoder profiling.',
       cli=False),
    _f("--mm-processor-kwargs", "mm-max-pixels", V, "mm_max_pixels",
       "vLLM: the processor's JSON; its max_pixels (Qwen-VL) sizes the dummy image vLLM profiles.", cli=False),
    _f("--skip-mm-profiling", "bool", V, "skip_mm_profiling",
       "vLLM 0.10.2 →: no encoder profiling (its peak is then not in the budget).", cli=False, negatable=True),
    _f("--language-model-only", "bool", V, "language_model_only",
       "vLLM 0.17 →: every modality limit 0, no vision encoder.", cli=False, negatable=True),
    _f("--mm-encoder-tp-mode", "str", V, "mm_encoder_tp_mode",
       "vLLM: weights (split the tower) or data (each TP rank runs its share of the items, whole tower).",
       cli=False),
    # --- SGLang (python/sglang/srt/server_args.py, SGLang 0.5.23) --------------------------------------------------
    _f("--context-length", "count", S, "max_model_len", "SGLang context length.", in_logs=True),
    _f("--mem-fraction-static", "float", S, "mem_fraction_static", "SGLang's static memory fraction.",
       in_logs=True),
    _f("--chunked-prefill-size", "count", S, "chunked_prefill_size", "SGLang prefill chunk.", in_logs=True),
    _f("--max-running-requests", "count", S, "max_running_requests", "SGLang running requests.",
       in_logs=True),
    _f("--max-total-tokens", "count", S, "max_total_tokens", "SGLang KV pool cap (tokens).", in_logs=True),
    _f("--max-prefill-tokens", "count", S, "max_prefill_tokens", "SGLang prefill tokens per batch.",
       in_logs=True),
    _f("--page-size", "count", S, "page_size", "SGLang KV page (tokens).", in_logs=True),
    _f("--cuda-graph-max-bs", "count", S, "cuda_graph_max_bs", "SGLang largest CUDA-graph batch.",
       in_logs=True),
    _f("--disable-cuda-graph", "bool", S, "disable_cuda_graph", "SGLang: no CUDA graphs.", in_logs=True),
    _f("--enable-hierarchical-cache", "bool", S, "enable_hierarchical_cache", "SGLang HiCache.",
       aliases={"--enable-hicache": S}),
    _f("--hicache-ratio", "float", S, "hicache_ratio", "SGLang HiCache host/device ratio (default 2.0)."),
    _f("--hicache-size", "gb", S, "hicache_size_gb",
       "SGLang HiCache, decimal GB per rank (a bare number is GB; 40GB, 37.3GiB)."),
    _f("--dp-size", "count", S, "options.dp_size", "SGLang data-parallel size.", aliases={"--dp": S}),
    _f("--enable-dp-attention", "bool", S, "options.enable_dp_attention", "SGLang DP attention."),
    _f("--disaggregation-mode", "str", S, "options.disaggregation_mode", "SGLang prefill / decode role."),
    _f("--moe-a2a-backend", "str", S, "options.moe_a2a_backend", "SGLang MoE all-to-all backend."),
    _f("--speculative-algorithm", "str", S, "options.speculative_algorithm", "SGLang speculative decoding."),
    _f("--speculative-num-draft-tokens", "count", S, "options.speculative_num_draft_tokens",
       "SGLang draft tokens."),
    _f("--speculative-draft-model-path", "str", S, "options.speculative_draft_model_path",
       "SGLang EAGLE / EAGLE3 / STANDALONE draft, loaded like MODEL: its layers grow the KV cell, its weights are "
       "charged from 0.5.18.", aliases={"--speculative-draft-model": S}),
    _f("--attention-backend", "str", S, "options.attention_backend", "SGLang attention backend."),
    _f("--enable-memory-saver", "bool", S, "options.enable_memory_saver", "SGLang memory saver."),
    _f("--swa-full-tokens-ratio", "float", S, "options.swa_full_tokens_ratio", "SGLang SWA pool ratio."),
    _f("--disable-hybrid-swa-memory", "bool", S, "options.disable_hybrid_swa_memory",
       "SGLang: one pool for SWA layers."),
    _f("--max-mamba-cache-size", "count", S, "options.max_mamba_cache_size", "SGLang mamba state slots."),
    _f("--mamba-ssm-dtype", "str", S, "options.mamba_ssm_dtype", "SGLang SSM-state dtype."),
    _f("--mamba-full-memory-ratio", "float", S, "options.mamba_full_memory_ratio",
       "SGLang mamba / full-attention memory ratio."),
    _f("--disable-radix-cache", "bool", S, "options.disable_radix_cache", "SGLang: no prefix cache."),
)
"""Every engine flag vramctl reads."""

NO_MEMORY_EFFECT = frozenset(
    {
        "host", "port", "trust-remote-code", "served-model-name", "api-key", "disable-log-requests",
        "disable-log-stats", "log-level",
        "uvicorn-log-level", "tokenizer", "tokenizer-path", "revision", "seed", "random-seed", "download-dir",
        "enable-metrics", "chat-template", "tool-call-parser", "enable-auto-tool-choice",
        "reasoning-parser", "generation-config",
        "base-gpu-id", "disaggregation-ib-device", "schedule-policy", "hicache-write-policy",
        "hicache-io-backend", "hicache-mem-layout", "hicache-storage-backend",
    }
)
"""Engine flags that do not change the memory budget: a spec may give them (they are listed in its notes)."""

LOG_ONLY_KEYS: dict[str, str] = {
    "flashinfer_sampler": "flashinfer_sampler",
    "swap_space": "swap_space",
    "cpu_offload_gb": "cpu_offload_gb",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
    "ep_size": "ep_size",
    "attention_backend": "attention_backend",
}
"""Settings read-log reads from an args line that are no flag vramctl plans with (they explain a log)."""


def entries(engine: EngineName | None = None) -> tuple[EngineFlag, ...]:
    return tuple(f for f in REGISTRY if engine is None or engine in f.engines)


def by_name(name: str) -> EngineFlag:
    """The entry whose own name is `name` (with or without dashes); KeyError when none."""
    key = bare(name)
    for entry in REGISTRY:
        if entry.key == key:
            return entry
    raise KeyError(name)


def serve_table(engine: EngineName) -> dict[str, tuple[EngineFlag, bool | None]]:
    """Spelling (with dashes) → (entry, the value a bare bool sets; None for a value flag): what a serve command
    for `engine` may write, `--no-<name>` included for vLLM's negatable bools."""
    table: dict[str, tuple[EngineFlag, bool | None]] = {}
    for entry in REGISTRY:
        for spelling in entry.spellings(engine):
            table.setdefault(spelling, (entry, True if entry.kind == "bool" else None))
        if entry.negatable and engine in entry.engines:
            table[f"--no-{entry.key}"] = (entry, False)
    return table


@dataclass(frozen=True)
class Match:
    entry: EngineFlag
    engines: tuple[EngineName, ...]
    """The engines that accept this spelling (an alias may be one engine's only)."""
    negated: bool = False
    """Written `no-<name>`: the bool's value is inverted."""


def lookup(name: str, engines: tuple[EngineName, ...]) -> Match | None:
    """A spec's flag (any dashes, `_` as `-`) → its entry, None when the registry has no such spelling.

    A name two engines spell alike (`dp`: vLLM's `-dp` is --data-parallel-size, SGLang's `--dp` its --dp-size)
    resolves to the last of `engines` that has it."""
    key = bare(name)
    negated = False
    found: list[Match] = []
    for entry in REGISTRY:
        spelled = tuple(e for e in BOTH if any(bare(s) == key for s in entry.spellings(e)))
        if spelled:
            found.append(Match(entry, spelled))
    if not found and key.startswith("no-"):
        found = [Match(e, V, True) for e in REGISTRY if e.negatable and e.key == key[3:]]
        negated = True
    if not found:
        return None
    for engine in reversed(engines):
        for match in found:
            if engine in match.engines:
                return match
    return replace(found[0], negated=negated)


def takes_value() -> dict[str, bool]:
    """Every spelling (without dashes) → whether it takes a value: how a serve command's words split."""
    arity: dict[str, bool] = {}
    for entry in REGISTRY:
        for spelling in entry.spellings():
            arity[bare(spelling)] = entry.takes_value
        if entry.negatable:
            arity[f"no-{entry.key}"] = False
    return arity


def log_setting_keys() -> dict[str, str]:
    """Setting names as the engines print them in args lines (`max_num_seqs`, `tp_size`) → the field read-log
    files them under (a ServeSettings field, or `model`)."""
    keys: dict[str, str] = {}
    for entry in REGISTRY:
        if not entry.in_logs:
            continue
        for spelling in (*entry.spellings(), *entry.log_keys):
            if spelling.startswith("--") or not spelling.startswith("-"):
                keys.setdefault(bare(spelling).replace("-", "_"), entry.target)
    return {**keys, **LOG_ONLY_KEYS}
