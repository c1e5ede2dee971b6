"""The vLLM 0.30 → 0.33 features beside the core budget, wired into `plan_vllm` by three small hooks:

- `model_for_version`: vLLM 0.30's yarn rule for the derived max_model_len (vramctl.core.engines.vllm_yarn);
- `prepare`: the resolved settings as the engine sees the card with a weight-cache daemon
  (`--load-format ipc_cache`, vramctl.core.engines.vllm_external_weights), and the flag checks;
- `annotate`: the notes, warnings, vLLM's wording of a refusal, and the `engine_features` record: the daemon,
  what sleep mode frees (vramctl.core.engines.vllm_sleep), and (`--kv-cache-memory-suggestion`) vLLM's
  `--kv-cache-memory=` log line beside vramctl's (vramctl.core.engines.vllm_suggestion).

Each returns its input unchanged when no feature is in use, so other plans (and their JSON) do not move.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vramctl.core.engines import vllm_external_weights as xw
from vramctl.core.engines import vllm_sleep as sleep
from vramctl.core.engines import vllm_suggestion as sug
from vramctl.core.engines import vllm_yarn as yarn
from vramctl.core.engines.vllm import estimates as est
from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    NON_TORCH,
    OTHER_PROCESSES,
    SLACK,
    WEIGHTS,
    Ledger,
    TermSource,
)
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import ModelSpec
from vramctl.core.units import GiB
from vramctl.core.weights import rope_cache_bytes, stage_rank_weight_bytes

GPU_UTIL_EXCEEDS_FREE = "gpu-util-exceeds-free-memory"
WEIGHTS_DO_NOT_FIT = "weights-do-not-fit"


@dataclass(frozen=True)
class EngineFeatures:
    """The `engine_features` key of a plan's JSON (present only when one of them is in use)."""

    external_weights: xw.ExternalWeights | None = None
    sleep: sleep.SleepPlan | None = None
    kv_cache_memory_suggestion: sug.PlannedSuggestion | None = None
    yarn_max_model_len: tuple[int, int] | None = None
    """(≤ 0.29's derived length, ≥ 0.30's) for a yarn-family config whose two rules differ."""

    @property
    def in_use(self) -> frozenset[str]:
        names = {
            "ipc_cache": self.external_weights is not None,
            "sleep": self.sleep is not None,
            "kv_cache_memory_suggestion": self.kv_cache_memory_suggestion is not None,
            "yarn": self.yarn_max_model_len is not None,
        }
        return frozenset(name for name, used in names.items() if used)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.external_weights is not None:
            out["external_weights"] = self.external_weights.to_json()
        if self.sleep is not None:
            out["sleep"] = self.sleep.to_json()
        if self.kv_cache_memory_suggestion is not None:
            out["kv_cache_memory_suggestion"] = self.kv_cache_memory_suggestion.to_json()
        if self.yarn_max_model_len is not None:
            old, new = self.yarn_max_model_len
            out["yarn_max_model_len"] = {"up_to_0_29": old, "from_0_30": new, "citation": yarn.CITATION}
        return out


def model_for_version(model: ModelSpec, version: str, engine: str = "vllm") -> ModelSpec:
    """The model as vLLM `version` derives its length; for `--engine sglang` the vLLM plan is only a reference
    and SGLang's own length rule decides, so the model is left as loaded."""
    return model if engine == "sglang" else yarn.model_for_version(model, version)


def prepare(
    model: ModelSpec, s: Any, settings: ServeSettings, capacity: int
) -> tuple[Any, xw.ExternalWeights | None]:
    """Check the feature flags against the version; with a weight-cache daemon, the resolved settings `s` as the
    engine sees the card."""
    xw.check(settings, s.version)
    sleep.check(settings, s.version)
    if not xw.wanted(settings):
        return s, None
    tp, pp = s.tensor_parallel_size, s.pipeline_parallel_size
    weights = max(stage_rank_weight_bytes(model, tp=tp, pp=pp, dtype=s.dtype, ep=s.expert_parallel_size))
    ext = xw.resolve(
        settings,
        s.version,
        weight_bytes=weights + rope_cache_bytes(model, s.dtype),
        capacity=capacity,
        tp=tp * pp,
    )
    return xw.adjust(s, ext), ext


