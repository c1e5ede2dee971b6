"""SGLang's GPU memory sizing, by version: the default `mem_fraction_static`, the KV pool and its limits.

Every rule here is SGLang's own, read from its released wheels and written up in
`python/sglang/srt/server_args.py` (SGLang v0.5.23) (with the engine file:line below).

The sizing, in SGLang's units (`python/sglang/srt/server_args.py` (SGLang v0.5.23), `python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23), `python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23)):
1. `gpu_mem` = the nvidia-smi total in **MiB**, the minimum over the ranks (`get_nvgpu_memory_capacity`,
   0.5.18 `srt/utils/common.py` L655). vramctl reads it from `GpuSpec.nvidia_smi_total_mib`.
2. When `--mem-fraction-static` is unset, a reserve in MiB gives `mfs = round((gpu_mem − reserved) / gpu_mem, 3)`
   (0.5.18 `server_args.py` L4948–L4996). The reserve's rules changed by version (`RULES` below).
3. `pre` = free GiB before the weights load (after CUDA context and NCCL), `avail` = free GiB after the load;
   KV GiB = `avail − pre × (1 − mfs)` (0.5.18 `kv_cache_configurator.py::_profile_available_bytes` L1764–L1811).
4. tokens = floor(KV bytes / cell size), floored to the page size, capped by `--max-total-tokens`
   (`calculate_pool_sizes` L415–L423, `_apply_token_constraints` L1844).

Planning cannot read `pre` and `avail` off a device, so they are estimated: `pre` = CUDA total − the CUDA
context and NCCL buffers (`context_estimate_bytes`, calibrated on the collected real start-up logs, docs/sglang.md
"Accuracy"), `avail` = `pre` − the weights per rank. Both can be given instead (`SglangOptions`), e.g. the
`Load weight begin/end. avail mem=` numbers of a log, which reproduces SGLang's pool to the token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from vramctl.core.engines.sglang import messages
from vramctl.core.engines.sglang import post_capture as pc
from vramctl.core.engines.sglang.defaults import (
    decode_graph_batch_sizes,
    default_max_running_requests,
    gpu_mem_mib_for,
    gpu_tier,
    prefill_graph_buckets,
)
from vramctl.core.engines.sglang.options import SglangOptions
from vramctl.core.engines.sglang.pool import (
    MambaPool,
    cell_size,
    context_estimate_bytes,
    dsa_defaults,
    is_dsa,
    is_hybrid_swa,
    is_scaled_kv,
    layers_per_stage,
    mamba_pool,
    scaled_kv_refusal,
    stage_layout,
)
from vramctl.core.engines.sglang.reserve import (
    ReserveBreakdown,
    _activation_tokens,
    _fraction_0_4_6,
    _reserve_for,
    _reserve_words,
    _Resolved,
    _vlm_factor,
    post_capture_kv_sizing_planned,
    reserve_for_graph_mib,
)
from vramctl.core.engines.sglang.rules import (
    ACTIVATION_MIB_PER_TOKEN,
    BACKEND_PAGE_SIZE,
    DEFAULT_MAX_PREFILL_TOKENS,
    FLOOR_ABOVE_MIB,
    FLOOR_RESERVE_MIB,
    HYBRID_SWA_ARCHITECTURES,
    METADATA_RESERVE_MIB,
    OLDEST_SGLANG_VERSION,
    POST_CAPTURE_FLOOR_MIB,
    RULES_0_4_6,
    RULES_0_5_2,
    RULES_0_5_9,
    RULES_0_5_17,
    RULES_0_5_18,
    RULES_0_5_23,
    SGLANG_REF,
    UNKNOWN_GPU_FRACTION,
    rules_for_version,
)
from vramctl.core.errors import BadInputError
from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    KV_CACHE,
    MAMBA_STATE,
    NON_TORCH,
    OTHER_PROCESSES,
    SLACK,
    WEIGHTS,
    Ledger,
    Term,
    TermSource,
)
from vramctl.core.settings import LATEST_SGLANG_VERSION, ServeSettings, parse_version
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import GiB, MiB, format_bytes, format_count
from vramctl.core.verdicts import Verdict


@dataclass(frozen=True)
class SglangPlan:
    """SGLang's start-up sizing for one model on one card, in SGLang's own semantics."""

    version: str
    rules: str
    gpu_mem_mib: int | None
    capacity_bytes: int
    mem_fraction_static: float
    mem_fraction_source: Literal["given", "heuristic", "fallback"]
    reserve: ReserveBreakdown | None
    chunked_prefill_size: int
    max_prefill_tokens: int
    cuda_graph_max_bs: int
    cuda_graph_bs: tuple[int, ...]
    prefill_graph_max_bs: int
    prefill_graph_buckets: int
    page_size: int
    post_capture: bool
    context_bytes: int
    free_before_load_bytes: int
    weights_bytes: int
    free_after_load_bytes: int
    held_back_bytes: int
    """pre × (1 − mfs) (plus the post-capture graph estimate): not available to the KV pool."""
    kv_budget_bytes: int
    """avail − pre × (1 − mfs), as SGLang computes it in GiB (may be negative)."""
    bytes_per_token: int
    """SGLang's cell size: per rank, every layer of this PP stage."""
    max_total_num_tokens: int
    profiled_tokens: int
    """Tokens before the `--max-total-tokens` cap."""
    kv_cache_bytes: int
    full_layer_tokens: int | None
    swa_layer_tokens: int | None
    max_running_requests: int
    context_len: int
    verdict: str
    message: str
    branch: tuple[str, ...]
    """The branches taken, in words, in order."""
    ledger: Ledger
    notes: tuple[str, ...] = ()
    log_lines: tuple[str, ...] = ()
    """What SGLang would print (KV allocation, scheduler summary)."""
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def concurrency_at_context(self) -> float:
        """Full-length sequences of `context_len` the pool holds at once."""
        return self.max_total_num_tokens / self.context_len if self.context_len else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": "sglang",
            "version": self.version,
            "rules": self.rules,
            "gpu_mem_mib": self.gpu_mem_mib,
            "capacity_bytes": self.capacity_bytes,
            "mem_fraction_static": self.mem_fraction_static,
            "mem_fraction_source": self.mem_fraction_source,
            "reserve": None if self.reserve is None else self.reserve.to_json(),
            "reserved_mib": None if self.reserve is None else self.reserve.total_mib,
            "chunked_prefill_size": self.chunked_prefill_size,
            "max_prefill_tokens": self.max_prefill_tokens,
            "cuda_graph_max_bs": self.cuda_graph_max_bs,
            "cuda_graph_bs": list(self.cuda_graph_bs),
            "prefill_graph_max_bs": self.prefill_graph_max_bs,
            "prefill_graph_buckets": self.prefill_graph_buckets,
            "page_size": self.page_size,
            "post_capture_kv_sizing": self.post_capture,
            "context_bytes": self.context_bytes,
            "free_before_load_bytes": self.free_before_load_bytes,
            "weights_bytes": self.weights_bytes,
            "free_after_load_bytes": self.free_after_load_bytes,
            "held_back_bytes": self.held_back_bytes,
            "kv_budget_bytes": self.kv_budget_bytes,
            "bytes_per_token": self.bytes_per_token,
            "max_total_num_tokens": self.max_total_num_tokens,
            "profiled_tokens": self.profiled_tokens,
            "kv_cache_bytes": self.kv_cache_bytes,
            "full_layer_tokens": self.full_layer_tokens,
            "swa_layer_tokens": self.swa_layer_tokens,
            "max_running_requests": self.max_running_requests,
            "context_len": self.context_len,
            "concurrency_at_context": round(self.concurrency_at_context, 2),
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "verdict": str(self.verdict),
            "message": self.message,
            "branch": list(self.branch),
            "terms": self.ledger.to_json(),
            "notes": list(self.notes),
            "log_lines": list(self.log_lines),
            **({"mamba": self.extra["mamba"]} if "mamba" in self.extra else {}),
        }


