"""Estimates of what vLLM measures at start-up and a planner cannot: activation peak, sampler warm-up,
non-torch memory, the CUDA-graph pool. Each comes with its formula and an uncertainty band.

What vLLM actually runs at profile time (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0) step 3):
- `_dummy_run(max_num_batched_tokens, is_profile=True)`: one forward over max_num_batched_tokens tokens split
  over min(max_num_seqs, tokens) requests; logits only for the sampled (last) token of each request;
- a dummy sampler run over num_reqs × vocab logits in fp32 with top-k/top-p set, i.e. a full sort, a softmax,
  a cumsum and a scatter: several fp32 copies of [num_reqs, vocab] alive at once — on H100 with the server
  defaults (1024 seqs) this dominates the activation peak;
- non-torch growth after the init snapshot (attention workspaces, lazily created NCCL buffers under TP); the
  CUDA context, cuBLAS handles and NCCL communicators exist before the snapshot (V1) and are outside the budget;
- the graph pool: one graph per capture size per piecewise split (≈ layers + 1 pieces), captured largest first
  into one shared pool.

The coefficients below are fitted by `scripts/calibrate.py` on the collected real start-up logs (see docs/accuracy.md
for the per-datapoint errors, in-sample and leave-one-out). They are the only tuned numbers in the planner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vramctl.core.specs import ModelSpec
from vramctl.core.units import GiB, MiB

# --- fitted constants (scripts/calibrate.py on the collected real start-up logs; docs/accuracy.md) -------------------


@dataclass(frozen=True)
class Calibration:
    forward_factor: float
    """Multiplier on the layer working set of one max_num_batched_tokens forward (see `forward_working_set`)."""
    sampler_copies_v1: float
    """fp32 [num_reqs, vocab] copies alive at the V1 sampler warm-up peak (sort values + int64 indices, softmax,
    cumsum, scatter, probs, exponential noise)."""
    sampler_copies_v0: float
    activation_fixed_bytes: int
    """Small allocations of every profile run (position/slot buffers, rotary caches)."""
    activation_rel_band: float
    """Relative half-width of the activation band: the 90th percentile of the out-of-sample (leave-one-out and
    held-out) error of the term (docs/accuracy.md)."""
    activation_median_error: float
    """Median out-of-sample relative error of the activation term (printed with the plan)."""
    non_torch_v1_bytes: int
    """Non-torch growth after the init snapshot on one GPU, V1 ≤0.26 (attention workspace)."""
    consumed_extra_v1_bytes: int
    """≥0.28: total_consumed − weights on one GPU (non-torch growth + buffers torch keeps after the profile)."""
    non_torch_v0_bytes: int
    nccl_lazy_bytes: int
    """Per rank, NCCL / all-reduce buffers first touched in the profile run (TP > 1), charged in V1."""
    nccl_v0_bytes_per_peer: int
    """V0 before 0.7 charged NCCL to the budget (baseline before NCCL init): per peer rank in the group."""
    cuda_context_bytes: int
    """CUDA context + cuBLAS handles before the init snapshot (free at start-up minus total, one GPU)."""
    graph_per_piece_v0: int
    graph_per_piece_v1_piecewise: int
    graph_per_piece_v1_full_and_piecewise: int
    graph_tp_multiplier: float
    """V1 graphs captured with TP > 1 also hold all-reduce buffers registered per graph (V0: no factor)."""
    graph_fixed_bytes: int
    graph_rel_band: float
    """90th percentile of the graph pool's out-of-sample relative error."""
    graph_median_error: float
    non_torch_rel_band: float = 0.88
    """90th percentile of the non-torch term's error (in-sample for the samples: its constants are medians)."""
    non_torch_median_error: float = 0.11
    sampler_flashinfer_saving_copies: float = 3.5
    """fp32 [num_reqs, vocab] copies FlashInfer's sampler holds fewer than PyTorch's at the dummy sampler run's
    peak: the sort's values + int64 indices, the top-p softmax and the scatter (6.5 live copies) against
    FlashInfer's masked logits and probabilities (3.0), replayed op by op from
    vllm/v1/sample/ops/topk_topp_sampler.py (vLLM 0.10.1) by `scripts/calibrate.py --sampler-replay`."""
    nccl_v0_bytes_per_peer_no_p2p: int = int(0.33 * GiB)
    """V0 before 0.7, NCCL charged per peer where GPUs have no peer-to-peer path (shared-memory transport)."""
    nccl_lazy_v0_bytes: int = int(0.26 * GiB)
    """V0 from 0.7 (baseline after NCCL init), TP > 1: buffers NCCL first touches in the profile run."""
    graph_lora_multiplier: float = 2.0
    """`cudagraph_specialize_lora` (0.12 →) captures every graph with and without active adapters."""


