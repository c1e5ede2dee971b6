"""The engines' versioned memory rules as a table: what each switch is at a version, which ledger terms it moves,
and where the engine says so. `vramctl diff` lists the rules whose value differs between two versions beside
the terms that moved.

Each rule evaluates the switch the planner itself applies (`vramctl.core.engines.vllm.rules.VllmRules`, `.sglang`), so the
table cannot drift from the arithmetic: a rule here only names, groups and cites what the planner does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vramctl.core.engines import sglang as sg
from vramctl.core.engines import vllm as vr
from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    KV_CACHE,
    NON_TORCH,
    OTHER_PROCESSES,
    SLACK,
    WEIGHTS,
)
from vramctl.core.specs import GpuSpec


@dataclass(frozen=True)
class RuleContext:
    """What a rule may depend on besides the version: the card and the deployment's own limits."""

    gpu: GpuSpec
    entrypoint: str = "server"
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    sglang_post_capture: bool = False
    """SGLang's post-capture KV sizing is on in either plan (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1)."""
    defaults_used: frozenset[str] = frozenset()
    """Settings that took the engine's default on both sides: a rule about a default matters only for these."""
    features: frozenset[str] = frozenset()
    """vLLM 0.30 → 0.33 features either plan uses (vramctl.core.engines.vllm_features.features_in_use):
    `ipc_cache`, `ipc_cache_copy`, `sleep`, `kv_offload`, `kv_cache_memory_suggestion`, `yarn`."""
    mxfp4_moe: bool = False
    """The checkpoint's experts are MXFP4 (gpt-oss): the MoE kernel vLLM picks moves the weights term."""
    extensible_off: bool = False
    """Neither plan runs vLLM 0.34's extensible KV cache (`--no-enable-extensible-kv-cache`, `--kv-cache-memory-bytes`):
    the sizing rules then read as the profile estimate on both sides."""


@dataclass(frozen=True)
class VersionRule:
    engine: str
    key: str
    """A short stable id (JSON, the diff table's column)."""
    name: str
    terms: tuple[str, ...]
    """Ledger terms (and `verdict`) the rule moves."""
    citation: str
    value: Callable[[str, RuleContext], str]
    """The rule's value at a version, in words a user can compare."""
    default_of: tuple[str, ...] = ()
    """The settings whose default the rule is: it moves nothing when the user gave all of them."""


@dataclass(frozen=True)
class RuleChange:
    engine: str
    key: str
    name: str
    before: str
    after: str
    terms: tuple[str, ...]
    citation: str

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "key": self.key,
            "rule": self.name,
            "before": self.before,
            "after": self.after,
            "terms": list(self.terms),
            "citation": self.citation,
        }


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _subtraction(version: str, _: RuleContext) -> str:
    return {
        "v0": "V0: weights + torch peak + non-torch growth, baseline before NCCL",
        "profile-sum": "V1: non-torch increase + torch peak increase + weights",
        "consumed": "V1: free-memory drop since the init snapshot + transient peak",
    }[vr.subtraction_kind(version)]


def _extensible(version: str, ctx: RuleContext) -> bool:
    return vr.rules_for(version).extensible_kv_cache and ctx.gpu.vendor in ("nvidia", "amd") and not ctx.extensible_off


def _default_utilization(version: str, ctx: RuleContext) -> str:
    if _extensible(version, ctx):
        return f"{vr.EXTENSIBLE_DEFAULT_UTILIZATION:.2f} (extensible KV cache; 0.92 without it)"
    return f"{vr.default_gpu_memory_utilization(version):.2f}"


def _kv_sizing(version: str, ctx: RuleContext) -> str:
    if _extensible(version, ctx):
        return "extensible: measured after warm-up and graph capture, a margin and the transient peak kept free"
    return "the profile estimate"


def _scheduler(version: str, ctx: RuleContext) -> str:
    tokens, seqs = vr.default_scheduler_limits(
        ctx.gpu, version, ctx.entrypoint, max_model_len=ctx.max_model_len
    )
    return f"max_num_batched_tokens {tokens}, max_num_seqs {seqs}"


def _capture(version: str, ctx: RuleContext) -> str:
    if ctx.enforce_eager:
        return "none (--enforce-eager)"
    sizes = vr.default_capture_sizes(ctx.max_num_seqs, ctx.max_num_batched_tokens, ctx.gpu, version)
    return f"{len(sizes)} sizes up to {max(sizes) if sizes else 0}"


