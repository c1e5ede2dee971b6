"""`read-log`: decompose a GPU memory budget from an engine's own start-up lines.

`parse_startup_log(lines)` reads a vLLM (0.2 → 0.33, V0 and V1 workers, DEBUG lines included) or SGLang
(0.1 → 0.5.23) start-up log in one streaming pass and returns a frozen `StartupReport`: every number
the log prints about memory (with the line it came from), the settings it states, the engine and its
version (stated, or inferred from the wordings seen), and the same `Ledger` that `plan` prints:
weights, activation peak, non-torch, CUDA graphs, KV cache, slack and other processes, each `given`
(read from the log) or `derived` (arithmetic on logged numbers, the formula says which), summing exactly
to the capacity. The log rounds GiB to 2 decimals; each term carries that as `uncertainty_bytes` and the
residual term (the slack) absorbs the rounding so the sum stays exact.

The line formats are data (`startup_formats.py`); the engine semantics of the subtraction are
`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0) (V0 0.6.x; V1 ≤0.26: W + A + O; ≥0.28: consumed + headroom) and
`python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23) (KV = free after load − free before load × (1 − mem_fraction_static)).

Pure: no printing, no I/O beyond iterating the lines it is given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any, Protocol, cast

from vramctl.core.engines.flags import EngineFlag, EngineName, log_setting_keys
from vramctl.core.engines.flags import entries as flag_entries
from vramctl.core.engines.vllm.rules import V0_RULES_VERSION
from vramctl.core.engines.vllm.rules import rules_for as vllm_rules_for
from vramctl.core.engines.vllm_features import charged_non_torch_bytes
from vramctl.core.engines.vllm_speculative import MTP_METHODS
from vramctl.core.errors import BadInputError
from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    KV_CACHE,
    NON_TORCH,
    OTHER_PROCESSES,
    SLACK,
    TERM_ORDER,
    WEIGHTS,
    Ledger,
    Term,
    TermSource,
)
from vramctl.core.quantization import ONLINE_METHODS
from vramctl.core.settings import ServeSettings, parse_version
from vramctl.core.units import GB, GiB, format_gib
from vramctl.diagnose.startup_formats import (
    ALL_FORMATS,
    FACTS,
    RUN_START_NEEDLES,
    SNAPSHOT_KEYS,
    SUMMARY_TABLE_COLUMNS,
    VERSION_PATTERNS,
    Kind,
    LineFormat,
    Version,
)

__all__ = [
    "PREFILTER_ANCHORS",
    "PREFILTER_LOWER_ANCHORS",
    "Comparison",
    "ComparisonRow",
    "LogLineLike",
    "Observation",
    "RunSummary",
    "StartupReport",
    "compare_with_plan",
    "parse_startup_log",
    "settings_from_report",
    "startup_prefilter",
]

MAX_OBSERVATIONS_PER_RUN = 4096
"""Bound on the numbers kept per run (a log that repeats a line a million times stays small)."""
MAX_RUNS = 64
"""Bound on the runs kept (the first ones are dropped beyond this, and counted)."""


class LogLineLike(Protocol):
    @property
    def number(self) -> int: ...

    @property
    def text(self) -> str: ...

    @property
    def raw(self) -> str: ...

    @property
    def process(self) -> str | None: ...


@dataclass(frozen=True)
class Observation:
    """One number read from the log."""

    key: str
    value: float
    """Bytes (an integral float) for sizes, the count for counts, the ratio for ratios."""
    text: str
    """The number as printed, with its unit (`14.96 GiB`, `410,128`)."""
    line: int
    process: str | None
    uncertainty: float
    """Half of the last printed digit, in the value's unit (±0.005 GiB for `%.2f GiB`)."""
    format: str
    summary: bool = False
    """Read from a person's summary of a log (a list or table), not from a raw engine line."""

    @property
    def bytes(self) -> int:
        return round(self.value)

    def to_json(self) -> dict[str, Any]:
        kind = FACTS[self.key].kind
        value: float | int = round(self.value) if kind in (Kind.SIZE, Kind.COUNT) else self.value
        return {
            "value": value,
            "unit": "bytes" if kind is Kind.SIZE else kind.value,
            "text": self.text,
            "line": self.line,
            "process": self.process,
            "uncertainty": round(self.uncertainty) if kind is Kind.SIZE else self.uncertainty,
            "format": self.format,
            "summary": self.summary,
        }


_BLOCK_SIZES = frozenset(2**n for n in range(3, 12))
"""Block sizes vLLM's backends use (8 … 2048 tokens): the only ratios of KV tokens to blocks read as one."""


@dataclass(frozen=True)
class Setting:
    value: str | int | float | bool
    line: int
    source: str
    """`engine-config`, `args`, `non-default-args`, `server-args`, `command-line`, `log-line`, `implied` (a
    memory line names it in passing, e.g. SGLang's KV dtype: used only when nothing states it)."""


_SETTING_PRIORITY = {
    "engine-config": 5,
    "server-args": 5,
    "log-line": 4,
    "args": 3,
    "non-default-args": 3,
    "command-line": 1,
    "implied": 0,
}


@dataclass(frozen=True)
class RunSummary:
    index: int
    first_line: int
    last_line: int
    engine: str | None
    variant: str | None
    engine_version: str | None
    facts: int
    kv_cache_bytes: int | None
    kv_tokens: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "first_line": self.first_line,
            "last_line": self.last_line,
            "engine": self.engine,
            "variant": self.variant,
            "engine_version": self.engine_version,
            "facts": self.facts,
            "kv_cache_bytes": self.kv_cache_bytes,
            "kv_tokens": self.kv_tokens,
        }


@dataclass(frozen=True)
class StartupReport:
    engine: str | None
    """`vllm`, `sglang`, or None when the log holds no start-up memory line."""
    engine_version: str | None
    """The version the log states, else the range its line formats imply (`>=0.28`), else None."""
    version_source: str | None
    """`log` (a version line), `formats` (inferred from the wordings), or None."""
    variant: str | None
    """vLLM's worker: `V0` or `V1`."""
    semantics: str | None
    """The subtraction the numbers follow: `v0`, `v064`, `v1`, `v1-consumed`, `kv-bytes`, `sglang`."""
    settings: Mapping[str, Setting]
    facts: Mapping[str, Observation]
    """The number used for each fact (the primary process's first one)."""
    observations: tuple[Observation, ...]
    """Every number of the selected run, in log order (other ranks and repeats included)."""
    terms: tuple[Term, ...]
    """The ledger's terms; when the capacity is unknown, the known terms without the residual."""
    ledger: Ledger | None
    capacity_bytes: int | None
    capacity_source: str | None
    """`log`, `--gpu-memory`, `--gpu`, `derived` (requested ÷ utilisation), or None."""
    requested_bytes: int | None
    gpu_memory_utilization: float | None
    kv_cache_bytes: int | None
    num_blocks: int | None
    kv_tokens: int | None
    max_concurrency: float | None
    kv_cache_memory_bytes_suggestion: int | None
    kv_cache_memory_bytes_to_fill_gpu: int | None
    missing: tuple[str, ...]
    notes: tuple[str, ...]
    run_index: int
    runs: tuple[RunSummary, ...]
    runs_dropped: int = 0
    all_observations: tuple[Observation, ...] = ()
    """Every number of every run (for comparing runs of one log)."""

    @property
    def found(self) -> bool:
        """True when the log printed start-up memory lines (a size, count or ratio; not only timings)."""
        return any(FACTS[key].kind is not Kind.SECONDS for key in self.facts)

    @property
    def budget_read(self) -> bool:
        """True when a memory budget (KV bytes, blocks or tokens, or a term) was read."""
        return bool(self.terms) or self.kv_tokens is not None or self.num_blocks is not None

    def lines(self) -> dict[str, int]:
        out = {key: obs.line for key, obs in self.facts.items()}
        for key, setting in self.settings.items():
            out[f"settings.{key}"] = setting.line
        return out

    def to_json(self) -> dict[str, Any]:
        terms: dict[str, Any] = (
            self.ledger.to_json() if self.ledger is not None else {t.name: t.to_json() for t in self.terms}
        )
        return {
            "engine": self.engine,
            "engine_version": self.engine_version,
            "version_source": self.version_source,
            "variant": self.variant,
            "semantics": self.semantics,
            "settings": {key: s.value for key, s in self.settings.items()},
            "terms": terms,
            "capacity_bytes": self.capacity_bytes,
            "capacity_source": self.capacity_source,
            "requested_bytes": self.requested_bytes,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "kv_cache_bytes": self.kv_cache_bytes,
            "num_blocks": self.num_blocks,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": self.max_concurrency,
            "kv_cache_memory_bytes_suggestion": self.kv_cache_memory_bytes_suggestion,
            "kv_cache_memory_bytes_to_fill_gpu": self.kv_cache_memory_bytes_to_fill_gpu,
            "facts": {key: obs.to_json() for key, obs in self.facts.items()},
            "lines": self.lines(),
            "missing": list(self.missing),
            "notes": list(self.notes),
            "run": self.run_index,
            "runs": [run.to_json() for run in self.runs],
        }


# ==================================================================================================
# Reading lines


_PAREN_PID_RE = re.compile(r"\(([^()]*?\bpid=\d+[^()]*)\)")
_BRACKET_RANK_RE = re.compile(r"\[[^\]]*?\b((?:DP\d+ )?TP\d+)\]")
_GPU_ID_RE = re.compile(r"\[(gpu(?:_id)?=\d+)\]")
_RANK_NUMBER_RE = re.compile(r"(?:\brank=|\bTP|Worker_TP|\bgpu(?:_id)?=|\brank)(\d+)")

