"""Out-of-memory during a measurement: recognise it, release memory, explain it with the phase and numbers.

Phases use the phase labels of docs/explain-oom.md (`startup-check`, `weights-load`, `profiling`,
`graph-capture`, `kv-alloc`, `serving`), so a caught OOM reads the same as `vramctl explain-oom` on an
engine log. When the explain-oom library (`vramctl.diagnose`) is present, its classifier names the cause
from the real torch message plus the phase; otherwise the cause is the taxonomy label of the phase.
"""

from __future__ import annotations

import gc
import re
import traceback
from dataclasses import dataclass
from typing import Any

from vramctl.core.errors import DeviceOutOfMemoryError, VramctlError
from vramctl.core.exit_codes import ExitCode
from vramctl.core.units import format_gib

# Phase → the taxonomy cause when nothing more specific is known, and the direction of the fix.
PHASE_CAUSES: dict[str, tuple[str, str]] = {
    "weights-load": (
        "weights-do-not-fit",
        "the weights alone do not fit: use more GPUs (--tensor-parallel-size), a quantised checkpoint or a "
        "smaller model",
    ),
    "profiling": (
        "batch-budget-too-large",
        "the max-shape forward does not fit: lower --max-num-batched-tokens or --max-num-seqs",
    ),
    "sampler": (
        "sampler-warmup-oom",
        "the sampler's fp32 logits (max_num_seqs × vocab × 4 B) do not fit: lower --max-num-seqs",
    ),
    "graph-capture": (
        "cuda-graph-capture-oom",
        "CUDA-graph capture does not fit: lower --gpu-memory-utilization / the KV size, or --enforce-eager",
    ),
    "kv-alloc": (
        "kv-pool-overcommit",
        "the KV pool does not fit: use a smaller --kv-cache-memory-bytes (or lower --gpu-memory-utilization)",
    ),
    "serving": (
        "activation-spike",
        "the forward does not fit beside the KV pool: a smaller KV pool or fewer batched tokens",
    ),
}

_OOM_PATTERNS = (
    re.compile(r"out of memory", re.IGNORECASE),
    re.compile(r"can't allocate memory", re.IGNORECASE),
    re.compile(r"DefaultCPUAllocator", re.IGNORECASE),
    re.compile(r"CUBLAS_STATUS_ALLOC_FAILED"),
)


class StartupMemoryError(VramctlError):
    """vLLM's start-up check failed: free memory below utilisation × total. Exit 1 (does not fit)."""

    exit_code = ExitCode.CHECK_FAILED


def is_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError, a RuntimeError that says out of memory / can't allocate, or MemoryError,
    raised itself or underneath another error (an OOM inside `torch.cuda.graph` surfaces as the
    capture_end failure that follows it, with the OOM as its `__context__`)."""
    return oom_root(exc) is not None


def oom_root(exc: BaseException) -> BaseException | None:
    """The out-of-memory error in `exc`'s cause / context chain (itself first), or None."""
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen and len(seen) < 16:
        seen.add(id(node))
        if _is_oom_one(node):
            return node
        node = node.__cause__ or node.__context__
    return None


