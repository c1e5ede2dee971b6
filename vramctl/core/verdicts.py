"""The verdict labels a plan ends with: the cause labels of docs/explain-oom.md, `fits` when the engine would start.

`Verdict` is a `StrEnum`: each member *is* its string (`Verdict.FITS == "fits"`, `json.dumps` writes `"fits"`),
so JSON output and comparisons with the plain strings are unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    FITS = "fits"
    NO_KV_CACHE_MEMORY = "no-kv-cache-memory"
    KV_TOO_SMALL = "kv-cache-too-small-for-max-model-len"
    GPU_UTIL_EXCEEDS_FREE = "gpu-util-exceeds-free-memory"
    WEIGHTS_DO_NOT_FIT = "weights-do-not-fit"
    KV_POOL_OVERCOMMIT = "kv-pool-overcommit"
    """`--kv-cache-memory-bytes` larger than the card holds beside the weights: vLLM skips profiling and fails
    allocating the pool it was told to size (explain-oom: an OOM at KV allocation, phase kv-alloc)."""
    HOST_PINNED_MEMORY_FAILURE = "host-pinned-memory-failure"
    """The host tier's pinned pool does not fit the host's RAM: SGLang refuses to start ("Not enough host memory
    available…"), vLLM's pinned allocation fails (the cause labels of docs/explain-oom.md, host tier)."""


def as_verdict(text: str) -> Verdict:
    """The member for a verdict string (a `Verdict` is returned as is); ValueError for an unknown label."""
    return Verdict(text)


FITS = Verdict.FITS
NO_KV_CACHE_MEMORY = Verdict.NO_KV_CACHE_MEMORY
KV_TOO_SMALL = Verdict.KV_TOO_SMALL
GPU_UTIL_EXCEEDS_FREE = Verdict.GPU_UTIL_EXCEEDS_FREE
WEIGHTS_DO_NOT_FIT = Verdict.WEIGHTS_DO_NOT_FIT
KV_POOL_OVERCOMMIT = Verdict.KV_POOL_OVERCOMMIT
HOST_PINNED_MEMORY_FAILURE = Verdict.HOST_PINNED_MEMORY_FAILURE

__all__ = [
    "FITS",
    "GPU_UTIL_EXCEEDS_FREE",
    "HOST_PINNED_MEMORY_FAILURE",
    "KV_POOL_OVERCOMMIT",
    "KV_TOO_SMALL",
    "NO_KV_CACHE_MEMORY",
    "WEIGHTS_DO_NOT_FIT",
    "Verdict",
    "as_verdict",
]
