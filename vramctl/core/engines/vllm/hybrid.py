"""Hybrid attention + Mamba2 / Gated DeltaNet / KDA models: the recurrent-state side of the vLLM plan (docs/hybrid.md)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vramctl.core import kv as kvmath
from vramctl.core.engines.vllm import messages as M
from vramctl.core.engines.vllm.budget import _Core
from vramctl.core.engines.vllm.kv_manager import hybrid_kv_for as _hybrid_kv
from vramctl.core.engines.vllm.kv_manager import kv_view_of_model
from vramctl.core.engines.vllm.kv_manager import state_only_kv_for as _state_only_kv
from vramctl.core.ledger import (
    KV_CACHE,
    Ledger,
)
from vramctl.core.plan_result import PlanResult
from vramctl.core.settings import ServeSettings
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.core.units import GiB, MiB, cdiv


@dataclass(frozen=True)
class HybridPlan:
    """The recurrent-state side of a hybrid model's vLLM plan, on the binding rank."""

    state_kind: str
    full_attention_layers: int
    state_layers: int
    mlp_only_layers: int
    kv: kvmath.HybridKv
    group_size: int
    attention_groups: int
    state_groups: int
    attention_blocks_per_request: int
    state_blocks_per_request: int
    state_bytes_per_request: int
    """Unpadded conv + SSM state of every state layer on this rank, one request."""
    state_bytes_per_request_padded: int
    """What those layers take from the pool: state layers × the unified page."""
    attention_bytes_per_request: int
    """Attention KV of one max_model_len request on this rank (full-attention layers × blocks × page)."""
    num_blocks: int
    max_concurrency: float
    kv_tokens: int
    state_bytes_at_max_concurrency: int
    log_lines: tuple[str, ...]
    mamba_cache_mode: str = "none"

    def to_json(self) -> dict[str, Any]:
        return {
            "state_kind": self.state_kind,
            "full_attention_layers": self.full_attention_layers,
            "state_layers": self.state_layers,
            "mlp_only_layers": self.mlp_only_layers,
            **self.kv.to_json(),
            "group_size": self.group_size,
            "attention_groups": self.attention_groups,
            "state_groups": self.state_groups,
            "attention_blocks_per_request": self.attention_blocks_per_request,
            "state_blocks_per_request": self.state_blocks_per_request,
            "state_bytes_per_request": self.state_bytes_per_request,
            "state_bytes_per_request_padded": self.state_bytes_per_request_padded,
            "attention_bytes_per_request": self.attention_bytes_per_request,
            "num_blocks": self.num_blocks,
            "max_concurrency": round(self.max_concurrency, 4),
            "kv_tokens": self.kv_tokens,
            "state_bytes_at_max_concurrency": self.state_bytes_at_max_concurrency,
            "mamba_cache_mode": self.mamba_cache_mode,
            "log_lines": list(self.log_lines),
        }


STATE_KIND_NAMES = {
    "gated_delta_net": "Gated DeltaNet",
    "mamba2": "Mamba2",
    "kda": "Kimi Delta Attention",
    "mamba1": "Mamba1",
    "short_conv": "short-convolution",
}
"""`StateSpaceSpec.kind` → the name the plan's notes use."""

_MAMBA_CACHE_NOTES = {
    "align": "Prefix caching is on (vLLM's default for hybrids from 0.28; --no-enable-prefix-caching turns it off): "
    "mamba_cache_mode 'align' keeps two state blocks per request and state group (MambaSpec.max_memory_usage_bytes, "
    "vllm/v1/kv_cache_interface.py, vLLM 0.32), one with prefix caching off.",
    "none": "Prefix caching is off (mamba_cache_mode none: one state block per request and state group; vLLM turns "
    "it on by default for hybrids from 0.28, in the 'align' mode: two).",
    "all": "Prefix caching in mamba_cache_mode 'all' (this Mamba1 / Mamba2 class's default with "
    "--enable-prefix-caching on vLLM 0.15-0.27, or --mamba-cache-mode all to 0.31): a state block per mamba block of "
    "the request, cdiv(max_model_len, block) (MambaSpec.max_memory_usage_bytes, vllm/v1/kv_cache_interface.py), on "
    "an attention block aligned to the Mamba chunk (_align_hybrid_block_size, vllm/platforms/interface.py).",
    "unmodelled": "--enable-prefix-caching on vLLM 0.12-0.14 keeps this Mamba1 / Mamba2 class's state per block of "
    "block_size tokens, on a block aligned to the Mamba chunk (and mode 'all' on a model of state layers only): not "
    "modelled, planned with one state block per request.",
}