_ABSURD_TOKENS = 1 << 26
"""A token count above 67,108,864 is a typo (vramctl.core.plan uses the same bound for vLLM)."""
_ABSURD_REQUESTS = 1 << 20


def _validate(settings: ServeSettings, options: SglangOptions) -> None:
    if settings.tensor_parallel_size < 1:
        raise BadInputError(f"--tp-size {settings.tensor_parallel_size}: must be ≥ 1")
    if settings.pipeline_parallel_size < 1:
        raise BadInputError(f"--pp-size {settings.pipeline_parallel_size}: must be ≥ 1")
    mfs = settings.mem_fraction_static
    if mfs is not None and not (0 < mfs < 1):
        raise BadInputError(f"--mem-fraction-static {mfs}: must be in (0, 1)")
    for name, value in (
        ("--max-total-tokens", settings.max_total_tokens),
        ("--max-running-requests", settings.max_running_requests),
        ("--cuda-graph-max-bs", settings.cuda_graph_max_bs),
        ("--page-size", settings.page_size),
        ("--max-prefill-tokens", settings.max_prefill_tokens),
        ("--context-length", settings.max_model_len),
    ):
        if value is not None and value < 1:
            raise BadInputError(f"{name} {value}: must be ≥ 1")
    for name, value, upper in (
        ("--max-total-tokens", settings.max_total_tokens, _ABSURD_TOKENS),
        ("--chunked-prefill-size", settings.chunked_prefill_size, _ABSURD_TOKENS),
        ("--max-prefill-tokens", settings.max_prefill_tokens, _ABSURD_TOKENS),
        ("--page-size", settings.page_size, _ABSURD_TOKENS),
        ("--max-running-requests", settings.max_running_requests, _ABSURD_REQUESTS),
        ("--cuda-graph-max-bs", settings.cuda_graph_max_bs, _ABSURD_REQUESTS),
    ):
        if value is not None and value > upper:
            raise BadInputError(f"{name} {value}: absurdly large (at most {upper:,})")
    if options.dp_size < 1:
        raise BadInputError(f"--dp-size {options.dp_size}: must be ≥ 1")
    if not 0 < options.swa_full_tokens_ratio <= 1:
        raise BadInputError(f"--swa-full-tokens-ratio {options.swa_full_tokens_ratio}: must be in (0, 1]")


@dataclass
class _Trace:
    """The branches taken (in words, in order) and the notes, as the steps of `plan_sglang` add them."""

    branch: list[str]
    notes: list[str]