_NEEDLES = tuple(sorted({fmt.needle for fmt in ALL_FORMATS}))
_NEEDLE_RE = re.compile("|".join(re.escape(n) for n in _NEEDLES))
_SETTINGS_NEEDLES = (
    "Namespace(",
    "non-default args:",
    "with config:",
    "server_args=ServerArgs(",
    "server_args:",
    "LLM(",
    "EngineArgs(",
    "Chunked prefill is enabled with max_num_batched_tokens=",
    "top-p & top-k sampling",
    "Custom allreduce is disabled",
    "Reset SSM cache type to",
    "vllm serve",
    "sglang.launch_server",
    "api_server",
    "vllm-openai",
)
_COMMAND_NEEDLES = ("vllm serve", "sglang.launch_server", "api_server", "vllm-openai", "docker run", "python")
_KV_RE = re.compile(r"\b([a-z_][a-z0-9_]*)=('[^']*'|\"[^\"]*\"|[^,\s)]+)")
_DICT_RE = re.compile(r"'([a-z_][a-z0-9_]*)':\s*('[^']*'|\"[^\"]*\"|[^,}]+)")
_SPEC_DICT_RE = re.compile(r"'speculative_config':\s*(\{[^{}]*\})")
_SPEC_REPR_RE = re.compile(r"speculative_config=SpeculativeConfig\((?P<body>[^()]*)\)")


def _engine_config_speculative(body: str) -> str | None:
    """The engine-config line's `speculative_config=SpeculativeConfig(method='mtp', model=…, num_spec_tokens=2)`
    (vLLM V1 `Initializing a V1 LLM engine … with config:`, SpeculativeConfig.__repr__, 0.32.0) as the dict the
    non-default args line prints; None without one (or `speculative_config=None`)."""
    m = _SPEC_REPR_RE.search(body)
    if m is None:
        return None
    fields = dict(re.findall(r"(\w+)=('[^']*'|\d+)", m.group("body")))
    tokens = fields.get("num_spec_tokens")
    if tokens is None or not tokens.isdigit():
        return None
    config: dict[str, object] = {"num_speculative_tokens": int(tokens)}
    if fields.get("method"):
        config["method"] = fields["method"].strip("'")
    if fields.get("model") and config.get("method") not in MTP_METHODS:
        config["model"] = fields["model"].strip("'")  # a draft model (an MTP method names the target itself)
    return repr(config)
_FLAG_RE = re.compile(r"(?<![\w-])--([a-z][a-z0-9_\-.]*)(?:[= ]+(?!-)([^\s\\`'\"]+|'[^']*'|\"[^\"]*\"))?")
_SERVE_MODEL_RE = re.compile(r"\bvllm serve\s+(?!-)([^\s\\`]+)")
_WRAP_TAIL_RE = re.compile(r"(?:takes|take|is|:)\s*$")
_BLOCKS_LINE_RE = re.compile(r"#\s*(?:GPU|cuda|CUDA) blocks:")
_TABLE_SPLIT_RE = re.compile(r"\s*\|\s*")
_TABLE_NUM_RE = re.compile(r"^-?\d+(?:\.\d+)?$")

# Setting keys as the engines print them → vramctl's names (ServeSettings fields, plus `model`): the flag registry's
# entries read-log reads (vramctl.core.engines.flags, `in_logs`), and the log-only settings it lists.
_SETTING_KEYS: dict[str, str] = log_setting_keys()


def _process_of(raw: str, given: str | None) -> str | None:
    m = _PAREN_PID_RE.search(raw[:300])
    if m is not None:
        return m.group(1)
    m = _BRACKET_RANK_RE.search(raw[:120])
    if m is not None:
        return m.group(1)
    m = _GPU_ID_RE.search(raw[:60])
    if m is not None:
        return m.group(1)
    if given is not None and re.search(r"\d", given) and not re.search(r"[-_]\d+$", given):
        return given  # e.g. `rank0`; a docker-compose service tag (`vllm-llm-1`) is not a process
    return None


def _rank_of(process: str | None) -> int | None:
    if process is None:
        return None
    m = _RANK_NUMBER_RE.search(process)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class _Line:
    number: int
    text: str
    raw: str
    process: str | None


def _as_lines(lines: Iterable[LogLineLike | str]) -> Iterator[_Line]:
    from vramctl.diagnose.reader import clean_line, split_prefixes

    for index, item in enumerate(lines, start=1):
        if isinstance(item, str):
            raw = clean_line(item.encode("utf-8", "replace"))
            given, text = split_prefixes(raw)
            yield _Line(index, text.strip(), raw, _process_of(raw, given))
        else:
            yield _Line(item.number, item.text, item.raw, _process_of(item.raw, item.process))


# The line filter: at least one of these is in every line read-log uses (checked by tests on every sample
# log and every synthetic format line). Most start with a capital, a digit-free unit or punctuation, so
# the regex engine skips the lower-case bulk of a log cheaply; the few lower-case ones are searched with
# bytes.find (memchr speed) instead of widening the regex's first-character set.
PREFILTER_ANCHORS: tuple[bytes, ...] = (
    b"GiB",
    b"GB",
    b"GPU blocks",
    b"# cuda blocks",
    b"KV cache size",
    b"KV Cache",
    b"in KV cache (",
    b"Maximum concurrency",
    b"Memory",
    b"Model loading",
    b"Loading model weights",
    b"Graph capturing",
    b"Capture",
    b"Load weight",
    b"Init torch",
    b"Setting kv cache",
    b"Setting attention block",
    b"KV cache scaling",
    b"Padding mamba",
    b"kv cache group sizes",
    b"cache_config_info with",
    b"KV cache memory",
    b"Encoder cache will",
    b"Loading weights took",
    b"Desired GPU",
    b"Free memory",
    b"Initial free",
    b"Available KV",
    b"Estimated CUDA",
    b"CUDA graph",
    b"Overriding num_gpu_blocks",
    b"num_gpu_blocks is:",
    b"Auto-fit",
    b"Post-capture",
    b"Allocating",
    b"Time elapsed",
    b"LLM",
    b"Namespace(",
    b"ServerArgs(",
    b"EngineArgs(",
    b"Chunked prefill",
    b"top-k sampling",
    b"Custom allreduce",
    b"Reset SSM",
    b"For requested memory",
    b"For full GPU",
    b"CPU blocks",
    b"==",
    b"_tokens=",
    b"_token=",
    b"\n|",
    b"\n |",
    b"\\\n",
    b"\\\r\n",
    b"\\ \n",
)
PREFILTER_LOWER_ANCHORS: tuple[bytes, ...] = (b"vllm", b"sglang", b"python", b"args")
"""Command lines (`vllm serve`, `python -m sglang.launch_server`), environment reports (`sglang: 0.4.3`)
and `non-default args:` / `server_args:` lines: no capital to anchor on."""


@dataclass(frozen=True)
class _Hit:
    begin: int

    def start(self) -> int:
        return self.begin


class _PrefilterPattern:
    """`search(data, pos)`: the first hit of the anchor regex or of a lower-case literal.

    The subset of `re.Pattern[bytes]` that `reader.iter_matching_lines` uses. The next hit of each part is
    cached per buffer, so a block with a thousand hits is still scanned once per part.
    """

    def __init__(self, regex: re.Pattern[bytes], literals: tuple[bytes, ...]) -> None:
        self.pattern = regex.pattern
        self._regex = regex
        self._literals = literals
        self._data: bytes | None = None
        self._pos = 0
        self._next: list[int] = []

    def search(self, data: bytes, pos: int = 0) -> _Hit | None:
        if data is not self._data or pos < self._pos:
            self._data = data
            self._next = [-2] * (len(self._literals) + 1)
        self._pos = pos
        best = -1
        for i in range(len(self._literals) + 1):
            at = self._next[i]
            if at == -1:
                continue
            if at < pos:
                if i == 0:
                    m = self._regex.search(data, pos)
                    at = m.start() if m is not None else -1
                else:
                    at = data.find(self._literals[i - 1], pos)
                self._next[i] = at
                if at == -1:
                    continue
            if best == -1 or at < best:
                best = at
        if best == -1:
            return None
        if data[best : best + 1] == b"\n":  # `\n|`: the table row starts after the newline
            best += 1
        return _Hit(best)


def startup_prefilter() -> re.Pattern[bytes]:
    """The line filter for `reader.iter_matching_lines(source, startup_prefilter(), context_after=1)`.

    Every line read-log can use holds one of `PREFILTER_ANCHORS` / `PREFILTER_LOWER_ANCHORS`; with
    `context_after=1` a wrapped line's tail and a shell command's last line come along. Lines it skips
    cannot change the report (tests compare the filtered and the full parse on every sample and every
    synthetic format line).
    """
    # Grouped by first byte (`G(?:iB|B|PU blocks|raph capturing)|…`): `re` tries one branch per candidate
    # position instead of every anchor, 2-3x faster than the flat alternation. (A trie on longer common
    # prefixes measured the same; wrapping the top level in a group loses `re`'s first-byte skip: 4x slower.)
    groups: dict[bytes, list[bytes]] = {}
    for anchor in sorted(set(PREFILTER_ANCHORS), key=len, reverse=True):
        groups.setdefault(anchor[:1], []).append(anchor[1:])
    literals = b"|".join(
        re.escape(first) + b"(?:" + b"|".join(re.escape(rest) for rest in rests) + b")"
        for first, rests in sorted(groups.items())
    )
    # `\\$`: a continued command line when the reader checks one line without its newline.
    regex = re.compile(literals + rb"|\\[ \t]*\r?$")
    return cast("re.Pattern[bytes]", _PrefilterPattern(regex, PREFILTER_LOWER_ANCHORS))


def _decimals(number_text: str) -> int:
    return len(number_text.split(".", 1)[1]) if "." in number_text else 0


def _to_float(number_text: str) -> float:
    return float(number_text.replace(",", ""))


_UNIT_BYTES = {"GiB": GiB, "GB": GB, "B": 1}


