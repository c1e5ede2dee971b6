"""The physical ledger of a vLLM plan: every term on the binding rank, the slack as the residual."""

from __future__ import annotations

from vramctl.core.engines.vllm import rules as V
from vramctl.core.engines.vllm.budget import _Core
from vramctl.core.ledger import (
    ACTIVATION_PEAK,
    CUDA_GRAPH,
    KV_CACHE,
    NON_TORCH,
    OTHER_PROCESSES,
    SLACK,
    WEIGHTS,
    Ledger,
    Term,
    TermSource,
)
from vramctl.core.units import GiB, MiB


def _ledger(core: _Core, kv_band: int = 0) -> Ledger:
    st = core.binding
    s = core.s
    terms: list[Term] = []
    if core.other_processes:
        terms.append(
            Term(
                OTHER_PROCESSES,
                core.other_processes,
                TermSource.GIVEN,
                "total − --free-memory",
                note="held by other tenants before the engine starts",
            )
        )
    derived, band = core.derived, core.weight_band
    terms.append(
        Term(
            WEIGHTS,
            st.weights,
            TermSource.ESTIMATED if derived else TermSource.DERIVED,
            f"checkpoint bytes on this rank (tp {s.tensor_parallel_size}, pp stage {st.index + 1}/"
            f"{s.pipeline_parallel_size}): split tensors / tp, replicated ones (norms, routers, MLA q_a/kv_a) whole"
            + (
                f"; + {core.load_change.note}"
                if core.load_change and (core.load_change.per_moe_layer_bytes or core.load_change.per_layer_bytes)
                else ""
            )
            + (f"; + rotary cos/sin cache {core.rope_bytes / MiB:.0f} MiB" if core.rope_bytes >= MiB else "")
            + (
                f"; + DSA indexer top-k buffer {core.indexer_buffer_bytes / MiB:.0f} MiB "
                "(max_num_batched_tokens × index_topk × int32)"
                if core.indexer_buffer_bytes
                else ""
            ),
            round(st.weights * band),
            f"DERIVED from the bundled {derived.base} quantised as {derived.method} ('{derived.marker}' in the name; "
            f"its config.json was not read: {derived.why})"
            if derived
            else "from the checkpoint's shapes: median 0.1 %, worst 1 % on the calibration logs (8 % on one held-out "
            "Gemma-2 log) (docs/accuracy.md)",
        )
    )
    terms.append(
        Term(
            ACTIVATION_PEAK,
            st.activation.bytes,
            TermSource.ESTIMATED,
            st.activation.formula,
            st.activation.uncertainty_bytes,
            "the profile run's torch peak above the weights (vLLM measures it; vramctl estimates)",
        )
    )
    non_torch = st.non_torch.bytes + st.outside.bytes
    terms.append(
        Term(
            NON_TORCH,
            non_torch,
            TermSource.ESTIMATED,
            f"{st.non_torch.formula}; outside the budget: {st.outside.formula}",
            st.non_torch.uncertainty_bytes + st.outside.uncertainty_bytes,
            "V0 before 0.7 read its baseline before NCCL init: NCCL buffers are charged to the budget"
            if V.charges_nccl_to_budget(s.version)
            else "this version charges all of it to gpu_memory_utilization (the CUDA context and communicators too)"
            if st.outside.bytes == 0
            else f"{st.outside.bytes / GiB:.2f} GiB of it exists before vLLM's init snapshot and is not charged to "
            "gpu_memory_utilization",
        )
    )
    if s.cudagraph_capture_sizes:
        charged = st.graph_charged > 0
        terms.append(
            Term(
                CUDA_GRAPH,
                st.graph.bytes,
                TermSource.ESTIMATED,
                st.graph.formula,
                st.graph.uncertainty_bytes,
                "measured after capture by the extensible KV cache's sizing (vLLM 0.34 →)"
                if s.extensible_kv_cache and charged
                else "charged to the budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1)"
                if charged
                else "not charged to the budget in this version/setting: taken from the headroom above u",
            )
        )
    kv_given = s.kv_cache_memory_bytes is not None
    terms.append(
        Term(
            KV_CACHE,
            st.kv_bytes,
            TermSource.GIVEN if kv_given else TermSource.DERIVED,
            "--kv-cache-memory-bytes (profiling skipped; ignores gpu_memory_utilization)"
            if kv_given
            else "extensible KV cache (vLLM 0.34 →): min(requested − used, free at start − used − margin) − reserve; "
            "used = weights + non-torch growth + graph pool, reserve = activation peak"
            + (" + graph estimate" if s.estimate_cudagraphs else "")
            + f", margin = max(1 GiB, 0.75 × reserve); {st.held_back / GiB:.2f} GiB held back beyond the terms"
            if s.extensible_kv_cache
            else "requested − weights − activation peak − non-torch growth"
            + (" − graph estimate" if st.graph_charged else ""),
            0 if kv_given else kv_band,
            ""
            if kv_given or not kv_band
            else "± the estimated terms' bands summed: what the KV pool loses if they all land at the top",
        )
    )
    return Ledger.with_residual(
        core.capacity,
        terms,
        residual=SLACK,
        residual_formula=(
            "total − every other term (with --kv-cache-memory-bytes the utilisation plays no part)"
            if kv_given
            else f"total − every other term: the extensible KV cache's margin and reserve ({st.held_back / GiB:.2f} "
            "GiB) and (1 − u) × total, what lives outside the budget"
            if s.extensible_kv_cache
            else f"total − every other term: (1 − u) × total = {(core.capacity - core.requested) / GiB:.2f} GiB "
            "held back, less what lives outside the budget"
        ),
    )