def _engine_outside(result: Any) -> int:
    """The engine's own memory outside the budget before its init snapshot (context, cuBLAS, NCCL)."""
    graph = result.ledger.bytes_of(CUDA_GRAPH)
    graph_outside = graph if not _graph_charged(result) else 0
    return max(0, int(result.outside_budget_bytes) - graph_outside)


def charged_non_torch_bytes(result: Any) -> int:
    """The plan's non-torch term less what exists before vLLM's init snapshot (context, cuBLAS, NCCL
    communicators): the part vLLM charges to the budget. That is the figure its log prints as non-torch memory:
    `non_torch_increase`, measured from the init snapshot (MemoryProfilingResult's repr,
    `vllm/utils/__init__.py:2771-2779` at v0.11.0; V0's "non_torch_memory takes", `vllm/worker/worker.py` at
    0.7.3)."""
    return max(0, int(result.ledger.bytes_of(NON_TORCH)) - _engine_outside(result))


def _graph_charged(result: Any) -> bool:
    s = result.settings
    return bool(s.estimate_cudagraphs and s.cudagraph_capture_sizes and s.kv_cache_memory_bytes is None)


def _with_daemon(result: Any, ext: xw.ExternalWeights) -> Any:
    """The daemon named in the ledger and vLLM ≥ 0.32's own words for a refusal."""
    ledger: Ledger = result.ledger
    terms = []
    for term in ledger.terms:
        if term.name == OTHER_PROCESSES:
            daemon = (
                f"the weight-cache daemon: its CUDA context {ext.daemon_overhead_bytes / GiB:.2f} GiB (its weights, "
                f"{ext.daemon_weight_bytes / GiB:.2f} GiB, are charged to the budget by vLLM ≥ 0.32: under weights)"
                if ext.rule == "subtracted"
                else f"the weight-cache daemon: weights {ext.daemon_weight_bytes / GiB:.2f} GiB + its CUDA context "
                f"{ext.daemon_overhead_bytes / GiB:.2f} GiB"
            )
            given = ext.free_before_bytes != ledger.capacity_bytes
            term = replace(
                term,
                source=TermSource.DERIVED,
                formula=daemon + ("; + total − --free-memory" if given else ""),
                note="--load-format ipc_cache: the daemon (`vllm preload`) is another process on the card",
            )
        elif term.name == WEIGHTS and ext.rule == "outside":
            term = replace(
                term,
                formula="0: mapped from the weight-cache daemon over CUDA IPC (booked under other_processes)",
                note="not charged to gpu_memory_utilization in this version / mode",
            )
        terms.append(term)
    out = replace(result, ledger=Ledger(ledger.capacity_bytes, tuple(terms)))
    if ext.rule != "subtracted":
        return out
    total, util, req = result.capacity_bytes, result.settings.gpu_memory_utilization, result.requested_bytes
    if result.verdict == WEIGHTS_DO_NOT_FIT:
        return replace(
            out, verdict_message=xw.external_weights_error(ext, total=total, util=util, requested=req)
        )
    if result.verdict == GPU_UTIL_EXCEEDS_FREE and result.settings.free_memory_bytes is not None:
        snapshot_free = int(result.settings.free_memory_bytes) - _engine_outside(result)
        return replace(
            out,
            verdict_message=xw.engine_budget_error(
                ext, snapshot_free=snapshot_free, total=total, util=util, requested=req
            ),
        )
    return out


