"""GPU profiles (profiles/gpus/*.yaml) → GpuSpec, and a GpuSpec for an unlisted card's total."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from vramctl.core.errors import BadInputError, UnknownNameError
from vramctl.core.specs import GpuSpec
from vramctl.core.units import GB, GiB, MiB, format_gib
from vramctl.registry._catalog import GPUS
from vramctl.registry._fields import get_float, get_int, get_mapping, get_sources, get_str, get_str_list
from vramctl.registry.names import normalize

TB = 10**12
SAME_CARD_TOLERANCE = 0.005


PROFILE_KEYS = frozenset(
    {
        "id",
        "display_name",
        "vendor",
        "aliases",
        "compute_capability",
        "cuda_total_gib",
        "cuda_total_bytes",
        "nvidia_smi_total_mib",
        "hbm_bandwidth_tb_s",
        "dense_bf16_tflops",
        "host_link",
        "sources",
    }
)


def gpu_from_profile(doc: dict[str, Any], where: str) -> GpuSpec:
    """Validate one GPU profile mapping (schema: docs/models-and-gpus.md)."""
    unknown = sorted(set(doc) - PROFILE_KEYS)
    if unknown:
        raise BadInputError(f"{where}: unknown field {unknown[0]!r}")
    if doc.get("cuda_total_bytes") is not None:
        cuda_total = get_int(doc, "cuda_total_bytes", where)
    else:
        # Logs print 2 decimals; the driver hands out whole MiB, so take the nearest MiB (79.18 → 81,080 MiB).
        cuda_total = round(get_float(doc, "cuda_total_gib", where) * 1024) * MiB
    smi_mib = get_int(doc, "nvidia_smi_total_mib", where)
    if cuda_total <= 0:
        raise BadInputError(f"{where}: field 'cuda_total_gib' must be positive")
    if cuda_total > smi_mib * MiB:
        raise BadInputError(
            f"{where}: cuda total {format_gib(cuda_total)} exceeds nvidia_smi_total_mib {smi_mib} MiB"
        )
    link = get_mapping(doc, "host_link", where)
    if link is None:
        raise BadInputError(f"{where}: missing required field 'host_link'")
    link_where = f"{where}: host_link"
    bandwidth = get_float(doc, "hbm_bandwidth_tb_s", where) * TB
    flops = get_float(doc, "dense_bf16_tflops", where) * TB
    if bandwidth <= 0 or flops <= 0:
        raise BadInputError(f"{where}: hbm_bandwidth_tb_s and dense_bf16_tflops must be positive")
    return GpuSpec(
        name=get_str(doc, "id", where),
        display_name=get_str(doc, "display_name", where),
        cuda_total_bytes=cuda_total,
        nvidia_smi_total_mib=smi_mib,
        hbm_bandwidth_bytes_per_s=bandwidth,
        pcie_generation=get_int(link, "pcie_generation", link_where),
        pcie_lanes=get_int(link, "lanes", link_where),
        host_link_bytes_per_s=get_float(link, "gb_per_s_per_direction", link_where) * GB,
        dense_bf16_flops=flops,
        vendor=get_str(doc, "vendor", where, default="nvidia"),
        compute_capability=str(doc["compute_capability"]) if doc.get("compute_capability") else None,
        aliases=get_str_list(doc, "aliases", where),
        sources=get_sources(doc, where),
    )


@cache
def _gpu_at(path: Path) -> GpuSpec:
    return gpu_from_profile(GPUS.document(path), str(path))


UNIFIED_MEMORY: dict[str, str] = {
    "jetson-orin": "Jetson AGX / Orin NX / Orin Nano",
    "jetson-agx-orin": "Jetson AGX Orin",
    "orin": "Jetson Orin",
    "jetson-thor": "Jetson AGX Thor",
    "thor": "Jetson Thor",
    "dgx-spark": "DGX Spark (GB10)",
    "gb10": "GB10 (DGX Spark)",
    "jetson": "Jetson",
}
"""Boards whose GPU shares one LPDDR pool with the CPU and the OS: cudaMemGetInfo's total is the board's RAM and
its free part moves with everything else running, so no fixed device total can be bundled."""


def _unified(name: str) -> str | None:
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    key = key.removeprefix("nvidia-")
    for prefix, board in UNIFIED_MEMORY.items():
        if key == prefix or key.startswith(prefix + "-"):
            return board
    return None


NON_CUDA_DEVICES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(^|-)(ascend|atlas|npu)(-|$)|^910[a-z]?(-|$)|^310p?(-|$)"), "a Huawei Ascend NPU (vllm-ascend / SGLang's NPU backend)"),
    (re.compile(r"(^|-)(hygon|dcu)(-|$)|^(k100|z100)(-ai|l)?(-|$)"), "a Hygon DCU (its DTK stack)"),
    (re.compile(r"(^|-)(apple|mps|metal)(-|$)|^m[1-5](-(pro|max|ultra))?(-|$)"), "Apple silicon (Metal, unified memory)"),
    (re.compile(r"(^|-)(gaudi[0-9]?|hpu|habana)(-|$)"), "an Intel Gaudi HPU (vLLM's HPU backend)"),
    (re.compile(r"(^|-)(xpu|arc|ponte-vecchio|intel)(-|$)|data-center-gpu-max"), "an Intel XPU (vLLM's XPU backend)"),
    (re.compile(r"(^|-)(tpu|trainium|inferentia|neuron)[0-9a-z]*(-|$)"), "a TPU / AWS Neuron accelerator"),
)
"""Devices vramctl has no memory rules for: their engines' memory accounting is another platform's (Ascend, Hygon,
Apple, Intel, TPU / Neuron), so a name matching one is refused in one line instead of "unknown GPU"."""


def _non_cuda(name: str) -> str | None:
    key = normalize(name).replace(" ", "-").replace("_", "-")
    key = re.sub(r"-+", "-", key).strip("-")
    for pattern, what in NON_CUDA_DEVICES:
        if pattern.search(key):
            return what
    return None


_VENDOR_PREFIX = re.compile(r"^\s*(?:nvidia|amd)\b", re.IGNORECASE)


def load_gpu(name: str) -> GpuSpec:
    """A bundled GPU by id, alias, or its torch / nvidia-smi name (`NVIDIA H100 80GB HBM3`), any case.

    Unified-memory boards (Jetson Orin / Thor, DGX Spark) are refused in one line: pass `--gpu-memory`."""
    if not isinstance(name, str) or not name.strip():
        raise BadInputError("--gpu: empty GPU name")
    board = _unified(name)
    if board is not None:
        raise BadInputError(
            f"--gpu {name}: the {board} GPU shares one memory pool with the CPU and the OS (unified memory), so "
            "there is no fixed device total to bundle; pass --gpu-memory with the total torch.cuda.mem_get_info() "
            "or your engine's log reports on that board (and --free-memory with what is free)"
        )
    path = GPUS.find(name)
    if path is None and _VENDOR_PREFIX.match(name) is None:
        # `GeForce RTX 4090`, `Tesla V100-SXM2-32GB`: the runtime's name without its vendor word
        path = GPUS.find(f"NVIDIA {name.strip()}")
    if path is None:
        path = _find_by_memory_size(name)
    if path is None and (what := _non_cuda(name)) is not None:
        raise BadInputError(
            f"--gpu {name}: {what}; vramctl models vLLM and SGLang memory on NVIDIA (CUDA) and AMD (ROCm) GPUs only and "
            "bundles no total or rules for it; --gpu-memory with the device total its log prints gives only a rough "
            "plan under CUDA rules"
        )
    if path is None:
        raise UnknownNameError("GPU", name, GPUS.suggest(name))
    return _gpu_at(path)


_MEMORY_SUFFIX = re.compile(r"^(?P<board>.+?)-?(?P<gb>\d{1,3})-?(?:gb|gib|g)$")


def _board_gib(gpu: GpuSpec) -> float:
    return (gpu.nvidia_smi_total_mib or 0) / 1024 or gpu.cuda_total_bytes / GiB


def _has_memory(gpu: GpuSpec, stated_gib: int) -> bool:
    return abs(_board_gib(gpu) - stated_gib) <= 0.1 * stated_gib


# A word after the board name that makes another board, not another memory size of this one (`rtx 3060 ti` is not
# an `rtx 3060` variant: an "RTX 3060 8GB" must not resolve to the 3060 Ti, which also has 8 GB).
_OTHER_BOARD_WORDS = frozenset({"ti", "super", "xt", "xtx", "d", "max", "laptop", "mobile"})


def _is_variant_name(candidate: str, board: str) -> bool:
    if not candidate.startswith(board):
        return False
    rest = candidate[len(board) :].replace("-", " ").split()
    return not rest or rest[0] not in _OTHER_BOARD_WORDS


def _find_by_memory_size(name: str) -> Path | None:
    """`RTX 4060 Ti 16GB`, `a100 80g`, `v100-32gb`: a board name with its memory size appended, as nvidia-smi and
    cloud catalogues write it. The board's profile answers when its memory is that size (nvidia-smi's total within
    10 % of the stated GB); when the bundled board has another size the name is refused in one line saying so —
    never a plan of a card with other memory (a 4060 Ti 8GB planned as the 16 GB board would say "fits" wrongly)."""
    match = _MEMORY_SUFFIX.match(normalize(name))
    if match is None:
        return None
    board = match.group("board")
    stated_gib = int(match.group("gb"))
    path = GPUS.find(board)
    if path is not None and _has_memory(_gpu_at(path), stated_gib):
        return path
    # another bundled variant of the board with that memory (`h100 94gb` is the H100 NVL, `v100 16g` the 16 GB V100)
    variants = [
        other
        for other in GPUS.paths()
        if other != path
        and any(_is_variant_name(normalize(n), board) for n in GPUS.names_of(other))
        and _has_memory(_gpu_at(other), stated_gib)
    ]
    if len(variants) == 1:
        return variants[0]
    if path is None:
        return None
    gpu = _gpu_at(path)
    board_gib = _board_gib(gpu)
    raise BadInputError(
        f"--gpu {name}: the bundled {gpu.display_name} has {board_gib:.0f} GB, not {stated_gib} GB; pass --gpu "
        f"{gpu.name} only for that board, or --gpu-memory with the total your card reports (torch.cuda.mem_get_info()"
        " or the engine's log) for this one"
    )


def list_gpus() -> list[GpuSpec]:
    return [_gpu_at(path) for path in GPUS.paths()]


def gpu_from_capacity(total_bytes: int, *, nvidia_smi_total_mib: int | None = None) -> GpuSpec:
    """An unlisted card of `total_bytes` (the CUDA total, e.g. `--gpu-memory 79.18GiB`).

    Links, bandwidth and FLOP/s are borrowed from the listed card whose CUDA total is nearest (named in
    `display_name` and `sources`). The nvidia-smi total, unless given, is that card's when the totals
    agree within 0.5 % (the same card on another host), else the CUDA total rounded up to a MiB (the
    driver's reservation is unknown for an unlisted card).
    """
    if isinstance(total_bytes, bool) or not isinstance(total_bytes, int) or total_bytes <= 0:
        raise BadInputError(f"--gpu-memory: must be a positive size, got {total_bytes!r}")
    if nvidia_smi_total_mib is not None and (
        isinstance(nvidia_smi_total_mib, bool) or nvidia_smi_total_mib * MiB < total_bytes
    ):
        raise BadInputError(
            f"nvidia-smi total {nvidia_smi_total_mib} MiB is below the CUDA total {format_gib(total_bytes)}"
        )
    known = list_gpus()
    nearest = min(known, key=lambda gpu: (abs(gpu.cuda_total_bytes - total_bytes), gpu.name))
    close = abs(nearest.cuda_total_bytes - total_bytes) <= SAME_CARD_TOLERANCE * nearest.cuda_total_bytes
    close = close and nearest.nvidia_smi_total_mib * MiB >= total_bytes
    if nvidia_smi_total_mib is not None:
        smi, smi_source = nvidia_smi_total_mib, "given"
    elif (
        close
    ):  # the same card on another host: its board total, not the CUDA total, is what nvidia-smi shows
        smi, smi_source = nearest.nvidia_smi_total_mib, f"assumed: {nearest.name}'s (CUDA total within 0.5 %)"
    else:
        smi, smi_source = -(-total_bytes // MiB), "assumed: = CUDA total (driver reservation unknown)"
    return GpuSpec(
        name="custom",
        display_name=f"GPU with {format_gib(total_bytes)} (links and FLOP/s as {nearest.name})",
        cuda_total_bytes=total_bytes,
        nvidia_smi_total_mib=smi,
        hbm_bandwidth_bytes_per_s=nearest.hbm_bandwidth_bytes_per_s,
        pcie_generation=nearest.pcie_generation,
        pcie_lanes=nearest.pcie_lanes,
        host_link_bytes_per_s=nearest.host_link_bytes_per_s,
        dense_bf16_flops=nearest.dense_bf16_flops,
        vendor=nearest.vendor,
        compute_capability=nearest.compute_capability,
        aliases=(),
        sources=(
            ("cuda_total_bytes", "given: --gpu-memory"),
            ("nvidia_smi_total_mib", smi_source),
            ("links, bandwidth, flops", f"assumed: nearest listed card by CUDA total ({nearest.name})"),
        ),
    )