def _observation(key: str, number_text: str, unit: str, line: _Line, fmt: LineFormat) -> Observation | None:
    info = FACTS.get(key)
    if info is None:
        return None
    try:
        number = _to_float(number_text)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    if info.kind is Kind.SIZE:
        scale = _UNIT_BYTES[unit]
        if scale == 1:
            return Observation(
                key,
                float(round(number)),
                f"{number_text} bytes",
                line.number,
                line.process,
                0.0,
                fmt.name,
                fmt.summary,
            )
        # GiB/GB are printed with %.2f, or vLLM's format_gib (round(x, 2), not zero-padded).
        decimals = max(_decimals(number_text), 2)
        value = float(round(number * scale))
        unc = 0.5 * 10.0 ** (-decimals) * scale
        return Observation(
            key, value, f"{number_text} {unit}", line.number, line.process, unc, fmt.name, fmt.summary
        )
    if info.kind is Kind.COUNT:
        return Observation(
            key, float(round(number)), number_text, line.number, line.process, 0.0, fmt.name, fmt.summary
        )
    unc = 0.5 * 10.0 ** (-_decimals(number_text)) if "." in number_text else 0.0
    return Observation(key, number, number_text, line.number, line.process, unc, fmt.name, fmt.summary)


def _parse_value(text: str) -> str | int | float | bool | None:
    value = text.strip().strip(",")
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
        return value if value else None
    if value in ("None", "null", ""):
        return None
    if value in ("True", "true"):
        return True
    if value in ("False", "false"):
        return False
    if value.startswith("torch."):
        return value[len("torch.") :]
    try:
        if re.fullmatch(r"-?\d+", value):
            return int(value)
        if re.fullmatch(r"-?\d*\.\d+(?:[eE][+-]?\d+)?", value):
            return float(value)
    except ValueError:
        return value
    return value


@dataclass
class _Run:
    index: int
    first_line: int
    last_line: int = 0
    observations: list[Observation] = field(default_factory=list)
    dropped: int = 0
    formats: dict[str, LineFormat] = field(default_factory=dict)
    settings: dict[str, Setting] = field(default_factory=dict)
    versions: list[tuple[str, str, int]] = field(default_factory=list)
    variant: str | None = None
    engine_votes: dict[str, int] = field(default_factory=dict)
    kv_seen_by: set[str | None] = field(default_factory=set)

    def has_facts(self) -> bool:
        return bool(self.observations)

    def add(self, obs: Observation) -> None:
        if len(self.observations) >= MAX_OBSERVATIONS_PER_RUN:
            self.dropped += 1
            return
        self.observations.append(obs)
        self.last_line = max(self.last_line, obs.line)
        if FACTS[obs.key].kv_phase and not obs.summary:
            self.kv_seen_by.add(obs.process)

    def set_setting(self, key: str, value: str | int | float | bool | None, line: int, source: str) -> None:
        name = _SETTING_KEYS.get(key)
        if name is None or value is None:
            return
        if name in ("max_model_len",) and not isinstance(value, int):
            return
        if isinstance(value, str) and not re.match(r"[\w/.~]", value) and not (
            name == "speculative_config" and value.startswith("{")  # the one dict-valued setting read
        ):
            return  # a placeholder (`<model>`) or punctuation, not a value
        current = self.settings.get(name)
        if current is None or _SETTING_PRIORITY[source] > _SETTING_PRIORITY[current.source]:
            self.settings[name] = Setting(value, line, source)
            self.last_line = max(self.last_line, line)


class _Parser:
    def __init__(self) -> None:
        self.runs: list[_Run] = [_Run(0, 1)]
        self.runs_dropped = 0
        self.global_versions: list[tuple[str, str, int]] = []
        self.pending: _Line | None = None
        self.table_columns: dict[int, str] | None = None
        self.in_command = False

    @property
    def run(self) -> _Run:
        return self.runs[-1]

    def new_run(self, line: int) -> None:
        self.runs.append(_Run(self.run.index + 1, line))
        if len(self.runs) > MAX_RUNS:
            self.runs.pop(0)
            self.runs_dropped += 1

    def feed(self, line: _Line) -> None:
        text = line.text
        run = self.run
        if text.startswith("#") and _BLOCKS_LINE_RE.match(text) is None:
            return  # an annotation or a Markdown heading, not an engine line (vLLM's "# GPU blocks" aside)
        if any(needle in text for needle in RUN_START_NEEDLES) and run.has_facts():
            self.new_run(line.number)
            run = self.run
        self._versions(line)
        if self.in_command or any(needle in line.raw for needle in _SETTINGS_NEEDLES):
            self._settings(line)
        # A shell command continued with backslashes: its flags are on the following lines.
        self.in_command = line.raw.rstrip().endswith("\\") and (
            self.in_command or any(n in line.raw for n in _COMMAND_NEEDLES)
        )
        if text.startswith("|"):
            self._table(line)
            return
        self.table_columns = None
        candidate = text
        pending = self.pending
        self.pending = None
        joined = pending is not None and pending.number == line.number - 1 and pending.process == line.process
        if joined and pending is not None:
            candidate = pending.text + " " + text.lstrip()
        if _NEEDLE_RE.search(candidate) is None:
            return
        found = self._formats(line, candidate)
        if not found and joined and pending is not None:
            # A hard wrap inside a word or a number (a terminal or a pasted issue cut at a fixed column).
            found = self._formats(line, pending.text + text.lstrip())
        if _WRAP_TAIL_RE.search(text) or (not found and not joined and _NEEDLE_RE.search(text) is not None):
            self.pending = line

    # ---- pieces ------------------------------------------------------------------------------------
    def _versions(self, line: _Line) -> None:
        for engine, needle, pattern in VERSION_PATTERNS:
            if needle not in line.text:
                continue
            m = pattern.search(line.text)
            if m is None:
                continue
            # `sglang==0.5.3.post3.` at the end of a sentence: the dot is not part of the version.
            version = m.group("v").lstrip("v").split("@")[0].rstrip(".-+")
            entry = (engine, version, line.number)
            if needle in ("vLLM Version:", "sglang: ", "vllm==", "sglang=="):
                self.global_versions.append(entry)  # environment reports: they apply to every run
            self.run.versions.append(entry)
            variant = m.groupdict().get("variant")
            if variant:
                self.run.variant = variant
            elif needle == "LLM engine (v":
                self.run.variant = "V0"  # "Initializing an LLM engine (v0.6.x)": the V0 engine
            self.run.engine_votes[engine] = self.run.engine_votes.get(engine, 0) + 1

    def _settings(self, line: _Line) -> None:
        raw = line.raw
        run = self.run
        if "with config:" in raw:
            source = "engine-config"
            body = raw.split("with config:", 1)[1]
            pairs = [(k, v) for k, v in _KV_RE.findall(body) if k != "speculative_config"]
            spec = _engine_config_speculative(body)
            if spec is not None:
                pairs.append(("speculative_config", spec))
        elif "server_args=ServerArgs(" in raw or "server_args:" in raw:
            source = "server-args"
            pairs = _KV_RE.findall(raw.split("server_args", 1)[1])
            run.engine_votes["sglang"] = run.engine_votes.get("sglang", 0) + 2
        elif "Namespace(" in raw:
            source = "args"
            pairs = _KV_RE.findall(raw.split("Namespace(", 1)[1])
        elif "non-default args:" in raw:
            source = "non-default-args"
            tail = raw.split("non-default args:", 1)[1]
            pairs = [(k, v) for k, v in _DICT_RE.findall(tail) if k != "speculative_config"]
            m = _SPEC_DICT_RE.search(tail)  # a nested dict: `'speculative_config': {'method': 'mtp', …}`
            if m:
                pairs.append(("speculative_config", repr(m.group(1))))
        elif "Chunked prefill is enabled with max_num_batched_tokens=" in raw:
            m = re.search(r"max_num_batched_tokens=(\d+)", raw)
            if m:
                run.set_setting("max_num_batched_tokens", int(m.group(1)), line.number, "log-line")
            return
        elif "Reset SSM cache type to" in raw:
            # vLLM's CPU platform replaces the SSM state dtype (vllm/platforms/cpu.py `check_and_update_config`,
            # 0.32.0: "Reset SSM cache type to float32 for accelerated GDN mamba backend '…'"): the state a
            # state-only pool (pure Mamba) is sized by
            m = re.search(r"Reset SSM cache type to (\w+)", raw)
            if m:
                run.set_setting("mamba_ssm_cache_dtype", m.group(1), line.number, "log-line")
            return
        elif "top-p & top-k sampling" in raw or "Custom allreduce is disabled" in raw:
            # vllm/v1/sample/ops/topk_topp_sampler.py: "Using FlashInfer for top-p & top-k sampling." or a
            # fall-back to the PyTorch-native one; custom_all_reduce.py: "Custom allreduce is disabled because …"
            if "Custom allreduce is disabled" in raw:
                run.set_setting("disable_custom_all_reduce", True, line.number, "log-line")
            elif "Using FlashInfer for top-p & top-k sampling" in raw:
                run.set_setting("flashinfer_sampler", True, line.number, "log-line")
            elif "PyTorch-native" in raw or "PyTorch-\nnative" in raw or "disabled" in raw:
                run.set_setting("flashinfer_sampler", False, line.number, "log-line")
            return
        elif "LLM(" in raw or "EngineArgs(" in raw:
            source = "command-line"
            pairs = _KV_RE.findall(raw.split("(", 1)[1])
        else:
            source = "command-line"
            pairs = [(k.replace("-", "_"), v) for k, v in _FLAG_RE.findall(raw)]
            m = _SERVE_MODEL_RE.search(raw)
            if m:
                pairs.insert(0, ("model", m.group(1)))
            if "sglang.launch_server" in raw:
                run.engine_votes["sglang"] = run.engine_votes.get("sglang", 0) + 1
            pairs = [(k, v if v else "True") for k, v in pairs]
        for key, value in pairs:
            run.set_setting(key, _parse_value(value), line.number, source)

    def _formats(self, line: _Line, candidate: str) -> bool:
        """Record every format's facts on the line; whether any fact was read."""
        run = self.run
        seen: set[str] = set()
        found = False
        for fmt in ALL_FORMATS:
            if fmt.needle not in candidate:
                continue
            matches: list[re.Match[str]]
            if fmt.search_all:
                matches = list(fmt.pattern.finditer(candidate))
            else:
                one = fmt.pattern.search(candidate)
                matches = [one] if one is not None else []
            if not matches:
                continue
            new: list[Observation] = []
            for m in matches:
                groups = m.groupdict()
                for name, text in groups.items():
                    if name.startswith("set_") and text is not None:
                        run.set_setting(name[4:], _parse_value(text), line.number, "implied")
                if "key" in groups:
                    key = groups["key"]
                    fact = SNAPSHOT_KEYS.get(key, key)
                    unit = "GiB" if groups.get("unit") and "G" in groups["unit"] else "B"
                    if FACTS.get(fact) is not None and FACTS[fact].kind is not Kind.SIZE:
                        unit = fmt.size_unit
                    obs = _observation(fact, groups["value"], unit, line, fmt)
                    if obs is not None and fact not in seen:
                        new.append(obs)
                        seen.add(fact)
                    continue
                for key, number_text in groups.items():
                    if number_text is None or key not in FACTS or key in seen:
                        continue
                    obs = _observation(key, number_text, fmt.size_unit, line, fmt)
                    if obs is not None:
                        new.append(obs)
                        if not fmt.search_all:
                            seen.add(key)
            if fmt.engine != "any":
                run.engine_votes[fmt.engine] = run.engine_votes.get(fmt.engine, 0) + 1
            # A weight-loading line after this process already sized its KV cache: a new run (a restart
            # or a second engine in the same log without an engine-start line between them).
            if (
                any(FACTS[o.key].load_phase for o in new)
                and line.process in run.kv_seen_by
                and run.has_facts()
            ):
                self.new_run(line.number)
                run = self.run
            run.formats.setdefault(fmt.name, fmt)
            if fmt.variant and run.variant is None:
                run.variant = fmt.variant
            for obs in new:
                run.add(obs)
            found = found or bool(new)
        return found

    def _table(self, line: _Line) -> None:
        cells = [c for c in _TABLE_SPLIT_RE.split(line.text.strip().strip("|"))]
        if self.table_columns is None:
            columns: dict[int, str] = {}
            for index, cell in enumerate(cells):
                label = re.sub(r"\s*\((?:GiB|GB)\)\s*$", "", cell).strip().lower()
                if label in SUMMARY_TABLE_COLUMNS:
                    columns[index] = SUMMARY_TABLE_COLUMNS[label]
            if len(columns) >= 2:
                self.table_columns = columns
            return
        fmt = _TABLE_FORMAT
        for index, key in self.table_columns.items():
            if index < len(cells) and _TABLE_NUM_RE.match(cells[index]):
                obs = _observation(key, cells[index], "GiB", line, fmt)
                if obs is not None:
                    self.run.add(obs)
                    self.run.formats.setdefault(fmt.name, fmt)