def _with_hybrid(
    result: PlanResult, model: ModelSpec, gpu: GpuSpec, settings: ServeSettings, core: _Core
) -> PlanResult:
    """Attach the state term: per-request state bytes, blocks, concurrency, vLLM's two hybrid log lines, and a note
    on the KV term saying how much of the shared pool the state takes at full concurrency (the ledger still sums:
    attention pages and mamba pages are one pool, `num_blocks × bytes_per_block`)."""
    s = core.s
    if model.is_state_only:
        return _with_state_only(result, model, settings, core)
    hkv = _hybrid_kv(model, gpu, settings, s.version)
    kv_model = kv_view_of_model(model, s.version, s.drafter_kv_layers)
    kinds = kvmath.stage_layer_kinds(kv_model, s.pipeline_parallel_size)[core.binding.index]
    layout = kvmath.stage_layout(kinds)
    attention_groups = sum(1 for g in layout.groups if g.kind != kvmath.STATE_GROUP)
    state_groups = len(layout.groups) - attention_groups
    full_blocks = cdiv(s.max_model_len, s.block_size)
    n_state = layout.num_state_layers
    state_blocks = s.state_blocks  # per state layer and request: 2 in the "align" mode of prefix caching
    state_raw = n_state * hkv.state_page_bytes * state_blocks
    state_padded = n_state * hkv.page_bytes * state_blocks
    attention_bytes = layout.num_full_layers * full_blocks * hkv.page_bytes
    held = int(core.concurrency) * state_padded
    st = model.state_space
    assert st is not None
    lines = []
    if hkv.block_size_raised:
        lines.append(M.hybrid_block_size_log(hkv.block_size))
    if hkv.page_bytes != hkv.state_page_bytes:
        lines.append(M.hybrid_padding_log(hkv.padding_pct))
    hybrid = HybridPlan(
        state_kind=st.kind,
        full_attention_layers=layout.num_full_layers,
        state_layers=n_state,
        mlp_only_layers=len(kinds) - layout.num_full_layers - n_state - layout.num_sliding_layers,
        kv=hkv,
        group_size=layout.group_size,
        attention_groups=attention_groups,
        state_groups=state_groups,
        attention_blocks_per_request=attention_groups * full_blocks,
        state_blocks_per_request=state_groups * state_blocks,
        state_bytes_per_request=state_raw,
        state_bytes_per_request_padded=state_padded,
        attention_bytes_per_request=attention_bytes,
        num_blocks=core.num_blocks,
        max_concurrency=core.concurrency,
        kv_tokens=core.kv_tokens,
        state_bytes_at_max_concurrency=held,
        log_lines=tuple(lines),
        mamba_cache_mode=s.mamba_cache_mode if s.mamba_cache_mode in ("align", "all") else "none",
    )
    kind = STATE_KIND_NAMES.get(st.kind, st.kind)
    notes = [
        f"Hybrid ({kind} + attention): {n_state} {kind} layers keep a fixed state per request "
        f"({state_raw / MiB:.2f} MiB per rank: conv {hkv.shapes.conv} + SSM {hkv.shapes.ssm} per layer) and "
        f"{layout.num_full_layers} full-attention layers keep KV; vLLM raises the attention block to "
        f"{hkv.block_size} tokens so one attention page ({hkv.page_bytes:,} B) holds a mamba page "
        f"({hkv.state_page_bytes:,} B, padded {hkv.padding_pct:.2f} %).",
        f"Per {s.max_model_len:,}-token request: {attention_groups * full_blocks:,} attention blocks + "
        f"{state_groups * state_blocks} state block(s) of the {core.num_blocks:,} (groups of {layout.group_size} layers: "
        f"{attention_groups} attention, {state_groups} state); state {state_padded / MiB:.2f} MiB, attention "
        f"{attention_bytes / GiB:.2f} GiB per rank; at {core.concurrency:.2f}x the state holds "
        f"{held / GiB:.2f} GiB of the pool.",
        _MAMBA_CACHE_NOTES[s.mamba_cache_mode],
    ]
    if s.mamba_cache_mode == "align" and s.prefill_checkpoint_blocks:
        notes.append(
            "Mamba2 layers add a prefill checkpoint block in 'align' mode (num_prefill_checkpoint_blocks = 1, "
            "MambaMixer2.get_kv_cache_spec, vLLM 0.32): three state blocks per request and state group."
        )
    kv_note = (
        f"one pool for attention KV and {kind} state: {state_groups} of the {len(layout.groups)} groups hold state "
        f"({state_padded / MiB:.2f} MiB per request); {held / GiB:.2f} GiB of it at {core.concurrency:.2f}x"
    )
    ledger = Ledger(
        result.ledger.capacity_bytes,
        tuple(replace(t, note=kv_note) if t.name == KV_CACHE else t for t in result.ledger.terms),
    )
    return replace(result, hybrid=hybrid, ledger=ledger, explanations=(*result.explanations, *notes))



