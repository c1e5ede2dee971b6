"""The default `mem_fraction_static`: the MiB reserve per version, the VLM factor, post-capture KV sizing."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vramctl.core.engines.sglang.defaults import gpu_tier, prefill_graph_buckets
from vramctl.core.engines.sglang.options import Role, SglangOptions
from vramctl.core.engines.sglang.rules import (
    ACTIVATION_MIB_PER_TOKEN,
    DECODE_GRAPH_MIB_PER_BS,
    DEEPEP_RESERVE_MIB,
    DEFAULT_MAX_PREFILL_TOKENS,
    FLOOR_ABOVE_MIB,
    FLOOR_RESERVE_MIB,
    METADATA_RESERVE_MIB,
    MIN_ACTIVATION_TOKENS,
    MLA_PREFILL_GRAPH_RESERVE_MIB,
    POST_CAPTURE_FLOOR_MIB,
    PREFILL_GRAPH_MIB_PER_BUCKET,
    RULES_0_4_6,
    RULES_0_5_2,
    RULES_0_5_9,
    RULES_0_5_17,
    RULES_0_5_18,
    RULES_0_5_23,
    XPU_RESERVE_MIB,
    rules_for_version,
)
from vramctl.core.specs import ModelSpec


@dataclass(frozen=True)
class ReserveBreakdown:
    """The MiB reserve behind the default `mem_fraction_static` (`python/sglang/srt/arg_groups/memory_hook.py` (SGLang v0.5.23))."""

    rules: str
    branch: str
    """`normal`, `post-capture`, `table` (0.5.2), `tp-pp-table` (0.4.6) or `unknown-gpu`."""
    activation_tokens: int = 0
    activation_mib: float = 0.0
    metadata_mib: float = 0.0
    parallel_mib: float = 0.0
    graph_mib: float = 0.0
    graph_parts: tuple[tuple[str, float], ...] = ()
    floor_applied: bool = False
    floor_extra_mib: float = 0.0
    after_floor_mib: float = 0.0
    """DeepEP / speculative / XPU add-ons that come after the floor."""
    table_mib: float = 0.0
    """The 0.5.2 table value (0 for other rules)."""
    total_mib: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "rules": self.rules,
            "branch": self.branch,
            "activation_tokens": self.activation_tokens,
            "activation_mib": self.activation_mib,
            "metadata_mib": self.metadata_mib,
            "parallel_mib": self.parallel_mib,
            "graph_mib": self.graph_mib,
            "graph_parts": {name: mib for name, mib in self.graph_parts},
            "floor_applied": self.floor_applied,
            "floor_extra_mib": self.floor_extra_mib,
            "after_floor_mib": self.after_floor_mib,
            "table_mib": self.table_mib,
            "total_mib": self.total_mib,
        }


@dataclass(frozen=True)
class _Resolved:
    """Flags after SGLang's defaults, the input to the reserve."""

    rules: str
    gpu_mem: int | None
    tp: int
    pp: int
    role: Role
    chunked: int
    max_prefill_tokens: int
    max_bs: int
    decode_graph: bool
    prefill_graph: bool
    prefill_max_bs: int
    buckets: int
    is_mla: bool
    max_running_requests: int | None
    options: SglangOptions


def _activation_tokens(r: _Resolved) -> tuple[int, str]:
    if r.role == "decode" and r.rules in (RULES_0_5_17, RULES_0_5_18, RULES_0_5_23):
        running = r.max_running_requests or r.max_bs or 1
        draft = r.options.speculative_num_draft_tokens or 1
        return max(running * draft, MIN_ACTIVATION_TOKENS), (
            f"disaggregation decode: max({running} running × {draft} draft tokens, 2048)"
        )
    if r.chunked > 0:
        return max(
            r.chunked, MIN_ACTIVATION_TOKENS
        ), f"chunked prefill: max(chunked_prefill_size {r.chunked}, 2048)"
    return max(r.max_prefill_tokens, MIN_ACTIVATION_TOKENS), (
        f"no chunked prefill: max(max_prefill_tokens {r.max_prefill_tokens}, 2048)"
    )