_TABLE_FORMAT = LineFormat(
    name="summary-table",
    engine="any",
    needle="|",
    pattern=re.compile(r"\|"),
    since="a Markdown table of logged numbers (llm-d empirical-vllm-memory-results.md)",
    summary=True,
)


# ==================================================================================================
# From facts to a report


_BUDGET_KEYS = frozenset(
    {
        "total_memory",
        "requested_memory",
        "weights",
        "weights_loaded",
        "non_torch",
        "activation_peak",
        "kv_cache",
        "kv_cache_extended",
        "kv_tokens",
        "num_gpu_blocks",
        "load_begin_avail",
        "load_end_avail",
        "pool_end_avail",
        "k_size",
        "kv_size",
        "max_total_num_tokens",
        "cuda_graph_actual",
        "consumed_memory",
        "load_mem_usage",
        "graph_begin_avail",
        "graph_mem_usage",
        "graph_end_avail",
    }
)


def _primary(observations: list[Observation]) -> tuple[dict[str, Observation], str | None]:
    """One observation per fact: the first from the process with the most facts (driver, rank 0 first)."""
    keys_by_process: dict[str | None, set[str]] = {}
    order: list[str | None] = []
    for obs in observations:
        if obs.process not in keys_by_process:
            keys_by_process[obs.process] = set()
            order.append(obs.process)
        keys_by_process[obs.process].add(obs.key)

    def score(process: str | None) -> tuple[int, int, int, int]:
        rank = _rank_of(process)
        return (
            len(keys_by_process[process] & _BUDGET_KEYS),
            1 if process is None else 0,
            1 if rank == 0 else 0,
            -order.index(process),
        )

    primary = max(order, key=score) if order else None
    chosen: dict[str, Observation] = {}
    for obs in observations:
        if obs.process == primary and obs.key not in chosen:
            chosen[obs.key] = obs
    for obs in observations:
        if obs.key not in chosen:
            chosen[obs.key] = obs
    return chosen, primary


def _version_range(formats: Iterable[LineFormat]) -> tuple[Version | None, Version | None]:
    low: Version | None = None
    high: Version | None = None
    for fmt in formats:
        if fmt.min_version is not None and (low is None or fmt.min_version > low):
            low = fmt.min_version
        if fmt.max_version is not None and (high is None or fmt.max_version < high):
            high = fmt.max_version
    if low is not None and high is not None and low > high:
        return None, None  # contradictory wordings (a log with several versions pasted): no inference
    return low, high


def _vtext(version: Version) -> str:
    return ".".join(str(part) for part in version)


def _range_text(low: Version | None, high: Version | None) -> str | None:
    if low is None and high is None:
        return None
    if low is not None and high is not None:
        if low == high:
            return _vtext(low)
        return f">={_vtext(low)},<={_vtext(high)}".replace(".99", ".x")
    if low is not None:
        return f">={_vtext(low)}"
    assert high is not None
    return f"<={_vtext(high)}".replace(".99", ".x")


def _safe_version(text: str | None) -> Version | None:
    if text is None:
        return None
    try:
        parts = parse_version(text)
    except ValueError:
        return None
    return (parts[0], parts[1], parts[2])


@dataclass
class _Builder:
    facts: dict[str, Observation]
    capacity: int | None
    capacity_unc: float
    capacity_source: str | None
    notes: list[str]
    missing: list[str]
    terms: list[Term] = field(default_factory=list)

    def obs(self, key: str) -> Observation | None:
        return self.facts.get(key)

    def given(self, name: str, obs: Observation, note: str = "") -> Term:
        proc = f", {obs.process}" if obs.process else ""
        return Term(
            name,
            obs.bytes,
            TermSource.GIVEN,
            f"logged: {obs.text} (line {obs.line}{proc})",
            round(obs.uncertainty),
            note,
        )

    @staticmethod
    def derived(name: str, value: float, formula: str, unc: float, note: str = "") -> Term:
        return Term(name, round(value), TermSource.DERIVED, formula, round(unc), note)


def _ref(obs: Observation) -> str:
    return f"{obs.text} (line {obs.line})"