def _graph_regime(version: str, ctx: RuleContext) -> str:
    if ctx.enforce_eager:
        return "none (--enforce-eager)"
    return {
        "v0": "V0 full graphs per batch size",
        "piecewise": "piecewise graphs (attention outside)",
        "full-and-piecewise": "full + piecewise graphs",
    }[vr.rules_for(version).graph_regime]


def _pre_profile_charge(version: str, ctx: RuleContext) -> str:
    if vr.is_v0(version):
        return "V0 (its own baseline)"
    charge = vr.rules_for(version).v1_pre_profile_charge
    if charge == "process":
        return "the CUDA context, cuBLAS and the communicators"
    if charge == "communicators" and ctx.tensor_parallel_size > 1:
        return "the NCCL / custom all-reduce communicators"
    return "nothing (only the profile run's growth)"


def _mxfp4_hopper(version: str, ctx: RuleContext) -> str:
    if not ctx.mxfp4_moe or not (ctx.gpu.compute_capability or "").startswith("9."):
        return "n/a"
    return "Marlin (padded experts)" if vr.rules_for(version).mxfp4_marlin_on_hopper else "Triton"


VLLM_RULES: tuple[VersionRule, ...] = (
    VersionRule(
        "vllm",
        "default-utilization",
        "default --gpu-memory-utilization",
        (SLACK, KV_CACHE),
        "vllm/config/cache.py (0.90 until 0.19, 0.92 from 0.20.0, PR #38284; 0.34.0: lines 186, 494-501, 1.0 with "
        "the extensible KV cache)",
        _default_utilization,
        ("gpu_memory_utilization",),
    ),
    VersionRule(
        "vllm",
        "kv-sizing",
        "how the KV pool is sized",
        (KV_CACHE, SLACK, "verdict"),
        "vllm/v1/worker/extensible_kv_cache.py:592-618 and vllm/config/vllm.py:3180-3263 (0.34.0); "
        "vllm/v1/worker/gpu_worker.py determine_available_memory before",
        _kv_sizing,
    ),
    VersionRule(
        "vllm",
        "default-block-size",
        "default KV block size (before the attention backend raises it)",
        (KV_CACHE,),
        "vllm/config/cache.py:185 (16 through 0.33.0, 64 in 0.34.0)",
        lambda v, _: str(vr.default_block_size(v)),
        ("block_size",),
    ),
    VersionRule(
        "vllm",
        "graph-estimate",
        "CUDA-graph memory estimated inside the budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)",
        (CUDA_GRAPH, KV_CACHE, SLACK),
        "vllm/envs.py (absent until 0.18, default 0 in 0.19, 1 from 0.20.0; PR #30515, PR #38284)",
        lambda v, _: (
            _yes(vr.estimate_cudagraphs_default(v))
            if vr.supports_cudagraph_estimate(v)
            else "no (graphs outside the budget)"
        ),
        ("estimate_cudagraphs",),
    ),
    VersionRule(
        "vllm",
        "subtraction",
        "non-KV subtraction",
        (NON_TORCH, ACTIVATION_PEAK, KV_CACHE, SLACK),
        "vllm/utils/mem_utils.py (0.26.0: lines 309-313; 0.28.0 on: lines 312-321); V0 worker/worker.py",
        _subtraction,
    ),
    VersionRule(
        "vllm",
        "nccl-charged",
        "NCCL buffers charged to the budget",
        (NON_TORCH, KV_CACHE, SLACK),
        "vllm/worker/worker.py at 0.6.6.post1 (baseline before NCCL init); MemorySnapshot from 0.7 (PR #11809)",
        lambda v, _: _yes(vr.charges_nccl_to_budget(v)),
    ),
    VersionRule(
        "vllm",
        "pre-profile-charge",
        "memory held before profiling that V1 charges to the budget",
        (NON_TORCH, KV_CACHE, SLACK),
        "vllm/v1/worker/gpu_worker.py: used - torch allocated at 0.8.5 (lines 200-210); init snapshot before "
        "init_worker_distributed_environment at 0.9.1-0.10.2 (0.10.1: lines 174, 192); distributed init first "
        "from 0.11.0 (lines 169, 182)",
        _pre_profile_charge,
    ),
    VersionRule(
        "vllm",
        "mxfp4-hopper",
        "MXFP4 MoE kernel on Hopper",
        (WEIGHTS, KV_CACHE, SLACK),
        "vllm/model_executor/layers/quantization/mxfp4.py: Marlin unless torch >= 2.8 at 0.10.1 (lines 123-135; "
        "torch 2.7.1 pinned), Triton where triton_kernels is importable from 0.10.2 (lines 88-97)",
        _mxfp4_hopper,
    ),
    VersionRule(
        "vllm",
        "free-memory-check",
        "start-up check: free memory >= utilisation x total",
        ("verdict",),
        "vllm/v1/worker/gpu_worker.py request_memory (PR #19312, from 0.10.0)",
        lambda v, _: _yes(vr.checks_free_memory(v)),
    ),
    VersionRule(
        "vllm",
        "other-processes",
        "other processes' memory taken from this instance's KV budget",
        (OTHER_PROCESSES, KV_CACHE),
        "V1 0.8-0.9 gpu_worker.py determine_available_memory (fixed by PR #18974 / #19312); V0 <= 0.6.4 (PR #9352)",
        lambda v, _: _yes(vr.counts_other_processes(v)),
    ),
    VersionRule(
        "vllm",
        "scheduler-defaults",
        "default scheduler limits for this card and entry point",
        (ACTIVATION_PEAK, KV_CACHE),
        "vllm/engine/arg_utils.py (0.11.0: lines 1605-1651; 0.33.0: lines 2940-3039)",
        _scheduler,
        ("max_num_batched_tokens", "max_num_seqs"),
    ),
    VersionRule(
        "vllm",
        "capture-sizes",
        "CUDA-graph capture sizes",
        (CUDA_GRAPH, KV_CACHE, SLACK),
        "vllm/config/vllm.py _set_cudagraph_sizes (0.33.0: lines 2398-2620); 0.8-0.11 vllm/config.py",
        _capture,
    ),
    VersionRule(
        "vllm",
        "graph-regime",
        "CUDA-graph regime",
        (CUDA_GRAPH, SLACK),
        "vllm/compilation (piecewise from the V1 engine, 0.8; FULL_AND_PIECEWISE default from 0.12)",
        _graph_regime,
    ),
    VersionRule(
        "vllm",
        "null-block",
        "one KV block held back as the null block (the one-request check plans against usable blocks)",
        ("verdict",),
        "vllm/v1/core/block_pool.py:187 and vllm/v1/core/kv_cache_utils.py:1104-1130 at 0.32.0 (from 0.12)",
        lambda v, _: _yes(vr.rules_for(v).reserves_null_block),
    ),
    VersionRule(
        "vllm",
        "kv-token-count",
        "KV token capacity as vLLM reports it",
        ("kv_tokens",),
        "vllm/v1/core/kv_cache_utils.py:1706 at 0.20.1 and :2300-2308 at 0.32.0 (int(max_concurrency x max_model_len), from 0.20.1)",
        lambda v, _: "concurrency x max_model_len"
        if vr.rules_for(v).tokens_from_concurrency
        else "blocks // groups x block_size",
    ),
)


