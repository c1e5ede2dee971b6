"""Why vLLM's KV pool differs from SGLang's for the same model and card, term by term (`plan --engine both`,
`vramctl diff --from vllm --to sglang`)."""

from __future__ import annotations

from typing import Any

from vramctl.core.engines.sglang.budget import SglangPlan
from vramctl.core.gap import GapItem as GapItem
from vramctl.core.gap import VllmResultLike as VllmResultLike
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
)
from vramctl.core.units import MiB, format_bytes

# --- vLLM vs SGLang, term by term -----------------------------------------------------------------------
# GapItem and VllmResultLike live in vramctl.core.gap (shared by `plan --engine both` and `vramctl diff`).


def _vllm_ledger(result: Any) -> Ledger | None:
    for attr in ("ledger", "terms"):
        value = getattr(result, attr, None)
        if isinstance(value, Ledger):
            return value
    return None


def explain_gap(vllm_result: VllmResultLike, sglang_plan: SglangPlan) -> tuple[GapItem, ...]:
    """Why vLLM's KV differs from SGLang's for the same model and card, term by term.

    The items' bytes sum exactly to vLLM KV − SGLang KV. Each compares the two ledgers' term of the same
    name (both sum to their capacity), so the difference of the KV residuals is the sum of the differences
    of every other term, plus any difference in the capacity each engine starts from.
    """
    s = sglang_plan
    v_kv = int(vllm_result.kv_cache_bytes)
    v_ledger = _vllm_ledger(vllm_result)
    if v_ledger is None:
        return (
            GapItem(
                "total",
                v_kv - s.kv_cache_bytes,
                f"vLLM plans {format_bytes(v_kv)} of KV, SGLang {format_bytes(s.kv_cache_bytes)} "
                "(no vLLM ledger to split the difference)",
            ),
        )
    s_terms = s.ledger.as_mapping()
    v_terms = v_ledger.as_mapping()
    items: list[GapItem] = []
    cap_diff = v_ledger.capacity_bytes - s.ledger.capacity_bytes
    v_kv_term = v_ledger.bytes_of(KV_CACHE)
    if cap_diff:
        items.append(
            GapItem(
                "capacity",
                cap_diff,
                f"vLLM starts from the CUDA total {format_bytes(v_ledger.capacity_bytes)}, SGLang from "
                f"{format_bytes(s.ledger.capacity_bytes)}",
            )
        )
    reserve = s.reserve
    u = _vllm_utilization(vllm_result)
    sentences = {
        SLACK: (
            f"vLLM holds back (1 − u)·C{'' if u is None else f' with u = {u}'}; SGLang holds back "
            f"pre_model_load × (1 − {s.mem_fraction_static:.3f}) = {format_bytes(s.held_back_bytes)} of the "
            f"free memory before load (not of the {s.gpu_mem_mib} MiB nvidia-smi total its fraction was computed "
            "from); what is not its activation or graph part (512 MiB metadata, 128 MiB per rank, the 10 GiB "
            f"floor, page rounding to {s.page_size}) is slack"
        ),
        ACTIVATION_PEAK: (
            "vLLM profiles (here: estimates) the peak of a max_num_batched_tokens forward and the sampler; "
            + (
                f"SGLang reserves 1.5 MiB × {reserve.activation_tokens} tokens = {reserve.activation_mib:.0f} MiB "
                "(max(chunked_prefill_size, 2048))"
                if reserve is not None and reserve.activation_tokens
                else "SGLang's reserve has no separate activation part here"
            )
        ),
        CUDA_GRAPH: (
            "vLLM estimates the graph pool over its capture sizes; SGLang reserves 2 MiB per decode max_bs "
            "+ 8 MiB per prefill bucket (reserve_for_graph_mb)"
            + (f" = {reserve.graph_mib:.0f} MiB" if reserve is not None else "")
        ),
        NON_TORCH: (
            "vLLM counts non-torch memory after profiling (context, NCCL, workspaces); SGLang's context is "
            "whatever is not free before the weights load"
        ),
        WEIGHTS: "weights are the same checkpoint split over the same ranks in both engines",
        OTHER_PROCESSES: "memory other tenants hold on the card",
        MAMBA_STATE: (
            "SGLang keeps a hybrid's Mamba / linear-attention state in its own pool, rest × r / (1 + r) "
            "(--mamba-full-memory-ratio); vLLM pages the state inside its KV pool, one block per request and state "
            "group (docs/hybrid.md)"
        ),
    }
    names = [t.name for t in v_ledger.terms] + [t.name for t in s.ledger.terms]
    seen: set[str] = set()
    for name in names:
        if name in seen or name == KV_CACHE:
            continue
        seen.add(name)
        diff = (s_terms[name].bytes if name in s_terms else 0) - (
            v_terms[name].bytes if name in v_terms else 0
        )
        if diff == 0:
            continue
        v_bytes = v_terms[name].bytes if name in v_terms else 0
        s_bytes = s_terms[name].bytes if name in s_terms else 0
        if name == SLACK:
            split = _slack_items(s, v_bytes, s_bytes, u)
            if split:
                items.extend(split)
                continue
        sentence = sentences.get(name, f"vLLM term {name!r} has no SGLang counterpart")
        sentence = f"{name}: vLLM {format_bytes(v_bytes)}, SGLang {format_bytes(s_bytes)}. {sentence}"
        items.append(GapItem(name, diff, sentence))
    rest = v_kv - v_kv_term
    if rest:
        items.append(
            GapItem("vllm_kv_rounding", rest, "vLLM's kv_cache_bytes differs from its ledger's KV term")
        )
    total = sum(i.bytes for i in items)
    assert total == v_kv - s.kv_cache_bytes, (total, v_kv - s.kv_cache_bytes)
    items.sort(key=lambda i: -abs(i.bytes))
    return tuple(items)


