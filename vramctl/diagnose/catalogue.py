"""Load and check the signature catalogue (catalogue.yaml, shipped inside the package).

The catalogue is data: signatures (keys, patterns, facts, cause, phase, weight, rules, fixes), frames,
progress markers, hints, engine and version lines, settings and per-cause fixes. This module turns it
into frozen, compiled objects and refuses a catalogue that breaks the contract (an unknown label or
phase, a regex that does not compile, an expression outside the small language, a fix placeholder that
nothing defines). `classify.py` applies it; nothing here knows a particular message.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from vramctl.diagnose.facts import UNITS, compile_expression, placeholders, settings_pattern
from vramctl.diagnose.yamlcache import load_built_cached, load_yaml_cached

CATALOGUE_PATH = Path(__file__).with_name("catalogue.yaml")

LABELS: tuple[str, ...] = (
    "gpu-util-exceeds-free-memory",
    "version-regression",
    "weights-do-not-fit",
    "no-kv-cache-memory",
    "kv-cache-too-small-for-max-model-len",
    "kv-pool-overcommit",
    "multi-gpu-imbalance",
    "batch-budget-too-large",
    "sampler-warmup-oom",
    "multimodal-profiling-oom",
    "cuda-graph-capture-oom",
    "logprobs-spike",
    "activation-spike",
    "allocator-fragmentation",
    "kv-pool-exhausted-runtime",
    "memory-leak",
    "non-torch-allocation-oom",
    "attention-workspace-overflow",
    "host-pinned-memory-failure",
    "host-swap-space-exhausted",
    "host-kv-buffer-exhausted",
    "host-oom-killer",
    "host-shm-exhausted",
    "not-oom",
    "no-failure",
)
"""The cause labels explain-oom reports (docs/explain-oom.md): a public contract (never renamed)."""

PHASES: tuple[str, ...] = (
    "startup-check",
    "weights-load",
    "profiling",
    "graph-capture",
    "kv-alloc",
    "serving",
    "host-tier",
    "unknown",
)
"""The phases explain-oom reports (docs/explain-oom.md)."""

KINDS = ("failure", "consequence", "facts")
CONFIDENCES = ("high", "medium", "low")


class CatalogueError(ValueError):
    """The catalogue breaks its schema: a bug in the shipped data, not user input."""


@dataclass(frozen=True, slots=True)
class Fix:
    action: str
    flag: str | None
    value: str | None
    reason: str
    let: tuple[tuple[str, ast.Expression], ...] = ()
    when: ast.Expression | None = None
    engine: str | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    when: ast.Expression
    when_text: str
    cause: str | None
    phase: str | None
    confidence: str | None
    why: str | None


@dataclass(frozen=True, slots=True)
class Repeat:
    min_count: int
    cause: str
    phase: str | None
    confidence: str | None
    why: str | None


_GROUP_NAME_RE = re.compile(r"(?<!\\)\(\?P<([A-Za-z_]\w*)>")


class LazyPattern:
    """A signature's regex, compiled on first use. The shipped catalogue has some 250 patterns and a run uses the
    few whose keys its log holds: compiling all of them cost more than the rest of a small log's diagnosis. The
    group names come from the text (`(?P<name>`); the test suite compiles every shipped pattern."""

    __slots__ = ("_compiled", "groupindex", "pattern")

    def __init__(self, pattern: str, compiled: re.Pattern[str] | None = None) -> None:
        self.pattern = pattern
        self._compiled = compiled
        self.groupindex: Mapping[str, int] = (
            compiled.groupindex
            if compiled is not None
            else {name: i for i, name in enumerate(_GROUP_NAME_RE.findall(pattern), 1)}
        )

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        return self.compiled.search(text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LazyPattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"


@dataclass(frozen=True, slots=True)
class Signature:
    id: str
    kind: str
    cause: str | None
    phase: str | None
    default_phase: str | None
    weight: int
    confidence: str
    engine: str | None
    what: str | None
    keys: tuple[str, ...]
    patterns: tuple[LazyPattern, ...]
    units: tuple[tuple[str, str], ...]
    multiline: int
    """How many following lines the patterns also see (0: the line alone; `true` in the YAML is 2)."""
    when: ast.Expression | None
    derive: tuple[tuple[str, ast.Expression], ...]
    refine: tuple[Rule, ...]
    repeat: Repeat | None
    fixes: tuple[Fix, ...]
    do_not: tuple[str, ...]
    head_only: bool = False
    consequence_of_memory: bool = False
    """A failure that follows a memory failure when both are in one incident (an NCCL timeout or error on the ranks
    that wait for the one that died, a crash while shutting down): then the memory failure is the root."""
    report_words: bool = False
    """A failure told in a person's words (an issue title, a report's sentences): it outranks the generic vocabulary
    in its incident but never an engine's or runtime's own failure message (in its incident or in another one)."""
    vocabulary: bool = False
    """The generic vocabulary beneath the catalogue (any wording of "memory ran out"): not an engine's own message."""