def _with_state_only(result: PlanResult, model: ModelSpec, settings: ServeSettings, core: _Core) -> PlanResult:
    """A model without attention layers (docs/hybrid.md, "Pure Mamba"): every layer's page is its unpadded state,
    all layers form one KV-cache group. Attention-free models (prefix caching off): a block is one request's state,
    block size = max_model_len, so the blocks are the concurrency and the tokens vLLM logs are blocks ×
    max_model_len. An all-Mamba hybrid class in 'align' mode: blocks of the cache block size, 2 (+ 1 prefill
    checkpoint for Mamba2) per request."""
    s = core.s
    hkv = _state_only_kv(model, settings, s.block_size, s.version)
    kinds = kvmath.stage_layer_kinds(model, s.pipeline_parallel_size)[core.binding.index]
    layout = kvmath.stage_layout(kinds)
    n_state = layout.num_state_layers
    state = n_state * hkv.state_page_bytes * s.state_blocks
    held = int(core.concurrency) * state
    st = model.state_space
    assert st is not None
    mode = "align" if s.mamba_cache_mode == "align" else "none"
    hybrid = HybridPlan(
        state_kind=st.kind,
        full_attention_layers=0,
        state_layers=n_state,
        mlp_only_layers=len(kinds) - n_state,
        kv=hkv,
        group_size=layout.group_size,
        attention_groups=0,
        state_groups=len(layout.groups),
        attention_blocks_per_request=0,
        state_blocks_per_request=core.blocks_per_request,
        state_bytes_per_request=state,
        state_bytes_per_request_padded=state,
        attention_bytes_per_request=0,
        num_blocks=core.num_blocks,
        max_concurrency=core.concurrency,
        kv_tokens=core.kv_tokens,
        state_bytes_at_max_concurrency=held,
        log_lines=(),
        mamba_cache_mode=mode,
    )
    kind = STATE_KIND_NAMES.get(st.kind, st.kind)
    what = "Attention-free" if model.is_attention_free else "No attention layer"
    notes = [
        f"{what} ({kind} in every layer): {n_state} layers keep a fixed state per request "
        f"({state / MiB:.2f} MiB per rank: conv {hkv.shapes.conv} + SSM {hkv.shapes.ssm} per layer, "
        f"× {s.state_blocks} block(s)) and no KV; there is no attention page to pad the state to, so a block is one "
        "layer's state.",
    ]
    if s.mamba_cache_mode == "unmodelled":
        notes.append(_MAMBA_CACHE_NOTES["unmodelled"])
    elif mode == "none":
        off_why = (
            "the default for attention-free models"
            if model.is_attention_free
            else "--no-enable-prefix-caching, or the default before vLLM 0.28"
        )
        notes.append(
            f"Prefix caching is off ({off_why}"
            f"): the block is max_model_len ({s.max_model_len:,} tokens, MambaModelConfig) and a request holds one, "
            f"so {core.num_blocks:,} states fit, at most {core.num_blocks:,} requests at once whatever their length; "
            f"the {core.kv_tokens:,} tokens vLLM logs are blocks × max_model_len, not a token budget."
        )
    else:
        notes.append(
            f"Prefix caching is on (vLLM's default for hybrid classes from 0.28; --no-enable-prefix-caching turns it "
            f"off): mamba_cache_mode 'align', blocks of {s.block_size} tokens, {s.state_blocks} per request "
            f"(MambaSpec.max_memory_usage_bytes), {core.concurrency:.2f}x."
        )
    kv_note = f"{kind} state only: {core.num_blocks:,} blocks of {hkv.state_page_bytes * n_state / MiB:.2f} MiB per rank"
    ledger = Ledger(
        result.ledger.capacity_bytes,
        tuple(replace(t, note=kv_note) if t.name == KV_CACHE else t for t in result.ledger.terms),
    )
    return replace(result, hybrid=hybrid, ledger=ledger, explanations=(*result.explanations, *notes))
