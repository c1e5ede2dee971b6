"""When fetching KV from a slower tier beats recomputing it, how long an entry stays, and the host RAM bill.

Pure arithmetic (the worked example's tiers section, docs/tiers.md):
- A tier of read bandwidth B (bytes/s) delivers B / b_tok tokens of KV per second, b_tok = KV bytes per token
  (per rank). Fetching a cached prefix beats recomputing it when the engine's prefill rate R is below
  R*read = B / b_tok (a hierarchical-cache read: the write happened earlier, off the critical path). A
  preemption swap pays the link twice (out and back): R*swap = B / (2·b_tok). The advantage is R*read / R.
- R from FLOPs: R = tp × achieved FLOP/s / FLOPs per token, with
  FLOPs/token = 2·P_active + 2·Σ_layers attended(context)·n_heads·(d_qk + d_v)/2, i.e. for full attention
  2·n_layers·context·n_heads·head_dim: 2 FLOPs per weight per token (every matmul weight, embedding and LM
  head included, as the worked example's 22,000 tok/s does) plus QKᵀ and PV over the average causal span context/2
  of a `context`-token prefill (a sliding layer attends at most its window). Llama-3-8B, context 8,192:
  2·8.03e9 + 2·32·8192·4096 = 18.21 GFLOP/token; at 400 TFLOP/s R = 21,966 tok/s (the worked example's ≈ 22,000).
- Fetch time for N tokens = latency + N·b_tok / B; recompute time = N / R. The fetch is worth its fixed
  cost above N* = latency / (1/R − b_tok/B) tokens (never, when B / b_tok ≤ R).
- Residency (a simplified unique-insertion LRU model, as in the worked example): a tier of C tokens fed λ new tokens/s
  keeps an entry about C/λ seconds. GPU window C_gpu/λ; host window inclusive (write-through keeps copies
  of the GPU entries) C_host/λ, exclusive (C_gpu + C_host)/λ. The host tier pays for inter-turn gaps
  between the GPU window and the host window.
- Host RAM: pinned bytes = host tokens × b_tok per rank, × ranks on the node; SGLang refuses a host pool
  larger than the available RAM − 10 GiB (`HICACHE_HOST_MEMORY_RESERVE_BYTES`, `python/sglang/srt/mem_cache/memory_pool_host.py` (SGLang v0.5.23)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.core.params import active_param_count
from vramctl.core.specs import SLIDING_ATTENTION, GpuSpec, ModelSpec
from vramctl.core.units import GB, GiB
from vramctl.tiers.bandwidths import BenchBandwidths

DEFAULT_CONTEXT_TOKENS = 8192
"""Prefill length the FLOPs per token are averaged over (the worked example's 8k prompts)."""
DEFAULT_MFU = 0.40
"""Achieved / dense bf16 peak when neither --achieved-flops nor --prefill-rate is given (the worked example's
400 TFLOP/s on an H100 SXM is 40 % of its 989 TFLOP/s)."""
SGLANG_PREFETCH_THRESHOLD_TOKENS = 256
"""SGLang's L3 prefetch threshold (`python/sglang/srt/mem_cache/hiradix_cache.py` (SGLang v0.5.23))."""
SGLANG_HOST_RESERVE_BYTES = 10 * GiB
"""SGLang `HICACHE_HOST_MEMORY_RESERVE_BYTES` (`python/sglang/srt/mem_cache/memory_pool_host.py` (SGLang v0.5.23))."""
SGLANG_DEFAULT_HICACHE_RATIO = 2.0
"""SGLang `--hicache-ratio` default in `cache` mode (`python/sglang/srt/mem_cache/memory_pool_host.py` (SGLang v0.5.23))."""

# Fixed per-fetch costs (seconds). Estimates, not measurements; `tiers bench` can supply `latency_s`.
HOST_LATENCY_S = 10e-6
HOST_LATENCY_SOURCE = (
    "estimate: a few cudaMemcpyAsync/batch submissions at 2-5 us each plus an event wait (docs/tiers-bench.md)"
)
NVME_LATENCY_S = 100e-6
NVME_LATENCY_SOURCE = "estimate: NVMe read latency ~100 us (vendor class figure), plus the staging copy"
NET100_LATENCY_S = 20e-6
NET100_LATENCY_SOURCE = "estimate: RDMA read round trip plus software, ~10-20 us in a rack"
NET10_LATENCY_S = 50e-6
NET10_LATENCY_SOURCE = "estimate: TCP round trip in a rack, ~50 us"
USER_LATENCY_S = 50e-6
USER_LATENCY_SOURCE = "default for a user tier: 50 us (give a measured latency_s in a bandwidths file)"


@dataclass(frozen=True)
class TierLink:
    """One tier as the plan sees it."""

    name: str
    read_bytes_per_s: float
    write_bytes_per_s: float | None
    source: str
    kind: str
    """`nominal` (datasheet / line rate), `measured` (tiers bench), or `given` (--tier)."""
    latency_s: float
    latency_source: str


def nominal_tiers(gpu: GpuSpec) -> list[TierLink]:
    """HBM, host over the card's link, NVMe, 100 GbE, 10 GbE: the worked example's ceilings."""
    return [
        TierLink(
            "hbm",
            gpu.hbm_bandwidth_bytes_per_s,
            gpu.hbm_bandwidth_bytes_per_s,
            f"{gpu.name} profile: HBM {gpu.hbm_bandwidth_bytes_per_s / 1e12:g} TB/s (datasheet)",
            "nominal",
            0.0,
            "resident: nothing to fetch",
        ),
        TierLink(
            "host",
            gpu.host_link_bytes_per_s,
            gpu.host_link_bytes_per_s,
            f"{gpu.name} profile: PCIe Gen{gpu.pcie_generation} x{gpu.pcie_lanes} "
            f"{gpu.host_link_bytes_per_s / GB:g} GB/s per direction (link rate)",
            "nominal",
            HOST_LATENCY_S,
            HOST_LATENCY_SOURCE,
        ),
        TierLink(
            "nvme",
            14e9,
            None,
            "PCIe Gen5 x4 enterprise NVMe sequential read, vendor spec (as in the worked example)",
            "nominal",
            NVME_LATENCY_S,
            NVME_LATENCY_SOURCE,
        ),
        TierLink(
            "100gbe", 12.5e9, 12.5e9, "100 GbE line rate", "nominal", NET100_LATENCY_S, NET100_LATENCY_SOURCE
        ),
        TierLink(
            "10gbe", 1.25e9, 1.25e9, "10 GbE line rate", "nominal", NET10_LATENCY_S, NET10_LATENCY_SOURCE
        ),
    ]


def measured_tiers(bandwidths: BenchBandwidths) -> list[TierLink]:
    links = []
    for tier in bandwidths.tiers:
        if tier.latency_s is not None:
            latency, latency_source = tier.latency_s, "measured (tiers bench)"
        elif tier.name.startswith("host"):
            latency, latency_source = HOST_LATENCY_S, HOST_LATENCY_SOURCE
        elif tier.name.startswith("disk"):
            latency, latency_source = NVME_LATENCY_S, NVME_LATENCY_SOURCE
        else:
            latency, latency_source = USER_LATENCY_S, USER_LATENCY_SOURCE
        verified = "verified" if tier.verified else "NOT verified"
        links.append(
            TierLink(
                tier.name,
                tier.read_bytes_per_s,
                tier.write_bytes_per_s,
                f"measured: {tier.method} ({verified}; {bandwidths.source})",
                "measured",
                latency,
                latency_source,
            )
        )
    return links


def parse_tier_option(text: str) -> TierLink:
    """`--tier NAME=GB/s` (decimal GB/s, read direction), e.g. `cxl=64` or `nfs=2.5`."""
    if "=" not in text:
        raise BadInputError(f"--tier {text!r}: expected NAME=GB/s, e.g. --tier cxl=64")
    name, raw = (part.strip() for part in text.split("=", 1))
    if not name:
        raise BadInputError(f"--tier {text!r}: the tier needs a name, e.g. --tier cxl=64")
    raw = raw.removesuffix("GB/s").removesuffix("gb/s").strip()
    try:
        gbps = float(raw)
    except ValueError:
        raise BadInputError(f"--tier {text!r}: {raw!r} is not a bandwidth in GB/s") from None
    if not math.isfinite(gbps) or gbps <= 0:
        raise BadInputError(f"--tier {text!r}: the bandwidth must be a positive number of GB/s")
    bandwidth = gbps * GB
    return TierLink(
        name,
        bandwidth,
        bandwidth,
        f"given: --tier {name}={gbps:g} GB/s",
        "given",
        USER_LATENCY_S,
        USER_LATENCY_SOURCE,
    )


# --------------------------------------------------------------------------------------------------
# Prefill rate


def attention_flops_per_token(model: ModelSpec, context: int) -> float:
    """QKᵀ + PV FLOPs per token, averaged over a causal prefill of `context` tokens."""
    if model.mla is not None:
        d_qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
        d_v = model.mla.v_head_dim
    else:
        d_qk = d_v = model.head_dim
    heads = model.num_attention_heads
    total = 0.0
    for kind in model.attention_kinds():
        span = context / 2
        if kind == SLIDING_ATTENTION and model.sliding_window:
            span = min(span, float(model.sliding_window))
        total += 2 * span * heads * (d_qk + d_v)
    return total


def flops_per_token(model: ModelSpec, context: int = DEFAULT_CONTEXT_TOKENS) -> float:
    """2 × active parameters + the attention term (module docstring)."""
    if context <= 0:
        raise BadInputError(f"--context {context}: must be a positive number of tokens")
    return 2.0 * active_param_count(model) + attention_flops_per_token(model, context)


@dataclass(frozen=True)
class PrefillRate:
    tokens_per_s: float
    source: str
    """`given` (--prefill-rate) or `derived` (FLOPs)."""
    achieved_flops: float | None
    flops_per_token: float | None
    context_tokens: int | None
    tp: int
    formula: str

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens_per_s": self.tokens_per_s,
            "source": self.source,
            "achieved_flops": self.achieved_flops,
            "flops_per_token": self.flops_per_token,
            "context_tokens": self.context_tokens,
            "tp": self.tp,
            "formula": self.formula,
        }