def reserve_for_graph_mib(r: _Resolved) -> tuple[float, tuple[tuple[str, float], ...]]:
    """`reserve_for_graph_mb` (0.5.18 L5078–L5118; 0.5.23 memory_hook.py L357–L399), in MiB, with its parts."""
    parts: list[tuple[str, float]] = []
    dp = r.options.dp_size if r.options.enable_dp_attention else 1
    if r.role != "prefill" and r.decode_graph:
        parts.append(("decode_graph", float(DECODE_GRAPH_MIB_PER_BS * r.max_bs)))
    if r.options.enable_dp_attention and r.role != "prefill":
        dp_mib = r.max_bs * dp * 3.0
        if r.max_bs > 300:
            dp_mib += r.max_bs * dp * 1.5
        parts.append(("dp_attention", dp_mib))
    if r.role != "decode" and r.prefill_graph:
        if r.is_mla:
            parts.append(("prefill_graph_mla", float(MLA_PREFILL_GRAPH_RESERVE_MIB)))
        else:
            parts.append(("prefill_graph", float(PREFILL_GRAPH_MIB_PER_BUCKET * r.buckets)))
        if r.options.prefill_graph_breakable and r.options.moe_a2a_backend == "deepep":
            parts.append(("prefill_graph_deepep", 1024.0))
    return sum(mib for _, mib in parts), tuple(parts)


def _reserve_0_5_9(r: _Resolved) -> ReserveBreakdown:
    """0.5.9 (server_args.py L911–L1071): no prefill-graph reserve unless piecewise graphs are on."""
    act_tokens, _ = _activation_tokens(r)
    parts: list[tuple[str, float]] = [("decode_graph", float(DECODE_GRAPH_MIB_PER_BS * r.max_bs))]
    dp = r.options.dp_size if r.options.enable_dp_attention else 1
    if r.options.enable_dp_attention:
        dp_mib = r.max_bs * dp * 3.0 + (r.max_bs * dp * 1.5 if r.max_bs > 300 else 0.0)
        parts.append(("dp_attention", dp_mib))
    if r.options.enable_piecewise_cuda_graph:
        parts.append(("piecewise_graph", float(PREFILL_GRAPH_MIB_PER_BUCKET * r.buckets)))
    graph = sum(mib for _, mib in parts)
    activation = act_tokens * ACTIVATION_MIB_PER_TOKEN
    parallel = r.tp * r.pp / 8 * 1024
    raw = METADATA_RESERVE_MIB + activation + parallel + graph
    floored = max(raw, FLOOR_RESERVE_MIB) if r.gpu_mem is not None and r.gpu_mem > FLOOR_ABOVE_MIB else raw
    after = 0.0
    algo = (r.options.speculative_algorithm or "").upper()
    if algo == "STANDALONE":
        after += 6 * 1024
    elif algo and algo != "NGRAM":
        after += 2 * 1024
    return ReserveBreakdown(
        rules=r.rules,
        branch="normal",
        activation_tokens=act_tokens,
        activation_mib=activation,
        metadata_mib=float(METADATA_RESERVE_MIB),
        parallel_mib=parallel,
        graph_mib=graph,
        graph_parts=tuple(parts),
        floor_applied=floored > raw,
        floor_extra_mib=floored - raw,
        after_floor_mib=after,
        total_mib=floored + after,
    )


def _reserve_0_5_18(r: _Resolved, post_capture: bool) -> ReserveBreakdown:
    """0.5.17 / 0.5.18 / 0.5.23 (0.5.18 L4948–L4983; 0.5.23 memory_hook.py L281–L328)."""
    parallel = r.tp * r.pp / 8 * 1024
    if post_capture:
        floor = float(POST_CAPTURE_FLOOR_MIB[r.rules])
        return ReserveBreakdown(
            rules=r.rules,
            branch="post-capture",
            metadata_mib=floor,
            parallel_mib=parallel,
            total_mib=floor + parallel,
        )
    act_tokens, _ = _activation_tokens(r)
    activation = act_tokens * ACTIVATION_MIB_PER_TOKEN
    graph, parts = reserve_for_graph_mib(r)
    raw = METADATA_RESERVE_MIB + activation + parallel + graph
    floored = max(raw, FLOOR_RESERVE_MIB) if r.gpu_mem is not None and r.gpu_mem > FLOOR_ABOVE_MIB else raw
    after = 0.0
    if r.decode_graph and r.role != "prefill" and r.options.moe_a2a_backend == "deepep":
        after += DEEPEP_RESERVE_MIB
    if r.rules == RULES_0_5_23 and r.options.device == "xpu":
        after += XPU_RESERVE_MIB
    return ReserveBreakdown(
        rules=r.rules,
        branch="normal",
        activation_tokens=act_tokens,
        activation_mib=activation,
        metadata_mib=float(METADATA_RESERVE_MIB),
        parallel_mib=parallel,
        graph_mib=graph,
        graph_parts=parts,
        floor_applied=floored > raw,
        floor_extra_mib=floored - raw,
        after_floor_mib=after,
        total_mib=floored + after,
    )


