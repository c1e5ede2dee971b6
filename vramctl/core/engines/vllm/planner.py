"""`plan_vllm`: the vLLM plan for one model, card and set of flags, assembled from the rules package."""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramctl.core import kv as kvmath
from vramctl.core.engines import vllm_features as vf
from vramctl.core.engines import vllm_runtime as RT
from vramctl.core.engines import vllm_speculative as SP
from vramctl.core.engines.base import EnginePlan
from vramctl.core.engines.vllm import estimates as est
from vramctl.core.engines.vllm import rules as V
from vramctl.core.engines.vllm.budget import _auto_fit, _Core, _core, speculative_charges
from vramctl.core.engines.vllm.defaults import AUTO_MAX_MODEL_LEN, VllmSettings, resolve_settings, validate
from vramctl.core.engines.vllm.explain import _explanations, _utilization_rows
from vramctl.core.engines.vllm.hybrid import _with_hybrid
from vramctl.core.engines.vllm.kv_manager import kv_view_of_model
from vramctl.core.engines.vllm.ledger import _ledger
from vramctl.core.engines.vllm.scheduler import default_capture_sizes
from vramctl.core.errors import BadInputError
from vramctl.core.plan_result import PlanEdge, PlanResult
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec, derived_warning


def _edge_of(core: _Core) -> PlanEdge:
    return PlanEdge(
        kv_cache_bytes=core.binding.kv_bytes,
        num_blocks=core.num_blocks,
        kv_tokens=core.kv_tokens,
        max_concurrency=core.concurrency,
        max_model_len_fit=core.max_model_len_fit,
        verdict=core.verdict,
        verdict_message=core.verdict_message,
    )


@dataclass(frozen=True)
class VllmResolution:
    """The flags as vLLM resolves them on one card: the one resolution `plan`, `profile` and `suggest` share."""

    version: str
    """The vLLM release planned."""
    model: ModelSpec
    """The model as that release derives its length (`--hf-overrides`-free yarn rule of 0.30, vllm_yarn)."""
    settings: VllmSettings
    fallback: str | None
    """Why 0.8 – 0.10 run V0 here (`vllm_runtime.v1_fallback_reason`), or None."""
    rules_version: str
    """The release whose rules apply: `V0_RULES_VERSION` on a V0 fall-back, else `version`."""


def checkpoint_kv_dtype(model: ModelSpec, settings: ServeSettings) -> str | None:
    """The KV cache dtype `--kv-cache-dtype auto` resolves to for a ModelOpt checkpoint that declares one
    (`ModelSpec.checkpoint_kv_cache_dtype`) on a release that reads it (`V.reads_checkpoint_kv_dtype`); None
    otherwise (the flag given, no declared dtype, an older release)."""
    if (settings.kv_cache_dtype or "auto").strip().lower() != "auto" or not model.checkpoint_kv_cache_dtype:
        return None
    version = V.resolve_version(settings.engine_version if settings.engine != "sglang" else None)
    if not V.reads_checkpoint_kv_dtype(version):
        return None
    return model.checkpoint_kv_cache_dtype