def prefill_rate(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    tp: int = 1,
    prefill_rate_tokens_per_s: float | None = None,
    achieved_flops: float | None = None,
    context: int = DEFAULT_CONTEXT_TOKENS,
) -> PrefillRate:
    if prefill_rate_tokens_per_s is not None:
        if not math.isfinite(prefill_rate_tokens_per_s) or prefill_rate_tokens_per_s <= 0:
            raise BadInputError(
                f"--prefill-rate {prefill_rate_tokens_per_s}: must be a positive number of tokens/s"
            )
        return PrefillRate(prefill_rate_tokens_per_s, "given", None, None, None, tp, "--prefill-rate")
    if achieved_flops is None:
        achieved_flops = DEFAULT_MFU * gpu.dense_bf16_flops
        flops_note = f"{DEFAULT_MFU:.0%} of {gpu.name} dense bf16 {gpu.dense_bf16_flops / 1e12:g} TFLOP/s"
    else:
        if not math.isfinite(achieved_flops) or achieved_flops <= 0:
            raise BadInputError(f"--achieved-flops {achieved_flops:g}: must be a positive FLOP/s")
        flops_note = "--achieved-flops"
    per_token = flops_per_token(model, context)
    rate = tp * achieved_flops / per_token
    return PrefillRate(
        rate,
        "derived",
        achieved_flops,
        per_token,
        context,
        tp,
        f"R = tp × achieved / (2·P_active + attention at context {context}) = {tp} × {achieved_flops:.4g} / "
        f"{per_token:.4g} ({flops_note})",
    )