CALIBRATION = Calibration(
    # Fitted by `python scripts/calibrate.py` on the collected real start-up logs (index.yaml): least squares over the
    # activation of points 001 003 011 013 015 017 019 117 118 (LOO median error 15 %, docs/accuracy.md). Refitting
    # on samples + the 22 held-out logs of tests/fixtures/startup_collected made leave-one-out worse (score 31.2 vs
    # 25.0), so these stay the samples-only fit.
    forward_factor=0.44,
    sampler_copies_v1=9.11,
    sampler_copies_v0=8.16,
    activation_fixed_bytes=64 * MiB,
    # Bands = the 90th percentile of the out-of-sample error (LOO on the samples, held-out on the collected logs),
    # as scripts/calibrate.py prints them; medians are printed with the plan.
    activation_rel_band=0.38,
    activation_median_error=0.10,
    # Medians of the logged non-torch terms (in-sample only): 013/015/017 (V1 ≤0.26, TP 1), 049 (0.31 consumed −
    # weights), 019 (TP 2: +0.41), 011/026/118 (V0), 117 (0.6.4, TP 8: 7.71 GiB on rank 0 ≈ 1.08 GiB per peer).
    non_torch_v1_bytes=int(0.13 * GiB),
    consumed_extra_v1_bytes=int(0.26 * GiB),
    non_torch_v0_bytes=int(0.06 * GiB),
    nccl_lazy_bytes=int(0.41 * GiB),
    nccl_v0_bytes_per_peer=int(1.08 * GiB),
    # Free memory at start-up vs total: 78.57/79.18 (H100, 013) and 78.84/79.25 (A100, 049).
    cuda_context_bytes=int(0.50 * GiB),
    # Graph pools: median cost per piece per regime at TP 1 (V0: 011 118; piecewise: 035a 035b; full-and-
    # piecewise: 049 only), and the median TP > 1 ratio of the V1 points (125, 129). LOO median error 72 %.
    graph_per_piece_v0=int(0.471 * MiB),
    graph_per_piece_v1_piecewise=int(0.262 * MiB),
    graph_per_piece_v1_full_and_piecewise=int(0.128 * MiB),
    graph_tp_multiplier=2.59,
    graph_fixed_bytes=int(0.02 * GiB),
    graph_rel_band=1.83,
    graph_median_error=0.57,
    non_torch_rel_band=0.78,
    non_torch_median_error=0.03,
    # Not fitted: read off vLLM's source (vramctl.core.engines.vllm_runtime) or one log each. FlashInfer's sampler
    # holds 3.5 fp32 [num_reqs, vocab] copies fewer at the dummy run's peak (op-by-op replay of
    # topk_topp_sampler.py, vLLM 0.10.1); V0 < 0.7 charges NCCL per peer at 0.33 GiB without peer access (c001,
    # 0.6.5 on GeForce, against 1.08 GiB over NVLink, 117); V0 ≥ 0.7 at TP > 1 charges the buffers NCCL first
    # touches in the profile run: the median of 119 (0.05) and 120 (0.46) with 0.06 workspaces, 0.26 GiB;
    # cudagraph_specialize_lora (0.12 →) captures every graph twice.
    sampler_flashinfer_saving_copies=3.5,
    nccl_v0_bytes_per_peer_no_p2p=int(0.33 * GiB),
    nccl_lazy_v0_bytes=int(0.26 * GiB),
    graph_lora_multiplier=2.0,
)


def accuracy_note(median_error: float, rel_band: float) -> str:
    """How good an estimated term is, for the plan's text: its measured out-of-sample error."""
    return (
        f"estimated: out-of-sample error on real start-up logs median {median_error:.0%}, "
        f"90th percentile {rel_band:.0%} (the ± band; docs/accuracy.md)"
    )


