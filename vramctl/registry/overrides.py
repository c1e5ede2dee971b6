"""`--hf-overrides` / `--rope-scaling`: the config.json a serve actually uses, as vLLM builds it.

vLLM applies `--hf-overrides` (a JSON object) to the Hugging Face config after loading it
(`ModelConfig._apply_dict_overrides`, vllm/config/model.py, 0.10-0.12): a key naming a nested sub-config
(`text_config`, `vision_config`, …) is updated key by key, any other key is replaced whole — so
`{"rope_scaling": {...}}` replaces the whole rope_scaling. The older `--rope-scaling JSON` flag (removed in 0.10)
is the same override of one key. The derived max_model_len then follows from the new config (yarn:
`original_max_position_embeddings × factor`), which is what `--max-model-len` is checked against.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vramctl.core.errors import BadInputError
from vramctl.core.specs import ModelSpec

CONTEXT_KEYS = frozenset(
    {
        "rope_scaling",
        "rope_parameters",
        "rope_theta",
        "max_position_embeddings",
        "model_max_length",
        "max_sequence_length",
        "seq_length",
        "max_seq_len",
        "original_max_position_embeddings",
        "sliding_window",
    }
)
"""Keys that change the context length, not the weights: the checkpoint's exact bytes are kept."""

MAX_OVERRIDE_CHARS = 64 << 10


def parse_overrides(
    text: str | Mapping[str, Any] | None, flag: str = "--hf-overrides"
) -> dict[str, Any] | None:
    """The JSON object of `--hf-overrides` / `--rope-scaling` (for the latter, wrapped as {"rope_scaling": ...})."""
    if text is None:
        return None
    if isinstance(text, Mapping):
        data: Any = dict(text)
    else:
        if not text.strip():
            return None
        if len(text) > MAX_OVERRIDE_CHARS:
            raise BadInputError(f"{flag}: longer than {MAX_OVERRIDE_CHARS >> 10} KiB; not a config override")
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise BadInputError(f"{flag} {text[:60]!r}: not a JSON object ({msg})") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{flag}: expected a JSON object, got {type(data).__name__}")
    result: dict[str, Any] = {"rope_scaling": data} if flag == "--rope-scaling" else dict(data)
    return result


def merged_config(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`config` with `overrides` applied as vLLM applies them (sub-configs key by key, other keys replaced)."""
    out = dict(config)
    for key, value in overrides.items():
        current = out.get(key)
        if isinstance(value, dict) and isinstance(current, dict) and key.endswith("_config"):
            out[key] = merged_config(current, value)
        else:
            out[key] = value
    return out


def touches_weights(overrides: Mapping[str, Any]) -> bool:
    """Whether an override can change the checkpoint's shapes (anything but the context keys)."""
    for key, value in overrides.items():
        if key.endswith("_config") and isinstance(value, dict):
            if touches_weights(value):
                return True
        elif key not in CONTEXT_KEYS:
            return True
    return False


def spec_with_overrides(
    spec: ModelSpec, config: Mapping[str, Any], where: str, overrides: Mapping[str, Any]
) -> ModelSpec:
    """The spec rebuilt from `config` + `overrides`; the exact weight bytes kept when only the context changes."""
    from vramctl.registry.models import spec_from_config

    merged = merged_config(config, overrides)
    keys = ", ".join(sorted(overrides))
    shapes = touches_weights(overrides)
    sources = (*spec.sources, ("hf_overrides", f"--hf-overrides {keys} applied to {where}"))
    return spec_from_config(
        merged,
        where=f"{where} with --hf-overrides",
        name=spec.name,
        param_count=None if shapes else spec.param_count,
        weight_bytes=None if shapes else spec.weight_bytes,
        aliases=spec.aliases,
        sources=sources,
    )