def _reserve_0_5_2(r: _Resolved) -> ReserveBreakdown:
    """0.5.2 table (server_args.py L449–L527), all in GiB × 1024."""
    assert r.gpu_mem is not None
    p = r.tp * r.pp
    g = r.gpu_mem
    if g < 35 * 1024:
        gib = 2.8 + p / 10
    elif g < 90 * 1024:
        gib = 9.5 + p / 2
    elif g < 160 * 1024:
        gib = 12 + p / 2
    else:
        gib = 32.0
    table = gib * 1024
    after = 0.0
    algo = (r.options.speculative_algorithm or "").upper()
    if algo == "STANDALONE":
        after += 6 * 1024
    elif algo:
        after += 2 * 1024
    if r.options.enable_dp_attention:
        after += 4 * 1024
    return ReserveBreakdown(
        rules=r.rules, branch="table", table_mib=table, after_floor_mib=after, total_mib=table + after
    )


def _fraction_0_4_6(gpu_mem: int, tp: int, pp: int) -> float:
    """0.4.6.post5 (server_args.py L244–L306); not rounded (sample 110 logs 0.8717961202189594 on H200)."""
    parallel = tp * pp
    if gpu_mem <= 81920:
        if parallel >= 16:
            mfs = 0.79
        elif parallel >= 8:
            mfs = 0.81
        elif parallel >= 4:
            mfs = 0.85
        elif parallel >= 2:
            mfs = 0.87
        else:
            mfs = 0.88
    else:
        mfs = 0.88
    if gpu_mem > 96 * 1024:
        mfs = min(mfs + 48 * 1024 * (1 - mfs) / gpu_mem, (gpu_mem - 18 * 1024) / gpu_mem)
    return mfs


def post_capture_kv_sizing_planned(r: _Resolved, model: ModelSpec, kv_cache_dtype: str) -> tuple[bool, str]:
    """`post_capture_kv_sizing_planned()` (0.5.18 L5006–L5055; 0.5.23 overrides.py L1791–L1862)."""
    o = r.options
    arch_on = r.rules == RULES_0_5_23 and model.architecture == "MuseSparkForConditionalGeneration"
    if r.rules not in POST_CAPTURE_FLOOR_MIB:
        return False, f"no post-capture sizing before 0.5.16 (rules {r.rules})"
    if not (o.post_capture_kv_sizing or arch_on):
        return False, "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING is not set (default off)"
    if o.device != "cuda":
        return False, f"post-capture sizing excluded: device {o.device} is not cuda"
    if o.dcp_size != 1:
        return False, "post-capture sizing excluded: dcp_size != 1"
    if r.is_mla:
        return False, "post-capture sizing excluded: MLA attention backend"
    if r.rules != RULES_0_5_23 and kv_cache_dtype == "fp4_e2m1":
        return False, "post-capture sizing excluded: kv_cache_dtype fp4_e2m1"
    if o.enable_memory_saver:
        return False, "post-capture sizing excluded: --enable-memory-saver"
    if r.role != "prefill" and not r.decode_graph:
        return False, "post-capture sizing excluded: decode CUDA graph disabled"
    if r.role != "decode":
        if not r.prefill_graph:
            return False, "post-capture sizing excluded: prefill CUDA graph disabled"
        if r.chunked <= 0:
            return False, "post-capture sizing excluded: chunked prefill disabled"
        if r.chunked > r.prefill_max_bs:
            return False, (
                f"post-capture sizing excluded: prefill buffer {r.chunked} tokens > largest captured "
                f"prefill bucket {r.prefill_max_bs}"
            )
    name = f"{model.architecture} {model.name}".lower()
    if "deepseekv4" in name or "deepseek-v4" in name or ("minimax" in name and "sparse" in name):
        return False, "post-capture sizing excluded: DeepSeek-V4 / MiniMax-sparse model"
    why = (
        "architecture MuseSparkForConditionalGeneration"
        if arch_on
        else "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1"
    )
    return True, f"post-capture KV sizing ({why})"


def _vlm_factor(options: SglangOptions) -> float | None:
    if options.vit_layers is None and options.vit_hidden_size is None:
        return None
    layers = options.vit_layers or 24
    hidden = options.vit_hidden_size or 1024
    complexity = layers * hidden**2 / (24 * 1024**2)
    return 0.95 * min(max(1 - 0.1 * (complexity - 1), 0.8), 1.05)


