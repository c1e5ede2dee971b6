"""`vramctl diff`: one deployment planned two ways — two engine versions, vLLM against SGLang, or two flag sets —
compared term by term, with the versioned rule behind each term that moved.

Pure: takes two PlanResults (from `vramctl.core.plan.plan`) and returns a frozen DiffResult. The CLI builds the
two plans from one command line (`vramctl.cli.diff`); `vramctl check --against-version` reuses `kv_loss`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramctl.core.engines.version_rules import RuleChange, RuleContext, changed_rules
from vramctl.core.engines.vllm_features import features_in_use
from vramctl.core.ledger import TERM_ORDER
from vramctl.core.units import format_bytes
from vramctl.core.verdicts import Verdict

DEFAULT_MAX_KV_LOSS = 0.10
"""`check --against-version`: the share of KV cache an upgrade may lose before the gate fails."""


@dataclass(frozen=True)
class Side:
    """One of the two plans, as the diff shows it."""

    label: str
    engine: str
    engine_version: str
    verdict: str
    verdict_message: str
    capacity_bytes: int
    kv_cache_bytes: int
    num_blocks: int
    block_size: int
    kv_tokens: int
    max_concurrency: float
    max_model_len: int
    max_model_len_fit: int

    @property
    def starts(self) -> bool:
        return self.verdict == Verdict.FITS

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "verdict": str(self.verdict),
            "verdict_message": self.verdict_message,
            "capacity_bytes": self.capacity_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "num_blocks": self.num_blocks,
            "block_size": self.block_size,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_model_len": self.max_model_len,
            "max_model_len_fit": self.max_model_len_fit,
        }


@dataclass(frozen=True)
class TermDelta:
    name: str
    before_bytes: int
    after_bytes: int
    rules: tuple[str, ...]
    """Keys of the changed rules that move this term (empty when none of the table's rules does)."""

    @property
    def delta_bytes(self) -> int:
        return self.after_bytes - self.before_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "before_bytes": self.before_bytes,
            "after_bytes": self.after_bytes,
            "delta_bytes": self.delta_bytes,
            "rules": list(self.rules),
        }


@dataclass(frozen=True)
class SettingDelta:
    name: str
    before: Any
    after: Any
    default_before: bool
    default_after: bool
    """Whether each side took the engine's default (a default that moved is an upgrade effect, not a flag)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "before": self.before,
            "after": self.after,
            "default_before": self.default_before,
            "default_after": self.default_after,
        }


@dataclass(frozen=True)
class DiffResult:
    kind: str
    """`versions` (one engine, two versions), `engines` (vLLM against SGLang) or `flags` (two flag sets)."""
    model: str
    gpu: str
    before: Side
    after: Side
    terms: tuple[TermDelta, ...]
    """Every ledger term of either side, in ledger order (unmoved ones included, delta 0)."""
    settings: tuple[SettingDelta, ...]
    rules: tuple[RuleChange, ...]
    gap_sentences: tuple[str, ...] = ()
    """`engines`: vramctl's term-by-term vLLM-vs-SGLang explanation (the same as `plan --engine both`)."""

    @property
    def moved_terms(self) -> tuple[TermDelta, ...]:
        return tuple(t for t in self.terms if t.delta_bytes != 0)

    @property
    def kv_change_fraction(self) -> float:
        """(after − before) / before KV; −1.0 when the KV cache disappears, 0.0 when there was none."""
        if self.before.kv_cache_bytes <= 0:
            return 0.0
        return (self.after.kv_cache_bytes - self.before.kv_cache_bytes) / self.before.kv_cache_bytes

    @property
    def stops_starting(self) -> bool:
        return self.before.starts and not self.after.starts

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "gpu": self.gpu,
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "kv_change_bytes": self.after.kv_cache_bytes - self.before.kv_cache_bytes,
            "kv_change_fraction": round(self.kv_change_fraction, 6),
            "stops_starting": self.stops_starting,
            "terms": [t.to_json() for t in self.terms],
            "settings": [s.to_json() for s in self.settings],
            "rules": [r.to_json() for r in self.rules],
            "gap": list(self.gap_sentences),
        }