def _vllm_terms(b: _Builder, semantics: str | None, variant: str | None) -> tuple[int | None, float]:
    """Fill b.terms for vLLM; return (requested bytes, its uncertainty)."""
    f = b.obs
    total = b.capacity
    util = f("gpu_memory_utilization")
    requested: int | None = None
    req_unc = 0.0
    if f("requested_memory") is not None:
        req = f("requested_memory")
        assert req is not None
        requested, req_unc = req.bytes, req.uncertainty
    elif total is not None and util is not None:
        # V1 request_memory(): ceil(total × util) (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0)); V0: total × util.
        requested = math.ceil(total * util.value)
        req_unc = b.capacity_unc * util.value + total * util.uncertainty

    free = f("free_memory_at_start")
    if free is not None and total is not None:
        b.terms.append(
            b.derived(
                OTHER_PROCESSES,
                total - free.bytes,
                f"total − free at start {_ref(free)}",
                b.capacity_unc + free.uncertainty,
                "in use before the engine's init snapshot: this process's CUDA context, NCCL buffers, and other "
                "processes (vLLM V1 takes it from free memory, not from the requested budget)",
            )
        )

    # ---- weights
    weights_obs = f("weights") or f("weights_loaded")
    weights: int | None = None
    weights_unc = 0.0
    if weights_obs is not None:
        note = "" if weights_obs.key == "weights" else "torch memory allocated while loading the model"
        b.terms.append(b.given(WEIGHTS, weights_obs, note))
        weights, weights_unc = weights_obs.bytes, weights_obs.uncertainty

    # ---- non-torch
    non_torch: int | None = None
    nt_unc = 0.0
    consumed = f("consumed_memory")
    if f("non_torch") is not None:
        nt = f("non_torch")
        assert nt is not None
        b.terms.append(
            b.given(
                NON_TORCH,
                nt,
                "non-torch memory increase during profiling (NCCL, cuBLAS, attention workspaces)",
            )
        )
        non_torch, nt_unc = nt.bytes, nt.uncertainty
    elif consumed is not None and weights is not None:
        non_torch = consumed.bytes - weights
        nt_unc = consumed.uncertainty + weights_unc
        b.terms.append(
            b.derived(
                NON_TORCH,
                non_torch,
                f"consumed {_ref(consumed)} − weights",
                nt_unc,
                "≥0.28 logs 'consumed memory (weights + non-torch)': the free-memory drop since the "
                "init snapshot",
            )
        )

    # ---- activation peak and the CUDA-graph estimate inside the budget
    activation: int | None = None
    act_unc = 0.0
    estimate = f("cuda_graph_estimate")
    incl = f("peak_activation_incl_graph")
    non_kv = f("non_kv_memory")
    if f("activation_peak") is not None:
        act = f("activation_peak")
        assert act is not None
        b.terms.append(b.given(ACTIVATION_PEAK, act, "torch peak increase during the profile run"))
        activation, act_unc = act.bytes, act.uncertainty
    elif semantics == "v064" and f("peak_torch_memory") is not None and weights is not None:
        ptm = f("peak_torch_memory")
        assert ptm is not None
        activation = ptm.bytes - weights
        act_unc = ptm.uncertainty + weights_unc
        b.terms.append(
            b.derived(
                ACTIVATION_PEAK,
                activation,
                f"peak torch memory {_ref(ptm)} − weights",
                act_unc,
                "0.6.4 logs the torch peak including the weights",
            )
        )
    elif non_kv is not None and consumed is not None:
        activation = non_kv.bytes - consumed.bytes
        act_unc = non_kv.uncertainty + consumed.uncertainty
        b.terms.append(
            b.derived(
                ACTIVATION_PEAK,
                activation,
                f"total non-KV {_ref(non_kv)} − consumed {_ref(consumed)}",
                act_unc,
                "the transient peak headroom (torch peak − torch allocated after profiling)",
            )
        )
    elif incl is not None:
        if estimate is not None:
            activation = incl.bytes - estimate.bytes
            act_unc = incl.uncertainty + estimate.uncertainty
            b.terms.append(
                b.derived(
                    ACTIVATION_PEAK,
                    activation,
                    f"peak activation {_ref(incl)} − CUDA-graph estimate {_ref(estimate)}",
                    act_unc,
                    "≥0.28 'peak activation' includes the applied CUDA-graph estimate",
                )
            )
        else:
            activation, act_unc = incl.bytes, incl.uncertainty
            b.terms.append(
                b.given(
                    ACTIVATION_PEAK,
                    incl,
                    "≥0.28 'peak activation' includes the CUDA-graph estimate when "
                    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 (default since 0.20); the log "
                    "does not print the estimate, so the graph pool may be counted twice",
                )
            )

    # ---- CUDA graphs: the real capture (after the KV cache) or the estimate reserved inside the budget
    actual = f("cuda_graph_actual")
    graph: int | None = None
    graph_unc = 0.0
    if actual is not None:
        where = (
            "captured after the KV cache was allocated: it comes out of the memory outside the "
            "requested budget"
            if variant == "V0" or semantics in ("v0", "v064")
            else "free-memory drop across the real capture"
        )
        if actual.value < 0:
            where += "; negative: free memory grew across the capture"
        b.terms.append(b.given(CUDA_GRAPH, actual, where))
        graph, graph_unc = actual.bytes, actual.uncertainty
    elif estimate is not None:
        b.terms.append(
            b.given(
                CUDA_GRAPH,
                estimate,
                "the profiled estimate (subtracted from the budget when "
                "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)",
            )
        )
        graph, graph_unc = estimate.bytes, estimate.uncertainty
    del graph, graph_unc

    # ---- KV cache: exact bytes when logged, else the logged GiB, else requested − the other terms
    in_use = f("kv_cache_in_use")
    kv_obs = in_use if in_use is not None and in_use.uncertainty == 0 else (f("kv_cache") or in_use)
    # vLLM 0.34's extensible KV cache: the pool committed after warm-up (the lines above state the reserved capacity)
    kv_obs = f("kv_cache_extended") or kv_obs or f("kv_available_at_error")
    if kv_obs is not None:
        note = "negative: the engine refused to start" if kv_obs.value < 0 else ""
        if kv_obs.key == "kv_available_at_error":
            note = "the available KV cache memory the start-up error states: too small for one max-length request"
        b.terms.append(b.given(KV_CACHE, kv_obs, note))
    elif (
        requested is not None
        and weights is not None
        and activation is not None
        and non_torch is not None
        and semantics in ("v0", "v1", None)
    ):
        kv = requested - weights - activation - non_torch
        formula = "requested − weights − activation peak − non-torch"
        unc = req_unc + weights_unc + act_unc + nt_unc
        if estimate is not None and semantics == "v1":
            kv -= estimate.bytes
            formula += " − CUDA-graph estimate"
            unc += estimate.uncertainty
        b.terms.append(b.derived(KV_CACHE, kv, formula, unc))
    return requested, req_unc


def _sglang_terms(b: _Builder, settings: Mapping[str, Setting]) -> tuple[int | None, float]:
    f = b.obs
    total = b.capacity
    begin = f("load_begin_avail")
    end = f("load_end_avail")
    pool = f("pool_end_avail")
    if begin is not None and total is not None:
        b.terms.append(
            b.derived(
                OTHER_PROCESSES,
                total - begin.bytes,
                f"total − free before loading weights {_ref(begin)}",
                b.capacity_unc + begin.uncertainty,
                "in use before the weights load: this process's CUDA context, NCCL, and other processes",
            )
        )
    if f("load_mem_usage") is not None:
        usage = f("load_mem_usage")
        assert usage is not None
        b.terms.append(b.given(WEIGHTS, usage, "free-memory drop across weight loading"))
    elif begin is not None and end is not None:
        b.terms.append(
            b.derived(
                WEIGHTS,
                begin.bytes - end.bytes,
                f"free before loading {_ref(begin)} − free after {_ref(end)}",
                begin.uncertainty + end.uncertainty,
            )
        )
    kv: int | None = None
    kv_unc = 0.0
    k, v, single = f("k_size"), f("v_size"), f("kv_size")
    if k is not None and v is not None:
        kv, kv_unc = k.bytes + v.bytes, k.uncertainty + v.uncertainty
        b.terms.append(b.derived(KV_CACHE, kv, f"K size {_ref(k)} + V size {_ref(v)}", kv_unc))
    elif single is not None:
        kv, kv_unc = single.bytes, single.uncertainty
        b.terms.append(b.given(KV_CACHE, single, "single KV buffer (MLA)"))
    elif end is not None and pool is not None:
        kv, kv_unc = end.bytes - pool.bytes, end.uncertainty + pool.uncertainty
        b.terms.append(
            b.derived(
                KV_CACHE,
                kv,
                f"free after weights {_ref(end)} − free after the pools {_ref(pool)}",
                kv_unc,
                "this log does not print the K/V sizes: includes the request-slot pools",
            )
        )
        kv = None  # the pool remainder is already inside
    if kv is not None and end is not None and pool is not None:
        extra = end.bytes - pool.bytes - kv
        unc = end.uncertainty + pool.uncertainty + kv_unc
        formula = f"free after weights {_ref(end)} − KV − free after the pools {_ref(pool)}"
        # Free memory before the first capture (decode, or a prefill / piecewise capture before it), plus
        # what was allocated between two captures (the end of one to the begin of the next).
        captures: list[tuple[Observation, Observation | None]] = []
        for prefix in ("", "prefill_"):
            capture_begin = f(f"{prefix}graph_begin_avail")
            if capture_begin is not None:
                captures.append((capture_begin, f(f"{prefix}graph_end_avail")))
        captures.sort(key=lambda pair: pair[0].line)
        if captures:
            gb = captures[0][0]
            extra += pool.bytes - gb.bytes
            unc += pool.uncertainty + gb.uncertainty
            formula = f"free after weights {_ref(end)} − KV − free before CUDA-graph capture {_ref(gb)}"
            for (_, prev_end), (next_begin, _) in pairwise(captures):
                if prev_end is not None and prev_end.line < next_begin.line:
                    extra += prev_end.bytes - next_begin.bytes
                    unc += prev_end.uncertainty + next_begin.uncertainty
                    formula += f" + between captures: {_ref(prev_end)} − {_ref(next_begin)}"
        b.terms.append(
            b.derived(
                NON_TORCH,
                extra,
                formula,
                unc,
                "allocated by the pool step besides K/V (req_to_token pool, allocator "
                "metadata) and before graph capture (attention workspaces)",
            )
        )
    graphs: list[tuple[float, float, str]] = []  # (bytes, uncertainty, how) per capture: decode, prefill
    for prefix, what in (("", "decode"), ("prefill_", "prefill")):
        usage = f(f"{prefix}graph_mem_usage")
        g_begin, g_end = f(f"{prefix}graph_begin_avail"), f(f"{prefix}graph_end_avail")
        if usage is not None:
            graphs.append((usage.value, usage.uncertainty, f"{what} capture mem usage {_ref(usage)}"))
        elif g_begin is not None and g_end is not None:
            graphs.append(
                (
                    g_begin.value - g_end.value,
                    g_begin.uncertainty + g_end.uncertainty,
                    f"{what}: free before capture {_ref(g_begin)} − free after {_ref(g_end)}",
                )
            )
    decode_usage = f("graph_mem_usage")
    if len(graphs) == 1 and decode_usage is not None:
        b.terms.append(b.given(CUDA_GRAPH, decode_usage, "free-memory drop across CUDA-graph capture"))
    elif graphs:
        b.terms.append(
            b.derived(
                CUDA_GRAPH,
                sum(g[0] for g in graphs),
                " + ".join(g[2] for g in graphs),
                sum(g[1] for g in graphs),
                "free-memory drop across the CUDA-graph captures" if len(graphs) > 1 else "",
            )
        )
    mfs = settings.get("mem_fraction_static")
    if begin is not None and mfs is not None and isinstance(mfs.value, (int, float)):
        requested = round(begin.bytes * float(mfs.value))
        return requested, begin.uncertainty * float(mfs.value)
    return None, 0.0