def _slack_items(s: SglangPlan, v_slack: int, s_slack: int, u: float | None) -> list[GapItem]:
    """The slack difference split into what makes up SGLang's held-back memory (empty when not separable)."""
    r = s.reserve
    if r is None or r.branch != "normal" or s.post_capture:
        return []
    act = s.ledger.bytes_of(ACTIVATION_PEAK)
    graph = s.ledger.bytes_of(CUDA_GRAPH)
    if act != int(r.activation_mib * MiB) or graph != int(r.graph_mib * MiB):
        return []  # the parts were clipped to a small held-back amount
    held = s.held_back_bytes
    reserved = int(r.total_mib * MiB)
    parts: list[GapItem] = [
        GapItem(
            "vllm_headroom",
            -v_slack,
            f"vLLM leaves {format_bytes(v_slack)} on the card beyond its estimated terms: (1 − u)·C"
            + ("" if u is None else f" with u = {u}")
            + " minus what lives outside its request",
        ),
        GapItem(
            "sglang_metadata",
            int(r.metadata_mib * MiB),
            "SGLang reserves a constant 512 MiB of 'meta data (e.g., from attention backend)'",
        ),
        GapItem(
            "sglang_parallel",
            int(r.parallel_mib * MiB),
            f"SGLang reserves tp·pp/8 × 1024 MiB = {r.parallel_mib:.0f} MiB for large parallel sizes",
        ),
    ]
    if r.floor_extra_mib:
        parts.append(
            GapItem(
                "sglang_floor",
                int(r.floor_extra_mib * MiB),
                f"the reserve is floored at 10 GiB on cards above 60 GiB: {r.floor_extra_mib:.0f} MiB above its parts",
            )
        )
    if r.after_floor_mib:
        parts.append(
            GapItem(
                "sglang_after_floor",
                int(r.after_floor_mib * MiB),
                f"{r.after_floor_mib:.0f} MiB added after the floor (DeepEP / speculative / XPU)",
            )
        )
    base_sentence = (
        f"SGLang applies 1 − {s.mem_fraction_static:.3f} to the free memory before load "
        f"({format_bytes(s.free_before_load_bytes)}), not to the {s.gpu_mem_mib} MiB nvidia-smi total the reserve "
        "was computed on, and rounds the fraction to 3 decimals"
    )
    if s.mem_fraction_source == "given":
        base_sentence = (
            f"--mem-fraction-static {s.mem_fraction_static} holds back {format_bytes(held)} of the free memory "
            f"before load, against the {format_bytes(reserved)} the default heuristic would reserve"
        )
    parts.append(GapItem("sglang_fraction_base", held - reserved, base_sentence))
    rounding = s_slack - held + act + graph
    if rounding:
        parts.append(
            GapItem(
                "sglang_page_rounding",
                rounding,
                f"the pool is whole tokens of {s.bytes_per_token} B floored to pages of {s.page_size}"
                + (" and capped by --max-total-tokens" if s.max_total_num_tokens < s.profiled_tokens else ""),
            )
        )
    assert sum(p.bytes for p in parts) == s_slack - v_slack
    return [p for p in parts if p.bytes]


def _vllm_utilization(result: Any) -> float | None:
    for attr in ("gpu_memory_utilization", "utilization"):
        value = getattr(result, attr, None)
        if isinstance(value, float):
            return value
    settings = getattr(result, "settings", None)
    value = getattr(settings, "gpu_memory_utilization", None)
    return value if isinstance(value, float) else None
