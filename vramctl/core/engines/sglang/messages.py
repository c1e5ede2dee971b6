"""SGLang's start-up failures, in its words (`python/sglang/srt/model_executor/model_runner.py` and
`kv_cache_configurator.py` at 0.5.18 / 0.5.23; the older "Not enough memory" wording from 0.4.x – 0.5.17), with
the number to change added where SGLang gives none."""

from __future__ import annotations

from vramctl.core.units import GiB


def weights_do_not_fit(weights_bytes: int, free_before_load_bytes: int, tp: int) -> str:
    return (
        f"the weights ({weights_bytes / GiB:.2f} GiB per rank) do not fit in the {free_before_load_bytes / GiB:.2f} "
        f"GiB free before load: add GPUs (--tp-size {tp * 2}) or load a quantised checkpoint"
    )


def no_gpu_memory_for_kv(mfs: float, minimum: float) -> str:
    """0.5.18 →: the rest after `avail − pre × (1 − mfs)` is not positive."""
    return (
        f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={mfs:.3f}. "
        f"Raise --mem-fraction-static above {minimum:.3f} (minimum viable = 1 - available/pre = "
        f"{minimum:.4f})."
    )


def not_enough_memory(mfs: float, minimum: float) -> str:
    """Before 0.5.18 (and a pool of zero tokens): SGLang's `Not enough memory` RuntimeError."""
    return (
        "Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: mem_fraction_static={mfs:.3f} (needs more than {minimum:.3f})"
    )