def side_of(result: Any, label: str) -> Side:
    """The diff's view of a PlanResult (either engine's top-level numbers)."""
    return Side(
        label=label,
        engine=str(result.engine),
        engine_version=str(result.engine_version),
        verdict=str(result.verdict),
        verdict_message=str(result.verdict_message),
        capacity_bytes=int(result.capacity_bytes),
        kv_cache_bytes=max(0, int(result.kv_cache_bytes)),
        num_blocks=int(result.num_blocks),
        block_size=int(result.block_size),
        kv_tokens=int(result.kv_tokens),
        max_concurrency=float(result.max_concurrency),
        max_model_len=int(result.max_model_len),
        max_model_len_fit=int(result.max_model_len_fit),
    )


def _term_bytes(result: Any) -> dict[str, int]:
    return {t.name: int(t.bytes) for t in result.ledger.terms}


def _ordered(names: set[str]) -> list[str]:
    known = [n for n in TERM_ORDER if n in names]
    return known + sorted(names - set(known))


def _settings_of(result: Any) -> tuple[dict[str, Any], set[str]]:
    """The resolved settings a plan used and the names that took the engine's default."""
    if result.engine == "sglang" and result.sglang is not None:
        full = result.sglang.to_json()
        data = {name: full.get(name) for name in _SGLANG_SETTINGS}
        source = full.get("mem_fraction_source")
        return data, ({"mem_fraction_static"} if source in ("heuristic", "fallback") else set())
    data = result.settings.to_json()
    return data, set(result.settings.defaults_used)


_SGLANG_SETTINGS = (
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "cuda_graph_max_bs",
    "page_size",
    "post_capture_kv_sizing",
    "max_running_requests",
    "context_len",
)
_SETTING_SKIP = frozenset({"engine_version", "defaults_used", "cudagraph_capture_sizes"})


def _setting_deltas(before: Any, after: Any) -> tuple[SettingDelta, ...]:
    a, a_defaults = _settings_of(before)
    b, b_defaults = _settings_of(after)
    out: list[SettingDelta] = []
    for name in sorted(set(a) & set(b) - _SETTING_SKIP):
        if a[name] != b[name]:
            out.append(SettingDelta(name, a[name], b[name], name in a_defaults, name in b_defaults))
    graphs_a = a.get("cudagraph_capture_sizes")
    graphs_b = b.get("cudagraph_capture_sizes")
    if graphs_a is not None and graphs_b is not None and graphs_a != graphs_b:
        out.append(
            SettingDelta(
                "cudagraph_capture_sizes",
                f"{len(graphs_a)} sizes up to {max(graphs_a, default=0)}",
                f"{len(graphs_b)} sizes up to {max(graphs_b, default=0)}",
                "cudagraph_capture_sizes" in a_defaults,
                "cudagraph_capture_sizes" in b_defaults,
            )
        )
    return tuple(out)


def _rule_context(result: Any, other: Any) -> RuleContext:
    s = result.settings
    both = set(getattr(s, "defaults_used", ())) & set(getattr(other.settings, "defaults_used", ()))
    return RuleContext(
        gpu=result.gpu,
        entrypoint=str(getattr(s, "entrypoint", "server")),
        max_model_len=int(result.max_model_len),
        max_num_seqs=int(getattr(s, "max_num_seqs", 256)),
        max_num_batched_tokens=int(getattr(s, "max_num_batched_tokens", 8192)),
        tensor_parallel_size=int(getattr(s, "tensor_parallel_size", 1)),
        enforce_eager=bool(getattr(s, "enforce_eager", False)),
        sglang_post_capture=any(
            bool(getattr(r.sglang, "post_capture", False)) for r in (result, other) if r.sglang is not None
        ),
        defaults_used=frozenset(both),
        features=features_in_use(result) | features_in_use(other),  # vramctl.core.engines.vllm_features
        mxfp4_moe=str(getattr(result.model, "quantization", None) or "").lower() == "mxfp4",
        extensible_off=not any(bool(getattr(r.settings, "extensible_kv_cache", False)) for r in (result, other)),
    )