def _features_rules() -> tuple[VersionRule, ...]:
    """The rules of vramctl.core.engines.vllm_features: each says "not used" on both sides unless the plan uses
    the feature, so it never shows in a diff that does not involve it."""
    from vramctl.core.engines import vllm_external_weights as xw
    from vramctl.core.engines import vllm_offload as off
    from vramctl.core.engines import vllm_sleep as sl
    from vramctl.core.engines import vllm_suggestion as sug
    from vramctl.core.engines import vllm_yarn as yarn

    def yarn_len(version: str, ctx: RuleContext) -> str:
        if "yarn" not in ctx.features:
            return "not used (no yarn-family rope)"
        if yarn.uses_unscaled_len(version):
            return "max_position_embeddings, unscaled"
        return "original_max_position_embeddings × factor"

    def external(version: str, ctx: RuleContext) -> str:
        if not ctx.features & {"ipc_cache", "ipc_cache_copy"}:
            return "not used (weights loaded by the engine)"
        rules = vr.rules_for(version)
        if not rules.ipc_cache_loader:
            return "no ipc_cache loader"
        if "ipc_cache_copy" in ctx.features or not rules.external_weights_subtracted:
            return "daemon's weights outside u × total at the start-up check, not charged"
        counted = "exported weight bytes" if rules.external_weights_exported_bytes else "daemon memory_allocated()"
        return f"subtracted from u × total by request_memory ({counted})"

    def sleep_rule(version: str, ctx: RuleContext) -> str:
        if "sleep" not in ctx.features:
            return "not used"
        rules = vr.rules_for(version)
        words = ["level 1 offloads weights to the host, level 2 discards them; KV discarded"]
        if rules.sleep_nccl_suspend:
            words.append("--enable-nccl-comm-suspend")
        if rules.release_kv_endpoint:
            words.append("/release_kv_cache_memory")
        if rules.sleep_runtime_offload:
            words.append("runtime + graph pools offloaded (--sleep-mode-offload-cudagraph)")
        return "; ".join(words)

    def offload_rule(version: str, ctx: RuleContext) -> str:
        if "kv_offload" not in ctx.features:
            return "not used"
        rules = vr.rules_for(version)
        if not rules.offload_shared_region:
            return "private pinned tensors per rank (may round up to a power of two)"
        return "one /dev/shm region per engine, ≤ cpu_bytes_to_use" + (
            ", unlinked once mapped" if rules.offload_region_unlinked else ""
        )

    def suggestion(version: str, ctx: RuleContext) -> str:
        if "kv_cache_memory_suggestion" not in ctx.features:
            return "not asked"
        if not vr.rules_for(version).kv_cache_memory_suggestion:
            return "none"
        return "graph pool counted twice" if sug.double_counts(version) else "graph pool counted once"

    return (
        VersionRule("vllm", "yarn-max-model-len", "derived max_model_len of a yarn-family RoPE config",
                    ("verdict",), yarn.CITATION, yarn_len, ("max_model_len",)),
        VersionRule("vllm", "external-weights", "--load-format ipc_cache: the daemon's weights in the budget",
                    (OTHER_PROCESSES, WEIGHTS, KV_CACHE, "verdict"), xw.CITATION, external),
        VersionRule("vllm", "sleep-mode", "what /sleep frees", ("engine_features.sleep",), sl.CITATION, sleep_rule),
        VersionRule("vllm", "kv-offload-host", "native KV offload's host buffer", ("host_tier",), off.CITATION,
                    offload_rule),
        VersionRule("vllm", "kv-cache-memory-suggestion", "the logged --kv-cache-memory= suggestion",
                    ("engine_features.kv_cache_memory_suggestion",),
                    sug.CITATION, suggestion),
    )