@dataclass(frozen=True)
class _Load:
    """Free memory before and after the weights load, and what sits before the KV budget (step 3)."""

    pre: int
    avail: int
    weights: int
    weights_source: TermSource
    weights_formula: str
    ctx_bytes: int
    ctx_source: TermSource
    ctx_unc: int
    ctx_formula: str
    other: int
    stage_layers: int


@dataclass(frozen=True)
class _Pool:
    """The token pool (step 4): SGLang's KV budget in its GiB arithmetic, tokens, bytes, limits."""

    slack_gib: float
    rest_gib: float
    graph_estimate: int
    budget: int
    cell: int
    page: int
    profiled: int
    tokens: int
    kv_bytes: int
    full_tokens: int | None
    swa_tokens: int | None
    context_len: int
    max_running_requests: int
    mamba: MambaPool | None


def _refuse_own_layouts(model: ModelSpec) -> None:
    """Models whose caches vramctl sizes only as vLLM allocates them (Gemma-4, DeepSeek-V4)."""
    if model.gemma4 is not None:
        raise BadInputError(
            f"--engine sglang: {model.name} is Gemma-4, whose per-layer head sizes and KV-shared layers vramctl sizes "
            "only as vLLM allocates them (docs/models-and-gpus.md#gemma-4); SGLang's Gemma-4 pool is not modelled: "
            "plan it with --engine vllm"
        )
    if model.dsv4 is not None:
        raise BadInputError(
            f"--engine sglang: {model.name} is DeepSeek-V4, whose compressed caches vramctl sizes only as vLLM "
            "allocates them (docs/hybrid.md#deepseek-v4); SGLang's DeepSeek-V4 pool is not modelled: plan it with "
            "--engine vllm"
        )


def plan_sglang(
    model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, *, options: SglangOptions | None = None
) -> SglangPlan:
    """Size SGLang's KV pool for `model` on `gpu` with `settings`, in the semantics of the chosen version.

    The steps, in SGLang's order: the card's tier defaults (`_resolve`), `mem_fraction_static` (`_fraction`), the
    free memory before and after the weights load (`_load`), the token pool (`_pool`), the failure SGLang would
    raise (`_verdict`) and the ledger (`_ledger`).
    """
    opts = _with_vision_tower(model, options or SglangOptions())
    _validate(settings, opts)
    if model.is_state_only:
        raise BadInputError(
            f"--engine sglang: {model.name} has no attention layer (pure Mamba); vramctl plans SGLang's mamba pool "
            "only beside a token pool (hybrids); plan it with --engine vllm"
        )
    _refuse_own_layouts(model)
    if settings.max_model_len is not None and settings.max_model_len > model.max_position_embeddings:
        raise BadInputError(
            f"--context-length {settings.max_model_len}: above the model's max_position_embeddings "
            f"{model.max_position_embeddings}; SGLang refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
        )
    version = opts.version or (
        settings.engine_version
        if settings.engine_version and settings.engine == "sglang"
        else LATEST_SGLANG_VERSION
    )
    rules = rules_for_version(version)
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    gpu_mem, capacity = gpu_mem_mib_for(gpu, settings)
    trace = _Trace([f"SGLang {version}: rules of {rules} ({SGLANG_REF}, the version history of its defaults)"], [])
    _version_notes(version, rules, trace)
    if is_dsa(model):  # DeepSeek-V3.2: SGLang picks the KV dtype, backend and page size by GPU (pool.dsa_defaults)
        dsa = dsa_defaults(settings, opts, rules, gpu.compute_capability, version)
        settings = replace(settings, kv_cache_dtype=dsa.kv_cache_dtype, page_size=dsa.page_size)
        opts = opts.with_changes(dsa_decode_backend=dsa.decode_backend)
        trace.branch.append(dsa.words)
    if is_scaled_kv(settings) and (
        refusal := scaled_kv_refusal(model, opts, rules, settings.kv_cache_dtype, version)
    ) is not None:
        raise BadInputError(refusal)
    resolved = _resolve(model, settings, opts, rules, gpu_mem, trace)
    post_capture, post_why = post_capture_kv_sizing_planned(resolved, model, settings.kv_cache_dtype)
    if rules in POST_CAPTURE_FLOOR_MIB:
        trace.branch.append(post_why)
    mfs, source, reserve = _fraction(settings, opts, resolved, post_capture, trace)
    load = _load(model, settings, opts, capacity, mfs, rules, trace)
    pool = _pool(model, settings, opts, resolved, load, mfs, post_capture, version, trace)
    verdict, message = _verdict(load, pool, mfs, rules, tp)
    if 0 < pool.tokens < pool.context_len:
        trace.notes.append(
            f"the pool holds {format_count(pool.tokens)} tokens, fewer than one context_len={pool.context_len} "
            "request"
        )
    held = int(pool.slack_gib * GiB)
    ledger = _ledger(capacity, load, pool, reserve, post_capture, held)
    log_lines = (
        _log_lines(
            model,
            settings,
            pool.tokens,
            pool.page,
            pool.cell,
            pool.kv_bytes,
            resolved.chunked,
            resolved.max_prefill_tokens,
            pool.max_running_requests,
            pool.context_len,
            rules,
            post_capture,
        )
        if pool.tokens > 0
        else ()
    )
    return SglangPlan(
        version=version,
        rules=rules,
        gpu_mem_mib=gpu_mem,
        capacity_bytes=capacity,
        mem_fraction_static=mfs,
        mem_fraction_source=source,
        reserve=reserve,
        chunked_prefill_size=resolved.chunked,
        max_prefill_tokens=resolved.max_prefill_tokens,
        cuda_graph_max_bs=resolved.max_bs,
        cuda_graph_bs=decode_graph_batch_sizes(resolved.max_bs) if resolved.decode_graph else (),
        prefill_graph_max_bs=resolved.prefill_max_bs if resolved.prefill_graph else 0,
        prefill_graph_buckets=resolved.buckets,
        page_size=pool.page,
        post_capture=post_capture,
        context_bytes=load.ctx_bytes,
        free_before_load_bytes=load.pre,
        weights_bytes=load.weights,
        free_after_load_bytes=load.avail,
        held_back_bytes=held + pool.graph_estimate,
        kv_budget_bytes=pool.budget,
        bytes_per_token=pool.cell,
        max_total_num_tokens=pool.tokens,
        profiled_tokens=pool.profiled,
        kv_cache_bytes=pool.kv_bytes,
        full_layer_tokens=pool.full_tokens,
        swa_layer_tokens=pool.swa_tokens,
        max_running_requests=pool.max_running_requests,
        context_len=pool.context_len,
        verdict=verdict,
        message=message,
        branch=tuple(trace.branch),
        ledger=ledger,
        notes=tuple(trace.notes),
        log_lines=log_lines,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        extra={"mamba": pool.mamba.to_json()} if pool.mamba is not None else {},
    )