@dataclass(frozen=True, slots=True)
class FrameRule:
    functions: frozenset[str]
    files: frozenset[str]
    phase: str
    rank: int
    hint: str | None
    yield_to: tuple[str, ...] = ()
    """Phases of a later progress marker that place the failure instead (a frame that spans several steps)."""
    paths: tuple[str, ...] = ()
    """When set, a `functions` match counts only in a file whose path contains one of these (`__init__` of a layer)."""

    def matches(self, func: str, file: str) -> bool:
        base = file.rsplit("/", 1)[-1]
        if base in self.files:
            return True
        return func in self.functions and (not self.paths or any(p in file for p in self.paths))


@dataclass(frozen=True, slots=True)
class Marker:
    keys: tuple[str, ...]
    phase: str
    """The phase the engine is in AFTER this line (what a failure after it interrupts)."""
    done: str | None = None
    """The phase this line reports finished (a result line): where a log that ends here stopped."""


@dataclass(frozen=True, slots=True)
class VersionLine:
    keys: tuple[str, ...]
    pattern: re.Pattern[str]
    engine: str


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    regex: LazyPattern
    """Compiled on first use: a line is read for a setting only when it holds one of `words`."""
    unit: str
    words: tuple[str, ...] = ()
    """The literal words one of which every match of `regex` holds (the setting's key and its flags)."""


@dataclass(frozen=True, slots=True)
class CauseInfo:
    summary: str
    fixes: tuple[Fix, ...]
    do_not: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PhaseGuess:
    when: ast.Expression
    phase: str
    why: str


@dataclass(frozen=True)
class Catalogue:
    signatures: tuple[Signature, ...]
    causes: dict[str, CauseInfo]
    frames: tuple[FrameRule, ...]
    markers: tuple[Marker, ...]
    hints: dict[str, tuple[str, ...]]
    global_hints: dict[str, tuple[str, ...]]
    engines: dict[str, tuple[str, ...]]
    versions: tuple[VersionLine, ...]
    settings: tuple[Setting, ...]
    settings_keys: tuple[str, ...]
    method_keys: tuple[str, ...]
    constants: tuple[tuple[str, ast.Expression], ...]
    phase_guess: tuple[PhaseGuess, ...]
    head_bytes: int
    back_bytes: int
    failure_anchors: tuple[bytes, ...]
    """Searched everywhere: every failure signature has a key that contains one of these."""
    all_anchors: tuple[bytes, ...]
    """Searched in the head of the log and around failures: every key contains one of these."""
    key_words: tuple[bytes, ...]
    """Every key phrase, as bytes (the line-level filter after the anchors: `key_regex`, or one native pass)."""
    keys_to_signatures: dict[str, tuple[int, ...]]
    frame_regex: re.Pattern[str]
    method_regex: re.Pattern[str]
    decisions: dict[str, tuple[Rule, ...]] = dataclass_field(default_factory=dict)
    """The decision tables (facts -> label), by name, in rule order."""

    @cached_property
    def key_regex(self) -> re.Pattern[bytes]:
        """One alternation of every key (a trie): the exact line-level filter after the anchors. Compiled on first use:
        a run with the native key search (`literals.native_key_finder`) never needs it."""
        return re.compile(trie_regex(list(self.key_words)))

    @cached_property
    def marker_phrases(self) -> dict[str, tuple[Marker, int]]:
        """Every key phrase that holds a progress marker's key -> (that marker, its rank in the markers list). The
        key search finds the longest phrase at each place (`# GPU blocks:` of a facts line, not the marker's `# GPU
        blocks` inside it), so a marker also answers to the catalogue's longer phrases that contain its key."""
        out: dict[str, tuple[Marker, int]] = {}
        for rank, marker in enumerate(self.markers):
            for key in marker.keys:
                out[key] = (marker, rank)
        for phrase in self._all_keys():
            if phrase in out:
                continue
            for rank, marker in enumerate(self.markers):
                if any(key in phrase for key in marker.keys):
                    out[phrase] = (marker, rank)
        return out

    def key_phrases(self) -> list[str]:
        """Every literal key phrase (for `grep -F` / `grep -E` baselines and docs)."""
        return sorted(self._all_keys())

    def _all_keys(self) -> set[str]:
        keys: set[str] = set()
        for sig in self.signatures:
            keys.update(sig.keys)
        for marker in self.markers:
            keys.update(marker.keys)
        for words in (*self.hints.values(), *self.global_hints.values()):
            keys.update(words)
        for version in self.versions:
            keys.update(version.keys)
        keys.update(self.settings_keys)
        keys.update(self.method_keys)
        keys.add('File "')
        return keys


