"""The inventory of memory-related messages, read from the engines' and runtimes' own sources.

`inventory.yaml` (shipped inside the package) lists every memory-related message site found in the sources
of vLLM, SGLang, PyTorch's CUDA caching allocator, NCCL, FlashInfer, flash-attn, xformers, Triton, cuBLAS /
cuDNN, the CUDA runtime and driver, Ray, Kubernetes / kubelet / containerd / Docker and the Linux kernel
(OOM killer, cgroup v1 / v2): one entry per message, with the component, the source file, the versions
that print it, the kind of site (raise, logger, assert, TORCH_CHECK, kernel, kubelet ...), a tolerant
regex, an example line and the facts it states (or `not-oom`: memory words, but no allocation failure).
docs/explain-oom-inventory.md describes the schema and how to add an entry.

This module is pure (no torch, typer or rich): `load_inventory()` validates and compiles the file once;
`match(text)` returns the best entry for a line or a short block of lines, with its numbers converted
(sizes to int bytes, counts to numbers). Matching is tolerant of what happens to log text on its way to
an issue thread: runs of whitespace (hard wraps, padding) collapse to one space, JSON-escaped newlines
and tabs are spaces, escaped ANSI colour codes are dropped, and an entry whose full pattern no longer
matches (an `...` elision, a cut line) still matches on its `anchor` phrase, without numbers
(`partial=True`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from vramctl.diagnose.catalogue import LABELS as CATALOGUE_LABELS
from vramctl.diagnose.catalogue import PHASES as CATALOGUE_PHASES
from vramctl.diagnose.yamlcache import load_yaml_cached

INVENTORY_PATH = Path(__file__).with_name("inventory.yaml")

COMPONENTS: tuple[str, ...] = (
    "vllm",
    "sglang",
    "torch",
    "cuda",
    "nccl",
    "flashinfer",
    "flash-attn",
    "xformers",
    "triton",
    "cublas-cudnn",
    "ray",
    "kubernetes",
    "docker-containerd",
    "linux",
    "python",
    "tgi",
    "tensorrt-llm",
)
"""Where a message comes from (`component` of an entry)."""

SITES: tuple[str, ...] = (
    "raise",
    "logger",
    "assert",
    "TORCH_CHECK",
    "C10_CUDA_CHECK",
    "kernel",
    "kubelet",
    "runtime",
    "error-string",
    "exception-class",
    "warn",
    "stderr",
    "shell",
)
"""How the message is emitted (`site`)."""

KINDS: tuple[str, ...] = (
    "cuda-oom",
    "driver-oom",
    "host-oom",
    "kv-budget",
    "kv-too-small",
    "startup-free",
    "imbalance",
    "sampler",
    "weights",
    "graph-capture",
    "workspace",
    "nccl",
    "cublas",
    "pinned",
    "shm",
    "swap",
    "pool-exhausted",
    "host-kv-buffer",
    "leak",
    "accounting",
    "consequence",
    "not-oom",
)
"""What a message says happened (`facts.kind`). `consequence` and `not-oom` are not failures of memory:
a consequence (a worker or engine that died, a watchdog) follows a root failure elsewhere in the log;
`not-oom` carries memory words without an allocation failure."""

NON_FAILURE_KINDS = frozenset({"consequence", "not-oom"})

LABELS: tuple[str, ...] = tuple(label for label in CATALOGUE_LABELS if label != "no-failure")
"""The cause labels explain-oom reports (docs/explain-oom.md); a label hint must be one of them."""

PHASES = CATALOGUE_PHASES

MIN_PARTIAL_ANCHOR = 12
"""An entry matches on its anchor alone (an elided or cut message, no numbers) only when every anchor has
at least this many characters: a short anchor is a prefilter, not evidence."""

_SIZE_SUFFIXES = ("_gib", "_mib", "_kib", "_gb", "_mb", "_kb", "_bytes")
_UNIT_BYTES: dict[str, int] = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 1 << 10,  # the kernel's "kB" and most logs' "KB" are KiB
    "k": 1 << 10,
    "mb": 1 << 20,
    "m": 1 << 20,
    "gb": 1 << 30,  # SGLang and torch-era logs print GiB as "GB"; entries with decimal_units say otherwise
    "g": 1 << 30,
    "tb": 1 << 40,
}
_DECIMAL_UNIT_BYTES: dict[str, int] = {
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
}
_SIZE_RE = re.compile(r"^\s*(-?[\d,]*\.?\d+)\s*([A-Za-z]*)\s*$")
_ANSI_ESCAPED = re.compile(r"(?:\\x1b|\\u001b|\\033|#033|\x1b)\[[0-9;]*m")
_JSON_WS = re.compile(r"\\[nrt]")
_SPACES = re.compile(r"\s+")
_QUOTE_MARK = re.compile(r"(?m)^[ \t]*(?:>[ \t]?)+")
_LINE_BREAK = re.compile(r"[ \t]*(?:\r?\n|\\n)[ \t]*")
_LITERAL_SPACE = re.compile(r"(?<!\\) +")


class InventoryError(ValueError):
    """inventory.yaml breaks its schema (a message names the entry and the field)."""


@dataclass(frozen=True)
class Facts:
    """What a message states: a failure or not, its kind, and hints for the label and the phase."""

    failure: bool
    kind: str
    label: str | None = None
    phase: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class InventoryEntry:
    """One message site in one component's sources."""

    id: str
    component: str
    source: str
    versions: str
    site: str
    url: str | None
    message: str
    pattern: str
    anchors: tuple[str, ...]
    partial: bool
    examples: tuple[str, ...]
    facts: Facts | None
    unmapped: str | None
    decimal_units: bool
    priority: int
    tolerant: str = field(repr=False, compare=False)
    """The pattern as compiled (placeholders expanded, spaces made tolerant)."""

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The compiled pattern (on first use: a run that looks up a few entries compiles a few)."""
        return re.compile(self.tolerant, re.IGNORECASE)

    @property
    def mapped(self) -> bool:
        """True when the entry says what the message means (a failure's facts, or not-oom)."""
        return self.facts is not None

    @property
    def failure(self) -> bool:
        """True when the message states a memory failure (False for not-oom, consequences and unmapped sites)."""
        return self.facts is not None and self.facts.failure


@dataclass(frozen=True)
class InventoryMatch:
    """An inventory entry found in a piece of log text, with the numbers its pattern captured."""

    entry: InventoryEntry
    text: str
    values: Mapping[str, int | float]
    partial: bool

    @property
    def failure(self) -> bool:
        return self.entry.facts is not None and self.entry.facts.failure

    @property
    def kind(self) -> str | None:
        return None if self.entry.facts is None else self.entry.facts.kind

    @property
    def label(self) -> str | None:
        return None if self.entry.facts is None else self.entry.facts.label

    @property
    def phase(self) -> str | None:
        return None if self.entry.facts is None else self.entry.facts.phase


def normalise(text: str) -> str:
    """Text as the patterns see it: markdown quote marks, escaped newlines and ANSI codes gone, whitespace
    runs one space."""
    text = _ANSI_ESCAPED.sub("", text)
    text = _QUOTE_MARK.sub("", text)
    text = _JSON_WS.sub(" ", text)
    return _SPACES.sub(" ", text).strip()


def joined(text: str) -> str:
    """Like `normalise`, but a line break (with the indentation around it) joins the lines with nothing
    between them: a hard wrap at a fixed column splits words, and this puts them back together."""
    text = _ANSI_ESCAPED.sub("", text)
    text = _QUOTE_MARK.sub("", text)
    text = _LINE_BREAK.sub("", text)
    return normalise(text)


_PLACEHOLDER = re.compile(r"\{(size|num|word|any)(?::([a-z_][a-z0-9_]*))?\}")
_PLACEHOLDER_RE: dict[str, str] = {
    "size": r"-?[\d.,]*\d\s*(?:[KMGT]i?B|[KMGT]|B|bytes)",
    "num": r"-?[\d,]*\.?\d+",
    "word": r"[^\s,;()\[\]'\"]+",
    "any": r".*?",
}


def _expand(found: re.Match[str]) -> str:
    body = _PLACEHOLDER_RE[found.group(1)]
    name = found.group(2)
    return body if name is None else f"(?P<{name}>{body})"


def _tolerant(pattern: str) -> str:
    """Placeholders (`{size:tried}`, `{num:total_gib}`, `{word:pid}`, `{any}`) become named groups; a
    literal space matches any run of whitespace (or none, where a hard wrap split the phrase)."""
    return _PLACEHOLDER.sub(_expand, _LITERAL_SPACE.sub(r"\\s*", pattern))


def _bad(entry_id: str, what: str) -> InventoryError:
    return InventoryError(f"inventory.yaml entry {entry_id!r}: {what}")


def _text(raw: Mapping[str, Any], key: str, entry_id: str, *, required: bool = True) -> str | None:
    value = raw.get(key)
    if value is None:
        if required:
            raise _bad(entry_id, f"missing {key!r}")
        return None
    if not isinstance(value, str) or not value.strip():
        raise _bad(entry_id, f"{key!r} must be a non-empty string")
    return value


_ENTRY_KEYS = frozenset(
    {
        "id",
        "component",
        "source",
        "versions",
        "site",
        "url",
        "message",
        "pattern",
        "anchor",
        "partial",
        "example",
        "examples",
        "facts",
        "unmapped",
        "decimal_units",
        "priority",
    }
)
_FACT_KEYS = frozenset({"failure", "kind", "label", "phase", "note"})


def _facts(raw: Any, entry_id: str) -> Facts:
    if raw == "not-oom":
        return Facts(failure=False, kind="not-oom", label="not-oom")
    if not isinstance(raw, Mapping):
        raise _bad(entry_id, "facts must be a mapping or the string 'not-oom'")
    unknown = set(raw) - _FACT_KEYS
    if unknown:
        raise _bad(entry_id, f"unknown facts keys {sorted(unknown)}")
    failure = raw.get("failure")
    if not isinstance(failure, bool):
        raise _bad(entry_id, "facts.failure must be true or false")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise _bad(entry_id, f"facts.kind {kind!r} is not one of {', '.join(KINDS)}")
    if failure == (kind in NON_FAILURE_KINDS):
        raise _bad(entry_id, f"facts.failure {failure} contradicts kind {kind!r}")
    label = raw.get("label")
    if label is not None and label not in LABELS:
        raise _bad(entry_id, f"facts.label {label!r} is not a cause label")
    if kind == "not-oom":
        label = "not-oom"
    elif label == "not-oom":
        raise _bad(entry_id, "facts.label not-oom on a failure")
    phase = raw.get("phase")
    if phase is not None and phase not in PHASES:
        raise _bad(entry_id, f"facts.phase {phase!r} is not one of {', '.join(PHASES)}")
    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise _bad(entry_id, "facts.note must be a string")
    return Facts(failure=failure, kind=str(kind), label=label, phase=phase, note=note)


def _entry(raw: Any, index: int, check: bool = True) -> InventoryEntry:
    if not isinstance(raw, Mapping):
        raise InventoryError(f"inventory.yaml entry #{index}: not a mapping")
    entry_id = raw.get("id")
    if not isinstance(entry_id, str) or not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", entry_id):
        raise InventoryError(f"inventory.yaml entry #{index}: id must be lower-case words joined by '-'")
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise _bad(entry_id, f"unknown keys {sorted(unknown)}")
    component = _text(raw, "component", entry_id)
    if component not in COMPONENTS:
        raise _bad(entry_id, f"component {component!r} is not one of {', '.join(COMPONENTS)}")
    site = _text(raw, "site", entry_id)
    if site not in SITES:
        raise _bad(entry_id, f"site {site!r} is not one of {', '.join(SITES)}")
    source = _text(raw, "source", entry_id)
    versions = raw.get("versions")
    if isinstance(versions, (int, float)):
        versions = str(versions)
    if not isinstance(versions, str) or not versions.strip():
        raise _bad(entry_id, "versions must be a non-empty string")
    message = _text(raw, "message", entry_id)
    pattern = _text(raw, "pattern", entry_id)
    assert component is not None and site is not None and source is not None
    assert message is not None and pattern is not None
    if re.search(r"\[[^\]]* [^\]]*\]", re.sub(r"\\.", "", pattern)):
        raise _bad(entry_id, "a literal space inside [...] (write \\s)")
    tolerant = _tolerant(pattern)
    regex: re.Pattern[str] | None = None
    if check:
        try:
            regex = re.compile(tolerant, re.IGNORECASE)
        except re.error as exc:
            raise _bad(entry_id, f"pattern does not compile: {exc}") from exc
    anchor_raw = raw.get("anchor")
    if anchor_raw is None:
        raise _bad(entry_id, "missing 'anchor' (a short literal phrase the message always contains)")
    anchor_list = [anchor_raw] if isinstance(anchor_raw, str) else anchor_raw
    if not isinstance(anchor_list, list) or not anchor_list:
        raise _bad(entry_id, "anchor must be a phrase or a list of phrases")
    if not all(isinstance(a, str) and len(a.strip()) >= 3 for a in anchor_list):
        raise _bad(entry_id, "every anchor must be a literal phrase of 3 or more characters")
    anchors = tuple(normalise(a).lower() for a in anchor_list)
    partial = raw.get("partial", all(len(a) >= MIN_PARTIAL_ANCHOR for a in anchors))
    if not isinstance(partial, bool):
        raise _bad(entry_id, "partial must be true or false")
    if partial and any(len(a) < MIN_PARTIAL_ANCHOR for a in anchors):
        raise _bad(entry_id, f"partial matching needs anchors of {MIN_PARTIAL_ANCHOR}+ characters")
    examples_raw = raw.get("examples", [])
    if "example" in raw:
        examples_raw = [raw["example"], *examples_raw]
    if not examples_raw or not all(isinstance(e, str) and e.strip() for e in examples_raw):
        raise _bad(entry_id, "needs at least one example line")
    examples = tuple(str(e) for e in examples_raw)
    facts_raw = raw.get("facts")
    unmapped = _text(raw, "unmapped", entry_id, required=False)
    if (facts_raw is None) == (unmapped is None):
        raise _bad(entry_id, "give exactly one of 'facts' (what it means) or 'unmapped' (why not yet)")
    facts = None if facts_raw is None else _facts(facts_raw, entry_id)
    decimal_units = raw.get("decimal_units", False)
    if not isinstance(decimal_units, bool):
        raise _bad(entry_id, "decimal_units must be true or false")
    priority = raw.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise _bad(entry_id, "priority must be an integer")
    url = _text(raw, "url", entry_id, required=False)
    for example in examples if regex is not None else ():
        flat = normalise(example)
        if not any(a in flat.lower() for a in anchors):
            raise _bad(entry_id, f"example contains none of the anchors {anchors!r}: {example[:80]!r}")
        if regex is not None and not regex.search(flat):
            raise _bad(entry_id, f"pattern does not match its example {example[:80]!r}")
    entry = InventoryEntry(
        id=entry_id,
        component=component,
        source=source,
        versions=str(versions),
        site=site,
        url=url,
        message=message,
        pattern=pattern,
        anchors=anchors,
        partial=partial,
        examples=examples,
        facts=facts,
        unmapped=unmapped,
        decimal_units=decimal_units,
        priority=priority,
        tolerant=tolerant,
    )
    if regex is not None:
        entry.__dict__["regex"] = regex  # the cached_property's slot: compiled once
    return entry


def load_inventory(path: str | None = None, *, check: bool = True) -> tuple[InventoryEntry, ...]:
    """Every entry of inventory.yaml, validated and compiled (cached: the file is read once).

    `check=False` (explain-oom's lookups in the shipped file, which the test suite validates) skips compiling every
    pattern and matching it against its examples up front: each pattern is compiled when first used (~0.1 s less
    start-up per run)."""
    if path is None and not check:
        return _load_inventory(None, False)
    return _load_inventory(path, True)


@lru_cache(maxsize=4)
def _load_inventory(path: str | None, check: bool) -> tuple[InventoryEntry, ...]:
    file = Path(path) if path is not None else INVENTORY_PATH
    try:
        # libyaml's safe loader when present: explain-oom loads the inventory on every run (10x faster start-up)
        if path is None:  # the shipped file: parsed once per content, then read from its marshal cache
            data = load_yaml_cached(file)
        else:
            import yaml

            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            data = yaml.load(file.read_text(encoding="utf-8"), Loader=loader)  # a safe loader (CSafeLoader)
    except Exception as exc:
        # PyYAML is imported only when a file is parsed (a cached inventory needs none of it)
        yaml_module = sys.modules.get("yaml")
        if yaml_module is not None and isinstance(exc, yaml_module.YAMLError):
            raise InventoryError(f"{file.name}: not valid YAML ({exc})") from exc
        raise
    if not isinstance(data, Mapping) or not isinstance(data.get("entries"), list):
        raise InventoryError(f"{file.name}: expected a mapping with an 'entries' list")
    entries = tuple(_entry(raw, i, check) for i, raw in enumerate(data["entries"]))
    seen: set[str] = set()
    for entry in entries:
        if entry.id in seen:
            raise _bad(entry.id, "duplicate id")
        seen.add(entry.id)
    return entries


def _number(text: str) -> int | float:
    clean = text.replace(",", "").strip()
    value = float(clean)
    return int(value) if value.is_integer() and "." not in clean else value


def _size_bytes(text: str, name: str, decimal: bool) -> int | None:
    """`1.74 GiB` → bytes; a bare number takes the unit from the group's name (`free_gib`)."""
    found = _SIZE_RE.match(text)
    if not found:
        return None
    number = float(found.group(1).replace(",", ""))
    unit = found.group(2).lower()
    if not unit:
        unit = next((s[1:] for s in _SIZE_SUFFIXES if name.endswith(s)), "")
        if not unit:
            return None
    table = _DECIMAL_UNIT_BYTES if decimal and unit in _DECIMAL_UNIT_BYTES else _UNIT_BYTES
    scale = table.get(unit)
    return None if scale is None else round(number * scale)


def _values(found: re.Match[str], entry: InventoryEntry) -> dict[str, int | float]:
    out: dict[str, int | float] = {}
    for name, raw in found.groupdict().items():
        if raw is None or not raw.strip():
            continue
        base = next((name[: -len(s)] for s in _SIZE_SUFFIXES if name.endswith(s)), name)
        size = _size_bytes(raw, name, entry.decimal_units)
        has_unit = bool(re.search(r"\d\s*[A-Za-z]+\s*$", raw))
        if size is not None and (has_unit or base != name):
            out[f"{base}_bytes"] = size
            continue
        try:
            out[name] = _number(raw)
        except ValueError:
            continue
    return out


@dataclass(frozen=True)
class _Index:
    entries: tuple[InventoryEntry, ...]
    anchors: tuple[tuple[tuple[str, ...], tuple[str, ...], InventoryEntry], ...]
    by_glued: tuple[tuple[str, tuple[int, ...]], ...]
    """Each anchor with its whitespace removed, and the entries (positions in `anchors`) that have it."""
    gate: re.Pattern[str]
    """Every anchor with its whitespace removed, in one alternation: a line that has none matches nothing."""


@lru_cache(maxsize=4)
def _index(path: str | None = None) -> _Index:
    entries = load_inventory(path, check=False)
    anchors = tuple((e.anchors, tuple(_SPACES.sub("", a) for a in e.anchors), e) for e in entries)
    owners: dict[str, list[int]] = {}
    for position, (_, glued_anchors, _) in enumerate(anchors):
        for glued in glued_anchors:
            owners.setdefault(glued, []).append(position)
    by_glued = tuple((glued, tuple(positions)) for glued, positions in owners.items())
    gate = re.compile(_trie_pattern(set(owners)))
    return _Index(entries, anchors, by_glued, gate)


def _trie_pattern(words: set[str]) -> str:
    """One regex for a set of literals, factored by common prefix (several times faster than `a|b|c`)."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


def match_all(text: str, *, path: str | None = None) -> tuple[InventoryMatch, ...]:
    """Every entry found in `text` (a line or a few lines), full matches first, then by priority."""
    index = _index(path)
    flat = normalise(text)
    low = flat.lower()
    glued = _SPACES.sub("", low)
    if index.gate.search(glued) is None:
        return ()
    rejoined: str | None = None
    found: list[tuple[int, int, int, InventoryMatch]] = []
    candidates = sorted({p for anchor, positions in index.by_glued if anchor in glued for p in positions})
    for position in candidates:
        anchors, _, entry = index.anchors[position]
        anchor = next((a for a in anchors if a in low), anchors[0])
        hit = entry.regex.search(flat)
        if hit is None and "\n" in text:
            rejoined = joined(text) if rejoined is None else rejoined
            hit = entry.regex.search(rejoined)
        if hit is not None:
            values = MappingProxyType(_values(hit, entry))
            found.append(
                (0, -entry.priority, -len(hit.group(0)), InventoryMatch(entry, hit.group(0), values, False))
            )
        elif entry.partial:
            at = max(low.find(anchor), 0)
            part = InventoryMatch(entry, flat[at : at + len(anchor)], MappingProxyType({}), True)
            found.append((1, -entry.priority, -len(anchor), part))
    found.sort(key=lambda item: item[:3])
    return tuple(item[3] for item in found)


def match(text: str, *, path: str | None = None) -> InventoryMatch | None:
    """The best entry for `text`: a full match before an anchor-only one, then priority, then the longest."""
    matches = match_all(text, path=path)
    return matches[0] if matches else None


def coverage(entries: tuple[InventoryEntry, ...] | None = None) -> tuple[int, int]:
    """(mapped, found): entries that say what their message means, over every message site found."""
    items = load_inventory() if entries is None else entries
    return sum(1 for e in items if e.mapped), len(items)


def counts_by_component(entries: tuple[InventoryEntry, ...] | None = None) -> dict[str, tuple[int, int]]:
    """Per component: (mapped, found)."""
    items = load_inventory() if entries is None else entries
    out: dict[str, tuple[int, int]] = {}
    for entry in items:
        mapped, found = out.get(entry.component, (0, 0))
        out[entry.component] = (mapped + int(entry.mapped), found + 1)
    return out