# --------------------------------------------------------------------------------------------------
# The table


@dataclass(frozen=True)
class TierVerdict:
    link: TierLink
    r_star_read: float
    r_star_swap: float
    advantage: float
    """R*read / R: how many times faster fetching is than recomputing (< 1: recompute wins)."""
    fetch_time_s: float
    recompute_time_s: float
    min_tokens_worth_fetching: float | None
    """Below this many tokens the fixed latency makes a fetch slower than recompute; None: never worth it."""

    @property
    def fetch_wins(self) -> bool:
        return self.advantage > 1.0

    @property
    def verdict(self) -> str:
        if self.fetch_wins:
            return f"fetching beats recomputing by {self.advantage:.1f}x"
        return f"recomputing wins: fetching is {1 / self.advantage:.1f}x slower"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.link.name,
            "kind": self.link.kind,
            "read_bytes_per_s": self.link.read_bytes_per_s,
            "write_bytes_per_s": self.link.write_bytes_per_s,
            "source": self.link.source,
            "r_star_read_tokens_per_s": self.r_star_read,
            "r_star_swap_tokens_per_s": self.r_star_swap,
            "advantage": self.advantage,
            "fetch_wins": self.fetch_wins,
            "verdict": self.verdict,
            "fetch_time_s": self.fetch_time_s,
            "recompute_time_s": self.recompute_time_s,
            "latency_s": self.link.latency_s,
            "latency_source": self.link.latency_source,
            "min_tokens_worth_fetching": self.min_tokens_worth_fetching,
        }


