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

from vramctl.core.errors import BadInputError, UnknownNameError
from vramctl.core.specs import GpuSpec, ModelSpec
from vramctl.registry._catalog import MODELS
from vramctl.registry.catalog_models import find_bundled, list_bundled
from vramctl.registry.gpus import gpu_from_capacity, list_gpus, load_gpu
from vramctl.registry.local import find_in_hf_cache, load_local_model, looks_like_path
from vramctl.registry.models import spec_from_config

__all__ = [
    "GpuSpec",
    "ModelSpec",
    "gpu_from_capacity",
    "list_gpus",
    "list_models",
    "load_gpu",
    "load_model",
    "spec_from_config",
]


def load_model(name_or_path: str) -> ModelSpec:
    """A bundled model by HF id or alias (any case), or a local config.json / model folder / HF cache snapshot.

    Order: an existing path; a bundled profile; the local Hugging Face cache (offline, no download).
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise BadInputError("--model: empty model name")
    if looks_like_path(name_or_path):
        return load_local_model(name_or_path)
    spec = find_bundled(name_or_path)
    if spec is not None:
        return spec
    cached = find_in_hf_cache(name_or_path)
    if cached is not None:
        return load_local_model(str(cached))
    raise UnknownNameError("model", name_or_path, MODELS.suggest(name_or_path))


def list_models() -> list[ModelSpec]:
    """Every bundled model profile, sorted by file name."""
    return list_bundled()
