"""The plan's explanations and warnings, and the utilisation trade re-planned at each u."""

from __future__ import annotations

import json
from dataclasses import replace

from vramctl.core import kv as kvmath
from vramctl.core.engines import vllm_runtime as RT
from vramctl.core.engines.vllm import estimates as est
from vramctl.core.engines.vllm import rules as V
from vramctl.core.engines.vllm.budget import _Core, _core, lora_slots_charged
from vramctl.core.engines.vllm.kv_manager import kv_view_of_model
from vramctl.core.engines.vllm.rules import OLDEST_VLLM_VERSION
from vramctl.core.ledger import (
    SLACK,
    Ledger,
)
from vramctl.core.settings import LATEST_VLLM_VERSION
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import GiB
from vramctl.core.utilization import UtilizationRow, margin_risk, utilization_trade
from vramctl.core.verdicts import (
    FITS,
)

_THIN_MARGIN_BYTES = 1 * GiB


def _utilization_rows(
    model: ModelSpec, gpu: GpuSpec, core: _Core, cal: est.Calibration
) -> tuple[UtilizationRow, ...]:
    """The utilisation trade (vramctl.core.utilization) with this plan's non-KV estimate (it does not depend
    on u). Each row's risk then says whether the engine starts at that u: the row is planned again with vLLM's
    checks (`no-start` with the failure), and at the pessimistic edge of the estimates (`at-risk`)."""
    s = core.s
    bpr = max(1, core.blocks_per_request)
    rows = utilization_trade(
        core.capacity,
        core.non_kv_bytes,
        core.binding.bytes_per_block,
        bpr,
        s.max_model_len,
        (s.gpu_memory_utilization,),
        block_size=s.block_size,
        current=s.gpu_memory_utilization,
    )
    if s.kv_cache_memory_bytes is not None:
        return rows
    out: list[UtilizationRow] = []
    for row in rows:
        at_u = replace(s, gpu_memory_utilization=row.utilization)
        here = core if row.current else _core(model, gpu, at_u, core.capacity, cal)
        if s.extensible_kv_cache:
            # the extensible KV cache's margin and reserve do not scale with u: each row's pool is the replan's
            # (budget._extensible_kv), not requested − a fixed non-KV sum
            st = here.binding
            free = core.capacity - st.kv_bytes - st.weights - st.activation.bytes - st.non_torch.bytes - st.graph.bytes
            risk, note = margin_risk(free, core.capacity)
            row = replace(
                row,
                held_back_bytes=free,
                risk="no-kv" if here.num_blocks <= 0 else risk,
                note=row.note if here.num_blocks <= 0 else note + " (kept free by the extensible KV cache's sizing)",
                kv_bytes=here.binding.kv_bytes,
                num_blocks=here.num_blocks,
                kv_tokens=here.kv_tokens,
                max_concurrency=here.concurrency,
                delta_kv_bytes=max(0, here.binding.kv_bytes) - max(0, core.binding.kv_bytes),
                delta_concurrency=here.concurrency - core.concurrency,
            )
        if row.risk != "no-kv" and here.verdict != FITS:
            row = replace(
                row,
                risk="no-start",
                note=f"does not start: {here.verdict} ({here.concurrency:.2f}x of one "
                f"{s.max_model_len}-token request)",
            )
        elif here.verdict == FITS:
            edge = _core(model, gpu, at_u, core.capacity, cal, +1)
            if edge.verdict != FITS:
                row = replace(
                    row,
                    risk="at-risk",
                    note=f"starts only if the estimates hold: at the pessimistic edge {edge.verdict} "
                    f"({edge.concurrency:.2f}x); {row.note}",
                )
        out.append(row)
    return tuple(out)