def _with_vision_tower(model: ModelSpec, opts: SglangOptions) -> SglangOptions:
    """A multimodal checkpoint gets SGLang's VLM adjustment (`python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23); 0.5.18 L9527
    `adjust_mem_fraction_for_vlm`), the tower's shape from its vision_config (defaults 24 × 1024)."""
    if opts.vit_layers is None and opts.vit_hidden_size is None and model.is_multimodal:
        return opts.with_changes(
            vit_layers=model.vision_layers or 24, vit_hidden_size=model.vision_hidden_size or 1024
        )
    return opts


def _version_notes(version: str, rules: str, trace: _Trace) -> None:
    if parse_version(version) > parse_version(LATEST_SGLANG_VERSION):
        trace.notes.append(
            f"SGLang {version} is newer than the latest version vramctl models ({LATEST_SGLANG_VERSION}): planned "
            f"with {rules}'s rules"
        )
    elif parse_version(version) < parse_version(OLDEST_SGLANG_VERSION):
        trace.notes.append(
            f"SGLang {version} predates the oldest version vramctl models ({OLDEST_SGLANG_VERSION}): planned with "
            f"{rules}'s rules, which may not be this version's"
        )


def _resolve(
    model: ModelSpec,
    settings: ServeSettings,
    opts: SglangOptions,
    rules: str,
    gpu_mem: int | None,
    trace: _Trace,
) -> _Resolved:
    """Step 1: the GPU-tier defaults and the flags after them (chunked prefill, graph batch sizes, buckets)."""
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    role = opts.disaggregation_mode
    is_mla = model.mla is not None
    tier = gpu_tier(gpu_mem, tp, rules)
    gpu_desc = (
        "unknown (nvidia-smi total not available)" if gpu_mem is None else f"{format_count(gpu_mem)} MiB"
    )
    trace.branch.append(f"gpu_mem = {gpu_desc} → tier {tier.label}")
    chunked = (
        settings.chunked_prefill_size
        if settings.chunked_prefill_size is not None
        else tier.chunked_prefill_size
    )
    if settings.chunked_prefill_size is None and rules == RULES_0_4_6:
        if role != "null":
            chunked = 16384
        if opts.enable_dp_attention and opts.dp_size > 1:
            chunked //= opts.dp_size
    max_prefill = settings.max_prefill_tokens or DEFAULT_MAX_PREFILL_TOKENS
    max_bs = settings.cuda_graph_max_bs if settings.cuda_graph_max_bs is not None else tier.cuda_graph_max_bs
    if (
        rules == RULES_0_5_23
        and settings.cuda_graph_max_bs is None
        and settings.max_running_requests is not None
    ):
        max_bs = min(max_bs, settings.max_running_requests)
        trace.branch.append(f"0.5.23: decode graph max_bs capped at --max-running-requests {max_bs}")
    decode_graph = not settings.disable_cuda_graph and role != "prefill"
    if rules in (RULES_0_5_17, RULES_0_5_18, RULES_0_5_23):
        prefill_graph = (
            not settings.disable_cuda_graph and not opts.disable_prefill_graph and role != "decode"
        )
        if rules == RULES_0_5_23 and opts.device != "cuda":
            prefill_graph = False
    else:
        prefill_graph = opts.enable_piecewise_cuda_graph and not settings.disable_cuda_graph
    if is_mla:
        prefill_max_bs = min(8192, chunked) if rules == RULES_0_5_23 else 2048
    else:
        prefill_max_bs = chunked if chunked > 0 else max_prefill
    if settings.max_total_tokens is not None:
        prefill_max_bs = min(prefill_max_bs, settings.max_total_tokens)
    if "llama-2" in model.name.lower():
        prefill_max_bs = min(prefill_max_bs, 4096)
    buckets = len(prefill_graph_buckets(prefill_max_bs)) if prefill_graph else 0
    return _Resolved(
        rules=rules,
        gpu_mem=gpu_mem,
        tp=tp,
        pp=pp,
        role=role,
        chunked=chunked,
        max_prefill_tokens=max_prefill,
        max_bs=max_bs,
        decode_graph=decode_graph,
        prefill_graph=prefill_graph,
        prefill_max_bs=prefill_max_bs,
        buckets=buckets,
        is_mla=is_mla,
        max_running_requests=settings.max_running_requests,
        options=opts,
    )