@dataclass(frozen=True)
class Estimate:
    """One estimated term: bytes, the half-width of its band, the formula with its numbers, its parts."""

    bytes: int
    uncertainty_bytes: int
    formula: str
    parts: tuple[tuple[str, int], ...] = ()


def _per_rank(value: int, tp: int) -> int:
    return max(1, value // max(1, tp))


def forward_working_set(model: ModelSpec, tokens: int, *, tp: int = 1, act_bytes: float = 2) -> int:
    """Bytes of the largest layer working set of a `tokens`-token forward on one rank (before the factor).

    max(attention, MLP): attention = tokens × (2·hidden + qkv_per_rank + heads_per_rank·head_dim) (MLA adds the
    decompressed k/v of the prefill path), MLP = tokens × (2·hidden + 3·intermediate_per_rank) (gate+up, then
    the activation), MoE = tokens × top_k × (3·moe_intermediate_per_rank + hidden) (the fused-experts caches).
    """
    h = model.hidden_size
    heads_r = _per_rank(model.num_attention_heads, tp)
    kv_r = max(1, model.num_key_value_heads // max(1, tp))
    if model.mla is not None:
        mla = model.mla
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        attn = (
            2 * h + heads_r * (qk + mla.qk_nope_head_dim + mla.v_head_dim + mla.v_head_dim) + mla.latent_dim
        )
    else:
        attn = 2 * h + (heads_r + 2 * kv_r) * model.head_dim + heads_r * model.head_dim
    dense = 2 * h + 3 * _per_rank(model.intermediate_size, tp)
    mlp = dense
    if model.moe is not None:
        moe = model.moe
        experts = moe.num_experts_per_tok * (3 * _per_rank(moe.moe_intermediate_size, tp) + h)
        shared = (
            3 * _per_rank(moe.shared_expert_intermediate_size, tp)
            if moe.shared_expert_intermediate_size
            else 0
        )
        mlp = max(dense if moe.first_k_dense_replace else 0, 2 * h + experts + shared)
    return int(tokens * max(attn, mlp) * act_bytes)


def activation_peak(
    model: ModelSpec,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int = 1,
    v0: bool = False,
    last_pp_rank: bool = True,
    act_bytes: float = 2,
    sampler: str = "pytorch",
    cal: Calibration = CALIBRATION,
) -> Estimate:
    """The torch peak of vLLM's profile run above the weights: the forward + the sampler warm-up.

    `sampler`: `pytorch` (the sort-based top-k / top-p the copies were fitted on) or `flashinfer`
    (vramctl.core.engines.vllm_runtime.sampler_kind), which holds `sampler_flashinfer_saving_copies` fewer."""
    num_reqs = min(max_num_seqs, max_num_batched_tokens)
    fwd_raw = forward_working_set(model, max_num_batched_tokens, tp=tp, act_bytes=act_bytes)
    fwd = int(cal.forward_factor * fwd_raw)
    vocab = model.vocab_size
    copies = cal.sampler_copies_v0 if v0 else cal.sampler_copies_v1
    kind = sampler
    if kind == "flashinfer":
        copies = max(1.0, round(copies - cal.sampler_flashinfer_saving_copies, 2))
    logits = int(num_reqs * vocab * 4)
    warmup = int(copies * logits) if last_pp_rank else 0
    fixed = cal.activation_fixed_bytes
    total = fwd + warmup + fixed
    band = int(cal.activation_rel_band * total)
    formula = (
        f"{cal.forward_factor} × forward working set of {max_num_batched_tokens} tokens "
        f"({fwd_raw / GiB:.2f} GiB) + {kind} sampler warm-up {copies:g} × {num_reqs} reqs × {vocab} vocab × 4 B "
        f"({warmup / GiB:.2f} GiB) + {fixed / MiB:.0f} MiB; "
        + accuracy_note(cal.activation_median_error, cal.activation_rel_band)
    )
    return Estimate(total, band, formula, (("forward", fwd), ("sampler", warmup), ("fixed", fixed)))


def with_mm_encoder(
    activation: Estimate, *, forward_bytes: int, outputs_bytes: int, formula: str, rel_band: float
) -> Estimate:
    """The activation peak of a multimodal model's V1 profile run: max(the language model's peak, the encoder's forward)
    + the encoder outputs held in `encoder_cache` through the language model's dummy run
    (vramctl.core.engines.vllm.multimodal). Two named parts: `mm_encoder` (what the encoder's forward adds above the
    language model's peak, often 0) and `mm_encoder_outputs`; the band grows by `rel_band` of both."""
    excess = max(0, forward_bytes - activation.bytes)
    extra = excess + outputs_bytes
    total = activation.bytes + extra
    text = (
        f"max(language model {activation.bytes / GiB:.2f} GiB, vision encoder forward {forward_bytes / GiB:.2f} GiB) "
        f"+ encoder outputs held {outputs_bytes / GiB:.2f} GiB; language model: {activation.formula}; "
        f"encoder: {formula} (± {rel_band:.0%}, a working-set formula, not fitted)"
    )
    parts = (*activation.parts, ("mm_encoder", excess), ("mm_encoder_outputs", outputs_bytes))
    return Estimate(total, activation.uncertainty_bytes + int(rel_band * extra), text, parts)


PreSnapshotCharge = Literal["none", "communicators", "process"]
"""Which of the memory a V1 worker holds before it profiles vLLM charges to the budget
(`VllmRules.v1_pre_profile_charge`): nothing (the init snapshot follows the distributed init), the
communicators (NCCL, pynccl, custom all-reduce: the snapshot precedes the distributed init), or everything the
process holds outside torch (the CUDA context and cuBLAS handles too: V1 before the init snapshot existed)."""


def non_torch_charged(
    *,
    version_kind: str,
    tp: int,
    charges_nccl: bool = False,
    peer_to_peer: bool = True,
    pre_snapshot_charge: PreSnapshotCharge = "none",
    cal: Calibration = CALIBRATION,
) -> Estimate:
    """Non-torch memory charged to the budget (grown after the init snapshot), per rank.

    `version_kind` is vLLM's subtraction kind (`vramctl.core.engines.vllm.subtraction_kind`); `charges_nccl`:
    the baseline was read before NCCL init (V0 before 0.7), so the communicators are charged, per peer rank:
    1.08 GiB per peer over NVLink / P2P (datapoint 117), 0.33 GiB without peer access (GeForce: NCCL's
    shared-memory transport, held-out c001). From 0.7 V0 charges only the buffers NCCL first touches in the
    profile run (`nccl_lazy_v0_bytes`).
    """
    if version_kind == "v0":
        base = cal.non_torch_v0_bytes
        per_peer = cal.nccl_v0_bytes_per_peer if peer_to_peer else cal.nccl_v0_bytes_per_peer_no_p2p
        if tp > 1 and charges_nccl:
            nccl = per_peer * (tp - 1)
            what = (
                f" + NCCL charged (baseline before NCCL init): {per_peer / GiB:.2f} GiB × {tp - 1} peers"
                + ("" if peer_to_peer else " (no peer access)")
            )
        elif tp > 1:
            nccl = cal.nccl_lazy_v0_bytes
            what = f" + {nccl / GiB:.2f} GiB NCCL buffers first used in the profile run (TP {tp})"
        else:
            nccl, what = 0, ""
        formula = f"{base / GiB:.2f} GiB workspaces" + what
    else:
        base = cal.consumed_extra_v1_bytes if version_kind == "consumed" else cal.non_torch_v1_bytes
        nccl = cal.nccl_lazy_bytes if tp > 1 else 0
        what = "consumed beyond the weights" if version_kind == "consumed" else "non-torch growth"
        formula = f"{base / GiB:.2f} GiB {what} (attention workspaces, runner buffers)" + (
            f" + {nccl / GiB:.2f} GiB NCCL buffers first used in the profile run (TP {tp})" if nccl else ""
        )
        if pre_snapshot_charge != "none":
            comm = dict(pre_snapshot_overhead(tp=tp, v0=False, cal=cal).parts)["nccl"]
            if comm:
                formula += f" + {comm / GiB:.2f} GiB NCCL / custom all-reduce communicators (created after the snapshot)"
            nccl += comm
    if pre_snapshot_charge == "process":
        # V1 0.8.0-0.9.0 and `VllmRules.v0_charges_process`: the device's whole non-torch use is charged, the CUDA
        # context and cuBLAS too (what `pre_snapshot_overhead` leaves out for this charge)
        base += cal.cuda_context_bytes
        formula += f" + {cal.cuda_context_bytes / GiB:.2f} GiB CUDA context and cuBLAS (charged: used − torch allocated)"
    total = base + nccl
    formula += "; " + accuracy_note(cal.non_torch_median_error, cal.non_torch_rel_band)
    return Estimate(
        total, int(cal.non_torch_rel_band * total), formula, (("workspaces", base), ("nccl", nccl))
    )


def pre_snapshot_overhead(
    *, tp: int, v0: bool, pre_snapshot_charge: PreSnapshotCharge = "none", cal: Calibration = CALIBRATION
) -> Estimate:
    """CUDA context, cuBLAS handles and (V1) NCCL communicators: allocated before vLLM's init snapshot, so
    outside `gpu_memory_utilization` (`vllm/v1/worker/gpu_worker.py` (vLLM v0.33.0)) — they only have to fit in free memory.
    `pre_snapshot_charge` names what of it the version charges instead (`non_torch_charged`): that part is left
    out here."""
    ctx = 0 if pre_snapshot_charge == "process" else cal.cuda_context_bytes
    nccl = 0 if v0 or tp <= 1 or pre_snapshot_charge != "none" else cal.nccl_lazy_bytes // 2
    total = ctx + nccl
    formula = (f"CUDA context + cuBLAS {ctx / GiB:.2f} GiB" if ctx else "nothing (charged to the budget instead)") + (
        f" + NCCL communicators {nccl / GiB:.2f} GiB" if nccl else ""
    )
    return Estimate(total, int(0.3 * total), formula, (("cuda_context", ctx), ("nccl", nccl)))


def graph_pool(
    model: ModelSpec,
    *,
    capture_sizes: tuple[int, ...],
    layers_on_rank: int,
    regime: str,
    tp: int = 1,
    custom_all_reduce: bool = False,
    lora_twice: bool = False,
    cal: Calibration = CALIBRATION,
    none_reason: str = "enforce eager",
) -> Estimate:
    """The CUDA-graph pool: fixed + per piece × pieces, pieces = capture sizes × (layers + 1).

    `regime`: `v0` (full graphs), `piecewise` (V1 0.8 – 0.11), `full-and-piecewise` (0.12 →). With TP > 1
    the V1 pieces grow by `graph_tp_multiplier` where NCCL runs inside the graphs (custom all-reduce off:
    PCIe-only or more than 8 GPUs, GeForce, `--disable-custom-all-reduce`; the fitted TP points 125 and 129 are
    such runs); with custom all-reduce they do not. `lora_twice`: `cudagraph_specialize_lora` captures each
    graph with and without adapters (× `graph_lora_multiplier`).
    """
    del model
    if not capture_sizes:
        return Estimate(0, 0, f"no CUDA graphs ({none_reason})")
    per = {
        "v0": cal.graph_per_piece_v0,
        "piecewise": cal.graph_per_piece_v1_piecewise,
        "full-and-piecewise": cal.graph_per_piece_v1_full_and_piecewise,
    }[regime]
    nccl_in_graphs = tp > 1 and regime != "v0" and not custom_all_reduce
    if nccl_in_graphs:
        per = int(per * cal.graph_tp_multiplier)
    pieces = len(capture_sizes) * (layers_on_rank + 1)
    total = cal.graph_fixed_bytes + per * pieces
    if lora_twice:
        total = int(total * cal.graph_lora_multiplier)
    tags = (
        regime
        + (", TP with NCCL in the graphs" if nccl_in_graphs else "")
        + (f", × {cal.graph_lora_multiplier:g} LoRA graph sets" if lora_twice else "")
    )
    formula = (
        f"{cal.graph_fixed_bytes / MiB:.0f} MiB + {per / MiB:.2f} MiB × {len(capture_sizes)} capture sizes × "
        f"({layers_on_rank} layers + 1) ({tags}); "
        + accuracy_note(cal.graph_median_error, cal.graph_rel_band)
    )
    return Estimate(total, int(cal.graph_rel_band * total), formula, (("pieces", pieces),))