def _reserve_for(r: _Resolved, post_capture: bool, gpu_mem: int | None) -> ReserveBreakdown:
    if r.rules == RULES_0_4_6:
        # The table has no reserve; report the 0.5.x parts for the ledger split only.
        # The table has no reserve: report what its fraction implies, split like 0.5.9 for the ledger.
        base = _reserve_0_5_9(r)
        implied = 0.0 if gpu_mem is None else gpu_mem * (1 - _fraction_0_4_6(gpu_mem, r.tp, r.pp))
        return replace(
            base, branch="tp-pp-table", total_mib=implied, floor_applied=False, floor_extra_mib=0.0
        )
    if r.rules == RULES_0_5_2:
        if gpu_mem is None:
            return ReserveBreakdown(rules=r.rules, branch="unknown-gpu")
        table = _reserve_0_5_2(r)
        act_tokens, _ = _activation_tokens(r)
        return replace(
            table,
            activation_tokens=act_tokens,
            activation_mib=act_tokens * ACTIVATION_MIB_PER_TOKEN,
            graph_mib=float(DECODE_GRAPH_MIB_PER_BS * r.max_bs),
        )
    if r.rules == RULES_0_5_9:
        return _reserve_0_5_9(r)
    return _reserve_0_5_18(r, post_capture)


def _reserve_words(reserve: ReserveBreakdown, gpu_mem: int, mfs: float) -> str:
    if reserve.branch == "table":
        return (
            f"0.5.2 reserved table: {reserve.table_mib:.0f} MiB + {reserve.after_floor_mib:.0f} MiB add-ons "
            f"→ mfs = round(({gpu_mem} − {reserve.total_mib:.0f}) / {gpu_mem}, 3) = {mfs}"
        )
    if reserve.branch == "post-capture":
        return (
            f"post-capture reserve {reserve.metadata_mib:.0f} + {reserve.parallel_mib:.0f} MiB (no activation, "
            f"graph or 10 GiB floor) → mfs = {mfs}"
        )
    graph = " + ".join(f"{name} {mib:.0f}" for name, mib in reserve.graph_parts) or "0"
    floor = f", floored to {FLOOR_RESERVE_MIB} MiB" if reserve.floor_applied else ""
    after = f", + {reserve.after_floor_mib:.0f} MiB after the floor" if reserve.after_floor_mib else ""
    return (
        f"reserved = 512 + {reserve.activation_tokens} × 1.5 + {reserve.parallel_mib:.0f} + graph ({graph})"
        f"{floor}{after} = {reserve.total_mib:.0f} MiB → mfs = round(({gpu_mem} − {reserve.total_mib:.0f}) / "
        f"{gpu_mem}, 3) = {mfs}"
    )


def worked_defaults(
    gpu_mem_mib: int, tp: int = 1, *, version: str = "0.5.18", mla: bool = False, post_capture: bool = False
) -> tuple[float, ReserveBreakdown]:
    """The default mem_fraction_static for a card alone (`python/sglang/srt/server_args.py` (SGLang v0.5.23)): (mfs, reserve). For docs and tests."""
    rules = rules_for_version(version)
    tier = gpu_tier(gpu_mem_mib, tp, rules)
    prefill_max_bs = (
        (min(8192, tier.chunked_prefill_size) if rules == RULES_0_5_23 else 2048)
        if mla
        else (tier.chunked_prefill_size)
    )
    prefill_graph = rules in (RULES_0_5_17, RULES_0_5_18, RULES_0_5_23)
    r = _Resolved(
        rules=rules,
        gpu_mem=gpu_mem_mib,
        tp=tp,
        pp=1,
        role="null",
        chunked=tier.chunked_prefill_size,
        max_prefill_tokens=DEFAULT_MAX_PREFILL_TOKENS,
        max_bs=tier.cuda_graph_max_bs,
        decode_graph=True,
        prefill_graph=prefill_graph,
        prefill_max_bs=prefill_max_bs,
        buckets=len(prefill_graph_buckets(prefill_max_bs)) if prefill_graph else 0,
        is_mla=mla,
        max_running_requests=None,
        options=SglangOptions(post_capture_kv_sizing=post_capture),
    )
    if rules == RULES_0_4_6:
        return _fraction_0_4_6(gpu_mem_mib, tp, 1), _reserve_for(r, False, gpu_mem_mib)
    reserve = _reserve_for(r, post_capture, gpu_mem_mib)
    return round((gpu_mem_mib - reserve.total_mib) / gpu_mem_mib, 3), reserve