def _is_oom_one(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover
        pass
    if isinstance(exc, RuntimeError):
        text = str(exc)
        return any(p.search(text) for p in _OOM_PATTERNS)
    return False


def release(*objects: Any) -> None:
    """Drop references, collect, and give cached device memory back (best effort)."""
    del objects
    gc.collect()
    torch = _imported_torch()
    if torch is None:
        return
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:  # pragma: no cover - cleanup must never raise
        pass


def _imported_torch() -> Any:
    """torch when it is already imported and fully initialised, else None. Never imports it: an interrupt inside
    `import torch` leaves a half-initialised module in sys.modules, and importing it again from a cleanup path
    crashed (SIGSEGV, SIGABRT) or reported "torch is not installed"."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return None
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not hasattr(cuda, "is_initialized"):
        return None
    return torch


def release_traceback(exc: BaseException) -> None:
    """Drop the tensors the failed phase's frames still hold (the traceback keeps their locals alive),
    then collect and empty the cache: after an OOM or Ctrl-C the device is given back at once."""
    traceback.clear_frames(exc.__traceback__)
    release()


@dataclass(frozen=True)
class OomContext:
    phase: str
    device: str
    message: str
    """The first line of the real torch / Python error."""
    free_bytes: int | None = None
    total_bytes: int | None = None
    detail: str = ""
    """What the phase was doing, with sizes (e.g. `allocating a 12.00 GiB KV pool`)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def oom_context(
    exc: BaseException, *, phase: str, device: str, detail: str = "", snapshot: Any = None
) -> OomContext:
    free = getattr(snapshot, "free_bytes", None)
    total = getattr(snapshot, "total_bytes", None)
    exc = oom_root(exc) or exc
    return OomContext(phase, device, f"{type(exc).__name__}: {_first_line(exc)}", free, total, detail)


# The engine function each phase runs in: a traceback frame that tells explain-oom's classifier the phase
# (the frame table of vramctl/diagnose/catalogue.yaml).
_PHASE_FRAMES = {
    "startup-check": "init_device",
    "weights-load": "load_weights",
    "profiling": "_dummy_run",
    "sampler": "_dummy_sampler_run",
    "graph-capture": "capture_model",
    "kv-alloc": "initialize_kv_cache",
    "serving": "execute_model",
}


def log_text(ctx: OomContext) -> str:
    """The failure as an engine log would show it: a frame of the phase's engine function, the error."""
    frame = _PHASE_FRAMES.get(ctx.phase, "execute_model")
    message = ctx.message.split(": ", 1)[1] if ": " in ctx.message else ctx.message
    return (
        "Traceback (most recent call last):\n"
        f'  File "vramctl/measure/run.py", line 1, in {frame}\n'
        f"torch.OutOfMemoryError: {message}\n"
    )


def explain(ctx: OomContext) -> tuple[str, str]:
    """(cause label, one-line explanation) for an OOM caught in `ctx.phase`, in explain-oom's words."""
    cause, fix = PHASE_CAUSES.get(
        ctx.phase, ("unknown", "free memory on the device or shrink the configuration")
    )
    summary = ""
    diagnosed = _diagnose(ctx)
    if diagnosed is not None:
        cause, summary, fix = diagnosed
    phase = "profiling (sampler warm-up)" if ctx.phase == "sampler" else ctx.phase
    where = f"out of memory on {ctx.device} during {phase}"
    if ctx.detail:
        where += f" ({ctx.detail})"
    numbers = ""
    if ctx.free_bytes is not None and ctx.total_bytes is not None:
        numbers = f"; {format_gib(ctx.free_bytes)} of {format_gib(ctx.total_bytes)} was free before it"
    said = f"{summary}; " if summary else ""
    return cause, f"{where}: {ctx.message}{numbers}; cause {cause}: {said}{fix}"


def _diagnose(ctx: OomContext) -> tuple[str, str, str] | None:
    """explain-oom's classifier on the failure (cause, summary, fixes), or None when it has no answer."""
    try:
        from vramctl.diagnose.classify import diagnose_text
    except ImportError:  # pragma: no cover - the diagnose package ships with vramctl
        return None
    try:
        result = diagnose_text(log_text(ctx))
    except Exception:
        return None
    if result.cause in ("unknown", "not-oom", "no-failure", ""):
        return None
    fixes = "; ".join(f"{f.action} ({f.flag})" if f.flag else f.action for f in result.fixes)
    return result.cause, result.summary, fixes or "see vramctl explain-oom"


def to_error(ctx: OomContext) -> DeviceOutOfMemoryError:
    """The exit-5 error the CLI prints as one line."""
    _, line = explain(ctx)
    error = DeviceOutOfMemoryError(line)
    error.oom = ctx  # type: ignore[attr-defined]
    return error