def _fraction(
    settings: ServeSettings,
    opts: SglangOptions,
    resolved: _Resolved,
    post_capture: bool,
    trace: _Trace,
) -> tuple[float, Literal["given", "heuristic", "fallback"], ReserveBreakdown | None]:
    """Step 2: mem_fraction_static — given, the version's heuristic, or the unknown-card fallback."""
    rules, gpu_mem = resolved.rules, resolved.gpu_mem
    reserve: ReserveBreakdown | None = None
    source: Literal["given", "heuristic", "fallback"]
    if settings.mem_fraction_static is not None:
        mfs = settings.mem_fraction_static
        source = "given"
        trace.branch.append(f"--mem-fraction-static {mfs} given: no heuristic")
        # What the heuristic would have reserved still explains the held-back memory's parts.
        reserve = _reserve_for(resolved, post_capture, gpu_mem)
    elif gpu_mem is None:
        mfs = UNKNOWN_GPU_FRACTION[rules]
        source = "fallback"
        trace.branch.append(f"gpu_mem unknown → mem_fraction_static {mfs} ({rules} fallback)")
    else:
        source = "heuristic"
        reserve = _reserve_for(resolved, post_capture, gpu_mem)
        if rules == RULES_0_4_6:
            mfs = _fraction_0_4_6(gpu_mem, resolved.tp, resolved.pp)
            trace.branch.append(
                f"0.4.6.post5 tp×pp table (tp·pp = {resolved.tp * resolved.pp}) → mem_fraction_static {mfs:.4f}"
            )
        else:
            mfs = round((gpu_mem - reserve.total_mib) / gpu_mem, 3)
            trace.branch.append(_reserve_words(reserve, gpu_mem, mfs))
        vlm = _vlm_factor(opts)
        if vlm is not None and resolved.role != "decode":
            if post_capture and rules == RULES_0_5_23:
                mfs = mfs - 8 * 1024 / gpu_mem
                trace.branch.append("VLM with post-capture sizing (0.5.23): − 8 GiB / gpu_mem")
            else:
                mfs = mfs * vlm
                trace.branch.append(f"VLM adjustment: × {vlm:.4f}")
    if not 0 < mfs < 1:
        trace.notes.append(
            f"mem_fraction_static came out {mfs:.3f}: outside (0, 1); the card is too small for the reserve"
        )
    return mfs, source, reserve