def resolve_vllm(model: ModelSpec, gpu: GpuSpec, settings: ServeSettings) -> VllmResolution:
    """Validate the flags (bad input: exit 2) and fill vLLM's defaults for this model, card and version, with the
    V0 fall-back of 0.8 – 0.10 applied (its defaults are V0's, `settings.release` the version run)."""
    version = V.resolve_version(settings.engine_version if settings.engine != "sglang" else None)
    model = vf.model_for_version(model, version, settings.engine)  # vLLM 0.30's yarn rule
    if settings.engine != "sglang":  # SGLang's own choices are checked by its planner
        V.check_kv_cache_dtype(settings.kv_cache_dtype, version)
    validate(model, gpu, settings)
    V.check_quantization_supported(model.name, model.quantization, model.quant_algos, version)
    if model.state_space is not None:
        V.check_hybrid_supported(model.name, version, model.architecture)
    if model.architecture.startswith("LongcatFlash") and settings.pipeline_parallel_size > 1:
        raise BadInputError(
            f"--pipeline-parallel-size {settings.pipeline_parallel_size}: LongCat-Flash is planned as two "
            "attention + MLP sub-layers per layer, which vLLM's stages do not split; plan it with tensor parallelism"
        )
    if model.dsv4 is not None:
        V.check_deepseek_v4_supported(
            model.name, version, gpu.compute_capability, settings.pipeline_parallel_size
        )
        tp, shape = settings.tensor_parallel_size, model.dsv4
        if shape.num_attention_heads % tp or shape.o_groups % tp:
            raise BadInputError(
                f"--tensor-parallel-size {tp}: DeepSeek-V4 splits its {shape.num_attention_heads} heads and "
                f"{shape.o_groups} output groups over the ranks (attention.py:212 asserts heads % tp == 0, :220 "
                "n_local_groups = o_groups // tp); use a TP size that divides both"
            )
        if settings.speculative_method:
            raise BadInputError(
                f"--speculative-config {settings.speculative_method}: DeepSeek-V4's MTP / DSpark drafter (its own "
                "compressed caches and weights) is not modelled; plan without speculative decoding"
            )
    if model.gemma4 is not None:
        V.check_gemma4_supported(model.name, model.architecture, version, settings.pipeline_parallel_size)
        tp, heads = settings.tensor_parallel_size, model.gemma4.num_attention_heads
        if heads % tp:
            raise BadInputError(
                f"--tensor-parallel-size {tp}: Gemma-4 splits its {heads} heads over the ranks (gemma4.py:386 asserts "
                "heads % tp == 0); use a TP size that divides them"
            )
        if settings.speculative_method:
            raise BadInputError(
                f"--speculative-config {settings.speculative_method}: Gemma-4's MTP / DSpark drafters (gemma4_mtp.py, "
                "gemma4_dspark.py: their own layers and caches) are not modelled; plan without speculative decoding"
            )
    fallback = RT.v1_fallback_reason(
        version,
        compute_capability=gpu.compute_capability,
        vendor=gpu.vendor,
        quantization=settings.quantization or (model.quantization or None),
        kv_cache_dtype=settings.kv_cache_dtype or "auto",
        dtype=settings.dtype,
        enable_lora=settings.enable_lora,
        pipeline_parallel_size=settings.pipeline_parallel_size,
        use_v1_env=settings.use_v1_env,
    )
    rules_version = V.V0_RULES_VERSION if fallback else version
    s = resolve_settings(model, gpu, settings, rules_version)
    if fallback:
        s = replace(s, release=version)
    return VllmResolution(version, model, s, fallback, rules_version)


def plan_vllm(
    model: ModelSpec,
    gpu: GpuSpec,
    settings: ServeSettings,
    *,
    calibration: est.Calibration = est.CALIBRATION,
    light: bool = False,
) -> PlanResult:
    """The vLLM plan for one model, card and set of flags (`light`: without the utilisation table, for the fix
    search, which needs only the verdict and its edges; `calibration`: the estimate coefficients; the
    default is the fitted set, scripts/calibrate.py passes others for leave-one-out)."""
    loaded = model
    kv_from_checkpoint = checkpoint_kv_dtype(model, settings)
    if kv_from_checkpoint:
        settings = settings.with_changes(kv_cache_dtype=kv_from_checkpoint)
    resolution = resolve_vllm(model, gpu, settings)
    version, model, s, fallback = resolution.version, resolution.model, resolution.settings, resolution.fallback
    rules_version = resolution.rules_version
    capacity = settings.gpu_memory_bytes or gpu.cuda_total_bytes
    s, external = vf.prepare(model, s, settings, capacity)  # --load-format ipc_cache, flag checks
    core = _core(model, gpu, s, capacity, calibration)
    auto_note = None
    edges: list[_Core] = []
    for edge in (+1, -1):
        at_edge = _core(model, gpu, s, capacity, calibration, edge)
        if settings.max_model_len == AUTO_MAX_MODEL_LEN:
            at_edge = _auto_fit(model, gpu, at_edge, capacity, calibration, edge)[0]
        edges.append(at_edge)
    if settings.max_model_len == AUTO_MAX_MODEL_LEN:
        core, auto_note = _auto_fit(model, gpu, core, capacity, calibration)
        s = core.s
    pessimistic, optimistic = (_edge_of(e) for e in edges)
    band = max(0, core.binding.kv_bytes - pessimistic.kv_cache_bytes)
    ledger = _ledger(core, band)
    notes, warnings = _explanations(model, gpu, core, ledger)
    if model.derived is not None:
        warnings.insert(0, derived_warning(model))
    if auto_note:
        notes.insert(0, auto_note)
    if model.dsv4 is not None:
        notes.append(V.deepseek_v4_note(version))
    if model.gemma4 is not None:
        notes.append(V.gemma4_note(version))
    if kv_from_checkpoint:
        notes.append(
            f"--kv-cache-dtype auto → {kv_from_checkpoint}: the checkpoint's quantisation config declares its KV cache "
            "dtype (kv_cache_quant_algo / kv_cache_scheme), which vLLM uses for `auto` "
            "(resolve_kv_cache_dtype_string, vllm/utils/torch_utils.py)"
        )
    if s.speculative is not None:
        charges = speculative_charges(model, s, calibration, _unspeculative_sizes(gpu, settings, s))
        speculative = replace(s.speculative, profile=charges)
        s = replace(s, speculative=speculative)
        drafter = SP.drafter_rank_bytes(
            model, speculative, dtype=s.dtype, tp=s.tensor_parallel_size, ep=s.expert_parallel_size,
            pp=s.pipeline_parallel_size,
        )
        notes.extend(SP.notes(speculative, model, drafter, dtype=s.dtype, pp=s.pipeline_parallel_size))
    if fallback:
        notes.insert(
            0,
            f"vLLM {version} runs its V0 engine here ({fallback}: `_is_v1_supported_oracle`, "
            "vllm/engine/arg_utils.py 0.8-0.10): planned with the V0 rules "
            f"(defaults, profiling, graphs) as of {V.V0_RULES_VERSION}",
        )
        s = replace(s, version=version)
    kv_model = kv_view_of_model(model, rules_version, s.drafter_kv_layers)
    result = PlanResult(
        engine="vllm",
        engine_version=version,
        model=model,
        gpu=gpu,
        settings=s,
        ledger=ledger,
        capacity_bytes=capacity,
        requested_bytes=core.requested,
        kv_cache_bytes=core.binding.kv_bytes,
        kv_bytes_per_token=kvmath.kv_bytes_per_token(
            kv_model,
            kv_cache_dtype=s.kv_cache_dtype,
            tp=s.tensor_parallel_size,
            pp=s.pipeline_parallel_size,
            model_dtype=s.dtype,
        ),
        bytes_per_block=core.binding.bytes_per_block,
        block_size=s.block_size,
        num_blocks=core.num_blocks,
        blocks_per_request=core.blocks_per_request,
        kv_tokens=core.kv_tokens,
        max_concurrency=core.concurrency,
        max_model_len=s.max_model_len,
        max_model_len_fit=core.max_model_len_fit,
        verdict=core.verdict,
        verdict_message=core.verdict_message,
        outside_budget_bytes=core.binding.outside.bytes
        + (0 if core.binding.graph_charged else core.binding.graph.bytes),
        binding_stage=core.binding.index,
        utilization_table=() if light else _utilization_rows(model, gpu, core, calibration),
        warnings=tuple(warnings),
        explanations=tuple(notes),
        kv_cache_uncertainty_bytes=band,
        pessimistic=pessimistic,
        optimistic=optimistic,
    )
    if model.state_space is not None:
        result = _with_hybrid(result, model, gpu, settings, core)
    annotated: PlanResult = vf.annotate(result, loaded, settings, external)
    return annotated


