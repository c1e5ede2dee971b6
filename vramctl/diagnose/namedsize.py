"""The weights of a model the registry cannot resolve offline, sized from the parameter count its name states.

`planfix.deployment` plans a log's deployment only when the model it names is bundled, a derived pre-quantised name
or in the local Hugging Face cache. For any other model (`OpenGVLab/InternVL3-78B`, `Meta-Llama-3.1-405B`) nothing is
planned, yet the name still says how many weights there are: `78B`, `405B`, `1.5B`, `8x7B` (a mixture's total,
experts x expert size: an upper bound, the experts share attention and embeddings), `235B-A22B` (235B in total, all
of it resident). Those parameters times the bytes per parameter of the quantisation the name implies, over the
logged tensor- and pipeline-parallel ranks, are the weights one rank holds:

- no quantisation marker: the 16-bit serving dtype (2 bytes), or the online method the log's settings state
  (`--quantization fp8`: 1 byte);
- a marker (`AWQ`, `GPTQ`, `FP8`, `W4A16`, `int4`, `bnb-4bit`, ...): the quantiser's defaults that the registry
  already derives pre-quantised names with (`vramctl.registry.derived.scheme_for`), costed per weight by the
  planner's own `vramctl.core.params.linear_bytes` (4 bits + a 16-bit scale and packed zeros per group of 128 for
  AWQ / GPTQ: ~0.52 bytes; FP8 ~1 byte). Embeddings and lm_head stay 16-bit in every recipe, so the estimate is low
  for a quantised name: it never overstates;
- a marker naming no single method the registry knows (`gguf`, `exl2`, `w4a8`, two methods) or a GGUF block type
  (`Q4_K_M`, `Q8_0`, `IQ4_XS`): no estimate.

The facts (`named_params`, `named_bytes_per_param`, `named_weights_per_rank_bytes`, `named_tp`, `named_budget_bytes`,
`named_model`, with `device_total_bytes`) feed the `planned-deployment` table, which decides `weights-do-not-fit`
(low: an inference from a name) only when the margin is clear: more than 1.05 x the card's whole total per rank.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from vramctl.diagnose.facts import FactValue

__all__ = ["NAMED_FACTS", "NAMED_MARGIN", "bytes_per_param", "named_facts", "named_tp_fix", "params_of_name"]

NAMED_FACTS = (
    "named_params",
    "named_bytes_per_param",
    "named_weights_per_rank_bytes",
    "named_tp",
    "named_budget_bytes",
    "named_model",
)
NAMED_MARGIN = 1.05
"""A name's size decides only past this margin over the card (the name rounds: `72B` is 72.7 B, `8B` 8.03 B)."""
_MAX_TP = 8
_SIZE_RE = re.compile(r"^(?:(?P<experts>\d{1,3})x)?(?P<num>\d+(?:\.\d+)?)(?P<unit>[bm])$")
_WORD_RE = re.compile(r"[a-z0-9.]+")
_GGUF_TYPE_RE = re.compile(r"(?<![a-z0-9])i?q[1-8]_(?:k|0|1|xs|xxs|s|m|nl)(?:_[a-z]+)?(?![a-z0-9])")
"""llama.cpp's GGUF quantisation types in a file or repository name (`Q4_K_M`, `Q8_0`, `IQ4_XS`)."""


def params_of_name(name: str) -> int | None:
    """The parameter count a model name states (`InternVL3-78B` -> 78e9, `Mixtral-8x7B` -> 56e9, `Qwen3-235B-A22B`
    -> 235e9, `SmolLM-360M` -> 360e6); None when it states none, or two different ones."""
    from vramctl.registry.names import size_tags

    counts: set[int] = set()
    for tag in size_tags(name.rstrip("/")):
        found = _SIZE_RE.match(tag)
        if found is None:  # `a22b` (the active share of a mixture), `e16` (an expert count)
            continue
        scale = 1e9 if found.group("unit") == "b" else 1e6
        counts.add(round(float(found.group("num")) * scale * int(found.group("experts") or 1)))
    counts.discard(0)
    return counts.pop() if len(counts) == 1 else None


@functools.lru_cache(maxsize=64)
def _scheme_bytes(words: frozenset[str], group: int | None) -> float | None:
    """Bytes per weight of a Linear layer in the scheme `words` name, as the planner costs it; None for no scheme."""
    from vramctl.core.params import linear_bytes
    from vramctl.core.specs import ModelSpec
    from vramctl.registry.derived import scheme_for
    from vramctl.registry.models import _quantization

    scheme = scheme_for(words, group, moe=False)
    if scheme is None:
        return None
    quant = _quantization({"quantization_config": scheme.quantization_config}, "name")
    side = 8192
    spec = ModelSpec(
        name="named", architecture="", hidden_size=side, intermediate_size=side, num_hidden_layers=1,
        num_attention_heads=1, num_key_value_heads=1, head_dim=side, vocab_size=1, max_position_embeddings=1,
        torch_dtype="bfloat16", param_count=side * side, weight_bytes=0, quantization=quant.method,
        quant_bits=quant.bits, quant_group_size=quant.group_size,
    )  # fmt: skip
    return linear_bytes(spec, side, side) / (side * side)