def _with_containing_keys(sig: Signature, cat_keys: set[str], containing: dict[str, set[str]] | None = None) -> Signature:
    """The signature with every catalogue key that contains one of its keys added. `containing` memoises, per key,
    the catalogue keys holding it (signatures share keys: ~60 % fewer substring tests at start-up)."""
    own = set(sig.keys)
    if containing is None:
        containing = {}
    holders: set[str] = set()
    for key in own:
        found = containing.get(key)
        if found is None:
            found = containing[key] = {k for k in cat_keys if key in k}
        holders |= found
    longer = sorted(holders - own)
    return replace(sig, keys=(*sig.keys, *longer)) if longer else sig


def _holders(cat_keys: set[str], keys: set[str]) -> dict[str, set[str]]:
    """For each of `keys`, the catalogue keys that contain it (`{k for k in cat_keys if key in k}`), found with
    `str.find` over the catalogue keys joined by newlines (no key holds one, so an occurrence lies inside one key):
    ~350 finds instead of ~200,000 substring tests at start-up. Keys holding a newline (none ship) are tested one
    by one."""
    ordered = sorted(cat_keys)
    blob = "\n".join(ordered)
    starts: list[int] = []
    pos = 0
    for k in ordered:
        starts.append(pos)
        pos += len(k) + 1
    plain = not any("\n" in k for k in ordered)
    out: dict[str, set[str]] = {}
    for key in keys:
        if not plain or not key or "\n" in key:
            out[key] = {k for k in cat_keys if key in k}
            continue
        found: set[str] = set()
        i = blob.find(key)
        while i >= 0:
            found.add(ordered[bisect.bisect_right(starts, i) - 1])
            i = blob.find(key, i + 1)
        out[key] = found
    return out


def _expr(text: Any, where: str) -> ast.Expression:
    if not isinstance(text, str):
        raise CatalogueError(f"{where}: expression must be a string, got {text!r}")
    try:
        return compile_expression(text)
    except (SyntaxError, ValueError) as exc:
        raise CatalogueError(f"{where}: {exc}") from None