def _sglang_rules(version: str, _: RuleContext) -> str:
    return f"the {sg.rules_for_version(version)} heuristic"


def _post_capture_floor(version: str, ctx: RuleContext) -> str:
    if not ctx.sglang_post_capture:
        return "not used (post-capture KV sizing off)"
    floor = sg.POST_CAPTURE_FLOOR_MIB.get(sg.rules_for_version(version))
    return "none" if floor is None else f"{floor} MiB"


SGLANG_RULES: tuple[VersionRule, ...] = (
    VersionRule(
        "sglang",
        "fraction-heuristic",
        "default --mem-fraction-static heuristic",
        (SLACK, KV_CACHE, ACTIVATION_PEAK, CUDA_GRAPH),
        "python/sglang/srt/server_args.py (0.4.6 table; 0.5.2; 0.5.9 activation tokens; 0.5.18 lines 4802-5203; "
        "0.5.23 memory_hook.py)",
        _sglang_rules,
    ),
    VersionRule(
        "sglang",
        "post-capture-floor",
        "post-capture KV sizing headroom floor",
        (KV_CACHE, SLACK),
        "python/sglang/srt/model_executor/model_runner.py (512 MB in 0.5.17, 1536 MB from 0.5.18)",
        _post_capture_floor,
    ),
)


def rules_for(engine: str) -> tuple[VersionRule, ...]:
    return (*VLLM_RULES, *_features_rules()) if engine == "vllm" else SGLANG_RULES


def changed_rules(engine: str, before: str, after: str, ctx: RuleContext) -> tuple[RuleChange, ...]:
    """The rules of `engine` whose value differs between two of its versions, in table order."""
    out: list[RuleChange] = []
    for rule in rules_for(engine):
        if rule.default_of and not any(name in ctx.defaults_used for name in rule.default_of):
            continue
        a, b = rule.value(before, ctx), rule.value(after, ctx)
        if a != b:
            out.append(RuleChange(engine, rule.key, rule.name, a, b, rule.terms, rule.citation))
    return tuple(out)