def _version_outside_known(version: str) -> str:
    """A warning when `version` lies outside the versions modelled: the nearest known rules are applied."""
    position = V.rules_for(version).known_range
    if position == "newer":
        return (
            f"vLLM {version} is newer than the latest version vramctl models ({LATEST_VLLM_VERSION}): planned with "
            f"{LATEST_VLLM_VERSION}'s rules; check the release notes for memory-profiling changes"
        )
    if position == "older":
        return (
            f"vLLM {version} predates the oldest version vramctl models ({OLDEST_VLLM_VERSION}): planned with V0 "
            "0.6's rules, which may not be this version's"
        )
    return ""


def _explanations(model: ModelSpec, gpu: GpuSpec, core: _Core, ledger: Ledger) -> tuple[list[str], list[str]]:
    s = core.s
    st = core.binding
    notes: list[str] = []
    warnings: list[str] = []
    known = _version_outside_known(s.version)
    if known:
        warnings.append(known)
    u_default = "gpu_memory_utilization" in s.defaults_used
    notes.append(
        f"requested = ceil({core.capacity / GiB:.2f} GiB × {s.gpu_memory_utilization}) = {core.requested / GiB:.2f} GiB"
        + (f" (vLLM {s.version}'s default utilisation)" if u_default else "")
        + f"; the card's total is what CUDA reports for {gpu.display_name}, not its marketing size."
    )
    if s.max_num_active_seqs is not None:
        notes.append(
            f"--max-num-active-seqs {s.max_num_active_seqs}: at most {s.max_num_active_seqs} requests run at once; "
            f"the model runner, the sampler warm-up and the CUDA graphs stay sized for max_num_seqs "
            f"{s.max_num_seqs}, so no memory term moves (vllm/config/scheduler.py, 0.31.0 →)"
        )
    if s.kv_cache_memory_bytes is not None:
        notes.append(
            "--kv-cache-memory-bytes skips vLLM's memory profiling and ignores --gpu-memory-utilization: the KV pool "
            "is exactly the given size; nothing checks that it fits (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0), open PR #56698)."
        )
        footprint = core.capacity - core.other_processes - ledger.bytes_of(SLACK)
        if ledger.bytes_of(SLACK) < 0:
            warnings.append(
                f"--kv-cache-memory-bytes {s.kv_cache_memory_bytes / GiB:.2f} GiB plus the estimated other terms "
                f"({(footprint - st.kv_bytes) / GiB:.2f} GiB) exceed the card's {core.capacity / GiB:.2f} GiB: expect "
                "an out-of-memory error at KV allocation or graph capture."
            )
    if s.extensible_kv_cache:
        notes.append(
            f"vLLM {s.version} sizes the KV pool as an extensible KV cache (the default on CUDA / ROCm from 0.34; "
            "--no-enable-extensible-kv-cache for the profile estimate): after warm-up and graph capture it takes "
            "min(requested − used, free at start − used − margin) − reserve, where used is the weights, non-torch "
            "growth and the captured graph pool, reserve the profiled activation peak"
            + (" plus the graph estimate" if s.estimate_cudagraphs else "")
            + " and margin max(1 GiB, 0.75 × reserve) (vllm/v1/worker/extensible_kv_cache.py:592-618, 0.34.0). "
            "Not modelled: the warm-up's own transient peak and torch's reservation growth (taken as no larger "
            "than the profiled peak), the sampler warm-up after capture (vllm/v1/worker/gpu_worker.py:1179-1194, "
            "0.34.0), and the fall-back to the profile estimate where the driver lacks virtual-memory management."
        )
        if (gpu.compute_capability or "").startswith("10.") and not s.enforce_eager:
            notes.append(
                "vLLM 0.34 on compute capability 10.x captures wider default CUDA-graph grids (prefill graphs up to "
                "8192 tokens, decode graphs up to max_num_seqs requests: `_split_cudagraph_capture_sizes`, "
                "vllm/config/vllm.py:2558-2737, 0.34.0); vramctl keeps the shared capture sizes, so the graph "
                "pool may be underestimated there."
            )
    sub = V.subtraction_kind(s.version)
    notes.append(
        {
            "consumed": "vLLM ≥0.28 subtracts the free-memory drop since its init snapshot plus the transient peak "
            "headroom; the CUDA context, cuBLAS handles and NCCL communicators predate the snapshot and are not "
            "charged.",
            "profile-sum": "vLLM 0.8–0.26 subtracts weights + torch peak increase + non-torch increase since the init "
            "snapshot (taken after NCCL init).",
            "v0": "vLLM V0 subtracts weights + torch peak + non-torch growth from a baseline read before NCCL init, "
            "so NCCL buffers are charged to the budget.",
        }[sub]
    )
    if sub == "v0" and V.rules_for(s.version).v0_charges_process:
        notes.append(
            f"vLLM {s.version} charges all the device holds outside torch (used − torch allocated: PR #2031 in "
            "0.2.5-0.3.0, PR #9352 in 0.6.4), the CUDA context and cuBLAS included, not only the growth since init."
        )
    if s.cudagraph_capture_sizes:
        if st.graph_charged:
            notes.append(
                f"CUDA-graph memory is estimated and subtracted (default since 0.20): {st.graph.bytes / GiB:.2f} GiB "
                f"over {len(s.cudagraph_capture_sizes)} capture sizes."
            )
        else:
            notes.append(
                f"CUDA graphs ({st.graph.bytes / GiB:.2f} GiB estimated) are captured after the KV pool and are not "
                "subtracted in this version/setting: they come out of the (1 − u) headroom."
            )
    else:
        notes.append("--enforce-eager: no CUDA graphs, no graph pool.")
    if model.num_sliding_layers and model.num_full_layers and kv_view_of_model(model, s.version) is not model:
        notes.append(
            f"vLLM {s.version} sizes every layer of this hybrid model as full attention (no hybrid KV manager)."
        )
    if s.pipeline_parallel_size > 1:
        notes.append(
            f"Pipeline stages hold {list(kvmath.pp_partition(model.num_hidden_layers, s.pipeline_parallel_size))} "
            f"layers; blocks are the minimum over ranks, so stage {st.index + 1} binds."
        )
    _deployment_notes(model, gpu, core, notes, warnings)
    _margin_warnings(core, ledger, warnings)
    return notes, warnings