def _sleep_plan(result: Any, settings: ServeSettings) -> sleep.SleepPlan | None:
    if not settings.enable_sleep_mode:
        return None
    s, ledger = result.settings, result.ledger
    tp = s.tensor_parallel_size * s.pipeline_parallel_size
    nccl = dict(est.pre_snapshot_overhead(tp=tp, v0=False).parts).get("nccl", 0)
    # the activation peak is transient: sleep's empty_cache returns the torch cache to the device
    resident = (
        ledger.capacity_bytes
        - ledger.bytes_of(OTHER_PROCESSES)
        - ledger.bytes_of(SLACK)
        - ledger.bytes_of(ACTIVATION_PEAK)
    )
    return sleep.plan_sleep(
        settings,
        result.engine_version,
        weights_bytes=ledger.bytes_of(WEIGHTS),
        kv_cache_bytes=max(0, int(result.kv_cache_bytes)),
        cuda_graph_bytes=ledger.bytes_of(CUDA_GRAPH),
        nccl_bytes=nccl,
        resident_bytes=resident,
    )


def _suggestion(result: Any, settings: ServeSettings) -> sug.PlannedSuggestion | None:
    s = result.settings
    if not settings.kv_cache_memory_suggestion or s.kv_cache_memory_bytes is not None:
        return None
    ledger = result.ledger
    outside = _engine_outside(result)
    free = s.free_memory_bytes if s.free_memory_bytes is not None else result.capacity_bytes
    charged_non_torch = max(0, ledger.bytes_of(NON_TORCH) - outside)
    graph = ledger.bytes_of(CUDA_GRAPH)
    return sug.plan_suggestion(
        result.engine_version,
        total=result.capacity_bytes,
        init_free=int(free) - outside,
        requested=result.requested_bytes,
        utilization=s.gpu_memory_utilization,
        consumed=ledger.bytes_of(WEIGHTS) + charged_non_torch,
        transient_peak=ledger.bytes_of(ACTIVATION_PEAK),
        graph_bytes=graph,
        graph_charged=_graph_charged(result),
    )


def annotate(result: Any, model: ModelSpec, settings: ServeSettings, ext: xw.ExternalWeights | None) -> Any:
    """The plan with the features' notes, warnings and record; unchanged when none is in use. `model`: as loaded,
    before `model_for_version`."""
    notes: list[str] = []
    warnings: list[str] = []
    version = result.engine_version
    yarn_note = yarn.note(model, version) if settings.engine != "sglang" else None
    if yarn_note:
        notes.append(yarn_note)
    if ext is not None:
        result = _with_daemon(result, ext)
        notes += xw.notes(
            ext,
            total=result.capacity_bytes,
            requested=result.requested_bytes,
            engine_outside_bytes=_engine_outside(result),
        )
    sp = _sleep_plan(result, settings)
    if sp is not None:
        ranks = result.settings.tensor_parallel_size * result.settings.pipeline_parallel_size
        more, warn = sleep.notes(
            sp,
            ranks=ranks * max(1, settings.data_parallel_size),
            host_memory_bytes=settings.host_memory_bytes,
        )
        notes += more
        warnings += warn
        if ext is not None and ext.mode == "zero_copy":
            warnings.append(
                "--enable-sleep-mode with --load-format ipc_cache (zero_copy): the weights live in the daemon's "
                "CUDA IPC allocations, outside the CuMemAllocator pool; vLLM says sleep mode must not be used with "
                "this loader (weight_cache/ipc_loader.py)."
            )
    ps = _suggestion(result, settings)
    if ps is not None:
        notes += sug.notes(ps)
    lengths = None
    if model.vllm_unscaled_yarn_len is not None and settings.engine != "sglang":
        lengths = (model.vllm_max_model_len, model.vllm_unscaled_yarn_len)
    features = EngineFeatures(ext, sp, ps, lengths)
    if not features.in_use:
        return result
    return replace(
        result,
        explanations=(*result.explanations, *notes),
        warnings=(*result.warnings, *warnings),
        engine_features=features,
    )


def features_in_use(result: Any) -> frozenset[str]:
    """For `vramctl diff`'s rule context: which features a plan uses."""
    features = getattr(result, "engine_features", None)
    used = set(features.in_use) if isinstance(features, EngineFeatures) else set()
    ext = features.external_weights if isinstance(features, EngineFeatures) else None
    if ext is not None and ext.mode == "copy":
        used.add("ipc_cache_copy")
    host = getattr(result, "host_tier", None)
    if str(getattr(host, "mechanism", "")).startswith("vllm-"):
        used.add("kv_offload")
    return frozenset(used)
