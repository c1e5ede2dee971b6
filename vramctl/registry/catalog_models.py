"""Bundled model profiles (profiles/models/*.yaml) → ModelSpec."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.core.specs import ModelSpec
from vramctl.registry._catalog import MODELS
from vramctl.registry._fields import get_int, get_mapping, get_sources, get_str, get_str_list
from vramctl.registry.models import spec_from_config

PROFILE_KEYS = frozenset(
    {"id", "aliases", "param_count", "weight_bytes", "extra_params", "sources", "config"}
)
"""`extra_params`: tensors outside the decoder formula (a vision tower), {part: count}; param_count includes them."""


def model_from_profile(doc: dict[str, Any], where: str) -> ModelSpec:
    """Validate one model profile: `id`, `aliases`, `param_count`, optional `weight_bytes`, `sources`, `config`."""
    unknown = sorted(set(doc) - PROFILE_KEYS)
    if unknown:
        raise BadInputError(
            f"{where}: unknown field {unknown[0]!r} (expected one of {', '.join(sorted(PROFILE_KEYS))})"
        )
    config = get_mapping(doc, "config", where)
    if config is None:
        raise BadInputError(f"{where}: missing required field 'config'")
    weight_bytes = get_int(doc, "weight_bytes", where) if doc.get("weight_bytes") is not None else None
    return spec_from_config(
        config,
        where=f"{where}: config",
        name=get_str(doc, "id", where),
        param_count=get_int(doc, "param_count", where),
        weight_bytes=weight_bytes,
        aliases=get_str_list(doc, "aliases", where),
        sources=get_sources(doc, where),
    )


@cache
def model_at(path: Path) -> ModelSpec:
    return model_from_profile(MODELS.document(path), str(path))


def find_bundled(name: str) -> ModelSpec | None:
    path = MODELS.find(name)
    return None if path is None else model_at(path)


def list_bundled() -> list[ModelSpec]:
    return [model_at(path) for path in MODELS.paths()]
