"""compressed-tensors checkpoints with more than one weight scheme (`config_groups`).

llm-compressor recipes can give some modules another scheme than the rest: an FP8 group for the attention
projections beside an int4 group for `Linear` (the MLPs), NVFP4 experts beside FP8 attention. vLLM picks a Linear's
scheme by its name first and its class last (`find_matched_target`,
vllm/model_executor/layers/quantization/compressed_tensors/utils.py: an exact or `re:` name match wins over the
`Linear` class target), so the group that targets the `Linear` class is the checkpoint's main scheme and a group that
targets names overrides it for the modules it names. The spec carries the main scheme; `override_delta` books the
difference for each decoder part (attention, dense MLP, shared experts, routed experts) another group names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from vramctl.core.params import quant_part_bytes
from vramctl.core.specs import ModelSpec


def _targets(group: Mapping[str, Any]) -> list[str]:
    raw = group.get("targets")
    return [t for t in raw if isinstance(t, str)] if isinstance(raw, list) else []


def _is_class_target(target: str) -> bool:
    return not target.startswith("re:") and "." not in target


def main_weights(quant: Mapping[str, Any]) -> dict[str, Any] | None:
    """The weight scheme of the group that targets a module class (`Linear`), else of the first group."""
    groups = quant.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return None
    values = [g for g in groups.values() if isinstance(g, dict)]
    main = next((g for g in values if any(_is_class_target(t) for t in _targets(g))), values[0] if values else None)
    weights = main.get("weights") if isinstance(main, dict) else None
    return weights if isinstance(weights, dict) else None


def scheme(weights: Mapping[str, Any]) -> tuple[int, int | None, bool]:
    """(bits, group size or block edge (None: per channel / tensor), asymmetric int) of one weight scheme."""
    bits = weights.get("num_bits")
    bits = bits if isinstance(bits, int) and not isinstance(bits, bool) and bits > 0 else 8
    group = weights.get("group_size")
    block = weights.get("block_structure")
    if isinstance(block, list) and block and isinstance(block[0], int):
        group = block[0]
    size = group if isinstance(group, int) and not isinstance(group, bool) and group > 0 else None
    asym = weights.get("symmetric") is False and str(weights.get("type") or "int") == "int" and bits in (2, 3, 4, 8)
    return bits, size, asym


def _matches(target: str, name: str) -> bool:
    if target.startswith("re:"):
        try:
            return re.match(target[3:], name) is not None
        except re.error:
            return False
    return target == name


def override_delta(
    spec: ModelSpec,
    quant: Mapping[str, Any],
    part_names: Mapping[str, Sequence[str]],
    kept: Mapping[str, float],
) -> int:
    """Bytes to add to the main scheme's total for the decoder parts a name-targeting group gives another scheme
    (each part less the fraction of its layers the ignore lists keep in 16 bits)."""
    groups = quant.get("config_groups")
    main = main_weights(quant)
    if not isinstance(groups, dict) or len(groups) < 2 or main is None or not spec.quantization:
        return 0
    base = quant_part_bytes(spec)
    delta = 0
    for part, names in part_names.items():
        if part not in base:
            continue
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, dict) else None
            if weights is main or not isinstance(weights, dict) or not isinstance(group, dict):
                continue
            named = [t for t in _targets(group) if not _is_class_target(t)]
            if any(_matches(t, n) for t in named for n in names):
                bits, size, asym = scheme(weights)
                other = replace(spec, quant_bits=bits, quant_group_size=size, quant_zero_points=asym)
                share = 1.0 - min(1.0, max(0.0, kept.get(part, 0.0)))
                delta += round((quant_part_bytes(other)[part] - base[part]) * share)
                break
    return delta