def _lets(raw: Any, where: str) -> tuple[tuple[str, ast.Expression], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: must be a mapping of name -> expression")
    return tuple((str(k), _expr(v, f"{where}.{k}")) for k, v in raw.items())


def _check_label(value: Any, where: str, *, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if value not in LABELS:
        raise CatalogueError(f"{where}: {value!r} is not a taxonomy label")
    return str(value)


def _check_phase(
    value: Any, where: str, *, allow_context: bool = True, allow_none: bool = True
) -> str | None:
    if value is None and allow_none:
        return None
    if value == "context" and allow_context:
        return "context"
    if value not in PHASES:
        raise CatalogueError(f"{where}: {value!r} is not a phase")
    return str(value)


def _confidence(value: Any, where: str, default: str | None = None) -> str | None:
    if value is None:
        return default
    if value not in CONFIDENCES:
        raise CatalogueError(f"{where}: confidence {value!r} is not one of {CONFIDENCES}")
    return str(value)


def _fix(raw: dict[str, Any], where: str, known: set[str]) -> Fix:
    for field in ("action", "reason"):
        if not isinstance(raw.get(field), str):
            raise CatalogueError(f"{where}: `{field}` is required")
    lets = _lets(raw.get("let"), f"{where}.let")
    defined = known | {name for name, _ in lets}
    texts = [raw["action"], raw["reason"], str(raw.get("flag") or ""), str(raw.get("value") or "")]
    for text in texts:
        for name in placeholders(text):
            if name not in defined:
                raise CatalogueError(f"{where}: placeholder {{{name}}} is not a fact, constant or let")
    return Fix(
        action=raw["action"],
        flag=None if raw.get("flag") is None else str(raw["flag"]),
        value=None if raw.get("value") is None else str(raw["value"]),
        reason=raw["reason"],
        let=lets,
        when=_expr(raw["when"], f"{where}.when") if raw.get("when") is not None else None,
        engine=raw.get("engine"),
    )


MULTILINE_DEFAULT = 2
MULTILINE_MAX = 8


def _multiline(value: Any, where: str) -> int:
    """`multiline: true` (the next 2 lines) or a number of following lines (messages printed over more lines)."""
    if isinstance(value, bool):
        return MULTILINE_DEFAULT if value else 0
    if isinstance(value, int) and 0 <= value <= MULTILINE_MAX:
        return value
    raise CatalogueError(f"{where}: multiline must be true/false or 0..{MULTILINE_MAX}, got {value!r}")


def _compile(pattern: Any, where: str) -> re.Pattern[str]:
    if not isinstance(pattern, str):
        raise CatalogueError(f"{where}: pattern must be a string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise CatalogueError(f"{where}: bad regex: {exc}") from None


def _pattern(pattern: Any, where: str, lazy: bool) -> LazyPattern:
    if lazy and isinstance(pattern, str):
        return LazyPattern(pattern)
    return LazyPattern(pattern, _compile(pattern, where))


def load_catalogue(path: Path | None = None) -> Catalogue:
    """Read, check and compile a catalogue (the shipped one by default, cached: its signatures' patterns are
    compiled on first use; a catalogue given by path is compiled whole, every regex checked)."""
    if path is None:
        return _shipped()
    return _load(path)


@lru_cache(maxsize=1)
def _shipped() -> Catalogue:
    # built once per content and code, then unpickled (yamlcache.py); the modules whose code shapes the objects
    from vramctl.core import units
    from vramctl.diagnose import facts

    sources = (Path(__file__), Path(facts.__file__), Path(units.__file__))
    return load_built_cached(CATALOGUE_PATH, _build_shipped, sources)


def _build_shipped() -> Catalogue:
    """The shipped catalogue as it is pickled: with its marker phrases already worked out (every key phrase against
    every marker's keys, ~0.012 s that every run paid; a cached property, so the pickle keeps the value)."""
    cat = _load(CATALOGUE_PATH, lazy=True)
    cat.marker_phrases  # noqa: B018 - computed now, kept in the instance's __dict__
    return cat


def _rule(r: Any, where: str) -> Rule:
    if not isinstance(r, dict):
        raise CatalogueError(f"{where}: a rule is a mapping with `when`")
    return Rule(
        when=_expr(r.get("when"), where),
        when_text=str(r.get("when")),
        cause=_check_label(r.get("cause"), where, allow_none=True),
        phase=_check_phase(r.get("phase"), where),
        confidence=_confidence(r.get("confidence"), where),
        why=r.get("why"),
    )


def _load(path: Path, *, lazy: bool = False) -> Catalogue:
    if lazy:  # the shipped file: parsed once per content, then read from its marshal cache (yamlcache.py)
        data = load_yaml_cached(path)
    else:
        import yaml  # imported here: a run with the cached shipped catalogue never needs PyYAML

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 10x faster start-up
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)  # a safe loader (CSafeLoader)
    if not isinstance(data, dict) or data.get("version") != 1:
        raise CatalogueError(f"{path}: not a version-1 catalogue")

    # Every fact name any pattern, derive, setting or constant can produce: placeholders must use these.
    known: set[str] = {
        "count",
        "requested_pct",
        "allocated_pct",
        "weights_pct",
        "engine",
        "engine_version",
        "previous_version",
        "new_version",
    }
    constants = _lets(data.get("constants"), "constants")
    known.update(name for name, _ in constants)
    settings: list[Setting] = []
    for name, spec in (data.get("settings") or {}).items():
        unit = spec.get("unit", "word")
        if unit not in UNITS:
            raise CatalogueError(f"settings.{name}: unknown unit {unit!r}")
        # `key`: the word the log prints (`dtype=torch.float32`) when the fact's name differs (`dtype_bits`)
        key = str(spec.get("key", name))
        flags = tuple(str(f) for f in spec.get("flags") or ())
        pattern = settings_pattern(key, flags)
        regex = LazyPattern(pattern) if lazy else LazyPattern(pattern, _compile(pattern, f"settings.{name}"))
        settings.append(Setting(str(name), regex, unit, (key, *flags)))
        known.add(str(name))
    for raw in data["signatures"]:
        for pattern in raw.get("pattern") if isinstance(raw.get("pattern"), list) else [raw.get("pattern")]:
            if isinstance(pattern, str):
                known.update(_pattern(pattern, f"signature {raw.get('id')}", lazy).groupindex)
        known.update((raw.get("derive") or {}).keys())

    # Decision tables: ordered rules over an incident's fact record, shared by every wording that maps to the same
    # kind of failure (a signature's `refine` splices one in with `{use: name}`)
    decisions: dict[str, tuple[Rule, ...]] = {}
    for name, rules in (data.get("decisions") or {}).items():
        decisions[str(name)] = tuple(_rule(r, f"decisions.{name}") for r in rules or ())
    signatures: list[Signature] = []
    seen_ids: set[str] = set()
    for raw in data["signatures"]:
        sid = raw.get("id")
        where = f"signature {sid}"
        if not isinstance(sid, str) or sid in seen_ids:
            raise CatalogueError(f"{where}: missing or duplicate id")
        seen_ids.add(sid)
        kind = raw.get("kind", "failure")
        if kind not in KINDS:
            raise CatalogueError(f"{where}: kind {kind!r} is not one of {KINDS}")
        keys = tuple(str(k) for k in raw.get("keys") or ())
        if not keys:
            raise CatalogueError(f"{where}: needs at least one key")
        patterns_raw = raw.get("pattern")
        patterns = tuple(
            _pattern(p, where, lazy) for p in (patterns_raw if isinstance(patterns_raw, list) else [patterns_raw])
        )
        units = dict(raw.get("units") or {})
        for name, unit in units.items():
            if unit not in UNITS:
                raise CatalogueError(f"{where}: unit {unit!r} of {name} is not one of {UNITS}")
        groups = set().union(*(p.groupindex for p in patterns))
        for group in groups:
            if group not in units:
                raise CatalogueError(f"{where}: group {group!r} has no unit")
            if units[group] in ("GiB", "MiB", "KiB", "bytes", "size", "size-decimal") and not group.endswith(
                "_bytes"
            ):
                raise CatalogueError(f"{where}: size fact {group!r} must end in _bytes")
        cause = None if kind == "facts" else _check_label(raw.get("cause"), where)
        if cause == "no-failure":
            raise CatalogueError(f"{where}: no-failure is the absence of a signature, not one")
        refine_list: list[Rule] = []
        for r in raw.get("refine") or ():
            if isinstance(r, dict) and set(r) == {"use"}:
                if r["use"] not in decisions:
                    raise CatalogueError(f"{where}.refine: no decision table {r['use']!r}")
                refine_list.extend(decisions[r["use"]])
            else:
                refine_list.append(_rule(r, f"{where}.refine"))
        refine = tuple(refine_list)
        rep = raw.get("repeat")
        repeat = (
            Repeat(
                min_count=int(rep["min"]),
                cause=str(_check_label(rep.get("cause"), f"{where}.repeat")),
                phase=_check_phase(rep.get("phase"), f"{where}.repeat"),
                confidence=_confidence(rep.get("confidence"), f"{where}.repeat"),
                why=rep.get("why"),
            )
            if rep
            else None
        )
        signatures.append(
            Signature(
                id=sid,
                kind=kind,
                cause=cause,
                phase=_check_phase(raw.get("phase"), where),
                default_phase=_check_phase(raw.get("default_phase"), where, allow_context=False),
                weight=int(raw.get("weight", 0)),
                confidence=str(_confidence(raw.get("confidence"), where, "medium")),
                engine=raw.get("engine"),
                what=raw.get("what"),
                keys=keys,
                patterns=patterns,
                units=tuple(units.items()),
                multiline=_multiline(raw.get("multiline", False), where),
                when=_expr(raw["when"], f"{where}.when") if raw.get("when") is not None else None,
                derive=_lets(raw.get("derive"), f"{where}.derive"),
                refine=refine,
                repeat=repeat,
                fixes=tuple(
                    _fix(f, f"{where}.fixes[{i}]", known) for i, f in enumerate(raw.get("fixes") or ())
                ),
                do_not=tuple(str(d) for d in raw.get("do_not") or ()),
                head_only=bool(raw.get("head_only", False)),
                consequence_of_memory=bool(raw.get("consequence_of_memory", False)),
                report_words=bool(raw.get("report_words", False)),
                vocabulary=bool(raw.get("vocabulary", False)),
            )
        )

    causes: dict[str, CauseInfo] = {}
    for label, info in (data.get("causes") or {}).items():
        _check_label(label, f"causes.{label}")
        causes[label] = CauseInfo(
            summary=str(info.get("summary", "")),
            fixes=tuple(
                _fix(f, f"causes.{label}.fixes[{i}]", known) for i, f in enumerate(info.get("fixes") or ())
            ),
            do_not=tuple(str(d) for d in info.get("do_not") or ()),
        )
    missing = set(LABELS) - set(causes) - {"no-failure"}
    if missing:
        raise CatalogueError(f"causes: no entry for {sorted(missing)}")

    frames = tuple(
        FrameRule(
            functions=frozenset(f.get("functions") or ()),
            files=frozenset(f.get("files") or ()),
            phase=str(_check_phase(f.get("phase"), "frames", allow_context=False, allow_none=False)),
            rank=int(f.get("rank", 0)),
            hint=f.get("hint"),
            yield_to=tuple(
                str(_check_phase(p, "frames.yield_to", allow_context=False, allow_none=False))
                for p in f.get("yield_to") or ()
            ),
            paths=tuple(str(p) for p in f.get("paths") or ()),
        )
        for f in data.get("frames") or ()
    )
    markers = tuple(
        Marker(
            keys=tuple(m["keys"]),
            phase=str(_check_phase(m.get("phase"), "markers", allow_context=False, allow_none=False)),
            done=_check_phase(m.get("done"), "markers", allow_context=False),
        )
        for m in data.get("markers") or ()
    )
    hints = {str(k): tuple(v) for k, v in (data.get("hints") or {}).items()}
    global_hints = {str(k): tuple(v) for k, v in (data.get("global_hints") or {}).items()}
    engines = {str(k): tuple(v) for k, v in (data.get("engines") or {}).items()}
    versions = tuple(
        VersionLine(tuple(v["keys"]), _compile(v["pattern"], "versions"), str(v["engine"]))
        for v in data.get("versions") or ()
    )
    phase_guess = tuple(
        PhaseGuess(
            _expr(g["when"], "phase_guess"),
            str(_check_phase(g["phase"], "phase_guess", allow_context=False, allow_none=False)),
            str(g.get("why", "")),
        )
        for g in data.get("phase_guess") or ()
    )
    settings_keys = tuple(str(k) for k in data.get("settings_keys") or ())
    method_keys = tuple(str(k) for k in data.get("method_keys") or ())

    # Anchors: the declared ones, plus every key no anchor covers (it becomes its own head anchor).
    declared = [(str(a["text"]), bool(a.get("failure", False))) for a in data.get("anchors") or ()]
    failure_anchors = [a for a, failure in declared if failure]
    all_anchors = [a for a, _ in declared]
    for sig in signatures:
        if (
            sig.kind == "failure"
            and not sig.head_only
            and not any(a in k for k in sig.keys for a in failure_anchors)
        ):
            raise CatalogueError(
                f"signature {sig.id}: no key contains a failure anchor {failure_anchors}: "
                "it would not be found past the head of a large log"
            )
    cat_keys = _collect_keys(
        signatures, markers, {**hints, **global_hints}, versions, settings_keys + method_keys
    )
    for key in sorted(cat_keys):
        if not any(a in key for a in all_anchors):
            all_anchors.append(key)
    # the key regex finds non-overlapping phrases (the longest at each place): a line whose longer phrase belongs to
    # another signature or a hint (`due to high memory usage`) also holds every shorter key inside it
    # (`high memory usage`), so each signature also answers to the catalogue's keys that contain one of its own
    containing = _holders(cat_keys, {key for sig in signatures for key in sig.keys})
    signatures = [_with_containing_keys(sig, cat_keys, containing) for sig in signatures]
    keys_to_signatures: dict[str, list[int]] = {}
    for index, sig in enumerate(signatures):
        for key in sig.keys:
            keys_to_signatures.setdefault(key, []).append(index)

    return Catalogue(
        signatures=tuple(signatures),
        causes=causes,
        frames=frames,
        markers=markers,
        hints=hints,
        global_hints=global_hints,
        engines=engines,
        versions=versions,
        settings=tuple(settings),
        settings_keys=settings_keys,
        method_keys=method_keys,
        constants=constants,
        phase_guess=phase_guess,
        decisions=decisions,
        head_bytes=int(data.get("head_bytes", 8 << 20)),
        back_bytes=int(data.get("back_bytes", 512 << 10)),
        failure_anchors=tuple(a.encode() for a in failure_anchors),
        all_anchors=tuple(a.encode() for a in all_anchors),
        key_words=tuple(sorted(k.encode() for k in cat_keys)),
        keys_to_signatures={k: tuple(v) for k, v in keys_to_signatures.items()},
        frame_regex=re.compile(r'File "(?P<file>[^"]+)", line \d+, in (?P<func>[\w<>.]+)'),
        method_regex=re.compile(r"(?:while processing method|Error executing method) '?(?P<func>\w+)"),
    )


def trie_regex(words: list[bytes]) -> bytes:
    """One regex matching any of `words`, factored as a trie (`ab(?:c|d)`): SRE then tests one byte per
    branch instead of every alternative at every position, which is ~20x faster than a flat `a|b|c`.
    Longer words win over their prefixes (a trie node with an end takes the continuation first)."""
    trie: dict[int, Any] = {}
    for word in words:
        node = trie
        for byte in word:
            node = node.setdefault(byte, {})
        node[-1] = {}

    def build(node: dict[int, Any]) -> bytes:
        ends = -1 in node
        branches = [re.escape(bytes([b])) + build(child) for b, child in sorted(node.items()) if b != -1]
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        if ends:
            return b"(?:" + body + b")?"
        return body

    return build(trie)


def _collect_keys(
    signatures: list[Signature],
    markers: tuple[Marker, ...],
    hints: dict[str, tuple[str, ...]],
    versions: tuple[VersionLine, ...],
    settings_keys: tuple[str, ...],
) -> set[str]:
    keys: set[str] = {'File "'}
    for sig in signatures:
        keys.update(sig.keys)
    for marker in markers:
        keys.update(marker.keys)
    for words in hints.values():
        keys.update(words)
    for version in versions:
        keys.update(version.keys)
    keys.update(settings_keys)
    return keys