def _load(
    model: ModelSpec,
    settings: ServeSettings,
    opts: SglangOptions,
    capacity: int,
    mfs: float,
    rules: str,
    trace: _Trace,
) -> _Load:
    """Step 3: free memory before the weights load (`pre`) and after it (`avail`), measured or estimated."""
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    ctx_bytes, ctx_unc, ctx_formula = context_estimate_bytes(tp * pp)
    start_free = capacity if settings.free_memory_bytes is None else min(capacity, settings.free_memory_bytes)
    stages = stage_layout(model, tp, pp)
    stage_layers, weights = stages[0]
    weights_source = TermSource.ESTIMATED
    weights_formula = (
        f"checkpoint {format_bytes(model.weight_bytes)} on tp {tp}: split tensors / tp + replicated ones"
    )
    if opts.free_before_load_bytes is not None:
        pre = opts.free_before_load_bytes
        ctx_bytes = max(0, start_free - pre)
        ctx_source, ctx_unc = TermSource.GIVEN, 0
        ctx_formula = "free at start − Load weight begin avail mem (given)"
    else:
        pre = start_free - ctx_bytes
        ctx_source = TermSource.ESTIMATED
    if opts.free_after_load_bytes is not None:
        avail = opts.free_after_load_bytes
        weights = pre - avail
        weights_source = TermSource.GIVEN
        weights_formula = "Load weight begin − end avail mem (given)"
    else:
        # PP ranks all-reduce MIN the token count: the binding stage has the fewest tokens.
        def stage_tokens(layers_weights: tuple[int, int]) -> int:
            layers, stage_weights = layers_weights
            rest = (pre - stage_weights) / GiB - pre / GiB * (1 - mfs)
            return int(rest * GiB) // cell_size(model, settings, opts, layers=layers, rules=rules)

        if pp > 1:
            stage_index = min(range(pp), key=lambda i: stage_tokens(stages[i]))
            stage_layers, weights = stages[stage_index]
            weights_formula = (
                f"stage {stage_index} of {pp} ({stage_layers} layers"
                f"{', embedding' if stage_index == 0 else ''}{', lm_head' if stage_index == pp - 1 else ''}) / tp {tp}"
            )
            trace.branch.append(f"pipeline stage {stage_index} binds (fewest tokens; PP ranks take the MIN)")
        draft = opts.speculative_draft_weight_bytes or 0
        if draft and rules in (RULES_0_5_18, RULES_0_5_23):
            # 0.5.18+: draft weights load before profiling and are charged to the KV budget (`python/sglang/srt/server_args.py` (SGLang v0.5.23)).
            weights += -(-draft // tp)
            weights_formula += f" + draft model {format_bytes(draft)} / tp {tp}"
            trace.branch.append(
                "speculative decoding: the draft model's weights are charged to the KV budget"
            )
        avail = pre - weights
    if opts.free_after_load_bytes is not None or pp == 1:
        stage_layers = layers_per_stage(model.num_hidden_layers, pp)
    trace.branch.append(
        f"pre_model_load_memory = {pre / GiB:.2f} GiB, after load {avail / GiB:.2f} GiB "
        f"(weights {weights / GiB:.2f} GiB per rank)"
    )
    return _Load(
        pre=pre,
        avail=avail,
        weights=weights,
        weights_source=weights_source,
        weights_formula=weights_formula,
        ctx_bytes=ctx_bytes,
        ctx_source=ctx_source,
        ctx_unc=ctx_unc,
        ctx_formula=ctx_formula,
        other=capacity - start_free,
        stage_layers=stage_layers,
    )


def _pool(
    model: ModelSpec,
    settings: ServeSettings,
    opts: SglangOptions,
    resolved: _Resolved,
    load: _Load,
    mfs: float,
    post_capture: bool,
    version: str,
    trace: _Trace,
) -> _Pool:
    """Step 4: the KV budget avail − pre × (1 − mfs) in GiB as SGLang computes it, then tokens and limits."""
    rules = resolved.rules
    pre_gib, avail_gib = load.pre / GiB, load.avail / GiB
    slack_gib = pre_gib * (1 - mfs)
    graph_estimate = 0
    mm_gib = 0.0
    if post_capture:
        # The pool is sized after capture: the graphs' memory is measured then; planning estimates it.
        graph_mib, _ = reserve_for_graph_mib(resolved)
        graph_estimate = int(graph_mib * MiB)
        # the pre-capture slack of a mamba model and the multimodal reservation (post_capture.py)
        raised = pc.pre_capture_slack_gib(
            version, slack_gib=slack_gib, reserve_mib=_activation_reserve_mib(resolved), mamba=model.state_space is not None
        )
        if raised > slack_gib:
            trace.branch.append(f"post-capture: mamba state raises the pre-capture slack to {raised:.2f} GiB")
        slack_gib = raised
        mm_gib = pc.mm_reservation_gib(version, multimodal=model.is_multimodal)
    rest_gib = avail_gib - slack_gib - mm_gib
    stage_layers = load.stage_layers
    mamba: MambaPool | None = None
    if model.state_space is not None:  # hybrid: carve the state pool out of rest first (`mamba_pool`)
        mamba = mamba_pool(model, settings, opts, rest_gib, rules, version=version)
        rest_gib = mamba.rest_after_gib
        stage_layers = model.num_full_layers
        trace.branch.append(mamba.words)
        trace.notes.append(
            f"Hybrid: {mamba.words}; the token pool counts the {stage_layers} full-attention layers only"
        )
    budget = int(rest_gib * GiB) - graph_estimate
    cell = _cell(model, settings, opts, stage_layers, trace, rules)
    page = settings.page_size or BACKEND_PAGE_SIZE.get((opts.attention_backend or "").lower(), 1)
    if opts.device == "musa" and settings.page_size is None:
        page = 64
    profiled = max(0, budget // cell) if budget > 0 else 0
    profiled -= profiled % page
    if post_capture:
        slack_gib, budget, profiled = _post_capture_cap(
            model, settings, resolved, rest_gib, load.pre / GiB, mfs, slack_gib, graph_estimate, cell, page, trace,
            version,
        )
    tokens = profiled
    if settings.max_total_tokens is not None and settings.max_total_tokens < tokens:
        tokens = settings.max_total_tokens - settings.max_total_tokens % page
        trace.branch.append(
            f"--max-total-tokens {settings.max_total_tokens} caps the pool (profiled {profiled})"
        )
    elif settings.max_total_tokens is not None:
        trace.notes.append(
            f"max_total_tokens={settings.max_total_tokens} is larger than the profiled value {profiled}. "
            "Use the profiled value instead."
        )
    tokens, kv_bytes, full_tokens, swa_tokens = _swa_pools(model, opts, rules, tokens, cell, page, trace)
    context_len = settings.max_model_len or model.max_position_embeddings
    dp_workers = opts.dp_size if opts.enable_dp_attention else 1
    mrr = default_max_running_requests(tokens, context_len, rules, settings.max_running_requests, dp_workers)
    if mamba is not None and mamba.slots > 0:
        capped = min(mrr, mamba.slots // mamba.ratio)
        if capped < mrr:
            trace.branch.append(
                f"max_running_requests capped to {capped} by the mamba state cache (max_mamba_cache_size "
                f"{mamba.slots} // ratio {mamba.ratio})"
            )
        mrr = capped
    return _Pool(
        slack_gib=slack_gib,
        rest_gib=rest_gib,
        graph_estimate=graph_estimate,
        budget=budget,
        cell=cell,
        page=page,
        profiled=profiled,
        tokens=tokens,
        kv_bytes=kv_bytes,
        full_tokens=full_tokens,
        swa_tokens=swa_tokens,
        context_len=context_len,
        max_running_requests=mrr,
        mamba=mamba,
    )


def _cell(
    model: ModelSpec, settings: ServeSettings, opts: SglangOptions, layers: int, trace: _Trace, rules: str
) -> int:
    """Bytes per token per rank; an EAGLE / standalone draft's KV shares the token count
    (`python/sglang/srt/model_executor/pool_configurator.py` (SGLang v0.5.23))."""
    cell = cell_size(model, settings, opts, layers=layers, rules=rules)
    algo = (opts.speculative_algorithm or "").upper()
    if opts.speculative_draft_layers and algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        cell += cell * opts.speculative_draft_layers // model.num_hidden_layers
        trace.branch.append(
            f"{algo} draft KV shares the token count: cell × (1 + {opts.speculative_draft_layers} / "
            f"{model.num_hidden_layers}) = {cell} B"
        )
    return cell


def _activation_reserve_mib(resolved: _Resolved) -> float:
    """`pre_capture_activation_reserve_mb`: 512 + 1.5 × activation tokens + tp·pp/8 × 1024, 10 GiB above 60 GiB."""
    act_tokens, _ = _activation_tokens(resolved)
    reserve_mib = METADATA_RESERVE_MIB + act_tokens * ACTIVATION_MIB_PER_TOKEN + resolved.tp * resolved.pp / 8 * 1024
    if resolved.gpu_mem is not None and resolved.gpu_mem > FLOOR_ABOVE_MIB:
        reserve_mib = max(reserve_mib, FLOOR_RESERVE_MIB)
    return reserve_mib


def _post_capture_cap(
    model: ModelSpec,
    settings: ServeSettings,
    resolved: _Resolved,
    rest_gib: float,
    pre_gib: float,
    mfs: float,
    slack_gib: float,
    graph_estimate: int,
    cell: int,
    page: int,
    trace: _Trace,
    version: str,
) -> tuple[float, int, int]:
    """Post-capture KV sizing (0.5.16 →): the headroom term of `compute_post_capture_kv_resize`
    (vramctl.core.engines.sglang.post_capture), and the tokens capped at the pre-capture value.
    Returns (slack GiB, budget bytes, profiled tokens)."""
    opts, rules = resolved.options, resolved.rules
    budget = int(rest_gib * GiB) - graph_estimate
    pre_capture_tokens = max(0, int(rest_gib * GiB) // cell)
    pre_capture_tokens -= pre_capture_tokens % page
    eager_gap = resolved.max_bs < default_max_running_requests(
        pre_capture_tokens,
        settings.max_model_len or model.max_position_embeddings,
        rules,
        settings.max_running_requests,
        opts.dp_size if opts.enable_dp_attention else 1,
    )
    head = pc.post_capture_headroom(
        version,
        pre_gib=pre_gib,
        mfs=mfs,
        reserve_mib=_activation_reserve_mib(resolved),
        eager_decode_gap=eager_gap,
        mamba=model.state_space is not None,
        multimodal=model.is_multimodal,
    )
    if head.headroom_gib > slack_gib:
        budget = int((rest_gib - (head.headroom_gib - slack_gib)) * GiB) - graph_estimate
        slack_gib = head.headroom_gib
        trace.branch.append(head.words)
    profiled = min(pre_capture_tokens, max(0, budget // cell) if budget > 0 else 0)
    profiled -= profiled % page
    trace.branch.append("post-capture: tokens capped at the pre-capture value")
    return slack_gib, budget, profiled


def _swa_pools(
    model: ModelSpec, opts: SglangOptions, rules: str, tokens: int, cell: int, page: int, trace: _Trace
) -> tuple[int, int, int | None, int | None]:
    """Hybrid-SWA architectures split the pool into full and SWA pools (swa_full_tokens_ratio); others give every
    layer full-length KV. Returns (tokens, KV bytes, full-layer tokens, SWA-layer tokens)."""
    hybrid = is_hybrid_swa(model, opts) and rules not in (RULES_0_4_6,)
    if hybrid and tokens > 0:
        full_layers, swa_layers = model.num_full_layers, model.num_sliding_layers
        ratio = opts.swa_full_tokens_ratio
        total = tokens * model.num_hidden_layers
        full_tokens = int(total / (ratio * swa_layers + full_layers))
        swa_tokens = int(full_tokens * ratio)
        full_tokens -= full_tokens % page
        swa_tokens -= swa_tokens % page
        per_layer = cell // model.num_hidden_layers
        kv_bytes = per_layer * (full_tokens * full_layers + swa_tokens * swa_layers)
        trace.branch.append(
            f"hybrid SWA pools ({model.architecture}): full_layer_tokens={full_tokens}, "
            f"swa_layer_tokens={swa_tokens} (swa_full_tokens_ratio {ratio})"
        )
        return full_tokens, kv_bytes, full_tokens, swa_tokens
    if model.num_sliding_layers and not hybrid:
        trace.notes.append(
            "sliding-window layers get full-length KV: SGLang sizes a separate SWA pool only for "
            + ", ".join(sorted(HYBRID_SWA_ARCHITECTURES))
        )
    return tokens, tokens * cell, None, None


def _verdict(load: _Load, pool: _Pool, mfs: float, rules: str, tp: int) -> tuple[Verdict, str]:
    """Step 5: the failure SGLang would raise, in its words (messages.py), or `fits`."""
    if pool.mamba is not None and pool.mamba.slots <= 0 and load.weights < load.pre:
        return Verdict.NO_KV_CACHE_MEMORY, pool.mamba.error
    if load.weights >= load.pre:
        return Verdict.WEIGHTS_DO_NOT_FIT, messages.weights_do_not_fit(load.weights, load.pre, tp)
    if pool.rest_gib <= 0 or pool.tokens <= 0:
        pre_gib = load.pre / GiB
        minimum = 1 - (load.avail / GiB) / pre_gib if pre_gib > 0 else 1.0
        if pool.rest_gib <= 0 and rules in (RULES_0_5_18, RULES_0_5_23):
            return Verdict.NO_KV_CACHE_MEMORY, messages.no_gpu_memory_for_kv(mfs, minimum)
        return Verdict.NO_KV_CACHE_MEMORY, messages.not_enough_memory(mfs, minimum)
    return Verdict.FITS, ""


def _ledger(
    capacity: int,
    load: _Load,
    pool: _Pool,
    reserve: ReserveBreakdown | None,
    post_capture: bool,
    held: int,
) -> Ledger:
    """Step 6: the ledger; capacity = the CUDA total, the slack whatever SGLang holds back beyond the terms."""
    terms: list[Term] = []
    if load.other:
        terms.append(Term(OTHER_PROCESSES, load.other, TermSource.GIVEN, "CUDA total − --free-memory"))
    terms.append(Term(NON_TORCH, load.ctx_bytes, load.ctx_source, load.ctx_formula, load.ctx_unc))
    terms.append(Term(WEIGHTS, load.weights, load.weights_source, load.weights_formula, 0))
    act_bytes = graph_bytes = 0
    if reserve is not None and reserve.branch in ("normal", "table", "tp-pp-table"):
        act_bytes = max(0, min(int(reserve.activation_mib * MiB), held))
        graph_bytes = max(0, min(int(reserve.graph_mib * MiB), held - act_bytes))
    elif post_capture and reserve is not None:
        graph_bytes = pool.graph_estimate
        act_bytes = max(0, held)
    if act_bytes:
        terms.append(
            Term(
                ACTIVATION_PEAK,
                act_bytes,
                TermSource.ESTIMATED,
                f"reserve's activation part: {reserve.activation_tokens if reserve else 0} tokens × 1.5 MiB"
                + (
                    " (clipped to the held-back pre × (1 − mfs))"
                    if reserve is not None and act_bytes < int(reserve.activation_mib * MiB)
                    else ""
                )
                if not post_capture
                else "post-capture headroom pre × (1 − mfs)",
                note="SGLang does not measure the activation peak; its reserve is a heuristic",
            )
        )
    if graph_bytes:
        terms.append(
            Term(
                CUDA_GRAPH,
                graph_bytes,
                TermSource.ESTIMATED,
                "reserve_for_graph_mb: 2 MiB × decode max_bs + 8 MiB × prefill buckets (1536 MiB for MLA)",
                note="SGLang's own estimate of the graphs' non-torch memory",
            )
        )
    mamba = pool.mamba
    if mamba is not None and mamba.slots > 0:
        terms.append(
            Term(
                MAMBA_STATE,
                mamba.pool_bytes,
                TermSource.DERIVED,
                f"max_mamba_cache_size {mamba.slots} × {mamba.per_request_bytes:,} B per request "
                f"({mamba.state_layers} state layers × (conv + SSM))",
                note="SGLang's MambaPool: fixed-size states, separate from the token KV pool",
            )
        )
    terms.append(
        Term(
            KV_CACHE, pool.kv_bytes, TermSource.DERIVED, f"{format_count(pool.tokens)} tokens × {pool.cell} B"
        )
    )
    return Ledger.with_residual(
        capacity,
        terms,
        residual=SLACK,
        residual_formula=(
            "pre × (1 − mfs) not counted above (512 MiB metadata, 128 MiB per tp·pp rank, floor excess) "
            "+ page/cell rounding + any --max-total-tokens cap"
        ),
    )


def _log_lines(
    model: ModelSpec,
    settings: ServeSettings,
    tokens: int,
    page: int,
    cell: int,
    kv_bytes: int,
    chunked: int,
    max_prefill: int,
    mrr: int,
    context_len: int,
    rules: str,
    post_capture: bool,
) -> tuple[str, ...]:
    """The start-up lines SGLang would print (`python/sglang/srt/model_executor/model_runner.py` (SGLang v0.5.23)); K/V buffers hold one padding page."""
    dtype = settings.kv_cache_dtype if settings.kv_cache_dtype != "auto" else model.torch_dtype
    dtype = "torch." + dtype.removeprefix("torch.")
    allocated = "VA upper bound" if post_capture else "is allocated"
    padded = (tokens + page) * cell / GiB
    dtype_part = "" if rules in (RULES_0_4_6, RULES_0_5_2, RULES_0_5_9) else f"dtype: {dtype}, "
    if model.mla is not None:
        kv_line = f"KV Cache {allocated}. {dtype_part}#tokens: {tokens}, KV size: {padded:.2f} GB"
    else:
        kv_line = (
            f"KV Cache {allocated}. {dtype_part}#tokens: {tokens}, K size: {padded / 2:.2f} GB, "
            f"V size: {padded / 2:.2f} GB"
        )
    summary = (
        f"max_total_num_tokens={tokens}, chunked_prefill_size={chunked}, max_prefill_tokens={max_prefill}, "
        f"max_running_requests={mrr}, context_len={context_len}"
    )
    return kv_line, summary