def _unspeculative_sizes(gpu: GpuSpec, settings: ServeSettings, s: VllmSettings) -> int:
    """How many CUDA-graph sizes the same flags capture without speculative decoding."""
    if not s.cudagraph_capture_sizes or settings.cudagraph_capture_sizes is not None:
        return len(s.cudagraph_capture_sizes)
    return len(
        default_capture_sizes(
            s.max_num_seqs,
            s.max_num_batched_tokens,
            gpu,
            s.version,
            max_capture_size=settings.max_cudagraph_capture_size,
        )
    )


def settings_record(model: ModelSpec, gpu: GpuSpec, settings: ServeSettings) -> VllmSettings:
    """The flags as a settings record (validated, defaults filled in at vLLM's newest rules) with no budget
    computed: what a plan whose top level is another engine's (`--engine sglang`) carries under `settings` for
    the header and `diff`'s rule context (`resolve_vllm` at the newest release: `plan_vllm` refuses the same
    input with the same message)."""
    from vramctl.core.engines.sglang.pool import SGLANG_ONLY_KV_DTYPES

    if settings.kv_cache_dtype.strip().lower() in SGLANG_ONLY_KV_DTYPES:
        # an SGLang-only KV dtype (SGLang's own sizing validated it): the record is resolved with vLLM's 1-byte
        # dtype and carries the user's value
        fp8 = resolve_vllm(model, gpu, settings.with_changes(engine="sglang", kv_cache_dtype="fp8")).settings
        return replace(fp8, kv_cache_dtype=settings.kv_cache_dtype)
    return resolve_vllm(model, gpu, settings.with_changes(engine="sglang")).settings


class VllmEngine:
    """vLLM's rules package behind `vramctl.core.engines.base.EngineRules`."""

    @property
    def engine(self) -> str:
        return "vllm"

    def plan(self, model: ModelSpec, gpu: GpuSpec, settings: ServeSettings) -> EnginePlan:
        return plan_vllm(model, gpu, settings.with_changes(engine="vllm")).engine_plan