def _finish_run(
    run: _Run,
    global_versions: list[tuple[str, str, int]],
    gpu_memory_bytes: int | None,
    gpu_memory_source: str | None,
) -> StartupReport:
    facts, primary = _primary(run.observations)
    # The real capture's graph memory: the pool line or the suggestion line when logged; else the LAST
    # "Graph capturing finished" of that process (the V2 runner of 0.33 prints one for the profiling
    # capture first, `vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0)).
    graph_obs = [
        o
        for o in run.observations
        if o.key == "cuda_graph_actual" and o.process == facts.get("cuda_graph_actual", o).process
    ]
    if graph_obs:
        exact = [o for o in graph_obs if o.format != "graph-capturing"]
        facts["cuda_graph_actual"] = exact[0] if exact else graph_obs[-1]
    notes: list[str] = []
    missing: list[str] = []

    # ---- engine and version
    votes = dict(run.engine_votes)
    engine: str | None = None
    if votes:
        engine = max(("vllm", "sglang"), key=lambda e: (votes.get(e, 0), e == "vllm"))
        if votes.get(engine, 0) == 0:
            engine = None
    if engine is None and facts:
        engine = "vllm"
    stated = [v for v in run.versions if v[0] == engine] or [v for v in global_versions if v[0] == engine]
    engine_version: str | None = None
    version_source: str | None = None
    engine_formats = [fmt for fmt in run.formats.values() if fmt.engine == engine]
    if stated:
        engine_version, version_source = stated[0][1], "log"
        if len({v[1] for v in stated}) > 1:
            notes.append("the log states several versions: " + ", ".join(sorted({v[1] for v in stated})))
    else:
        low, high = _version_range(engine_formats)
        engine_version = _range_text(low, high)
        version_source = "formats" if engine_version else None
    version = _safe_version(engine_version) if version_source == "log" else None

    # ---- semantics
    seen_semantics = {fmt.semantics for fmt in run.formats.values() if fmt.semantics}
    semantics: str | None
    if engine == "sglang":
        semantics = "sglang"
    else:
        for candidate in ("kv-bytes", "v1-consumed", "v1", "v064", "v0"):
            if candidate in seen_semantics:
                semantics = candidate
                break
        else:
            rules = vllm_rules_for(version) if version is not None else None
            if run.variant == "V0" or (rules is not None and rules.v0):
                semantics = "v0"
            elif rules is not None and rules.subtraction == "consumed":
                semantics = "v1-consumed"
            elif run.variant == "V1" or (rules is not None and rules.v1_only):
                semantics = "v1"
            else:
                semantics = None
    variant = run.variant if engine == "vllm" else None

    # ---- capacity
    capacity: int | None = None
    capacity_unc = 0.0
    capacity_source: str | None = None
    total = facts.get("total_memory")
    if total is not None:
        capacity, capacity_unc, capacity_source = total.bytes, total.uncertainty, "log"
        if gpu_memory_bytes is not None and abs(gpu_memory_bytes - total.bytes) > 0.01 * total.bytes:
            notes.append(
                f"the log's total {total.text} (line {total.line}) differs from {gpu_memory_source} "
                f"{format_gib(gpu_memory_bytes)}; the log's number is used"
            )
    elif gpu_memory_bytes is not None:
        capacity, capacity_source = gpu_memory_bytes, gpu_memory_source

    # The CUDA-graph hint prints util and util − estimate/total (4 decimals): with the estimate, that
    # bounds the device total when the log does not print it (a hint for --gpu, not a ledger capacity).
    est, hint_util = facts.get("cuda_graph_estimate"), facts.get("gpu_memory_utilization")
    without = facts.get("gpu_memory_utilization_without_graph_profiling")
    if capacity is None and est is not None and hint_util is not None and without is not None:
        delta = hint_util.value - without.value
        delta_unc = hint_util.uncertainty + without.uncertainty
        if delta > 2 * delta_unc > 0 and est.value > 0:
            total_low = (est.value - est.uncertainty) / (delta + delta_unc)
            total_high = (est.value + est.uncertainty) / (delta - delta_unc)
            notes.append(
                f"the CUDA-graph hint implies a device total of {total_low / GiB:.1f}-{total_high / GiB:.1f} GiB: "
                "estimate "
                f"{_ref(est)} ÷ ({hint_util.text} − {without.text}) (line {without.line}); pass --gpu NAME"
            )
    builder = _Builder(dict(facts), capacity, capacity_unc, capacity_source, notes, missing)
    settings = dict(run.settings)
    util_obs = facts.get("gpu_memory_utilization")
    if util_obs is None and engine == "vllm":
        util_setting = settings.get("gpu_memory_utilization")
        if util_setting is not None and isinstance(util_setting.value, (int, float)):
            util_obs = Observation(
                "gpu_memory_utilization",
                float(util_setting.value),
                str(util_setting.value),
                util_setting.line,
                None,
                0.0,
                f"settings ({util_setting.source})",
            )
            builder.facts["gpu_memory_utilization"] = util_obs

    if engine == "sglang":
        requested, req_unc = _sglang_terms(builder, settings)
    else:
        requested, req_unc = _vllm_terms(builder, semantics, variant)
        # Capacity from requested ÷ utilisation when nothing else gives it (V0 logs that print the terms
        # but not the total): requested = the four terms' sum.
        if capacity is None and util_obs is not None and util_obs.value > 0 and semantics in ("v0",):
            parts = {t.name: t for t in builder.terms}
            if (
                all(name in parts for name in (WEIGHTS, NON_TORCH, ACTIVATION_PEAK, KV_CACHE))
                and requested is None
            ):
                requested = sum(parts[n].bytes for n in (WEIGHTS, NON_TORCH, ACTIVATION_PEAK, KV_CACHE))
                req_unc = sum(
                    parts[n].uncertainty_bytes for n in (WEIGHTS, NON_TORCH, ACTIVATION_PEAK, KV_CACHE)
                )
                capacity = round(requested / util_obs.value)
                capacity_unc = req_unc / util_obs.value
                capacity_source = "derived"
                notes.append(
                    f"capacity derived: (weights + non-torch + activation + KV) ÷ gpu_memory_utilization "
                    f"{util_obs.text} (line {util_obs.line}) = {format_gib(capacity)} ± "
                    f"{capacity_unc / GiB:.2f} GiB"
                )
                builder.capacity, builder.capacity_unc = capacity, capacity_unc
        # Capacity from the logged requested memory ÷ utilisation (V1 DEBUG `Initial free memory: F GiB; Requested
        # memory: u (util), R GiB`, `vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0) row 8, where R = u × total) when the log prints no total.
        logged_request = facts.get("requested_memory")
        if (
            capacity is None
            and logged_request is not None
            and requested is not None
            and util_obs is not None
            and util_obs.value > 0
        ):
            capacity = round(requested / util_obs.value)
            capacity_unc = req_unc / util_obs.value + requested * util_obs.uncertainty / util_obs.value**2
            capacity_source = "derived"
            notes.append(
                f"capacity derived: requested memory {logged_request.text} (line {logged_request.line}) ÷ "
                f"gpu_memory_utilization {util_obs.text} = {format_gib(capacity)} ± {capacity_unc / GiB:.2f} GiB"
            )
            builder.capacity, builder.capacity_unc = capacity, capacity_unc

    terms = builder.terms
    ledger: Ledger | None = None
    names = {t.name for t in terms}
    if capacity is not None and KV_CACHE in names:
        unc = capacity_unc + sum(t.uncertainty_bytes for t in terms)
        formula = "capacity − every other term"
        if requested is not None and engine == "vllm":
            formula += f" (capacity − requested = {format_gib(capacity - requested)})"
        unknown = [n for n in (WEIGHTS, ACTIVATION_PEAK, NON_TORCH) if n not in names and engine == "vllm"]
        note = "absorbs the logs' rounding"
        mfs = settings.get("mem_fraction_static")
        begin = facts.get("load_begin_avail")
        if engine == "sglang":
            note = "free after the pools and graphs: SGLang's runtime headroom for activations"
            if mfs is not None and isinstance(mfs.value, (int, float)) and begin is not None:
                reserve = begin.bytes * (1 - float(mfs.value))
                note += (
                    f" (reserve = free before load {begin.text} × (1 − mem_fraction_static {mfs.value}) = "
                    f"{format_gib(reserve)})"
                )
            note += "; absorbs the logs' rounding"
        elif requested is not None:
            note = (
                "outside the requested budget (1 − utilisation) × total, less what the log puts there; "
                + note
            )
        if unknown:
            note += "; also holds the terms the log does not state: " + ", ".join(unknown)
        slack = Term(
            SLACK, capacity - sum(t.bytes for t in terms), TermSource.DERIVED, formula, round(unc), note
        )
        ordered = sorted(terms, key=lambda t: TERM_ORDER.index(t.name))
        ledger = Ledger(capacity, (*ordered, slack))
        terms = list(ledger.terms)
    else:
        terms = sorted(terms, key=lambda t: TERM_ORDER.index(t.name))

    # ---- consistency: the logged terms against the logged requested memory (vLLM)
    if engine == "vllm" and requested is not None and semantics in ("v0", "v1"):
        parts = {t.name: t for t in terms}
        if all(n in parts for n in (WEIGHTS, ACTIVATION_PEAK, NON_TORCH, KV_CACHE)):
            inside = sum(parts[n].bytes for n in (WEIGHTS, ACTIVATION_PEAK, NON_TORCH, KV_CACHE))
            gap = requested - inside
            tol = req_unc + sum(
                parts[n].uncertainty_bytes for n in (WEIGHTS, ACTIVATION_PEAK, NON_TORCH, KV_CACHE)
            )
            if abs(gap) <= tol + 1:
                notes.append(
                    f"weights + activation + non-torch + KV = requested within the log's rounding "
                    f"({gap / GiB:+.3f} GiB)"
                )
            else:
                notes.append(
                    f"requested − (weights + activation + non-torch + KV) = {gap / GiB:+.2f} GiB "
                    f"(beyond rounding: a CUDA-graph estimate or another reserve)"
                )

    # ---- counts
    def count(key: str) -> int | None:
        obs = facts.get(key)
        return obs.bytes if obs is not None else None

    kv_bytes = next((t.bytes for t in terms if t.name == KV_CACHE), None)
    kv_tokens = (
        count("kv_tokens") if engine != "sglang" else (count("kv_tokens") or count("max_total_num_tokens"))
    )
    num_blocks = count("num_gpu_blocks")
    conc = facts.get("max_concurrency")
    max_concurrency = conc.value if conc is not None else None
    if engine == "sglang" and max_concurrency is None and kv_tokens is not None and count("context_len"):
        ctx = count("context_len")
        assert ctx is not None
        max_concurrency = round(kv_tokens / ctx, 2)
        notes.append(f"concurrency derived: KV tokens ÷ context_len {ctx:,} (SGLang does not print it)")
    block_fact = facts.get("block_size")
    block = (
        Setting(block_fact.bytes, block_fact.line, "log-line")
        if block_fact is not None
        else settings.get("block_size")
    )
    if (
        block is None
        and engine == "vllm"
        and kv_tokens is not None
        and num_blocks
        and kv_tokens % num_blocks == 0
        and (kv_tokens // num_blocks) in _BLOCK_SIZES
    ):
        # one KV cache group (every layer full attention): vLLM's token count is blocks × block size
        # (v1/core/kv_cache_utils.py get_kv_cache_capacity, 0.32.0), so the block size the log omits follows
        block = Setting(
            kv_tokens // num_blocks, facts["kv_tokens"].line if "kv_tokens" in facts else 0, "derived"
        )
        settings["block_size"] = block
        notes.append(f"block size derived: {kv_tokens:,} KV tokens ÷ {num_blocks:,} blocks = {block.value}")
    if kv_tokens is None and num_blocks is not None and block is not None and isinstance(block.value, int):
        kv_tokens = num_blocks * block.value
        notes.append(f"KV tokens derived: {num_blocks:,} blocks × block size {block.value}")
    elif kv_tokens is None and num_blocks is not None and variant == "V0":
        kv_tokens = num_blocks * 16
        notes.append(
            f"KV tokens derived: {num_blocks:,} blocks × 16, vLLM's default block size (CacheConfig "
            "DEFAULT_BLOCK_SIZE, `vllm/config/cache.py` (vLLM v0.33.0)); the log does not state --block-size"
        )
    suggestion = count("kv_cache_memory_to_requested")
    to_gpu = count("kv_cache_memory_to_gpu")

    # ---- settings the facts imply
    auto_fit = facts.get("auto_fit_max_model_len")
    if auto_fit is not None:
        settings["max_model_len"] = Setting(auto_fit.bytes, auto_fit.line, "log-line")
    if block_fact is not None and "block_size" not in settings:
        settings["block_size"] = Setting(block_fact.bytes, block_fact.line, "log-line")
    ctx_obs = facts.get("concurrency_max_model_len") or facts.get("context_len")
    if ctx_obs is not None and "max_model_len" not in settings:
        settings["max_model_len"] = Setting(ctx_obs.bytes, ctx_obs.line, "log-line")
    if util_obs is not None and "gpu_memory_utilization" not in settings and engine == "vllm":
        settings["gpu_memory_utilization"] = Setting(util_obs.value, util_obs.line, "log-line")
    for key in ("chunked_prefill_size", "max_prefill_tokens", "max_running_requests"):
        obs = facts.get(key)
        if obs is not None and engine == "sglang" and key not in settings:
            settings[key] = Setting(obs.bytes, obs.line, "log-line")

    # ---- what the log did not say
    if facts:
        if capacity is None:
            missing.append(
                "capacity: the log does not print the device total (pass --gpu NAME or --gpu-memory SIZE)"
            )
        if kv_bytes is None:
            missing.append("kv_cache: no KV-cache size in bytes")
        wanted = (
            (WEIGHTS, ACTIVATION_PEAK, NON_TORCH, CUDA_GRAPH) if engine == "vllm" else (WEIGHTS, CUDA_GRAPH)
        )
        for name in wanted:
            if name not in names:
                missing.append(f"{name}: not in this log")
        if requested is None and engine == "vllm":
            missing.append("requested memory: neither logged nor computable (utilisation or total unknown)")
        if kv_tokens is None:
            missing.append("kv_tokens: not in this log")
        if engine_version is None:
            missing.append("engine version: not stated and not implied by the lines seen")
    if primary is not None:
        other = sorted({o.process or "driver" for o in run.observations if o.process != primary} - {"driver"})
        if other:
            notes.append(f"numbers from process {primary!r}; {len(other)} other process(es) also logged")
        borrowed = sorted(
            f"{key} ({obs.process or 'driver'})" for key, obs in facts.items() if obs.process != primary
        )
        if borrowed:
            notes.append("not printed by that process, taken from another: " + ", ".join(borrowed))
    if any(o.summary for o in facts.values()):
        notes.append(
            "some numbers come from a person's summary of a log (a list or table), not raw engine lines"
        )
    if run.dropped:
        notes.append(f"{run.dropped} repeated numbers beyond {MAX_OBSERVATIONS_PER_RUN} were not kept")

    return StartupReport(
        engine=engine if facts else None,
        engine_version=engine_version,
        version_source=version_source,
        variant=variant,
        semantics=semantics if facts else None,
        settings=settings,
        facts=facts,
        observations=tuple(run.observations),
        terms=tuple(terms),
        ledger=ledger,
        capacity_bytes=capacity,
        capacity_source=capacity_source,
        requested_bytes=requested,
        gpu_memory_utilization=util_obs.value if util_obs is not None else None,
        kv_cache_bytes=kv_bytes,
        num_blocks=num_blocks,
        kv_tokens=kv_tokens,
        max_concurrency=max_concurrency,
        kv_cache_memory_bytes_suggestion=suggestion,
        kv_cache_memory_bytes_to_fill_gpu=to_gpu,
        missing=tuple(missing),
        notes=tuple(notes),
        run_index=run.index,
        runs=(),
    )


def parse_startup_log(
    lines: Iterable[LogLineLike | str],
    *,
    gpu_memory_bytes: int | None = None,
    gpu_memory_source: str = "--gpu-memory",
    run: int | None = None,
) -> StartupReport:
    """Read a start-up log (LogLine objects from `iter_log_lines`, or plain strings) in one pass.

    `gpu_memory_bytes` is the capacity to use when the log does not print it. `run` picks one engine
    start of a log that holds several (0-based, negative counts from the end); by default the run with
    the most memory numbers (the last of equals) is reported.
    """
    parser = _Parser()
    for line in _as_lines(lines):
        parser.feed(line)
    runs = [r for r in parser.runs if r.has_facts()] or parser.runs[-1:]
    summaries_src = [
        _finish_run(r, parser.global_versions, gpu_memory_bytes, gpu_memory_source) for r in runs
    ]
    if run is not None:
        if not -len(runs) <= run < len(runs):
            raise BadInputError(
                f"--run {run}: the log holds {len(runs)} run(s) with memory lines (0..{len(runs) - 1})"
            )
        chosen = run % len(runs)
    else:
        chosen = max(range(len(runs)), key=lambda i: (len({o.key for o in runs[i].observations}), i))
    summaries = tuple(
        RunSummary(
            index=i,
            first_line=r.first_line,
            last_line=r.last_line,
            engine=rep.engine,
            variant=rep.variant,
            engine_version=rep.engine_version,
            facts=len(rep.facts),
            kv_cache_bytes=rep.kv_cache_bytes,
            kv_tokens=rep.kv_tokens,
        )
        for i, (r, rep) in enumerate(zip(runs, summaries_src, strict=True))
    )
    report = summaries_src[chosen]
    notes = list(report.notes)
    if len(runs) > 1:
        notes.append(
            f"the log holds {len(runs)} engine runs with memory lines; reporting run {chosen} "
            f"(lines {runs[chosen].first_line}-{runs[chosen].last_line}); pick another with --run"
        )
    all_obs = tuple(o for r in runs for o in r.observations)
    return replace(
        report,
        runs=summaries,
        run_index=chosen,
        notes=tuple(notes),
        runs_dropped=parser.runs_dropped,
        all_observations=all_obs,
    )


# ==================================================================================================
# Settings for plan(), and the comparison with a plan


_TORCH_KV_DTYPES = {
    "float8_e4m3fn": "fp8_e4m3",
    "float8_e4m3fnuz": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2",
    "float8_e5m2fnuz": "fp8_e5m2",
    "uint8": "fp8",
}
"""torch dtype names an engine prints for its KV pool → the `--kv-cache-dtype` spelling."""


_EXPLICIT_KV_FORMATS = ("cpu-kv-explicit", "kv-cache-memory-bytes")


def _explicit_kv_bytes(report: StartupReport) -> int | None:
    """The KV size a log says was set, not profiled (the CPU worker's `Explicitly set (K/T) GiB for KV cache`,
    e.g. from VLLM_CPU_KVCACHE_SPACE, which no args line states; the GPU worker's `reserved K GiB … as specified
    by kv_cache_memory_bytes`): the plan beside the log is given that size, as printed."""
    fact = report.facts.get("kv_cache")
    if fact is None or fact.format not in _EXPLICIT_KV_FORMATS:
        return None
    return int(fact.bytes)


def _version_in_range(text: str | None, variant: str | None) -> str | None:
    """The version to plan a log whose version only its line wordings bound (`>=0.6.5,<=0.10.0`): the newest in
    the range; V0 wordings past 0.7 (a 0.8-0.10 fall-back) are planned with the last V0 release's rules (0.7.3).
    None when the range has no upper bound (the newest vLLM vramctl knows)."""
    if not text:
        return None
    upper = next((part[2:] for part in text.split(",") if part.startswith("<=")), None)
    if upper is None:
        return None
    try:
        top = parse_version(upper.replace(".x", ".0"))
    except ValueError:
        return None
    if (
        variant == "V0" and not vllm_rules_for(top).v0
    ):  # a V1-era release running V0: the last V0 release's rules
        return V0_RULES_VERSION
    return ".".join(str(p) for p in top)


def _logged_value(report: StartupReport, entry: EngineFlag) -> Any:
    """The value the log states for a registry entry's field, as its kind holds it (a bool for a bool flag, an int
    for a count or size, a float, a string); None when the log does not state one of that type."""
    item = report.settings.get(entry.target)
    value = None if item is None else item.value
    if entry.kind == "bool":
        return value if isinstance(value, bool) else None
    if value is None or isinstance(value, bool):
        return None
    if entry.kind in ("float", "gib", "gb"):
        return float(value) if isinstance(value, (int, float)) else None
    if entry.kind in ("count", "max-model-len", "bytes"):
        if isinstance(value, int):
            return value
        return int(value) if isinstance(value, float) and value.is_integer() else None
    return str(value)


_NOT_PLANNED_FROM_LOGS: dict[str, frozenset[str]] = {"sglang": frozenset({"quantization"})}
"""Registry fields read-log files but does not plan with, per engine: SGLang's `quantization` line names the
checkpoint's method, which the registry's model already has."""


def settings_from_report(
    report: StartupReport,
    *,
    engine_version: str | None = None,
    fallback: Sequence[tuple[str, Any]] = (),
) -> ServeSettings:
    """The ServeSettings a plan for the same deployment needs, from what the log states: every flag-registry entry
    read-log reads (`in_logs`) for the log's engine fills its field; an absent or empty value keeps the default.

    `fallback` (ServeSettings field → value, e.g. a serve command's changes) fills the fields the log does not
    state; where the log states one, the log wins: it is what the engine ran with."""
    version = engine_version
    if version is not None and report.engine == "vllm" and report.variant == "V0" and not vllm_rules_for(version).v0:
        version = V0_RULES_VERSION  # a V1-era release running V0, as `_version_in_range` plans it
    if version is None and report.version_source == "log" and report.engine_version is not None:
        version = ".".join(str(p) for p in parse_version(report.engine_version))
    if version is None and report.version_source == "formats" and report.engine == "vllm":
        version = _version_in_range(report.engine_version, report.variant)
    engine: EngineName = "sglang" if report.engine == "sglang" else "vllm"
    defaults = ServeSettings(engine=engine)
    changes: dict[str, Any] = {"engine": engine, "engine_version": version, "gpu_memory_bytes": report.capacity_bytes}
    stated: set[str] = set()
    for entry in flag_entries(engine):
        if not (entry.in_logs and entry.is_setting) or entry.target in _NOT_PLANNED_FROM_LOGS.get(engine, ()):
            continue
        if entry.kind == "speculative-config":  # one JSON flag, three fields (vramctl.core.engines.flags)
            item = report.settings.get(entry.target)
            try:
                parsed = entry.parse(item.value, entry.name) if item is not None and item.value else None
            except BadInputError:
                parsed = None
            if parsed is not None:
                changes.update(parsed.changes())
                stated.update(field for field, _ in parsed.changes())
            continue
        value = _logged_value(report, entry)
        default = getattr(defaults, entry.target)
        changes[entry.target] = default if not value and default is not None else value
        if value:
            stated.add(entry.target)
    # SGLang prints the KV pool's torch dtype (`torch.float8_e4m3fn`); the flag spells it `fp8_e4m3`.
    changes["kv_cache_dtype"] = _TORCH_KV_DTYPES.get(changes["kv_cache_dtype"].lower(), changes["kv_cache_dtype"])
    if engine == "vllm":
        # The args line states the exact value (0.8938626454842437); the budget lines round it (0.89).
        changes["gpu_memory_utilization"] = changes["gpu_memory_utilization"] or report.gpu_memory_utilization
        changes["kv_cache_memory_bytes"] = changes["kv_cache_memory_bytes"] or _explicit_kv_bytes(report)
        # the log names the method in use; only the in-flight ones change the plan of an unquantised checkpoint
        # (a checkpoint's own method is the registry's already)
        quantization = (changes["quantization"] or "").strip().lower()
        changes["quantization"] = quantization if quantization in ONLINE_METHODS else None
        # the sampler line the engine logs (a log-only key: vramctl.core.engines.vllm_runtime)
        sampler = report.settings.get("flashinfer_sampler")
        changes["flashinfer_sampler"] = sampler.value if sampler and isinstance(sampler.value, bool) else None
        stated.update(field for field in ("gpu_memory_utilization", "kv_cache_memory_bytes") if changes[field])
    changes.update((field, value) for field, value in fallback if field not in stated)
    return ServeSettings().with_changes(**changes)


class PlanLike(Protocol):
    """What compare_with_plan reads from `vramctl.core.plan.PlanResult`."""

    @property
    def ledger(self) -> Ledger: ...


@dataclass(frozen=True)
class ComparisonRow:
    name: str
    unit: str
    """`bytes`, `count` or `ratio`."""
    logged: float | None
    planned: float | None
    source: str | None = None
    """The logged term's source (`given` / `derived`) and line, for the reader."""

    @property
    def difference(self) -> float | None:
        if self.logged is None or self.planned is None:
            return None
        return self.planned - self.logged

    @property
    def percent(self) -> float | None:
        diff = self.difference
        if diff is None or self.logged is None or self.logged == 0:
            return None
        return 100.0 * diff / abs(self.logged)

    def to_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | int | None:
            if x is None:
                return None
            return round(x) if self.unit in ("bytes", "count") else round(x, 4)

        pct = self.percent
        return {
            "name": self.name,
            "unit": self.unit,
            "logged": num(self.logged),
            "planned": num(self.planned),
            "difference": num(self.difference),
            "percent": None if pct is None else round(pct, 2),
            "source": self.source,
        }


@dataclass(frozen=True)
class Comparison:
    rows: tuple[ComparisonRow, ...]
    settings: ServeSettings
    notes: tuple[str, ...] = ()

    def row(self, name: str) -> ComparisonRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"rows": [r.to_json() for r in self.rows], "notes": list(self.notes)}