def _deployment_notes(model: ModelSpec, gpu: GpuSpec, core: _Core, notes: list[str], warnings: list[str]) -> None:
    """What the deployment adds: multimodal encoders, expert / data parallelism, LoRA, the worked-example comparison and
    a dominant sampler warm-up."""
    s = core.s
    st = core.binding
    arch = model.architecture
    mm = s.mm_encoder
    if mm is not None and mm.profiled:
        notes.append(
            f"{arch} is multimodal: vLLM profiles its vision encoder first (vLLM logs \"{mm.log_line()}\"): its "
            f"forward peaks at {mm.forward_bytes / GiB:.2f} GiB and the {mm.items} outputs "
            f"({mm.outputs_bytes / GiB:.2f} GiB) stay in the encoder cache through the language model's dummy run; "
            "the activation peak is max(language model, encoder) + the outputs (parts mm_encoder / mm_encoder_outputs, "
            "± 50 %; vramctl.core.engines.vllm.multimodal)."
        )
        if mm.forward_bytes + mm.outputs_bytes > st.activation.bytes // 2:
            no_video = (
                f"--limit-mm-per-prompt '{json.dumps({'video': 0})}' if you serve no video, " if mm.modality == "video" else ""
            )
            notes.append(
                f"The encoder's profile dominates the activation peak: fewer or smaller dummy items lower it ({no_video}"
                "--mm-processor-kwargs '{\"max_pixels\": N}' for a dynamic-resolution processor, a smaller "
                "--max-num-batched-tokens for many small items); --skip-mm-profiling leaves it out of the budget."
            )
    elif mm is not None and mm.unmodelled:
        warnings.append(
            f"{arch} is multimodal: {mm.unmodelled}, so the activation peak is under-estimated (docs/plan.md)."
        )
    elif mm is not None:
        notes.append(f"{arch} is multimodal; {mm.skipped}.")
        if mm.skipped.startswith("--skip-mm-profiling"):
            warnings.append(
                "--skip-mm-profiling: the vision encoder's peak and its cached outputs are not in vLLM's budget; the "
                "first large image or video needs that memory beyond the KV pool (vLLM: 'shifts the responsibility to "
                "users')."
            )
    elif model.is_multimodal or any(k in arch for k in ("ConditionalGeneration", "VL", "Llava", "Vision")):
        why = (
            "the V0 engine encodes the dummy images inside the model's forward, which vramctl does not model"
            if V.is_v0(s.version)
            else "vramctl does not know this vision tower's shape"
        )
        warnings.append(
            f"{arch} is multimodal: vLLM also profiles its vision encoder on a dummy image batch; {why}, so the "
            "activation peak is under-estimated (Gemma-3 V0 logs: 1–3 GiB more; docs/accuracy.md)."
        )
    if model.moe is not None and s.expert_parallel_size > 1:
        per_rank = -(-model.moe.num_experts // s.expert_parallel_size)
        notes.append(
            f"--enable-expert-parallel: the {model.moe.num_experts} routed experts are spread whole over "
            f"{s.expert_parallel_size} ranks (TP {s.tensor_parallel_size} × DP {s.data_parallel_size}), up to "
            f"{per_rank} per rank; attention and shared experts stay TP-split. The all-to-all buffers of an EP "
            "backend (DeepEP, pplx) and the larger fused-MoE workspace are not modelled (DeepSeek-R1 at TP 16: KV "
            "over-estimated by 20–40 %, docs/accuracy.md)."
        )
    elif model.moe is not None and s.tensor_parallel_size > 1:
        notes.append(
            "MoE experts are assumed sharded by TP; with --enable-expert-parallel each rank runs whole experts and "
            "the fused-MoE workspace is larger (DeepSeek-R1 at TP 16: KV over-estimated by 20–40 %, docs/accuracy.md)."
        )
    if s.sampler == "flashinfer" or RT.sampler_choice_matters(s.release or s.version, v0_engine=V.is_v0(s.version)):
        notes.append(
            f"profile-run sampler: {s.sampler} ({s.sampler_reason}; vllm/v1/sample/ops/topk_topp_sampler.py)"
        )
    slots = core.lora
    if slots is not None:
        notes.append(
            f"--enable-lora: {slots.max_loras} adapter slot(s) at rank {slots.max_lora_rank} on every Linear"
            f"{' (fully sharded)' if slots.fully_sharded else ''}: "
            f"{slots.stage_bytes[st.index] / GiB:.2f} GiB on this rank, "
            + (
                "booked with the weights (vLLM allocates them while the model loads)"
                if lora_slots_charged(s)
                else "outside the budget (V0 before 0.8 allocates them after its weights profiler and charges "
                "them nowhere, vllm#14450)"
            )
            + (
                "; the graph pool is doubled: vLLM captures each graph with and without adapters "
                "(cudagraph_specialize_lora, 0.12 →)."
                if RT.graphs_specialize_lora(s.version, v0_engine=V.is_v0(s.version))
                else "."
            )
        )
    if s.data_parallel_size > 1:
        dp = s.data_parallel_size
        notes.append(
            f"--data-parallel-size {dp}: {dp} engine replicas of TP {s.tensor_parallel_size} × PP "
            f"{s.pipeline_parallel_size}, each with the per-rank numbers above and its own KV pool: "
            f"{dp * core.kv_tokens:,} KV tokens and {dp * core.concurrency:.2f}x concurrency across them, "
            f"on {dp * s.tensor_parallel_size * s.pipeline_parallel_size} GPUs."
        )
    seed_note = _worked_example_comparison(model, gpu, core)
    if seed_note:
        notes.append(seed_note)
    sampler = dict(st.activation.parts).get("sampler", 0)
    if sampler > st.activation.bytes // 2:
        notes.append(
            f"The sampler warm-up over {min(s.max_num_seqs, s.max_num_batched_tokens)} requests × {model.vocab_size} "
            f"vocab in fp32 dominates the activation peak ({sampler / GiB:.2f} GiB); --max-num-seqs lowers it."
        )


def _margin_warnings(core: _Core, ledger: Ledger, warnings: list[str]) -> None:
    """A thin or negative margin left on the card after every term."""
    s = core.s
    slack = ledger.bytes_of(SLACK)
    if s.kv_cache_memory_bytes is None and 0 <= slack < max(_THIN_MARGIN_BYTES, int(0.02 * core.capacity)):
        warnings.append(
            f"Only {slack / GiB:.2f} GiB is left on the card after everything: graph-capture, fragmentation and "
            "logprob spikes live in that margin; lower --gpu-memory-utilization on shared or variable workloads."
        )
    if slack < 0 and s.kv_cache_memory_bytes is None:
        warnings.append(
            f"The estimated footprint exceeds the card by {-slack / GiB:.2f} GiB (memory outside the budget does not "
            "fit in the 1 − u headroom): expect an OOM during CUDA-graph capture or serving."
        )


EXAMPLE_MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
EXAMPLE_GPU = "h100-sxm"
EXAMPLE_TOTAL_GIB = 79.6
"""The worked example of this model on one H100 SXM: 79.6 GiB total, u 0.92, 14.96 GiB of weights, and the
logged `Available KV cache memory: 54.4 GiB` → 27,852 blocks of 16."""
EXAMPLE_KV_GIB = 54.4


def _worked_example_comparison(model: ModelSpec, gpu: GpuSpec, core: _Core) -> str | None:
    """Why this plan's KV differs from the worked example's 54.4 GiB (the embedded default's model and card)."""
    s = core.s
    if model.name != EXAMPLE_MODEL or gpu.name != EXAMPLE_GPU or s.kv_cache_memory_bytes is not None:
        return None
    if s.tensor_parallel_size != 1 or s.pipeline_parallel_size != 1:
        return None
    st = core.binding
    u = s.gpu_memory_utilization
    example_requested = EXAMPLE_TOTAL_GIB * u
    example_other = example_requested - model.weight_bytes / GiB - EXAMPLE_KV_GIB
    ours = (st.activation.bytes + st.non_torch.bytes + st.graph_charged) / GiB
    band = (
        st.activation.uncertainty_bytes + st.non_torch.uncertainty_bytes + st.graph.uncertainty_bytes
    ) / GiB
    sampler = dict(st.activation.parts).get("sampler", 0) / GiB
    return (
        f"Compared with the worked example for this model and card (54.4 GiB of KV, 27,852 blocks): this plan has "
        f"{st.kv_bytes / GiB:.2f} GiB. The example takes {EXAMPLE_TOTAL_GIB} GiB as the total (nvidia-smi's MiB "
        f"total), CUDA reports {core.capacity / GiB:.2f} GiB here: {(EXAMPLE_TOTAL_GIB - core.capacity / GiB) * u:.2f} "
        f"GiB less budget at u = {u}. The example's numbers leave {example_other:.2f} GiB for activation + non-torch "
        f"+ graphs; vramctl estimates {ours:.2f} ± {band:.2f} GiB (the sampler warm-up over "
        f"{min(s.max_num_seqs, s.max_num_batched_tokens)} × {model.vocab_size} fp32 logits alone is "
        f"{sampler:.2f} GiB). `--kv-cache-memory-bytes 54.4GiB` reproduces the example's blocks exactly."
    )
