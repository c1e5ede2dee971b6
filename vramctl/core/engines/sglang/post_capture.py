"""SGLang's post-capture KV sizing headroom term, 0.5.17 – 0.5.23 (`SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1`).

After graph capture `compute_post_capture_kv_resize` (`python/sglang/srt/model_executor/model_runner_components/
kv_pool_runtime.py`: 0.5.17 L39–L99, 0.5.18 L41–L110, 0.5.23 L59–L150) measures free memory again and sizes the
pool to

    budget = (free − headroom − mm_reservation) × 2^30 + bytes already backed [− canary workspace, 0.5.20 →]
    headroom = pre_model_load_memory × (1 − mem_fraction_static)
             → max(headroom, pre_capture_activation_reserve_mb / 1024) when decode runs eagerly above the decode
               graphs' max_bs (max_bs < max_running_requests), or the model has mamba state
               (0.5.22 →: not for a prefill-role engine whose full prefill graphs cap the batch, L94–L111)
             → max(headroom, sampling headroom) unless SGLANG_ENABLE_GRAPH_POOL_BORROW (default off; the sampling
               headroom is measured by a DFLASH draft only, else 0) (0.5.20 →)
    mm_reservation = SGLANG_VLM_CACHE_SIZE_MB (100) [+ SGLANG_MM_FEATURE_CACHE_MB (1024) with a cuda_ipc /
                     cuda_vmm feature transport] for a multimodal model, else 0 (0.5.18 →,
                     `mem_cache/kv_cache_configurator.py` `mm_runtime_reservation_gb` L130–L147)

Before capture (`kv_cache_configurator.py::_profile_available_bytes`, 0.5.18 L1775–L1789; 0.5.23 L3007–L3031)
the same mamba rule raises the pre-capture slack ("Mamba state is a fixed pre-capture allocation, so it can't ride
the ~0 post-capture slack"), and the same multimodal reservation is taken.

The floor on the reserve while post-capture sizing is planned (512 MB in 0.5.17, 1536 MB from 0.5.18) is
`rules.POST_CAPTURE_FLOOR_MIB`; this module is the post-capture term itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramctl.core.settings import parse_version

MM_RESERVATION_FROM = (0, 5, 18)
SAMPLING_HEADROOM_FROM = (0, 5, 20)
PREFILL_ROLE_EXEMPTION_FROM = (0, 5, 22)
VLM_CACHE_SIZE_MIB = 100
"""`SGLANG_VLM_CACHE_SIZE_MB = EnvInt(100)` (0.5.18 environ.py L1146; 0.5.23 L1598)."""
MM_FEATURE_CACHE_MIB = 1024
"""`SGLANG_MM_FEATURE_CACHE_MB = EnvInt(1 * 1024)` (0.5.18 environ.py L1168; 0.5.23 L1622)."""


def mm_reservation_gib(version: str, *, multimodal: bool, mm_feature_transport: str | None = None) -> float:
    """`mm_runtime_reservation_gb`: 0 before 0.5.18 and for text models."""
    if not multimodal or parse_version(version) < MM_RESERVATION_FROM:
        return 0.0
    mib = VLM_CACHE_SIZE_MIB + (
        MM_FEATURE_CACHE_MIB if mm_feature_transport in ("cuda_ipc", "cuda_vmm") else 0
    )
    return mib / 1024


@dataclass(frozen=True)
class PostCaptureHeadroom:
    base_gib: float
    """pre_model_load_memory × (1 − mem_fraction_static)."""
    reserve_gib: float
    """pre_capture_activation_reserve_mb / 1024 (the same formula as the pre-capture reserve)."""
    raised_by: tuple[str, ...]
    """Why the headroom rose to the reserve: `eager decode gap`, `mamba state` (empty: it did not)."""
    sampling_gib: float
    mm_reservation_gib: float

    @property
    def headroom_gib(self) -> float:
        head = max(self.base_gib, self.reserve_gib) if self.raised_by else self.base_gib
        return max(head, self.sampling_gib)

    @property
    def words(self) -> str:
        head = f"post-capture headroom {self.headroom_gib:.2f} GiB"
        if self.raised_by and self.reserve_gib > self.base_gib:
            head += (
                f" (raised from pre × (1 − mfs) = {self.base_gib:.2f} GiB to pre_capture_activation_reserve "
                f"{self.reserve_gib * 1024:.0f} MiB: {', '.join(self.raised_by)})"
            )
        else:
            head += " (pre × (1 − mfs))"
        if self.mm_reservation_gib:
            head += f" + multimodal reservation {self.mm_reservation_gib * 1024:.0f} MiB"
        return head


def post_capture_headroom(
    version: str,
    *,
    pre_gib: float,
    mfs: float,
    reserve_mib: float,
    eager_decode_gap: bool,
    mamba: bool,
    multimodal: bool,
    capped_full_prefill_role: bool = False,
    sampling_headroom_bytes: int = 0,
    mm_feature_transport: str | None = None,
) -> PostCaptureHeadroom:
    """The headroom term of `compute_post_capture_kv_resize` at SGLang `version` (0.5.17 →)."""
    v = parse_version(version)
    raised: list[str] = []
    if eager_decode_gap:
        raised.append("eager decode gap: graph max_bs < max_running_requests")
    if mamba:
        raised.append("mamba state")
    if raised and capped_full_prefill_role and v >= PREFILL_ROLE_EXEMPTION_FROM:
        raised = []
    sampling = sampling_headroom_bytes / (1 << 30) if v >= SAMPLING_HEADROOM_FROM else 0.0
    return PostCaptureHeadroom(
        base_gib=pre_gib * (1 - mfs),
        reserve_gib=reserve_mib / 1024,
        raised_by=tuple(raised),
        sampling_gib=sampling,
        mm_reservation_gib=mm_reservation_gib(
            version, multimodal=multimodal, mm_feature_transport=mm_feature_transport
        ),
    )


def pre_capture_slack_gib(version: str, *, slack_gib: float, reserve_mib: float, mamba: bool) -> float:
    """`_profile_available_bytes` under post-capture sizing: a mamba model's slack rises to the reserve."""
    del version  # the rule is the same in 0.5.17 – 0.5.23
    return max(slack_gib, reserve_mib / 1024) if mamba else slack_gib