def bytes_per_param(name: str, logged_quantization: str | None = None) -> tuple[float, str] | None:
    """(bytes per parameter, what it is) for the quantisation `name` implies; None when it names no known one."""
    from vramctl.registry.derived import _GROUP, MARKER_WORDS
    from vramctl.registry.names import quant_tags

    if _GGUF_TYPE_RE.search(name.lower().rsplit("/", 1)[-1]) is not None:
        return None  # a GGUF block type (Q4_K_M, Q8_0, IQ4_XS): a format the registry does not cost from a name
    words = _WORD_RE.findall(name.lower().rsplit("/", 1)[-1].replace("_", "-"))
    markers = frozenset(w for w in words if w in MARKER_WORDS)
    groups = [int(a or b) for w in words for a, b in _GROUP.findall(w)]
    if not markers and not quant_tags(name):
        if logged_quantization:
            online = _scheme_bytes(frozenset({logged_quantization.lower()}), None)
            return None if online is None else (online, f"--quantization {logged_quantization}")
        return 2.0, "16-bit (no quantisation in the name)"
    if not markers:
        return None  # gguf, exl2, w4a8: a format the registry does not cost from a name
    per = _scheme_bytes(markers, groups[0] if groups else None)
    return None if per is None else (per, "/".join(sorted(markers)) + " in the name")


def named_facts(
    report: Any, settings: Any, name: str, total_bytes: int, logged: Mapping[str, Any] | None = None
) -> dict[str, FactValue]:
    """The weights-only facts for the deployment `report` / `settings` describe (see the module docstring); {} when
    the name states no parameter count or no quantisation the registry knows. `logged` (the incident's facts) gives
    the TP where the start-up lines `report` read do not state it (a wrapped `Namespace(...)`, a command line)."""
    params = params_of_name(name)
    if params is None or total_bytes <= 0:
        return {}
    item = report.settings.get("quantization")  # as printed (`quantization=mxfp4`), not only the online methods
    method = str(item.value).strip().lower() if item is not None and item.value else ""
    method = "" if method in ("none", "null") else method
    found = bytes_per_param(name, method or getattr(settings, "quantization", None))
    if found is None:
        return {}
    per_param, _ = found
    sglang = getattr(settings, "engine", "vllm") == "sglang"
    stated_tp = _stated(report, settings, logged, "tensor_parallel_size")
    if stated_tp is None:
        return {}  # a log that never states its TP: the weights per rank are not known, even from a name
    tp = int(stated_tp)
    pp = int(getattr(settings, "pipeline_parallel_size", 1) or 1)
    utilisation = _stated(report, settings, logged, "mem_fraction_static" if sglang else "gpu_memory_utilization")
    budget = round(total_bytes * float(utilisation)) if utilisation and 0 < utilisation <= 1 else total_bytes
    return {
        "device_total_bytes": int(total_bytes),
        "named_params": params,
        "named_bytes_per_param": round(per_param, 4),
        "named_weights_per_rank_bytes": round(params * per_param / (tp * pp)),
        "named_tp": tp,
        "named_budget_bytes": min(budget, total_bytes),
        "named_model": name,
    }


def _stated(report: Any, settings: Any, logged: Mapping[str, Any] | None, key: str) -> float | None:
    """A setting the start-up lines state (then `settings` holds it), else the incident's fact of that name (a
    command line, a wrapped args line), else None (the engine's default is not assumed)."""
    if report.settings.get(key) is not None:
        value = getattr(settings, key, None)
        return float(value) if isinstance(value, (int, float)) else None
    fact = (logged or {}).get(key)
    return float(fact) if isinstance(fact, (int, float)) and not isinstance(fact, bool) and fact > 0 else None


def named_tp_fix(facts: dict[str, Any], engine: str | None) -> tuple[str, str, str, str] | None:
    """(action, flag, value, reason) for a weights-do-not-fit decided from a name: the smallest power-of-two TP above
    the logged one, up to 8, at which the weights take at most the budget / 1.05 (room left for the KV cache and the
    activations); None when no such size exists (the label's own fixes stand: a quantised checkpoint)."""
    try:
        weights = int(facts["named_weights_per_rank_bytes"])
        tp_now = int(facts["named_tp"])
        budget = int(facts["named_budget_bytes"])
        name = str(facts["named_model"])
        params = int(facts["named_params"])
    except (KeyError, TypeError, ValueError):
        return None
    flag = "--tp-size" if engine == "sglang" else "--tensor-parallel-size"
    where = (
        f"sized from the name, not planned: {name} states {params / 1e9:g}B parameters, "
        f"{weights * tp_now / 2**30:.1f} GiB of weights in all"
    )
    heads = "the model is not bundled, so its attention heads are unknown: check that they divide by the new size"
    tp = 1
    while tp <= _MAX_TP:
        if tp > tp_now and weights * tp_now / tp * NAMED_MARGIN <= budget:
            per_rank = weights * tp_now / tp / 2**30
            return (
                "spread the weights over more GPUs",
                flag,
                str(tp),
                f"{where}; at {tp} GPUs {per_rank:.1f} GiB per rank leaves room in the {budget / 2**30:.1f} GiB "
                f"budget ({heads})",
            )
        tp *= 2
    return None
