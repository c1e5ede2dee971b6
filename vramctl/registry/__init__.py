"""Load ModelSpec / GpuSpec from the bundled profiles/ or a local config.json / model folder.

Public API (stable; other layers import only these):
    load_model(name_or_path: str) -> ModelSpec      # HF id, alias, or path to config.json / folder / HF snapshot
    load_gpu(name: str) -> GpuSpec                  # `h100-sxm`, `a100-80gb`, `l4`, `mi300x`, ...
    gpu_from_capacity(total_bytes: int) -> GpuSpec  # an unlisted card from `--gpu-memory 79.18GiB`
    list_models() -> list[ModelSpec]
    list_gpus() -> list[GpuSpec]
Unknown names raise UnknownNameError with the closest matches.
"""

from __future__ import annotations