def judge_tier(link: TierLink, *, bytes_per_token: int, rate: float, tokens: int) -> TierVerdict:
    r_read = link.read_bytes_per_s / bytes_per_token
    per_token_fetch = bytes_per_token / link.read_bytes_per_s
    per_token_recompute = 1.0 / rate
    gain = per_token_recompute - per_token_fetch
    threshold = link.latency_s / gain if gain > 0 else None
    return TierVerdict(
        link=link,
        r_star_read=r_read,
        r_star_swap=r_read / 2,
        advantage=r_read / rate,
        fetch_time_s=link.latency_s + tokens * per_token_fetch,
        recompute_time_s=tokens * per_token_recompute,
        min_tokens_worth_fetching=threshold,
    )


@dataclass(frozen=True)
class Residency:
    arrival_tokens_per_s: float
    gpu_tokens: int
    host_tokens: int
    host_tokens_source: str
    gpu_tokens_source: str = "--gpu-tokens"

    @property
    def gpu_window_s(self) -> float:
        return self.gpu_tokens / self.arrival_tokens_per_s

    @property
    def host_window_inclusive_s(self) -> float:
        return self.host_tokens / self.arrival_tokens_per_s

    @property
    def host_window_exclusive_s(self) -> float:
        return (self.gpu_tokens + self.host_tokens) / self.arrival_tokens_per_s

    def band(self, hierarchy: str) -> tuple[float, float] | None:
        """Inter-turn gaps (seconds) that only the host tier serves; None when it adds nothing (inclusive,
        host no larger than the GPU tier)."""
        upper = self.host_window_inclusive_s if hierarchy == "inclusive" else self.host_window_exclusive_s
        if upper <= self.gpu_window_s:
            return None
        return (self.gpu_window_s, upper)

    def to_json(self) -> dict[str, Any]:
        inclusive = self.band("inclusive")
        exclusive = self.band("exclusive")
        return {
            "arrival_tokens_per_s": self.arrival_tokens_per_s,
            "gpu_tokens": self.gpu_tokens,
            "gpu_tokens_source": self.gpu_tokens_source,
            "host_tokens": self.host_tokens,
            "host_tokens_source": self.host_tokens_source,
            "gpu_window_s": self.gpu_window_s,
            "host_window_inclusive_s": self.host_window_inclusive_s,
            "host_window_exclusive_s": self.host_window_exclusive_s,
            "band_inclusive_s": list(inclusive) if inclusive else None,
            "band_exclusive_s": list(exclusive) if exclusive else None,
        }


@dataclass(frozen=True)
class HostMemoryCheck:
    host_tokens: int | None
    bytes_per_token: int
    ranks: int
    machine_bytes: int
    machine_source: str
    reserve_bytes: int = SGLANG_HOST_RESERVE_BYTES

    @property
    def pinned_bytes_per_rank(self) -> int | None:
        return None if self.host_tokens is None else self.host_tokens * self.bytes_per_token

    @property
    def pinned_bytes_total(self) -> int | None:
        per_rank = self.pinned_bytes_per_rank
        return None if per_rank is None else per_rank * self.ranks

    @property
    def usable_bytes(self) -> int:
        return max(0, self.machine_bytes - self.reserve_bytes)

    @property
    def fits(self) -> bool | None:
        total = self.pinned_bytes_total
        return None if total is None else total <= self.usable_bytes

    @property
    def max_host_tokens_per_rank(self) -> int:
        return self.usable_bytes // self.ranks // self.bytes_per_token

    def to_json(self) -> dict[str, Any]:
        return {
            "host_tokens_per_rank": self.host_tokens,
            "ranks": self.ranks,
            "pinned_bytes_per_rank": self.pinned_bytes_per_rank,
            "pinned_bytes_total": self.pinned_bytes_total,
            "machine_bytes": self.machine_bytes,
            "machine_source": self.machine_source,
            "reserve_bytes": self.reserve_bytes,
            "usable_bytes": self.usable_bytes,
            "fits": self.fits,
            "max_host_tokens_per_rank": self.max_host_tokens_per_rank,
            "max_hicache_size_gb_per_rank": self.max_host_tokens_per_rank * self.bytes_per_token / GB,
        }