def diff_plans(
    before: Any,
    after: Any,
    *,
    kind: str,
    before_label: str,
    after_label: str,
    gap_sentences: tuple[str, ...] = (),
) -> DiffResult:
    """Compare two PlanResults of one deployment. For `versions`, the engine's versioned rules that differ
    between the two versions are attached to the terms they move."""
    if kind not in ("versions", "engines", "flags"):
        raise ValueError(f"diff kind {kind!r}")
    rules: tuple[RuleChange, ...] = ()
    if kind == "versions" and before.engine == after.engine:
        rules = changed_rules(
            str(before.engine), str(before.engine_version), str(after.engine_version), _rule_context(after, before)
        )
    a, b = _term_bytes(before), _term_bytes(after)
    terms = tuple(
        TermDelta(
            name,
            a.get(name, 0),
            b.get(name, 0),
            tuple(r.key for r in rules if name in r.terms) if a.get(name, 0) != b.get(name, 0) else (),
        )
        for name in _ordered(set(a) | set(b))
    )
    return DiffResult(
        kind=kind,
        model=str(before.model.name),
        gpu=str(before.gpu.display_name or before.gpu.name),
        before=side_of(before, before_label),
        after=side_of(after, after_label),
        terms=terms,
        settings=_setting_deltas(before, after),
        rules=rules,
        gap_sentences=gap_sentences,
    )


@dataclass(frozen=True)
class UpgradeGate:
    """`check --against-version`: whether an upgrade keeps the deployment starting and its KV cache."""

    diff: DiffResult
    max_kv_loss: float

    @property
    def kv_loss_fraction(self) -> float:
        return max(0.0, -self.diff.kv_change_fraction)

    @property
    def passed(self) -> bool:
        return self.diff.after.starts and self.kv_loss_fraction <= self.max_kv_loss

    @property
    def message(self) -> str:
        d = self.diff
        if not d.after.starts:
            return (
                f"on {d.after.engine} {d.after.engine_version} the deployment does not start "
                f"({d.after.verdict}): {d.after.verdict_message}"
            )
        loss = self.kv_loss_fraction
        change = d.after.kv_cache_bytes - d.before.kv_cache_bytes
        verb = "loses" if change < 0 else "gains"
        text = (
            f"{d.before.engine} {d.before.engine_version} → {d.after.engine_version}: KV cache {verb} "
            f"{format_bytes(abs(change))} ({abs(d.kv_change_fraction) * 100:.1f} %), {d.before.kv_tokens} → "
            f"{d.after.kv_tokens} tokens"
        )
        if loss > self.max_kv_loss:
            text += f"; more than --max-kv-loss {self.max_kv_loss * 100:g} %"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "max_kv_loss": self.max_kv_loss,
            "kv_loss_fraction": round(self.kv_loss_fraction, 6),
            "message": self.message,
            "diff": self.diff.to_json(),
        }


def upgrade_gate(
    spec: Any, model: Any, gpu: Any, *, against: str, max_kv_loss: float = DEFAULT_MAX_KV_LOSS
) -> UpgradeGate:
    """`check SPEC --against-version V`: the spec's deployment on its own engine version and on `against`
    (`0.34.0`, or `sglang@0.5.23` for a spec that plans both engines), compared as `vramctl diff` does."""
    from dataclasses import replace

    from vramctl.core.errors import BadInputError
    from vramctl.core.plan import plan

    if not 0 <= max_kv_loss <= 1:
        raise BadInputError(f"--max-kv-loss {max_kv_loss}: a share between 0 and 1 (e.g. 0.1 or 10%)")
    engine, _, version = against.strip().partition("@")
    if not version:
        engine, version = ("vllm" if spec.engine == "both" else spec.engine), engine
    if engine not in ("vllm", "sglang"):
        raise BadInputError(f"--against-version {against!r}: the engine before @ must be vllm or sglang")
    if not version or not version[0].isdigit():
        raise BadInputError(f"--against-version {against!r}: give a version, e.g. 0.34.0 or sglang@0.5.23")
    own_version = spec.engine_version if spec.engine == engine else None
    options = spec.sglang_options if engine == "sglang" else None
    before = plan(model, gpu, replace(spec.settings, engine=engine, engine_version=own_version), sglang_options=options)
    after = plan(model, gpu, replace(spec.settings, engine=engine, engine_version=version), sglang_options=options)
    diff = diff_plans(
        before,
        after,
        kind="versions",
        before_label=f"{engine}@{before.engine_version}",
        after_label=f"{engine}@{after.engine_version}",
    )
    return UpgradeGate(diff, max_kv_loss)