def _attr(obj: object, *names: str) -> float | None:
    for name in names:
        value = getattr(obj, name, None)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _is_vllm_plan(plan_result: PlanLike) -> bool:
    """A vLLM PlanResult (its ledger books the pre-snapshot overhead with non-torch), not SGLang's plan."""
    return getattr(plan_result, "engine", "vllm") == "vllm" and hasattr(plan_result, "outside_budget_bytes")


def compare_with_plan(
    report: StartupReport, plan_result: PlanLike, settings: ServeSettings | None = None
) -> Comparison:
    """vramctl's plan beside the logged numbers, term by term (planned − logged, and % of logged)."""
    plan_ledger = plan_result.ledger
    logged_terms = {t.name: t for t in report.terms}
    planned_terms = {t.name: t for t in plan_ledger.terms}
    rows: list[ComparisonRow] = []
    rows.append(
        ComparisonRow(
            "capacity",
            "bytes",
            float(report.capacity_bytes) if report.capacity_bytes is not None else None,
            float(plan_ledger.capacity_bytes),
            report.capacity_source,
        )
    )
    rows.append(
        ComparisonRow(
            "requested",
            "bytes",
            float(report.requested_bytes) if report.requested_bytes is not None else None,
            _attr(plan_result, "requested_bytes", "requested_memory_bytes"),
        )
    )
    notes: list[str] = []
    for name in TERM_ORDER:
        logged = logged_terms.get(name)
        planned = planned_terms.get(name)
        if logged is None and planned is None:
            continue
        planned_bytes = float(planned.bytes) if planned is not None else None
        if name == NON_TORCH and planned is not None and _is_vllm_plan(plan_result):
            charged = float(charged_non_torch_bytes(plan_result))
            if charged != planned_bytes:
                notes.append(
                    f"non_torch planned: the {format_gib(int(charged))} charged to the budget; the plan's other "
                    f"{format_gib(int(planned.bytes - charged))} (CUDA context, cuBLAS, NCCL communicators) exist "
                    "before vLLM's init snapshot and are not in the log's figure"
                )
            planned_bytes = charged
        rows.append(
            ComparisonRow(
                name,
                "bytes",
                float(logged.bytes) if logged is not None else None,
                planned_bytes,
                logged.source.value if logged is not None else None,
            )
        )
    rows.append(
        ComparisonRow(
            "num_blocks",
            "count",
            float(report.num_blocks) if report.num_blocks is not None else None,
            _attr(plan_result, "num_blocks", "num_gpu_blocks"),
        )
    )
    rows.append(
        ComparisonRow(
            "kv_tokens",
            "count",
            float(report.kv_tokens) if report.kv_tokens is not None else None,
            _attr(plan_result, "kv_tokens", "max_total_num_tokens"),
        )
    )
    rows.append(
        ComparisonRow(
            "max_concurrency", "ratio", report.max_concurrency, _attr(plan_result, "max_concurrency")
        )
    )

    mm = getattr(getattr(plan_result, "settings", None), "mm_encoder", None)
    for key, planned_mm in (
        ("encoder_cache_budget_tokens", getattr(mm, "budget_tokens", None)),
        ("encoder_profile_items", getattr(mm, "items", None)),
    ):
        logged_mm = report.facts.get(key)
        if logged_mm is None and not planned_mm:  # only multimodal comparisons carry these rows
            continue
        rows.append(
            ComparisonRow(
                key,
                "count",
                logged_mm.value if logged_mm is not None else None,
                float(planned_mm) if planned_mm else None,
            )
        )

    def combined(name: str, parts: tuple[str, ...]) -> ComparisonRow | None:
        if not all(p in logged_terms for p in parts) or not all(p in planned_terms for p in parts):
            return None
        return ComparisonRow(
            name,
            "bytes",
            float(sum(logged_terms[p].bytes for p in parts)),
            float(sum(planned_terms[p].bytes for p in parts)),
            "derived",
        )

    if report.engine == "sglang" and SLACK in logged_terms:
        # SGLang does not measure activations: they live in what stays free (the slack) in the log, in an
        # estimated term in the plan. Compare the two together.
        rows.append(
            ComparisonRow(
                "activation_peak + slack",
                "bytes",
                float(sum(logged_terms[p].bytes for p in (ACTIVATION_PEAK, SLACK) if p in logged_terms)),
                float(sum(planned_terms[p].bytes for p in (ACTIVATION_PEAK, SLACK) if p in planned_terms)),
                "derived",
            )
        )
    elif report.semantics == "v1-consumed" and report.facts.get("cuda_graph_estimate") is None:
        both = combined("activation_peak + cuda_graph", (ACTIVATION_PEAK, CUDA_GRAPH))
        if both is not None:
            rows.append(both)
    if report.semantics == "v1-consumed" and report.facts.get("cuda_graph_estimate") is None:
        notes.append(
            "the log's activation peak includes the CUDA-graph estimate (≥0.28 wording); compare "
            "activation_peak + cuda_graph"
        )
    return Comparison(
        tuple(rows), settings if settings is not None else settings_from_report(report), tuple(notes)
    )