@dataclass(frozen=True)
class TiersPlan:
    model: str
    gpu: str
    tp: int
    kv_cache_dtype: str
    bytes_per_token: int
    """KV bytes per token on one rank."""
    tokens: int
    rate: PrefillRate
    tiers: tuple[TierVerdict, ...]
    residency: Residency | None
    host_memory: HostMemoryCheck | None

    @property
    def implied_prefetch_fixed_cost_s(self) -> float:
        """The fixed cost per fetch that would make SGLang's 256-token threshold the break-even point
        for a host-class link: 256 tokens of recompute at R."""
        return SGLANG_PREFETCH_THRESHOLD_TOKENS / self.rate.tokens_per_s

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "gpu": self.gpu,
            "tp": self.tp,
            "kv_cache_dtype": self.kv_cache_dtype,
            "bytes_per_token": self.bytes_per_token,
            "tokens": self.tokens,
            "fetch_bytes": self.tokens * self.bytes_per_token,
            "prefill_rate": self.rate.to_json(),
            "tiers": [t.to_json() for t in self.tiers],
            "sglang_prefetch_threshold_tokens": SGLANG_PREFETCH_THRESHOLD_TOKENS,
            "sglang_prefetch_threshold_recompute_s": self.implied_prefetch_fixed_cost_s,
            "residency": self.residency.to_json() if self.residency else None,
            "host_memory": self.host_memory.to_json() if self.host_memory else None,
        }


def plan_tiers(
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    bytes_per_token: int,
    rate: PrefillRate,
    links: Sequence[TierLink],
    tokens: int = DEFAULT_CONTEXT_TOKENS,
    tp: int = 1,
    kv_cache_dtype: str = "auto",
    residency: Residency | None = None,
    host_memory: HostMemoryCheck | None = None,
) -> TiersPlan:
    if tokens <= 0:
        raise BadInputError(f"--tokens {tokens}: must be a positive number of tokens")
    if bytes_per_token <= 0:
        raise BadInputError(f"{model.name}: no KV bytes per token (a model without attention KV?)")
    names = [link.name for link in links]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise BadInputError(f"--tier {duplicate}: a tier of that name is already in the table")
    verdicts = tuple(
        judge_tier(link, bytes_per_token=bytes_per_token, rate=rate.tokens_per_s, tokens=tokens)
        for link in links
    )
    return TiersPlan(
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        kv_cache_dtype=kv_cache_dtype,
        bytes_per_token=bytes_per_token,
        tokens=tokens,
        rate=rate,
        tiers=verdicts,
        residency=residency,
        host_memory=host_memory,
    )


def residency_model(
    *,
    gpu_tokens: int,
    host_tokens: int | None,
    arrival_tokens_per_s: float,
    gpu_tokens_source: str = "--gpu-tokens",
) -> Residency:
    if gpu_tokens <= 0:
        raise BadInputError(f"--gpu-tokens {gpu_tokens}: must be a positive number of tokens")
    if not math.isfinite(arrival_tokens_per_s) or arrival_tokens_per_s <= 0:
        raise BadInputError(
            f"--arrival-rate {arrival_tokens_per_s}: must be a positive number of new tokens/s"
        )
    if host_tokens is None:
        return Residency(
            arrival_tokens_per_s,
            gpu_tokens,
            int(gpu_tokens * SGLANG_DEFAULT_HICACHE_RATIO),
            f"SGLang default --hicache-ratio {SGLANG_DEFAULT_HICACHE_RATIO:g} × --gpu-tokens",
            gpu_tokens_source,
        )
    if host_tokens <= 0:
        raise BadInputError(f"--host-tokens {host_tokens}: must be a positive number of tokens")
    return Residency(arrival_tokens_per_s, gpu_tokens, host_tokens, "--host-tokens", gpu_tokens_source)
